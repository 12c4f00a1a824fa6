//! Runs an `http:` step in-process: one request with reqwest under the step's cancellation
//! (its `timeout:` cancels it as it does a command), the response body counted against the
//! step output limit as a task's output is, its tail recorded as a task's stdout is, and
//! written with the status to the `output:` artifact. Secret headers are read from the
//! environment here and nowhere else, sent to the URL's origin only (redirects are
//! followed here, see [`send`]), and their values are masked out of whatever the body
//! echoes before it is shown, recorded or written.

use tokio_util::sync::CancellationToken;

use super::{Ctx, Done};
use crate::assert::StepFacts;
use crate::pipeline::http_step::HttpCall;
use crate::pipeline::outline::Entry;
use crate::pipeline::{At, Step};
use crate::run::failure::FailureKind;
use crate::run::output_limit::OutputLimit;
use crate::run::task::record_tail;
use crate::run::transcript::Redactor;

/// Sends the request of `call` and judges the answer.
pub(crate) async fn http<'a>(
    ctx: &'a Ctx<'a>,
    step: &'a At<Step>,
    entry: &'a Entry,
    attempt: u32,
    call: &'a HttpCall,
    cancel: CancellationToken,
) -> Done {
    let dir = match super::step_dir::prepare(ctx, step, entry, attempt).await {
        Ok(d) => d,
        Err(done) => return done,
    };
    let (request, secrets) = match request(call) {
        Ok(r) => r,
        Err(done) => return done,
    };
    let limit = OutputLimit::new(ctx.loaded.pipeline.step_output_limit(), &cancel);
    let (status, body) = tokio::select! {
        r = exchange(&request, &limit) => match r {
            Ok(r) => r,
            Err(done) => return done,
        },
        () = limit.token.cancelled() => match limit.reached() {
            Some(reached) => return reached,
            None => return ctx.cancelled(),
        },
    };
    let shown = secrets.mask(&ctx.transcript.redactor().mask(&body));
    for line in shown.lines() {
        ctx.step_line(entry, line.to_owned());
    }
    let tail = record_tail(&shown).to_owned();
    super::record::update_at(ctx, entry, |r| r.produced.stdout_tail = tail).await;
    if !call.accepts(status) {
        let (m, u) = (&call.method.value, &call.url.value);
        let why = format!("HTTP status {status} from {m} {u}");
        // The request's answer said no, as a command's exit status does.
        return Done::fail(FailureKind::ExitStatus, why);
    }
    if let Some(out) = &call.output {
        let at = dir.join(&out.value);
        let written = std::fs::write(at.join("body"), &shown)
            .and_then(|()| std::fs::write(at.join("status"), status.to_string()));
        if let Err(e) = written {
            let why = format!("cannot write output `{}`: {e}", out.value);
            return Done::fail(FailureKind::Infrastructure, why);
        }
    }
    let facts = StepFacts {
        dir: &dir,
        stdout: &shown,
        stderr: "",
        code: None,
        verdict: None,
        tool_calls: &[],
    };
    super::step_dir::conclude(ctx, step, &dir, facts, None).await
}

/// The most redirects followed before the step fails.
const MAX_REDIRECTS: usize = 10;

/// A request ready to send: the secret headers apart, since they go to the URL's origin
/// only.
struct Prepared {
    client: reqwest::Client,
    method: reqwest::Method,
    url: reqwest::Url,
    headers: reqwest::header::HeaderMap,
    secrets: reqwest::header::HeaderMap,
    body: Option<String>,
    follow: bool,
}

/// The request, with the secret headers' values read from their variables, and a
/// redactor of those values. An error names the header and the variable, never a value.
fn request(call: &HttpCall) -> Result<(Prepared, Redactor), Done> {
    let method = reqwest::Method::from_bytes(call.method.value.as_bytes()).map_err(|_| {
        let why = format!("`{}` is not an HTTP method", call.method.value);
        Done::fail(FailureKind::Configuration, why)
    })?;
    let url = reqwest::Url::parse(&call.url.value).map_err(|e| {
        let why = format!("`{}` is not a URL: {e}", call.url.value);
        Done::fail(FailureKind::Configuration, why)
    })?;
    let mut headers = reqwest::header::HeaderMap::new();
    let bad = |name: &str, why: &str| {
        Done::fail(
            FailureKind::Configuration,
            format!("header `{name}`: {why}"),
        )
    };
    for (name, value) in &call.headers {
        let n = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| bad(name, "not a header name"))?;
        let v = reqwest::header::HeaderValue::from_str(value)
            .map_err(|_| bad(name, "not a header value"))?;
        headers.append(n, v);
    }
    let mut secrets = reqwest::header::HeaderMap::new();
    let mut values = Vec::new();
    for (name, var) in &call.secret_headers {
        let value = std::env::var(var)
            .map_err(|_| bad(name, &format!("environment variable `{var}` is not set")))?;
        if let Some(why) = crate::pipeline::http_step::too_short(&value) {
            return Err(bad(name, &format!("`{var}` {why}")));
        }
        let n = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| bad(name, "not a header name"))?;
        let mut v = reqwest::header::HeaderValue::from_str(&value)
            .map_err(|_| bad(name, &format!("`{var}` holds no valid header value")))?;
        v.set_sensitive(true);
        secrets.append(n, v);
        values.push(value);
    }
    treadle_session::tls::install_crypto_provider();
    // Redirects are followed here, not by reqwest, which would send the secret headers on
    // to another origin (it strips only `Authorization` and cookies).
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| {
            let why = format!("cannot build the HTTP client: {e}");
            Done::fail(FailureKind::Infrastructure, why)
        })?;
    let prepared = Prepared {
        client,
        method,
        url,
        headers,
        secrets,
        body: call.body.clone(),
        follow: call.follow_redirects,
    };
    Ok((prepared, Redactor::new(values)))
}

/// Sends the request, following redirects (unless `follow_redirects: false`): the secret
/// headers go only to the origin (scheme, host, port) of the step's URL, so a redirect to
/// another origin is followed without them. A 303, and a 301 or 302 answering a POST, go
/// on as a GET without the body, as browsers do.
async fn send(p: &Prepared) -> Result<reqwest::Response, Done> {
    let fail = |e: reqwest::Error| Done::failed(format!("request failed: {e}"));
    let origin = p.url.origin();
    let (mut method, mut url, mut body) = (p.method.clone(), p.url.clone(), p.body.clone());
    for _ in 0..=MAX_REDIRECTS {
        let mut request = p
            .client
            .request(method.clone(), url.clone())
            .headers(p.headers.clone());
        if url.origin() == origin {
            request = request.headers(p.secrets.clone());
        }
        if let Some(b) = &body {
            request = request.body(b.clone());
        }
        let response = request.send().await.map_err(fail)?;
        let status = response.status();
        let next = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| url.join(l).ok())
            .filter(|u| matches!(u.scheme(), "http" | "https"));
        let Some(next) = next.filter(|_| p.follow && status.is_redirection()) else {
            return Ok(response);
        };
        let post = method == reqwest::Method::POST;
        if status == reqwest::StatusCode::SEE_OTHER
            || (post && matches!(status.as_u16(), 301 | 302))
        {
            method = reqwest::Method::GET;
            body = None;
        }
        url = next;
    }
    Err(Done::failed(format!(
        "more than {MAX_REDIRECTS} redirects from {}",
        p.url
    )))
}

/// Sends the request; the status and the body (as text, lossily), each chunk counted
/// against `limit` (over it, the limit's token is cancelled and the caller reports it).
async fn exchange(request: &Prepared, limit: &OutputLimit) -> Result<(u16, String), Done> {
    // A transport error names the URL, which the step's key holds anyway; no header. No
    // kind names an unreachable server that is not a model provider.
    let fail = |e: reqwest::Error| Done::failed(format!("request failed: {e}"));
    let mut response = send(request).await?;
    let status = response.status().as_u16();
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(fail)? {
        if !limit.take(chunk.len()) {
            // The select in the caller sees the cancelled token and reports the limit.
            std::future::pending::<()>().await;
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}
