//! Every route of the server in one table, with who may call it: the router is built from
//! [`ROUTES`] and the guard looks each request's route up in it, so a route cannot exist
//! without saying whether the token protects it (tests/serve_routes.rs walks the table).

use std::sync::Arc;

use axum::Router;
use axum::routing::{MethodRouter, get, post};

use super::shared::App;

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone who reaches the server: the health check and the page's static bytes, which
    /// hold no data (a browser cannot send a header when it opens a link; the page sends
    /// the token, read from the URL fragment, with each API request).
    Open,
    /// The token, when the server has one.
    Token,
}

/// One route.
pub struct Route {
    /// The path pattern, in axum's syntax (`{id}` is a segment).
    pub path: &'static str,
    /// The methods it answers.
    pub methods: &'static [&'static str],
    /// Who may call it.
    pub access: Access,
    /// Its handlers.
    endpoint: fn() -> MethodRouter<Arc<App>>,
}

/// The table. Webhooks (`/hooks/check/{resource}`, `crate::watch::webhooks`) are not in it:
/// they are mounted beside it and carry their resource's own token.
pub static ROUTES: &[Route] = &[
    Route {
        path: "/api/v1/health",
        methods: &["GET"],
        access: Access::Open,
        endpoint: || get(super::api::health),
    },
    Route {
        path: "/api/v1/pipelines",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::api::pipelines),
    },
    Route {
        path: "/api/v1/pipelines/{name}/plan",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::api::plan),
    },
    Route {
        path: "/api/v1/runs",
        methods: &["GET", "POST"],
        access: Access::Token,
        endpoint: || get(super::api::runs).post(super::start::start),
    },
    Route {
        path: "/api/v1/runs/{id}",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::api::run),
    },
    Route {
        path: "/api/v1/runs/{id}/cancel",
        methods: &["POST"],
        access: Access::Token,
        endpoint: || post(super::api::cancel),
    },
    Route {
        path: "/api/v1/runs/{id}/fork",
        methods: &["POST"],
        access: Access::Token,
        endpoint: || post(super::fork::fork),
    },
    Route {
        path: "/api/v1/runs/{id}/steps/{seq}/turns",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::fork::turns),
    },
    Route {
        path: "/api/v1/runs/{id}/shadow",
        methods: &["POST"],
        access: Access::Token,
        endpoint: || post(super::shadows::begin),
    },
    Route {
        path: "/api/v1/runs/{id}/shadows",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::shadows::list),
    },
    Route {
        path: "/api/v1/runs/{id}/shadows/{n}",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::shadows::one),
    },
    Route {
        path: "/api/v1/runs/{id}/events",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::sse::events),
    },
    Route {
        path: "/api/v1/runs/{id}/steps/{seq}/receipt",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::receipt::receipt),
    },
    Route {
        path: "/api/v1/runs/{id}/steps/{seq}/changes",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::artifacts::changes),
    },
    Route {
        path: "/api/v1/runs/{id}/steps/{seq}/version",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::versions::version),
    },
    Route {
        path: "/api/v1/runs/{id}/artifacts",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::artifacts::top),
    },
    Route {
        path: "/api/v1/runs/{id}/artifacts/{*path}",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::artifacts::browse),
    },
    Route {
        path: "/api/v1/approvals",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::approvals::list),
    },
    Route {
        path: "/api/v1/runs/{id}/approvals/{seq}",
        methods: &["POST"],
        access: Access::Token,
        endpoint: || post(super::approvals::answer),
    },
    Route {
        path: "/metrics",
        methods: &["GET"],
        access: Access::Token,
        endpoint: || get(super::metrics::metrics),
    },
    Route {
        path: "/",
        methods: &["GET"],
        access: Access::Open,
        endpoint: || get(crate::web::shell),
    },
    Route {
        path: "/p/{pipeline}",
        methods: &["GET"],
        access: Access::Open,
        endpoint: || get(crate::web::shell),
    },
    Route {
        path: "/runs/{id}",
        methods: &["GET"],
        access: Access::Open,
        endpoint: || get(crate::web::shell),
    },
    Route {
        path: "/compare/{a}/{b}",
        methods: &["GET"],
        access: Access::Open,
        endpoint: || get(crate::web::shell),
    },
    Route {
        path: "/compare/{a}/shadow/{n}",
        methods: &["GET"],
        access: Access::Open,
        endpoint: || get(crate::web::shell),
    },
    Route {
        path: "/approvals",
        methods: &["GET"],
        access: Access::Open,
        endpoint: || get(crate::web::shell),
    },
    Route {
        path: "/assets/{name}",
        methods: &["GET"],
        access: Access::Open,
        endpoint: || get(crate::web::asset),
    },
];

/// Who may call the route whose pattern is `path`; a path not in the table (a 404) needs
/// the token, so a stranger learns nothing from which paths exist.
pub fn access(path: Option<&str>) -> Access {
    path.and_then(|p| ROUTES.iter().find(|r| r.path == p))
        .map_or(Access::Token, |r| r.access)
}

/// The router of the table (state: the [`App`]).
pub fn router() -> Router<Arc<App>> {
    ROUTES.iter().fold(Router::new(), |r, route| {
        r.route(route.path, (route.endpoint)())
    })
}
