//! The server's own token when none is configured (`--token-env`): made at start, so that
//! a server always has one (as Jupyter's does), kept for the local commands in
//! `server.token` beside the state file (mode 0600, removed at shutdown), and carried by
//! the page in a cookie set from the URL the server prints (`/?token=...`, which then
//! redirects to the clean address).
//!
//! The token is never in the server's environment (a process of the same user could read
//! it in `/proc/PID/environ`), and its file lives in the state directory, which confined
//! steps cannot read.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

/// The file a state file's server keeps its made token in: `state.redb` →
/// `server.token` in the same directory.
pub fn path_for(state: &Path) -> PathBuf {
    state.with_file_name("server.token")
}

/// Why the token file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the server's token to {path}: {source}")]
pub struct TokenFileError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

/// A new token: 256 random bits (the thread's CSPRNG), hex.
pub fn fresh() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `token` to the state's token file, readable and writable by the user only. A
/// file left by a server that was killed is replaced (this process holds the state file's
/// lock, so no other server uses it).
pub fn write(state: &Path, token: &str) -> Result<(), TokenFileError> {
    let path = path_for(state);
    let err = |source| TokenFileError {
        path: path.clone(),
        source,
    };
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(err(e)),
        _ => {}
    }
    // Created with its mode: there is no moment at which another user could open it.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(err)?;
    file.write_all(token.as_bytes()).map_err(err)
}

/// The token in the state's token file, if there is one.
pub fn read(state: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path_for(state)).ok()?;
    let token = text.trim();
    (!token.is_empty()).then(|| token.to_owned())
}

/// Removes the token file (at shutdown).
pub fn remove(state: &Path) {
    let _ = std::fs::remove_file(path_for(state));
}

/// The page's cookie on a server listening on `port`: a browser sends cookies to every
/// port of a host, so each server has its own name.
pub fn cookie_name(port: u16) -> String {
    format!("treadle_token_{port}")
}

/// The value of the cookie `name` in `headers`.
pub fn from_cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The `token` parameter of a query string, and the query without it.
fn split_query(query: &str) -> Option<(String, String)> {
    let mut token = None;
    let mut rest = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.strip_prefix("token=") {
            Some(value) => token = Some(value.to_owned()),
            None => rest.push(pair),
        }
    }
    token.map(|t| (t, rest.join("&")))
}

/// A page address carrying `?token=`: with the right token, an answer that sets the
/// cookie (HttpOnly, SameSite=Strict) and sends the browser on to the same address without
/// it; with a wrong one, 401. `None`: the address carries no token.
pub fn page_login(uri: &Uri, cookie: &str, valid: impl Fn(&str) -> bool) -> Option<Response> {
    let (given, rest) = split_query(uri.query()?)?;
    if !valid(&given) {
        return Some(
            (
                StatusCode::UNAUTHORIZED,
                "the token in this address is wrong: open the address `treadle serve` printed",
            )
                .into_response(),
        );
    }
    let clean = match rest.is_empty() {
        true => uri.path().to_owned(),
        false => format!("{}?{rest}", uri.path()),
    };
    let set = format!("{cookie}={given}; HttpOnly; SameSite=Strict; Path=/");
    let mut response = StatusCode::SEE_OTHER.into_response();
    let headers = response.headers_mut();
    if let (Ok(set), Ok(location)) = (HeaderValue::from_str(&set), HeaderValue::from_str(&clean)) {
        headers.insert(header::SET_COOKIE, set);
        headers.insert(header::LOCATION, location);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_leaves_the_query_and_the_rest_stays() {
        assert_eq!(
            split_query("a=1&token=abc&b=2"),
            Some(("abc".to_owned(), "a=1&b=2".to_owned()))
        );
        assert_eq!(split_query("a=1"), None);
    }

    #[test]
    fn a_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "x=1; treadle_token_8088=abc; y=2".parse().unwrap(),
        );
        assert_eq!(from_cookie(&h, "treadle_token_8088"), Some("abc"));
        assert_eq!(from_cookie(&h, "treadle_token_9000"), None);
    }

    #[test]
    fn the_file_is_the_users_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state.redb");
        write(&state, "t0k").unwrap();
        write(&state, "t1k").unwrap();
        let mode = std::fs::metadata(path_for(&state))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(read(&state).as_deref(), Some("t1k"));
        remove(&state);
        assert_eq!(read(&state), None);
    }
}
