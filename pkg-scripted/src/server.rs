//! The HTTP side: [`ScriptedServer`], its [`ServerBuilder`], and the request handlers
//! (chat completions, Anthropic Messages).

use std::borrow::Cow;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, OriginalUri, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::pace::{Delays, paced_body};
use crate::render::{self, Ctx, Rendered, Renderer};
use crate::reply::{Ending, Reply};
use crate::request::{LightRequest, RequestInfo};
use crate::script::Script;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The loopback port could not be bound.
    #[error("scripted server: cannot bind 127.0.0.1:{port}: {source}")]
    Bind {
        /// The requested port (0 = ephemeral).
        port: u16,
        /// The OS error.
        source: io::Error,
    },
    /// The bound address could not be read back.
    #[error("scripted server: cannot read the bound address: {0}")]
    LocalAddr(#[source] io::Error),
}

/// One request as the server received it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RecordedRequest {
    /// The request path, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Header names (lower case) and values, in the order received.
    pub headers: Vec<(String, String)>,
    /// The JSON body (a JSON string holding the raw text if the body was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Options for a [`ScriptedServer`]; made by [`ScriptedServer::builder`].
///
/// ```
/// use std::time::Duration;
/// use treadle_scripted::{Reply, Script, ScriptedServer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), treadle_scripted::ServerError> {
/// let server = ScriptedServer::builder()
///     .chunk_delay(Duration::from_millis(1))
///     .jitter(Duration::ZERO, Duration::from_millis(3), 42)
///     .quirks(true)
///     .record(false)
///     .start(Script::new([Reply::text("hi")]))
///     .await?;
/// assert!(server.base_url().starts_with("http://127.0.0.1:"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct ServerBuilder {
    first_byte_delay: Duration,
    chunk_delay: Duration,
    jitter: Option<(Duration, Duration, u64)>,
    quirks: bool,
    record: bool,
    port: u16,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        Self {
            first_byte_delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            jitter: None,
            quirks: false,
            record: true,
            port: 0,
        }
    }
}

impl ServerBuilder {
    /// Waits this long before the first streamed chunk, after the response's headers were
    /// sent (and before a non-streaming body), as a model reading a long prompt does: time
    /// to first token is this, not the headers' arrival. Default: no delay.
    pub fn first_byte_delay(mut self, delay: Duration) -> Self {
        self.first_byte_delay = delay;
        self
    }

    /// Waits this long before every streamed chunk after the first (and before a
    /// non-streaming body). Default: no delay.
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    /// Adds a random delay, uniform in `[min, max]`, wherever [`Self::chunk_delay`]
    /// applies. The random sequence of request number `i` is seeded from `(seed, i)`, so
    /// a seed reproduces a schedule as far as the arrival order does.
    pub fn jitter(mut self, min: Duration, max: Duration, seed: u64) -> Self {
        self.jitter = Some((min.min(max), max.max(min), seed));
        self
    }

    /// Behaves like a sloppy provider: intermediate chunks carry `finish_reason: ""`
    /// instead of `null`, usage is never sent, and every object has an extra unknown
    /// field `x_scripted_quirk`. Default: off.
    pub fn quirks(mut self, on: bool) -> Self {
        self.quirks = on;
        self
    }

    /// Keeps a log of requests for [`ScriptedServer::requests`]. Default: on. Turn it off
    /// for benchmarks: the server then parses only the fields it needs.
    pub fn record(mut self, on: bool) -> Self {
        self.record = on;
        self
    }

    /// Binds this loopback port instead of an ephemeral one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Binds `127.0.0.1` and starts serving `script` on the current tokio runtime.
    pub async fn start(self, script: Script) -> Result<ScriptedServer, ServerError> {
        let port = self.port;
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .map_err(|source| ServerError::Bind { port, source })?;
        let addr = listener.local_addr().map_err(ServerError::LocalAddr)?;
        let (shutdown, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            needs_body: script.needs_body(),
            state: Mutex::new(ScriptState {
                script,
                served: 0,
                log: Vec::new(),
            }),
            requests: watch::channel(0).0,
            disconnects: watch::channel(0).0,
            shutdown: shutdown.clone(),
            opts: self,
        });
        let router = Router::new()
            .route("/v1/chat/completions", post(completions))
            .route("/chat/completions", post(completions))
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .route("/v1/responses", post(responses))
            .layer(DefaultBodyLimit::disable())
            .with_state(Arc::clone(&inner));
        let listener = listener.tap_io(|tcp| {
            if let Err(err) = tcp.set_nodelay(true) {
                tracing::debug!("scripted server: cannot set TCP_NODELAY: {err}");
            }
        });
        let mut stop = shutdown.subscribe();
        let serve = axum::serve(listener, router).with_graceful_shutdown(async move {
            // An error means the sender is gone, which is a shutdown too.
            let _ = stop.wait_for(|s| *s).await;
        });
        tokio::spawn(async move {
            if let Err(err) = serve.await {
                tracing::warn!("scripted server stopped: {err}");
            }
        });
        tracing::debug!("scripted server listening on {addr}");
        Ok(ScriptedServer {
            base_url: format!("http://{addr}/v1"),
            addr,
            inner,
        })
    }
}

/// A scripted OpenAI-compatible chat-completions server on loopback.
///
/// It stops accepting connections when dropped; blocked streams then end.
///
/// ```
/// use serde_json::json;
/// use treadle_scripted::{Reply, Script, ScriptedServer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), treadle_scripted::ServerError> {
/// let server = ScriptedServer::start(Script::new([
///     Reply::text("Hello there").usage(10, 5),
///     Reply::tool_call("echo", json!({"i": 2})),
/// ]))
/// .await?;
/// // Point an OpenAI client at this:
/// let url = server.base_url();
/// assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/v1"));
/// server.push(Reply::status(500).body("boom"));
/// assert_eq!(server.remaining(), 3);
/// assert_eq!(server.request_count(), 0);
/// # Ok(())
/// # }
/// ```
pub struct ScriptedServer {
    base_url: String,
    addr: SocketAddr,
    inner: Arc<Inner>,
}

impl fmt::Debug for ScriptedServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedServer")
            .field("base_url", &self.base_url)
            .field("request_count", &self.request_count())
            .finish_non_exhaustive()
    }
}

impl ScriptedServer {
    /// Starts a server with default options (see [`ScriptedServer::builder`]).
    pub async fn start(script: Script) -> Result<Self, ServerError> {
        Self::builder().start(script).await
    }

    /// Options: delays, jitter, quirks, recording, port.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// `http://127.0.0.1:PORT/v1`, the base URL to give an OpenAI client.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `http://127.0.0.1:PORT`, the base URL to give an Anthropic Messages client (it adds
    /// `/v1/messages` itself; Claude Code reads it from `ANTHROPIC_BASE_URL`).
    pub fn messages_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The recorded requests, in arrival order (empty if recording is off).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.lock().log.clone()
    }

    /// How many chat-completions requests arrived (recorded or not).
    pub fn request_count(&self) -> usize {
        *self.inner.requests.borrow()
    }

    /// Appends a reply to the queue; queued replies are answered before any generator.
    pub fn push(&self, reply: Reply) {
        self.inner.lock().script.queue.push_back(reply);
    }

    /// How many queued replies are not yet answered (a generator is not counted).
    pub fn remaining(&self) -> usize {
        self.inner.lock().script.queue.len()
    }

    /// How many responses lost their client before they were complete: a blocked stream
    /// whose client went away, or a paced stream the client dropped part-way.
    pub fn disconnects(&self) -> usize {
        *self.inner.disconnects.borrow()
    }

    /// Waits until [`Self::disconnects`] reaches `n`; false on timeout.
    pub async fn wait_disconnects(&self, n: usize, timeout: Duration) -> bool {
        wait_count(&self.inner.disconnects, n, timeout).await
    }

    /// Waits until at least one client went away from an unfinished response; false on
    /// timeout. Same as `wait_disconnects(1, timeout)`.
    pub async fn wait_client_gone(&self, timeout: Duration) -> bool {
        self.wait_disconnects(1, timeout).await
    }

    /// Waits until [`Self::request_count`] reaches `n`; false on timeout.
    pub async fn wait_requests(&self, n: usize, timeout: Duration) -> bool {
        wait_count(&self.inner.requests, n, timeout).await
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.inner.shutdown.send_replace(true);
    }
}

async fn wait_count(counter: &watch::Sender<usize>, n: usize, timeout: Duration) -> bool {
    let mut rx = counter.subscribe();
    matches!(
        tokio::time::timeout(timeout, rx.wait_for(|c| *c >= n)).await,
        Ok(Ok(_))
    )
}

pub(crate) struct ScriptState {
    script: Script,
    /// Requests that got an answer from the script.
    served: usize,
    log: Vec<RecordedRequest>,
}

pub(crate) struct Inner {
    state: Mutex<ScriptState>,
    needs_body: bool,
    requests: watch::Sender<usize>,
    disconnects: watch::Sender<usize>,
    shutdown: watch::Sender<bool>,
    opts: ServerBuilder,
}

impl Inner {
    pub(crate) fn lock(&self) -> MutexGuard<'_, ScriptState> {
        // A panic in a user script function must not wedge every later request.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(crate) fn plain(status: StatusCode, msg: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        msg,
    )
        .into_response()
}

async fn completions(
    State(inner): State<Arc<Inner>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let value = if inner.opts.record || inner.needs_body {
        Some(serde_json::from_slice::<Value>(&body))
    } else {
        None
    };
    let (info, value) = match &value {
        Some(Ok(v)) => (Ok(RequestInfo::from_value(v)), Some(v)),
        Some(Err(e)) => (Err(e.to_string()), None),
        None => match serde_json::from_slice::<LightRequest<'_>>(&body) {
            Ok(l) => (Ok(RequestInfo::from(l)), None),
            Err(e) => (Err(e.to_string()), None),
        },
    };
    let picked = record_and_pick(&inner, &uri, &headers, &body, value, info.as_ref().ok());
    let info = match info {
        Ok(info) => info,
        Err(e) => {
            return plain(
                StatusCode::BAD_REQUEST,
                format!("scripted server: request body is not valid JSON: {e}"),
            );
        }
    };
    let (index, reply) = match picked {
        Ok(p) => p,
        Err(served) => {
            tracing::warn!("scripted server: script exhausted after {served} requests");
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("scripted server: script exhausted after {served} requests"),
            );
        }
    };
    tracing::debug!(index, stream = info.stream, "scripted server: answering");
    answer(&inner, &info, index, &reply).await
}

/// Records the request (when recording) and picks the next scripted reply, under one lock,
/// so the log order is the order in which script replies were handed out. `Err` holds how
/// many replies were served before the script ran out (0 for a request that is not JSON).
pub(crate) fn record_and_pick(
    inner: &Inner,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &Bytes,
    value: Option<&Value>,
    info: Option<&RequestInfo<'_>>,
) -> Result<(usize, Reply), usize> {
    let mut st = inner.lock();
    if inner.opts.record {
        st.log.push(RecordedRequest {
            path: uri.path().to_owned(),
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: value
                .cloned()
                .unwrap_or_else(|| Value::String(String::from_utf8_lossy(body).into_owned())),
        });
    }
    inner.requests.send_modify(|n| *n += 1);
    let info = info.ok_or(0usize)?;
    let served = st.served;
    match st.script.next(info.tool_messages, value) {
        Some(reply) => {
            st.served += 1;
            Ok((served, reply))
        }
        None => Err(served),
    }
}

/// Renders one scripted reply and sends it: a status error, a whole body, or a paced stream.
async fn answer(inner: &Inner, info: &RequestInfo<'_>, index: usize, reply: &Reply) -> Response {
    answer_with(inner, info, index, reply, render::render).await
}

/// Renders one scripted reply with `render` and sends it.
pub(crate) async fn answer_with(
    inner: &Inner,
    info: &RequestInfo<'_>,
    index: usize,
    reply: &Reply,
    render: Renderer,
) -> Response {
    let ctx = Ctx {
        request_index: index,
        model: reply.served_model.as_deref().unwrap_or(&info.model),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        stream: info.stream,
        include_usage: info.include_usage,
        quirks: inner.opts.quirks,
    };
    let rendered = match render(reply, &ctx) {
        Ok(r) => r,
        Err(e) => {
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("scripted server: cannot render reply: {e}"),
            );
        }
    };
    let mut delays = Delays::new(
        (inner.opts.first_byte_delay, inner.opts.chunk_delay),
        inner.opts.jitter,
        index,
    );
    match rendered {
        Rendered::Status {
            status,
            content_type,
            body,
            retry_after,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut resp = (status, [(header::CONTENT_TYPE, content_type)], body).into_response();
            if let Some(secs) = retry_after {
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            resp
        }
        Rendered::Ok {
            content_type,
            frames,
            ending,
        } => {
            if !info.stream {
                let first = delays.take_first().unwrap_or_default();
                let d = first + delays.next().unwrap_or_default();
                if !d.is_zero() {
                    tokio::time::sleep(d).await;
                }
            }
            let body = if ending == Ending::Complete && (delays.is_zero() || !info.stream) {
                Body::from(frames.buf)
            } else {
                paced_body(
                    frames,
                    ending,
                    delays,
                    inner.disconnects.clone(),
                    inner.shutdown.subscribe(),
                )
            };
            let mut resp = Response::new(body);
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
            if info.stream {
                resp.headers_mut()
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            }
            resp
        }
    }
}

// The Anthropic Messages and OpenAI Responses sides, answered from the same script; token
// counting takes no reply, so that a client counting before it sends does not shift the
// script.

/// `POST /v1/messages`.
pub(crate) async fn messages(
    State(inner): State<Arc<Inner>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer_api(&inner, &uri, &headers, &body, &crate::api::MESSAGES).await
}

/// `POST /v1/responses`.
pub(crate) async fn responses(
    State(inner): State<Arc<Inner>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer_api(&inner, &uri, &headers, &body, &crate::api::RESPONSES).await
}

async fn answer_api(
    inner: &Inner,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    body: &Bytes,
    api: &crate::api::Api,
) -> Response {
    let value = serde_json::from_slice::<Value>(body);
    let info = value.as_ref().ok().map(|v| RequestInfo {
        stream: v["stream"].as_bool().unwrap_or(false),
        include_usage: true,
        model: Cow::Borrowed(v["model"].as_str().unwrap_or("scripted")),
        tool_messages: (api.tool_results)(v),
    });
    let picked = record_and_pick(
        inner,
        uri,
        headers,
        body,
        value.as_ref().ok(),
        info.as_ref(),
    );
    let Some(info) = info else {
        let why = value.err().map_or_else(String::new, |e| e.to_string());
        return plain(
            StatusCode::BAD_REQUEST,
            format!("scripted server: request body is not valid JSON: {why}"),
        );
    };
    match picked {
        Ok((index, reply)) => answer_with(inner, &info, index, &reply, api.render).await,
        Err(served) => {
            tracing::warn!("scripted server: script exhausted after {served} requests");
            let error = (api.exhausted)(format!(
                "scripted server: script exhausted after {served} requests"
            ));
            (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(error)).into_response()
        }
    }
}

/// `POST /v1/messages/count_tokens`: about one token per four bytes of the request.
pub(crate) async fn count_tokens(body: Bytes) -> Response {
    axum::Json(json!({"input_tokens": body.len().div_ceil(4)})).into_response()
}
