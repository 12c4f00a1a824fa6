//! `POST /hooks/check/{resource}`: a webhook asks the watcher to check a resource now
//! (polling goes on as before). Served by `treadle watch --addr` and by `treadle serve`.
//!
//! The token is read from the variable the resource's `webhook_token_env:` names, when the
//! request comes, and sent as `Authorization: Bearer TOKEN` or `?token=TOKEN`. An unset or
//! empty variable accepts nothing; an unknown resource answers exactly as a bad token does
//! (401), so the endpoint tells a stranger nothing about which resources exist.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::post;

use super::Watcher;
use super::poll::CheckNow;

/// The routes, to merge into a server's router outside any other token check.
pub fn router(watcher: Arc<Watcher>) -> Router {
    Router::new()
        .route("/hooks/check/{resource}", post(deliver))
        .with_state(watcher)
}

/// Whether `given` equals `token`, in time that does not depend on where they differ.
fn same_token(given: &[u8], token: &[u8]) -> bool {
    given.len() == token.len() && given.iter().zip(token).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

fn given_token(headers: &HeaderMap, query: &HashMap<String, String>) -> Option<String> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| t.trim().to_owned())
        .or_else(|| query.get("token").cloned())
}

/// The watched resources named `resource` whose token `given` is.
fn targets(watcher: &Watcher, resource: &str, given: &str) -> Vec<CheckNow> {
    let mut out = Vec::new();
    for (i, w) in watcher.pipelines.iter().enumerate() {
        let Some(r) = w
            .loaded
            .pipeline
            .resources
            .iter()
            .find(|r| r.name.value == resource)
        else {
            continue;
        };
        let Some(var) = &r.webhook_token_env else {
            continue;
        };
        let expected = crate::environ::var(&var.value).unwrap_or_default();
        if !expected.is_empty() && same_token(given.as_bytes(), expected.as_bytes()) {
            out.push(CheckNow {
                pipeline: i,
                resource: resource.to_owned(),
            });
        }
    }
    out
}

async fn deliver(
    State(watcher): State<Arc<Watcher>>,
    Path(resource): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> (StatusCode, String) {
    let given = given_token(&headers, &query).unwrap_or_default();
    let found = targets(&watcher, &resource, &given);
    if found.is_empty() {
        return (
            StatusCode::UNAUTHORIZED,
            "unknown resource or wrong token\n".to_owned(),
        );
    }
    for t in found {
        // The poller is gone only when the watcher is stopping; nothing to check then.
        let _ = watcher.hook_tx.send(t);
    }
    (StatusCode::ACCEPTED, format!("checking `{resource}`\n"))
}
