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
pub fn call(args: &[Value], runtime: &tokio::runtime::Handle) -> Result<Value, String> {
    let (requests, single) = match args.first() {
        Some(Value::Array(list)) => (list.clone(), false),
        Some(one @ Value::Object(_)) => (vec![one.clone()], true),
        Some(other) => {
            return Err(format!(
                "http() takes a request map or a list of them, not {}",
                show_type(other)
            ));
        }
        None => return Err("http() needs a request, like http({url: \"...\"})".to_owned()),
    };
    if args.len() > 2 {
        return Err("http() takes a request (or a list) and settings".to_owned());
    }
    let settings = settings(args.get(1))?;
    let requests = requests
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            request(r, &settings).map_err(|e| {
                if single {
                    format!("http(): {e}")
                } else {
                    format!("http(): request {i}: {e}")
                }
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    treadle_session::tls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(settings.timeout)
        .build()
        .map_err(|e| format!("http(): cannot make an HTTP client: {e}"))?;
    let answers: Vec<Result<Value, String>> = runtime.block_on(async {
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

fn settings(v: Option<&Value>) -> Result<Settings, String> {
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
            return Err(format!(
                "http(): settings must be a map, not {}",
                show_type(other)
            ));
        }
    };
    let bad = |k: &str, want: &str, v: &Value| {
        format!("http(): setting `{k}` must be {want}, not {}", show_type(v))
    };
    for (k, v) in m {
        match k.as_str() {
            "headers" => s.headers = strings(v).map_err(|w| bad(k, &w, v))?,
            "concurrency" => {
                s.concurrency = count(v)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad(k, "a positive integer", v))?;
            }
            "timeout" => {
                let Value::String(t) = v else {
                    return Err(bad(k, "a duration like \"30s\"", v));
                };
                s.timeout = humantime::parse_duration(t)
                    .map_err(|e| format!("http(): setting `timeout`: {t:?}: {e}"))?;
            }
            "max_response_bytes" => {
                s.max_response_bytes = count(v).ok_or_else(|| bad(k, "a number of bytes", v))?;
            }
            "tolerate_errors" => {
                s.tolerate_errors = v.as_bool().ok_or_else(|| bad(k, "true or false", v))?;
            }
            "retry" => retry(v, &mut s)?,
            other => {
                return Err(format!(
                    "http(): unknown setting `{other}` (settings: headers, concurrency, timeout, max_response_bytes, retry, tolerate_errors)"
                ));
            }
        }
    }
    Ok(s)
}

fn retry(v: &Value, s: &mut Settings) -> Result<(), String> {
    let Value::Object(m) = v else {
        return Err(format!(
            "http(): setting `retry` must be a map like {{on: [429, 503], max: 3}}, not {}",
            show_type(v)
        ));
    };
    for (k, v) in m {
        match k.as_str() {
            "on" => {
                let list = v
                    .as_array()
                    .ok_or("http(): `retry.on` must be a list of status numbers")?;
                s.retry_on = list
                    .iter()
                    .map(|x| {
                        count(x).and_then(|n| u16::try_from(n).ok()).ok_or_else(|| {
                            format!(
                                "http(): `retry.on` takes status numbers like 429, not {}",
                                show_type(x)
                            )
                        })
                    })
                    .collect::<Result<_, _>>()?;
            }
            "max" => {
                s.retry_max = count(v)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        format!("http(): `retry.max` must be a number, not {}", show_type(v))
                    })?;
            }
            other => {
                return Err(format!(
                    "http(): unknown key `retry.{other}` (keys: on, max)"
                ));
            }
        }
    }
    Ok(())
}

fn count(v: &Value) -> Option<usize> {
    num(v).ok()?.as_i64().and_then(|n| usize::try_from(n).ok())
}

/// A map of strings (numbers and booleans written as text), or what it should be.
fn strings(v: &Value) -> Result<BTreeMap<String, String>, String> {
    let Value::Object(m) = v else {
        return Err("a map of strings".to_owned());
    };
    m.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            Value::Number(n) => Ok((k.clone(), n.to_string())),
            Value::Bool(b) => Ok((k.clone(), b.to_string())),
            _ => Err("a map of strings".to_owned()),
        })
        .collect()
}

fn request(v: Value, settings: &Settings) -> Result<Request, String> {
    let Value::Object(m) = &v else {
        return Err(format!(
            "a request must be a map with `url`, not {}",
            show_type(&v)
        ));
    };
    let field = |k: &str, want: &str| format!("`{k}` must be {want}");
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
                    .map_err(|w| field(k, &w))?
                    .into_iter()
                    .collect()
            }
            // A request's own header wins over the settings' one of the same name.
            "headers" => out.headers.extend(strings(val).map_err(|w| field(k, &w))?),
            "json" => {
                let bytes = serde_json::to_vec(val).map_err(|e| e.to_string())?;
                out.body = Some((bytes, Some("application/json")));
            }
            "body" => {
                let text = val.as_str().ok_or_else(|| field(k, "a string"))?;
                out.body = Some((text.as_bytes().to_vec(), None));
            }
            other => {
                return Err(format!(
                    "unknown request key `{other}` (keys: url, method, query, headers, json, body)"
                ));
            }
        }
    }
    if out.url.is_empty() {
        return Err("a request needs `url`".to_owned());
    }
    let implied = if m.contains_key("json") {
        "POST"
    } else {
        "GET"
    };
    let method = method.unwrap_or_else(|| implied.to_owned());
    out.method = reqwest::Method::from_bytes(method.as_bytes())
        .map_err(|_| format!("`method` {method:?} is not an HTTP method"))?;
    Ok(out)
}

/// Sends one request with its retries; its envelope, or why it got no response.
async fn send(client: &reqwest::Client, r: Request, s: &Settings) -> Result<Value, String> {
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
        let failed = |e: String| {
            let message = format!("{} {}: {e}", r.method, r.url);
            if s.tolerate_errors {
                Ok(envelope(&r.echo, 0, Map::new(), "", Some(message)))
            } else {
                Err(format!("http(): {message}"))
            }
        };
        let resp = match b.send().await {
            Ok(resp) => resp,
            Err(e) => return failed(reason(&e)),
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

async fn read(mut resp: reqwest::Response, cap: usize) -> Result<String, String> {
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| format!("reading the response: {}", reason(&e)))?
    {
        if body.len() + chunk.len() > cap {
            return Err(format!(
                "the response is larger than max_response_bytes ({cap})"
            ));
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
        assert!(e.contains("unknown setting `retries`"), "{e}");
        let e = settings(Some(&json!({"retry": {"on": ["429"]}}))).unwrap_err();
        assert!(e.contains("status numbers"), "{e}");
        let s = settings(Some(
            &json!({"retry": {"on": [429], "max": 2}, "timeout": "2s"}),
        ))
        .unwrap();
        assert_eq!(
            (s.retry_on.clone(), s.retry_max, s.timeout),
            (vec![429], 2, Duration::from_secs(2))
        );
        let e = request(json!({"url": "http://x", "header": {}}), &s).unwrap_err();
        assert!(e.contains("unknown request key `header`"), "{e}");
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
