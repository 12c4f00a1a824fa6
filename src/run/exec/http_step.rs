//! Runs an `http:` step in-process: one request with reqwest under the step's cancellation
//! (its `timeout:` cancels it as it does a command), the response body counted against the
//! step output limit as a task's output is, its tail recorded as a task's stdout is, and
//! written with the status to the `output:` artifact. Secret headers are read from the
//! environment here and nowhere else; their values are masked out of whatever the body
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
use crate::run::transcript::{Event, Redactor};

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
        r = exchange(request, &limit) => match r {
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
        ctx.emit(Event::Output {
            run: ctx.run,
            seq: entry.seq,
            stream: "stdout".into(),
            line: line.to_owned(),
        });
    }
    let tail = record_tail(&shown).to_owned();
    super::record::update_at(ctx, entry, |r| r.stdout_tail = tail).await;
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

/// The request, with the secret headers' values read from their variables, and a
/// redactor of those values. An error names the header and the variable, never a value.
fn request(call: &HttpCall) -> Result<(reqwest::RequestBuilder, Redactor), Done> {
    let method = reqwest::Method::from_bytes(call.method.value.as_bytes()).map_err(|_| {
        let why = format!("`{}` is not an HTTP method", call.method.value);
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
    let mut values = Vec::new();
    for (name, var) in &call.secret_headers {
        let value = std::env::var(var)
            .map_err(|_| bad(name, &format!("environment variable `{var}` is not set")))?;
        let n = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| bad(name, "not a header name"))?;
        let mut v = reqwest::header::HeaderValue::from_str(&value)
            .map_err(|_| bad(name, &format!("`{var}` holds no valid header value")))?;
        v.set_sensitive(true);
        headers.append(n, v);
        values.push(value);
    }
    treadle_session::tls::install_crypto_provider();
    let client = reqwest::Client::builder().build().map_err(|e| {
        let why = format!("cannot build the HTTP client: {e}");
        Done::fail(FailureKind::Infrastructure, why)
    })?;
    let mut builder = client.request(method, &call.url.value).headers(headers);
    if let Some(body) = &call.body {
        builder = builder.body(body.clone());
    }
    Ok((builder, Redactor::new(values)))
}

/// Sends the request; the status and the body (as text, lossily), each chunk counted
/// against `limit` (over it, the limit's token is cancelled and the caller reports it).
async fn exchange(
    request: reqwest::RequestBuilder,
    limit: &OutputLimit,
) -> Result<(u16, String), Done> {
    // A transport error names the URL, which the step's key holds anyway; no header. No
    // kind names an unreachable server that is not a model provider.
    let fail = |e: reqwest::Error| Done::failed(format!("request failed: {e}"));
    let mut response = request.send().await.map_err(fail)?;
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
