//! The guard in front of every route: the token (when the server has one) on every request
//! but those the route table (`routes.rs`) marks open, and no cross-site request that
//! changes state.
//!
//! Open are the health check and the page itself (`/`, `/assets/...`), which holds no
//! data: a browser cannot send a header when it opens a link. The page's address with
//! `?token=` (what `treadle serve` prints) sets the page's cookie and redirects to the
//! clean address; the cookie then carries the token (the page also still reads a token
//! from the URL fragment and sends it as a header). A path that is no route
//! needs the token as well. A state-changing request (anything but
//! GET, HEAD and OPTIONS) that a browser marks as cross-site (`Sec-Fetch-Site`), or whose
//! `Origin` is not this server's own, is refused whatever token it carries.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::identity::Caller;
use super::routes::{self, Access};
use super::shared::App;

/// Whether `given` equals `token`, in time that does not depend on where they differ.
fn same_token(given: &[u8], token: &[u8]) -> bool {
    given.len() == token.len() && given.iter().zip(token).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

/// The token a request carries: `Authorization: Bearer <token>`, or the page's cookie
/// (set from the address `treadle serve` printed, see `super::token`).
fn given<'h>(app: &App, headers: &'h HeaderMap) -> Option<&'h str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .or_else(|| super::token::from_cookie(headers, &app.cookie))
}

/// The token check against the server's own token.
fn authorized(given: Option<&str>, token: &str) -> Result<(), ApiError> {
    match given {
        Some(t) if same_token(t.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(ApiError::Unauthorized(
            "the token is wrong: send `Authorization: Bearer <token>` with the server's token (its --token-env variable, or the one it printed and keeps in .treadle/server.token)".to_owned(),
        )),
        None => Err(ApiError::Unauthorized(
            "this server requires a token: send `Authorization: Bearer <token>` with the server's token (its --token-env variable, or the one it printed and keeps in .treadle/server.token)".to_owned(),
        )),
    }
}

/// The cross-site check of a state-changing request.
fn same_site(headers: &HeaderMap) -> Result<(), ApiError> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site")
        && site != "same-origin"
        && site != "none"
    {
        return Err(ApiError::Forbidden(format!(
            "a cross-site request (Sec-Fetch-Site: {site}) cannot change anything here"
        )));
    }
    if let Some(origin) = text("origin") {
        let host = text("host").unwrap_or_default();
        let origin_host = origin.split_once("://").map_or(origin, |(_, h)| h);
        if origin_host != host {
            return Err(ApiError::Forbidden(format!(
                "a request from {origin} cannot change anything on {host}: only this server's own page may"
            )));
        }
    }
    Ok(())
}

/// The middleware.
pub async fn check(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if request.method() == Method::GET
        && !request.uri().path().starts_with("/api/")
        && let Some(answer) =
            super::token::page_login(request.uri(), &app.cookie, |t| who(&app, Some(t)).is_ok())
    {
        return answer;
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    let mut caller = None;
    if routes::access(route) == Access::Token {
        match who(&app, given(&app, headers)) {
            Ok(named) => caller = named,
            Err(e) => return e.into_response(),
        }
    }
    let reads = [Method::GET, Method::HEAD, Method::OPTIONS];
    if !reads.contains(request.method())
        && let Err(e) = same_site(headers)
    {
        return e.into_response();
    }
    let mut request = request;
    if let Some(c) = caller {
        request.extensions_mut().insert(c);
    }
    next.run(request).await
}

/// The token check of a protected route when the server has tokens: the server's own
/// (`--token-env`) or a user's (`--user-token`), whose name is the request's [`Caller`].
fn who(app: &App, given: Option<&str>) -> Result<Option<Caller>, ApiError> {
    if !app.identity.has_tokens() {
        return match &app.token {
            Some(token) => authorized(given, token).map(|()| None),
            None => Ok(None),
        };
    }
    if let Some(name) = given.and_then(|g| app.identity.named(g, same_token)) {
        return Ok(Some(Caller(name.to_owned())));
    }
    match &app.token {
        Some(token) => authorized(given, token).map(|()| None),
        None => Err(ApiError::Unauthorized(match given {
            Some(_) => "the token is wrong: send `Authorization: Bearer <token>` with your token (--user-token)",
            None => "this server requires a token: send `Authorization: Bearer <token>` with your token (--user-token)",
        }
        .to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token(b"abc", b"abc"));
        assert!(!same_token(b"abd", b"abc"));
        assert!(!same_token(b"ab", b"abc"));
    }

    #[test]
    fn cross_site_posts_are_refused() {
        let mut h = HeaderMap::new();
        h.insert("host", "127.0.0.1:8088".parse().unwrap());
        assert!(same_site(&h).is_ok());
        h.insert("origin", "http://127.0.0.1:8088".parse().unwrap());
        assert!(same_site(&h).is_ok());
        h.insert("origin", "http://evil.example".parse().unwrap());
        assert!(same_site(&h).is_err());
        h.remove("origin");
        h.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(same_site(&h).is_err());
    }
}
