//! The names the server answers to: a request whose `Host` (or absolute request target)
//! is not one of them is refused with 421 before it is routed, on every path.
//!
//! This is the defence against DNS rebinding: a web page whose name the attacker makes
//! resolve to this machine is same-origin with itself, so its browser sends `Host`,
//! `Origin` and `Sec-Fetch-Site: same-origin` that all agree. Only the name gives it away.
//!
//! Allowed: `localhost`, any IP address literal (`127.0.0.1`, `[::1]`, the bound address,
//! a LAN address of a wildcard bind), and the names given with `--allowed-host`. An IP
//! literal cannot be rebound (no name is resolved), so a browser sends one only to a page
//! that really is at that address; this is also what Vite's `allowedHosts` allows by
//! default. The port is not compared: a rebinding page is on the server's own port anyway.

use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::uri::Authority;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// A host name given with `--allowed-host`: letters, digits, `-` and `.`, without scheme
/// or port, kept lower-case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostName(String);

/// Why a `--allowed-host` value is not a host name.
#[derive(Debug, thiserror::Error)]
#[error(
    "`{0}` is not a host name: give the name alone (letters, digits, `-` and `.`, no scheme, port or path), as in `--allowed-host treadle.example.com`"
)]
pub struct BadHostName(String);

impl FromStr for HostName {
    type Err = BadHostName;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let ok = !text.is_empty()
            && text.len() <= 253
            && !text.starts_with(['.', '-'])
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        if ok {
            Ok(Self(text.to_ascii_lowercase()))
        } else {
            Err(BadHostName(text.to_owned()))
        }
    }
}

impl HostName {
    /// The name, lower-case.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The names this server answers to.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    /// `--allowed-host` names (lower-case); `localhost` and IP literals are always allowed.
    names: Vec<HostName>,
}

/// Why a request's host is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The request names no host at all.
    Missing,
    /// The `Host` header is not an authority (`name[:port]`).
    Malformed,
    /// A name this server is not known by.
    Foreign(String),
}

impl AllowedHosts {
    /// `localhost`, IP literals and `extra`.
    pub fn new(extra: Vec<HostName>) -> Self {
        Self { names: extra }
    }

    /// Whether the authority `text` (a `Host` header's value: `name[:port]`,
    /// `[v6][:port]`) names this server.
    pub fn check(&self, text: &str) -> Result<(), Refused> {
        let authority = Authority::from_str(text).map_err(|_| Refused::Malformed)?;
        // `Authority` also takes `user@host`; a Host header never carries user info.
        if authority.as_str().contains('@') {
            return Err(Refused::Malformed);
        }
        self.check_host(authority.host())
    }

    fn check_host(&self, host: &str) -> Result<(), Refused> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        if bare.parse::<IpAddr>().is_ok() {
            return Ok(());
        }
        let lower = host.to_ascii_lowercase();
        if lower == "localhost" || self.names.iter().any(|n| n.0 == lower) {
            return Ok(());
        }
        Err(Refused::Foreign(host.to_owned()))
    }

    /// Checks every host a request names: its `Host` header, and the authority of an
    /// absolute request target (`GET http://name/ HTTP/1.1`), which HTTP says wins.
    fn check_request(&self, request: &Request) -> Result<(), Refused> {
        let header = request.headers().get(header::HOST);
        if let Some(authority) = request.uri().authority() {
            self.check(authority.as_str())?;
        } else if header.is_none() {
            return Err(Refused::Missing);
        }
        match header {
            Some(value) => self.check(value.to_str().map_err(|_| Refused::Malformed)?),
            None => Ok(()),
        }
    }
}

/// The 421 answer, saying how to allow the name if it is the server's own.
fn misdirected(why: Refused) -> Response {
    let message = match why {
        Refused::Missing => "the request names no host: send a `Host` header".to_owned(),
        Refused::Malformed => {
            "the `Host` header is not a host name with an optional port".to_owned()
        }
        Refused::Foreign(name) => {
            let shown: String = name.chars().take(100).collect();
            format!(
                "this server does not answer to the name `{shown}`: only to localhost, IP addresses and the names given with --allowed-host\nhint: if `{shown}` is a name of this server, start it with `treadle serve --allowed-host {shown}`"
            )
        }
    };
    let body = serde_json::json!({ "error": message });
    (StatusCode::MISDIRECTED_REQUEST, axum::Json(body)).into_response()
}

/// The middleware, in front of the router.
pub async fn check(
    State(allowed): State<Arc<AllowedHosts>>,
    request: Request,
    next: Next,
) -> Response {
    match allowed.check_request(&request) {
        Ok(()) => next.run(request).await,
        Err(why) => misdirected(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed() -> AllowedHosts {
        AllowedHosts::new(vec!["Treadle.Example.com".parse().unwrap()])
    }

    #[test]
    fn own_names_and_ip_literals_pass() {
        let a = allowed();
        for ok in [
            "localhost",
            "LOCALHOST:8088",
            "127.0.0.1:8088",
            "[::1]:8088",
            "[::1]",
            "10.1.2.3",
            "treadle.example.com:443",
            "TREADLE.example.COM",
        ] {
            assert_eq!(a.check(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn other_names_are_refused() {
        let a = allowed();
        for bad in [
            "evil.example",
            "evil.example:8088",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "treadle.example.com.evil.example",
            "sub.localhost",
        ] {
            assert!(matches!(a.check(bad), Err(Refused::Foreign(_))), "{bad}");
        }
        assert_eq!(a.check("user@localhost"), Err(Refused::Malformed));
        assert_eq!(a.check("local host"), Err(Refused::Malformed));
        assert_eq!(a.check(""), Err(Refused::Malformed));
    }

    #[test]
    fn allowed_host_values_are_names() {
        assert!("treadle.example.com".parse::<HostName>().is_ok());
        for bad in ["http://x", "x:80", "", "a/b", ".x", "*"] {
            assert!(bad.parse::<HostName>().is_err(), "{bad}");
        }
    }
}
