//! The `http:` step's own configuration ([`HttpCall`]): what loading takes out of the
//! written keys (refusing a URL that is not http(s) or a method that is not a token, at
//! the key's line and column) and the part of the step's cache key it makes. Secret
//! headers are held by the NAME of the environment variable only: their values are read
//! when the request is sent, so no key, record or error ever holds one.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::at::{At, Pos};

/// An `http:` step's request.
#[derive(Debug, Clone)]
pub struct HttpCall {
    /// `url:`, http or https.
    pub url: At<String>,
    /// `method:`, upper-cased (default `GET`).
    pub method: At<String>,
    /// `headers:`, literal values.
    pub headers: BTreeMap<String, String>,
    /// `secret_headers:`: header name → the name of the environment variable holding it.
    pub secret_headers: BTreeMap<String, String>,
    /// `body:`, sent as it is.
    pub body: Option<String>,
    /// `expect:`, the statuses that count as success (empty: any 2xx).
    pub expect: Vec<u16>,
    /// `follow_redirects:` (default true); false: a 3xx answer is the answer, judged by
    /// `expect:` like any status.
    pub follow_redirects: bool,
    /// `output:`, the artifact the response is written to (`body`, `status`).
    pub output: Option<At<String>>,
}

/// Why an `http:` step's request cannot be loaded.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum HttpKeyError {
    /// No `url:`.
    #[error("http step `{0}` has no `url:`")]
    NoUrl(String),
    /// A URL that does not parse.
    #[error("`url: {url}` is not a URL: {reason}")]
    BadUrl {
        /// As written.
        url: String,
        /// What the parser said.
        reason: String,
    },
    /// A scheme other than http or https.
    #[error("`url: {0}`: only http and https URLs are fetched")]
    Scheme(String),
    /// A method that is not an HTTP token.
    #[error("`method: {0}` is not an HTTP method")]
    BadMethod(String),
}

impl HttpCall {
    /// A GET of `url` with nothing else set.
    pub fn get(url: impl Into<String>) -> Self {
        Self {
            url: At::new(url.into()),
            method: At::new("GET".to_owned()),
            headers: BTreeMap::new(),
            secret_headers: BTreeMap::new(),
            body: None,
            expect: Vec::new(),
            follow_redirects: true,
            output: None,
        }
    }

    /// The first problem with the request, at the key where it is written.
    pub fn problem(&self) -> Option<(Pos, HttpKeyError)> {
        let url = &self.url.value;
        match reqwest::Url::parse(url) {
            Err(e) => {
                let reason = e.to_string();
                let err = HttpKeyError::BadUrl {
                    url: url.clone(),
                    reason,
                };
                return Some((self.url.pos, err));
            }
            Ok(u) if !matches!(u.scheme(), "http" | "https") => {
                return Some((self.url.pos, HttpKeyError::Scheme(url.clone())));
            }
            Ok(_) => {}
        }
        let m = &self.method.value;
        if reqwest::Method::from_bytes(m.as_bytes()).is_err() || m.is_empty() {
            return Some((self.method.pos, HttpKeyError::BadMethod(m.clone())));
        }
        None
    }

    /// Whether `status` counts as success.
    pub fn accepts(&self, status: u16) -> bool {
        match self.expect.is_empty() {
            true => (200..300).contains(&status),
            false => self.expect.contains(&status),
        }
    }

    /// The step's part of its cache key: the request as written, secret headers by the
    /// names of their variables only (a changed secret is not a changed step).
    pub fn key_json(&self) -> Value {
        let mut key = json!({
            "method": self.method.value,
            "url": self.url.value,
            "headers": self.headers,
            "secret_headers": self.secret_headers,
            "body": self.body,
            "expect": self.expect,
        });
        // Only when asked: the keys of the steps written before it stay as they were.
        if !self.follow_redirects
            && let Some(map) = key.as_object_mut()
        {
            map.insert("follow_redirects".to_owned(), Value::Bool(false));
        }
        key
    }

    /// Adds the `output:` artifact to `outputs` (so that it is made and collected as
    /// any step's output is).
    pub fn add_output(&self, outputs: &mut Vec<At<String>>) {
        if let Some(o) = &self.output
            && !outputs.iter().any(|x| x.value == o.value)
        {
            outputs.push(o.clone());
        }
    }
}

/// Why `value` cannot serve as a secret header's value: too short to be masked safely
/// (its forms would be ordinary words and it would be masked in no form); `None` when it
/// can.
pub fn too_short(value: &str) -> Option<String> {
    let min = treadle_session::Secrets::MIN_LEN;
    let len = value.trim().chars().count();
    (len < min).then(|| {
        format!("holds a value of {len} characters, too short to be masked (at least {min})")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_and_token_methods_load() {
        let mut call = HttpCall::get("file:///etc/passwd");
        assert!(matches!(call.problem(), Some((_, HttpKeyError::Scheme(_)))));
        call.url.value = "not a url".into();
        assert!(matches!(
            call.problem(),
            Some((_, HttpKeyError::BadUrl { .. }))
        ));
        call.url.value = "https://example.com/x".into();
        assert!(call.problem().is_none());
        call.method.value = "GE T".into();
        assert!(matches!(
            call.problem(),
            Some((_, HttpKeyError::BadMethod(_)))
        ));
    }

    #[test]
    fn expect_defaults_to_2xx() {
        let mut call = HttpCall::get("http://x/");
        assert!(call.accepts(204) && !call.accepts(404) && !call.accepts(500));
        call.expect = vec![404];
        assert!(call.accepts(404) && !call.accepts(200));
    }
}
