//! The web page of `treadle serve`: a static shell, its stylesheet and its JavaScript
//! modules, compiled into the binary; the server's route table (`crate::server::routes`) serves
//! them with [`shell`] and [`asset`].
//!
//! The page reads only the JSON API and the event stream under `/api/v1` (the server's
//! part); nothing here touches the state file. There is no build step: the assets are
//! plain HTML, CSS and JavaScript modules, included with `include_str!`, so the binary
//! carries the exact bytes that were reviewed.
//!
//! Every response carries a Content-Security-Policy that allows scripts, styles, images and
//! connections from the page's own origin only. The page never hands model text to an HTML
//! parser (its markdown renderer builds DOM nodes); the policy is the second wall, so that
//! a renderer bug still cannot run a script or fetch a remote image.
//!
//! # Layout
//!
//! * `mod.rs`: the routes and the asset table.
//! * `assets/index.html`: the shell every page route answers with.
//! * `assets/style.css`: the look.
//! * `assets/app.js`: routing between the runs list, a run page and the approvals page.
//! * `assets/api.js`: fetch with the token, and the event-stream reader that resumes.
//! * `assets/dom.js`: building elements without HTML strings.
//! * `assets/markdown.js`: model text as markdown, rendered to DOM nodes, inert.
//! * `assets/json.js`: tool arguments and results as highlighted JSON.
//! * `assets/runs.js`: the runs list per pipeline, with its charts.
//! * `assets/run.js`: the run page: the step tree, live updates.
//! * `assets/steps.js`: one step's row and details (output, conversation).
//! * `assets/approvals.js`: pending approvals with their buttons, and decided ones.
//! * `assets/form.js`: a question's answer form, generated from its JSON Schema.
//! * `assets/fork.js`: a finished agent step's "fork from here", and a fork's link to its parent.
//! * `assets/compare.js`: two runs side by side (`/compare/{a}/{b}`).
//! * `assets/details.js`: a step's times (model calls, tool calls, elapsed), prompts,
//!   changed files with diffs, and the version a get used.
//! * `assets/files.js`: the run's artifact browser.
//! * `assets/chart.js`: a job's chart of duration and cost over its recent runs.
//! * `assets/start.js`: the start form: the job and the pipeline's vars.
//! * `assets/shadow.js`: a run beside one of its shadows (`/compare/{a}/shadow/{n}`), and the
//!   run page's list of a run's shadows.

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The policy of every page and asset response: this origin only, no inline script, no
/// plugins, no framing, no `<base>`.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; font-src 'self'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One file of the page: its name under `/assets/`, its media type and its bytes.
struct Asset {
    name: &'static str,
    media_type: &'static str,
    body: &'static str,
}

const JS: &str = "text/javascript; charset=utf-8";

/// A JavaScript module of the page, embedded under its file name.
macro_rules! script {
    ($name:literal) => {
        Asset {
            name: $name,
            media_type: JS,
            body: include_str!(concat!("assets/", $name)),
        }
    };
}

/// Every asset the page loads, by name.
const ASSETS: &[Asset] = &[
    Asset {
        name: "style.css",
        media_type: "text/css; charset=utf-8",
        body: include_str!("assets/style.css"),
    },
    script!("app.js"),
    script!("api.js"),
    script!("dom.js"),
    script!("markdown.js"),
    script!("json.js"),
    script!("runs.js"),
    script!("run.js"),
    script!("steps.js"),
    script!("approvals.js"),
    script!("form.js"),
    script!("fork.js"),
    script!("compare.js"),
    script!("details.js"),
    script!("files.js"),
    script!("chart.js"),
    script!("start.js"),
    script!("shadow.js"),
];

const INDEX: &str = include_str!("assets/index.html");

/// The page alone, with no API: what the page's own tests serve. `treadle serve` mounts
/// the same handlers from its route table (`crate::server::routes`).
pub fn router() -> Router {
    Router::new()
        .route("/", get(shell))
        .route("/p/{pipeline}", get(shell))
        .route("/runs/{id}", get(shell))
        .route("/approvals", get(shell))
        .route("/compare/{a}/{b}", get(shell))
        .route("/compare/{a}/shadow/{n}", get(shell))
        .route("/assets/{name}", get(asset))
}

/// The page's routes `/` (runs of every pipeline), `/p/{pipeline}`, `/runs/{id}`,
/// `/compare/{a}/{b}` and `/approvals` answer with the same shell, which routes in the browser.
pub async fn shell() -> Response {
    respond("text/html; charset=utf-8", INDEX)
}

/// `/assets/{name}`: the files above.
pub async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => respond(a.media_type, a.body),
        None => (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    }
}

/// A response with the page's headers. `no-cache` makes the browser revalidate, so a new
/// binary's assets are never mixed with an old binary's.
fn respond(media_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
