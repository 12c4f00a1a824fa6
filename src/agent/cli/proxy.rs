//! The loopback proxy through which a CLI agent reaches its model, so that the model's key
//! never enters the CLI's process (nor its Bash, nor anything its tools start).
//!
//! The CLI is given the proxy's URL as its base URL and a key of the step's own, made
//! fresh for the step and gone with it. The proxy answers only requests carrying that key
//! (as `x-api-key`, Anthropic's header, or `Authorization: Bearer`, OpenAI's), swaps in the
//! real key (read from `api_key_env:` in treadle's process) and forwards the request to
//! the step's endpoint, path and query unchanged; the upstream's answer is streamed back
//! as it arrives (server-sent events included), status and headers unchanged but for the
//! hop-by-hop ones. Redirects are not followed: the key goes to the endpoint only.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;

/// Why the proxy did not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// Its loopback port could not be had.
    #[error("cannot start the model proxy for the CLI agent on 127.0.0.1: {0}")]
    Listen(#[from] std::io::Error),
    /// Its HTTP client could not be built.
    #[error("cannot start the model proxy for the CLI agent: {0}")]
    Client(#[from] reqwest::Error),
}

/// How the real key is sent upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyHeader {
    /// `x-api-key: KEY` (Anthropic's Messages API).
    XApiKey,
    /// `Authorization: Bearer KEY` (OpenAI's Responses API).
    Bearer,
}

/// A running proxy; it stops when dropped.
pub struct Proxy {
    url: String,
    key: String,
    port: u16,
    stop: CancellationToken,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What each request needs.
#[derive(Clone)]
struct Upstream {
    /// The endpoint's base URL, without a trailing `/`.
    base: String,
    /// The step's key, which the CLI must present.
    step_key: String,
    /// The real key, when `api_key_env:` names one that is set.
    real_key: Option<String>,
    header: KeyHeader,
    client: reqwest::Client,
}

impl Proxy {
    /// Serves the proxy to `upstream` on a loopback port until dropped.
    pub async fn start(
        upstream: &str,
        header: KeyHeader,
        real_key: Option<String>,
    ) -> Result<Self, ProxyError> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(std::time::Duration::from_secs(30))
            .build()?;
        let state = Upstream {
            base: upstream.trim_end_matches('/').to_owned(),
            step_key: super::bridge::fresh_token(),
            real_key,
            header,
            client,
        };
        let key = state.step_key.clone();
        let router = axum::Router::new().fallback(forward).with_state(state);
        let stop = CancellationToken::new();
        let addr = super::bridge::serve_on_loopback(router, stop.clone(), "model proxy").await?;
        Ok(Self {
            url: format!("http://{addr}"),
            key,
            port: addr.port(),
            stop,
        })
    }

    /// The proxy's base URL (`http://127.0.0.1:PORT`), the CLI's endpoint.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The step's key, which the CLI presents instead of the real one.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Its loopback port, which a confined CLI must reach whatever its `network:`.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// Whether `headers` carry the step's key in either form.
fn presents(headers: &HeaderMap, key: &str) -> bool {
    let value = |name: HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    value(HeaderName::from_static("x-api-key")) == Some(key)
        || value(header::AUTHORIZATION).and_then(|v| v.strip_prefix("Bearer ")) == Some(key)
}

/// Headers that belong to one connection, or that the proxy sets itself.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "host"
            | "connection"
            | "keep-alive"
            | "proxy-authorization"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "content-length"
            | "x-api-key"
            | "authorization"
    )
}

async fn forward(State(up): State<Upstream>, request: Request) -> Response {
    if !presents(request.headers(), &up.step_key) {
        return (StatusCode::UNAUTHORIZED, "not this step's key\n").into_response();
    }
    let (parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let mut headers = HeaderMap::new();
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    if let Some(real) = &up.real_key {
        let (name, value) = match up.header {
            KeyHeader::XApiKey => (HeaderName::from_static("x-api-key"), real.clone()),
            KeyHeader::Bearer => (header::AUTHORIZATION, format!("Bearer {real}")),
        };
        match HeaderValue::from_str(&value) {
            Ok(mut value) => {
                value.set_sensitive(true);
                headers.insert(name, value);
            }
            Err(_) => {
                return (
                    StatusCode::BAD_GATEWAY,
                    "the step's key is not a valid header value\n",
                )
                    .into_response();
            }
        }
    }
    let sent = up
        .client
        .request(parts.method, format!("{}{path}", up.base))
        .headers(headers)
        .body(reqwest::Body::wrap_stream(body.into_data_stream()))
        .send()
        .await;
    let answer = match sent {
        Ok(answer) => answer,
        // reqwest's error names the URL, never a header: no key in it.
        Err(e) => {
            return (
                StatusCode::BAD_GATEWAY,
                format!("the model endpoint: {e}\n"),
            )
                .into_response();
        }
    };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in answer.headers() {
        if !hop_by_hop(name) {
            response = response.header(name, value);
        }
    }
    response
        .body(Body::from_stream(answer.bytes_stream()))
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}
