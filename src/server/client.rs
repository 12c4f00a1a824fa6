//! The other commands' side of the server: find it through the discovery file, check it
//! answers, and call its API; a run's event stream is read (and resumed after a dropped
//! connection) with [`SseParser`].
//!
//! Why a parser of our own and not `eventsource-stream` (in the lock file through
//! async-openai): that crate does what a browser's `EventSource` does, and a follower of a
//! run needs the stream as sent. There, an event without `id:` carries the last id seen,
//! so a live token delta would look journaled and move the resume cursor (tests/
//! serve_events.rs checks that deltas have no id); and an event with no `data:` is
//! dropped. What it would replace is the 40 lines of [`SseParser::feed`], which the
//! follower and the tests feed with byte chunks of any size.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::discovery::{self, Discovery};

/// The variable the commands read the server's token from, when it requires one.
pub const TOKEN_ENV: &str = "TREADLE_SERVER_TOKEN";

/// A server that answered.
#[derive(Debug, Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
    /// What the discovery file said.
    pub found: Discovery,
}

/// Why a call to the server failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// It could not be reached or the connection broke.
    #[error("the server at {addr} (pid {pid}) did not answer: {reason}")]
    Unreachable {
        /// Where.
        addr: SocketAddr,
        /// Its process.
        pid: u32,
        /// Why.
        reason: String,
    },
    /// It answered with an error.
    #[error("{message}")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// Its `error`.
        message: String,
    },
}

/// Where to connect for a listening address: a wildcard bind is reached on loopback.
pub(crate) fn reachable(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), addr.port())
        }
        _ => addr,
    }
}

impl Client {
    /// The server that owns the state file `state`, if one runs and answers its health
    /// check; `None`: work alone.
    pub async fn find(state: &Path) -> Option<Self> {
        let found = discovery::read(state)?;
        treadle_session::tls::install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        let client = Self {
            base: format!("http://{}", reachable(found.addr)),
            // The variable when set, or the token the server made (readable by this user
            // only, in the state directory).
            token: crate::environ::var(TOKEN_ENV)
                .or_else(|| std::env::var(TOKEN_ENV).ok())
                .or_else(|| super::token::read(state)),
            http,
            found,
        };
        let health: serde_json::Value =
            tokio::time::timeout(Duration::from_secs(3), client.get("/api/v1/health"))
                .await
                .ok()?
                .ok()?;
        (health.get("ok") == Some(&serde_json::Value::Bool(true))).then_some(client)
    }

    /// Who the server is, for messages: `the server at ADDR (pid N)`.
    pub fn who(&self) -> String {
        format!(
            "the server at {} (pid {})",
            reachable(self.found.addr),
            self.found.pid
        )
    }

    fn unreachable(&self, e: impl std::fmt::Display) -> ClientError {
        ClientError::Unreachable {
            addr: self.found.addr,
            pid: self.found.pid,
            reason: e.to_string(),
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    async fn answer<T: DeserializeOwned>(
        &self,
        sent: Result<reqwest::Response, reqwest::Error>,
    ) -> Result<T, ClientError> {
        let response = sent.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        let body: serde_json::Value = response.json().await.map_err(|e| self.unreachable(e))?;
        if !status.is_success() {
            let mut message = body
                .get("error")
                .and_then(|e| e.as_str())
                .unwrap_or("refused")
                .to_owned();
            if status == reqwest::StatusCode::UNAUTHORIZED {
                message.push_str(&format!(
                    "\nhint: set {TOKEN_ENV} to the server's token (its --token-env variable)"
                ));
            }
            return Err(ClientError::Refused {
                status: status.as_u16(),
                message,
            });
        }
        serde_json::from_value(body).map_err(|e| self.unreachable(e))
    }

    /// `GET path` as JSON.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        let sent = self.request(reqwest::Method::GET, path).send().await;
        self.answer(sent).await
    }

    /// `POST path` with a JSON body.
    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
    ) -> Result<T, ClientError> {
        let sent = self
            .request(reqwest::Method::POST, path)
            .json(body)
            .send()
            .await;
        self.answer(sent).await
    }

    /// Opens run `run`'s event stream after event `after`.
    pub async fn events(&self, run: u64, after: u64) -> Result<reqwest::Response, ClientError> {
        let response = self
            .request(reqwest::Method::GET, &format!("/api/v1/runs/{run}/events"))
            .header("Last-Event-ID", after.to_string())
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        if !response.status().is_success() {
            let status = response.status().as_u16();
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            return Err(ClientError::Refused {
                status,
                message: body
                    .get("error")
                    .and_then(|e| e.as_str())
                    .unwrap_or("refused")
                    .to_owned(),
            });
        }
        Ok(response)
    }
}

/// One server-sent event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// Its `id:` (journaled events only).
    pub id: Option<u64>,
    /// Its `event:` (`message` when none).
    pub event: String,
    /// Its `data:` lines, joined by newlines.
    pub data: String,
}

/// Reads server-sent events from a byte stream fed in pieces of any size.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    current: SseEvent,
    has_data: bool,
}

impl SseParser {
    /// Feeds bytes; returns the events they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buffer.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if self.has_data || !self.current.event.is_empty() {
                    let mut done = std::mem::take(&mut self.current);
                    if done.event.is_empty() {
                        done.event = "message".to_owned();
                    }
                    out.push(done);
                }
                self.has_data = false;
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => self.current.id = value.parse().ok(),
                "event" => self.current.event = value.to_owned(),
                "data" => {
                    if self.has_data {
                        self.current.data.push('\n');
                    }
                    self.current.data.push_str(value);
                    self.has_data = true;
                }
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere_parse_the_same() {
        let text = b"id: 1\nevent: step_started\ndata: {\"a\":1}\n\n: keep-alive\n\nevent: token\ndata: x\ndata: y\n\n";
        for cut in 0..text.len() {
            let mut p = SseParser::default();
            let mut got = p.feed(&text[..cut]);
            got.extend(p.feed(&text[cut..]));
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert_eq!(got[0].id, Some(1));
            assert_eq!(got[0].event, "step_started");
            assert_eq!(got[1].data, "x\ny");
            assert_eq!(got[1].id, None);
        }
    }
}
