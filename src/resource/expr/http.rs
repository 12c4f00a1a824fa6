//! `http()` of expression types: a list of requests sent `concurrency` at a time, answered
//! in request order with one envelope each (a single request, not in a list, with its
//! envelope alone):
//! `{request, status, headers, json, body, error}`. A status is data; only a request that
//! got no response fails the call (or, with `tolerate_errors`, gives `status: 0` and an
//! `error`). Statuses listed in `retry.on` are retried up to `retry.max` times, after the
//! server's `Retry-After` (seconds or an HTTP date, at most a minute) or an exponential
//! backoff; when retries run out the last response is returned.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Map, Value, json};

use super::builtins::{num, show_type};

/// Longest wait between retries, whatever `Retry-After` says.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// First backoff when the server gives no `Retry-After`; doubled per retry.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

/// Why `http()` failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Its first argument is neither a request nor a list of them.
    #[error("http() takes a request map or a list of them, not {0}")]
    NotARequest(String),
    /// It has no argument.
    #[error("http() needs a request, like http({{url: \"...\"}})")]
    NoRequest,
    /// It has more than two.
    #[error("http() takes a request (or a list) and settings")]
    TooManyArguments,
    /// Its settings are wrong.
    #[error("http(): {0}")]
    Settings(#[from] SettingsError),
    /// A request is wrong (`index` in a list).
    #[error("http(): {}{source}", .index.map(|i| format!("request {i}: ")).unwrap_or_default())]
    Request {
        /// Its place in the list, when a list was given.
        index: Option<usize>,
        /// What is wrong.
        source: RequestError,
    },
    /// No HTTP client could be made.
    #[error("http(): cannot make an HTTP client: {0}")]
    Client(reqwest::Error),
    /// A request got no response (and `tolerate_errors` is off).
    #[error("http(): {method} {url}: {source}")]
    NoResponse {
        /// Its method.
        method: String,
        /// Its URL.
        url: String,
        /// Why.
        source: Unanswered,
    },
}

/// What is wrong with `http()`'s settings.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// They are not a map.
    #[error("settings must be a map, not {0}")]
    NotAMap(String),
    /// A setting of the wrong kind.
    #[error("setting `{key}` must be {want}, not {found}")]
    Kind {
        /// The setting.
        key: String,
        /// What it must be.
        want: &'static str,
        /// What it is.
        found: String,
    },
    /// `timeout` that is not a duration.
    #[error("setting `timeout`: {text:?}: {source}")]
    Timeout {
        /// As written.
        text: String,
        /// Why it does not read.
        source: humantime::DurationError,
    },
    /// A setting that does not exist.
    #[error(
        "unknown setting `{0}` (settings: headers, concurrency, timeout, max_response_bytes, retry, tolerate_errors)"
    )]
    Unknown(String),
    /// `retry` that is not a map.
    #[error("setting `retry` must be a map like {{on: [429, 503], max: 3}}, not {0}")]
    RetryNotAMap(String),
    /// `retry.on` that is not a list.
    #[error("`retry.on` must be a list of status numbers")]
    RetryOnNotAList,
    /// An element of `retry.on` that is not a status.
    #[error("`retry.on` takes status numbers like 429, not {0}")]
    RetryOn(String),
    /// `retry.max` that is not a count.
    #[error("`retry.max` must be a number, not {0}")]
    RetryMax(String),
    /// A key of `retry` that does not exist.
    #[error("unknown key `retry.{0}` (keys: on, max)")]
    UnknownRetryKey(String),
}

/// What is wrong with one request.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// It is not a map.
    #[error("a request must be a map with `url`, not {0}")]
    NotAMap(String),
    /// A key of the wrong kind.
    #[error("`{key}` must be {want}")]
    Kind {
        /// The key.
        key: String,
        /// What it must be.
        want: &'static str,
    },
    /// A key that does not exist.
    #[error("unknown request key `{0}` (keys: url, method, query, headers, json, body)")]
    Unknown(String),
    /// It has no `url`.
    #[error("a request needs `url`")]
    NoUrl,
    /// `method` that is not an HTTP method.
    #[error("`method` {0:?} is not an HTTP method")]
    Method(String),
}

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum Unanswered {
    /// Sending it failed.
    #[error("{}", reason(.0))]
    Send(reqwest::Error),
    /// Reading the response failed.
    #[error("reading the response: {}", reason(.0))]
    Read(reqwest::Error),
    /// The response is over `max_response_bytes`.
    #[error("the response is larger than max_response_bytes ({0})")]
    TooLarge(usize),
}

/// The settings of one call (`http(requests, settings)`).
#[derive(Debug, Clone)]
struct Settings {
    headers: BTreeMap<String, String>,
    concurrency: usize,
    timeout: Duration,
    max_response_bytes: usize,
    retry_on: Vec<u16>,
    retry_max: u32,
    tolerate_errors: bool,
}

/// One request, checked.
#[derive(Debug, Clone)]
struct Request {
    echo: Value,
    method: reqwest::Method,
    url: String,
    query: Vec<(String, String)>,
    headers: BTreeMap<String, String>,
    body: Option<(Vec<u8>, Option<&'static str>)>,
}

/// Runs `http(args...)` on `runtime` (the caller is a blocking thread).
pub fn call(args: &[Value], runtime: &tokio::runtime::Handle) -> Result<Value, HttpError> {
    let (requests, single) = match args.first() {
        Some(Value::Array(list)) => (list.clone(), false),
        Some(one @ Value::Object(_)) => (vec![one.clone()], true),
        Some(other) => {
            return Err(HttpError::NotARequest(show_type(other)));
        }
        None => return Err(HttpError::NoRequest),
    };
    if args.len() > 2 {
        return Err(HttpError::TooManyArguments);
    }
    let settings = settings(args.get(1))?;
    let requests = requests
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            request(r, &settings).map_err(|source| HttpError::Request {
                index: (!single).then_some(i),
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    treadle_session::tls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(settings.timeout)
        .build()
        .map_err(HttpError::Client)?;
    let answers: Vec<Result<Value, HttpError>> = runtime.block_on(async {
        futures::stream::iter(requests)
            .map(|r| send(&client, r, &settings))
            .buffered(settings.concurrency)
            .collect()
            .await
    });
    let mut answers = answers.into_iter().collect::<Result<Vec<_>, _>>()?;
    // One request (not in a list) is answered with its envelope, not a list of one.
    Ok(match answers.pop() {
        Some(one) if single && answers.is_empty() => one,
        last => {
            answers.extend(last);
            Value::Array(answers)
        }
    })
}

fn settings(v: Option<&Value>) -> Result<Settings, SettingsError> {
    let mut s = Settings {
        headers: BTreeMap::new(),
        concurrency: 4,
        timeout: Duration::from_secs(30),
        max_response_bytes: 8 << 20,
        retry_on: Vec::new(),
        retry_max: 3,
        tolerate_errors: false,
    };
    let m = match v {
        None | Some(Value::Null) => return Ok(s),
        Some(Value::Object(m)) => m,
        Some(other) => {
            return Err(SettingsError::NotAMap(show_type(other)));
        }
    };
    let bad = |k: &str, want: &'static str, v: &Value| SettingsError::Kind {
        key: k.to_owned(),
        want,
        found: show_type(v),
    };
    for (k, v) in m {
        match k.as_str() {
            "headers" => s.headers = strings(v).ok_or_else(|| bad(k, STRINGS, v))?,
            "concurrency" => {
                s.concurrency = count(v)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad(k, "a positive integer", v))?;
            }
            "timeout" => {
                let Value::String(t) = v else {
                    return Err(bad(k, "a duration like \"30s\"", v));
                };
                s.timeout =
                    humantime::parse_duration(t).map_err(|source| SettingsError::Timeout {
                        text: t.clone(),
                        source,
                    })?;
            }
            "max_response_bytes" => {
                s.max_response_bytes = count(v).ok_or_else(|| bad(k, "a number of bytes", v))?;
            }
            "tolerate_errors" => {
                s.tolerate_errors = v.as_bool().ok_or_else(|| bad(k, "true or false", v))?;
            }
            "retry" => retry(v, &mut s)?,
            other => {
                return Err(SettingsError::Unknown(other.to_owned()));
            }
        }
    }
    Ok(s)
}

fn retry(v: &Value, s: &mut Settings) -> Result<(), SettingsError> {
    let Value::Object(m) = v else {
        return Err(SettingsError::RetryNotAMap(show_type(v)));
    };
    for (k, v) in m {
        match k.as_str() {
            "on" => {
                let list = v.as_array().ok_or(SettingsError::RetryOnNotAList)?;
                s.retry_on = list
                    .iter()
                    .map(|x| {
                        count(x)
                            .and_then(|n| u16::try_from(n).ok())
                            .ok_or_else(|| SettingsError::RetryOn(show_type(x)))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "max" => {
                s.retry_max = count(v)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| SettingsError::RetryMax(show_type(v)))?;
            }
            other => {
                return Err(SettingsError::UnknownRetryKey(other.to_owned()));
            }
        }
    }
    Ok(())
}

fn count(v: &Value) -> Option<usize> {
    num(v).ok()?.as_i64().and_then(|n| usize::try_from(n).ok())
}

/// What [`strings`] wants.
const STRINGS: &str = "a map of strings";

/// A map of strings (numbers and booleans written as text); `None` when it is not one.
fn strings(v: &Value) -> Option<BTreeMap<String, String>> {
    let Value::Object(m) = v else {
        return None;
    };
    m.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Some((k.clone(), s.clone())),
            Value::Number(n) => Some((k.clone(), n.to_string())),
            Value::Bool(b) => Some((k.clone(), b.to_string())),
            _ => None,
        })
        .collect()
}

fn request(v: Value, settings: &Settings) -> Result<Request, RequestError> {
    let Value::Object(m) = &v else {
        return Err(RequestError::NotAMap(show_type(&v)));
    };
    let field = |k: &str, want: &'static str| RequestError::Kind {
        key: k.to_owned(),
        want,
    };
    let mut out = Request {
        echo: v.clone(),
        method: reqwest::Method::GET,
        url: String::new(),
        query: Vec::new(),
        headers: settings.headers.clone(),
        body: None,
    };
    let mut method = None;
    for (k, val) in m {
        match k.as_str() {
            "url" => out.url = val.as_str().ok_or_else(|| field(k, "a string"))?.to_owned(),
            "method" => {
                method = Some(
                    val.as_str()
                        .ok_or_else(|| field(k, "a string"))?
                        .to_uppercase(),
                )
            }
            "query" => {
                out.query = strings(val)
                    .ok_or_else(|| field(k, STRINGS))?
                    .into_iter()
                    .collect()
            }
            // A request's own header wins over the settings' one of the same name.
            "headers" => out
                .headers
                .extend(strings(val).ok_or_else(|| field(k, STRINGS))?),
            "json" => {
                // A JSON value always writes back as JSON.
                let bytes = serde_json::to_vec(val).unwrap_or_default();
                out.body = Some((bytes, Some("application/json")));
            }
            "body" => {
                let text = val.as_str().ok_or_else(|| field(k, "a string"))?;
                out.body = Some((text.as_bytes().to_vec(), None));
            }
            other => {
                return Err(RequestError::Unknown(other.to_owned()));
            }
        }
    }
    if out.url.is_empty() {
        return Err(RequestError::NoUrl);
    }
    let implied = if m.contains_key("json") {
        "POST"
    } else {
        "GET"
    };
    let method = method.unwrap_or_else(|| implied.to_owned());
    out.method = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|_| RequestError::Method(method.clone()))?;
    Ok(out)
}

/// Sends one request with its retries; its envelope, or why it got no response.
async fn send(client: &reqwest::Client, r: Request, s: &Settings) -> Result<Value, HttpError> {
    let mut attempt = 0u32;
    loop {
        let mut b = client.request(r.method.clone(), &r.url).query(&r.query);
        for (k, v) in &r.headers {
            b = b.header(k, v);
        }
        if let Some((body, kind)) = &r.body {
            if let Some(kind) = kind {
                b = b.header(reqwest::header::CONTENT_TYPE, *kind);
            }
            b = b.body(body.clone());
        }
        let failed = |source: Unanswered| {
            if s.tolerate_errors {
                let message = format!("{} {}: {source}", r.method, r.url);
                Ok(envelope(&r.echo, 0, Map::new(), "", Some(message)))
            } else {
                Err(HttpError::NoResponse {
                    method: r.method.to_string(),
                    url: r.url.clone(),
                    source,
                })
            }
        };
        let resp = match b.send().await {
            Ok(resp) => resp,
            Err(e) => return failed(Unanswered::Send(e)),
        };
        let status = resp.status().as_u16();
        if s.retry_on.contains(&status) && attempt < s.retry_max {
            tokio::time::sleep(wait(&resp, attempt)).await;
            attempt += 1;
            continue;
        }
        let headers: Map<String, Value> = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    Value::String(String::from_utf8_lossy(v.as_bytes()).into_owned()),
                )
            })
            .collect();
        return match read(resp, s.max_response_bytes).await {
            Ok(body) => Ok(envelope(&r.echo, status, headers, &body, None)),
            Err(e) => failed(e),
        };
    }
}

fn envelope(
    request: &Value,
    status: u16,
    headers: Map<String, Value>,
    body: &str,
    error: Option<String>,
) -> Value {
    json!({
        "request": request,
        "status": status,
        "headers": headers,
        "json": serde_json::from_str::<Value>(body).unwrap_or(Value::Null),
        "body": body,
        "error": error,
    })
}

/// Why a request got no response, without reqwest's own copy of the URL.
fn reason(e: &reqwest::Error) -> String {
    let mut out = if e.is_timeout() {
        "timed out (raise the `timeout` setting if it needs longer)".to_owned()
    } else if e.is_connect() {
        "cannot connect".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    out
}

async fn read(mut resp: reqwest::Response, cap: usize) -> Result<String, Unanswered> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(Unanswered::Read)? {
        if body.len() + chunk.len() > cap {
            return Err(Unanswered::TooLarge(cap));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// How long to wait before retry `attempt` (from 0): the server's `Retry-After`, else an
/// exponential backoff; at most [`MAX_WAIT`].
fn wait(resp: &reqwest::Response, attempt: u32) -> Duration {
    let told = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(retry_after);
    told.unwrap_or_else(|| FIRST_BACKOFF.saturating_mul(2u32.saturating_pow(attempt)))
        .min(MAX_WAIT)
}

/// `Retry-After`: seconds, or an HTTP date.
fn retry_after(v: &str) -> Option<Duration> {
    if let Ok(secs) = v.trim().parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v.trim()).ok()?;
    let ms = (at.with_timezone(&chrono::Utc) - chrono::Utc::now()).num_milliseconds();
    Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_spelled_or_typed_wrong_are_errors() {
        let e = settings(Some(&json!({"retries": 3}))).unwrap_err();
        assert!(
            matches!(&e, SettingsError::Unknown(k) if k == "retries"),
            "{e}"
        );
        assert!(e.to_string().contains("unknown setting `retries`"), "{e}");
        let e = settings(Some(&json!({"retry": {"on": ["429"]}}))).unwrap_err();
        assert!(e.to_string().contains("status numbers"), "{e}");
        let s = settings(Some(
            &json!({"retry": {"on": [429], "max": 2}, "timeout": "2s"}),
        ))
        .unwrap();
        assert_eq!(
            (s.retry_on.clone(), s.retry_max, s.timeout),
            (vec![429], 2, Duration::from_secs(2))
        );
        let e = request(json!({"url": "http://x", "header": {}}), &s).unwrap_err();
        assert!(
            e.to_string().contains("unknown request key `header`"),
            "{e}"
        );
    }

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        assert_eq!(retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon"), None);
    }
}
