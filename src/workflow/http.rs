//! `Flow::http` and its builder [`Http`]: an `http:` step built in Rust, the very typed step
//! loading makes of the same step written in YAML (so the two record the same key), and
//! what it gives back ([`HttpOutput`], read from its output artifact).

use std::time::Duration;

use super::flow::{Flow, FlowError};
use crate::pipeline::http_step::HttpCall;
use crate::pipeline::{At, DurationSpec, Step, StepKind};

/// An HTTP request step (`http:` with `url:`, `method:`, `headers:`, ...).
#[derive(Debug, Clone)]
pub struct Http {
    call: HttpCall,
    timeout: Option<Duration>,
    volatile: bool,
}

impl Http {
    /// A request of `method` (`GET`, `POST`, ...; upper-cased as loading does) to `url`.
    pub fn new(method: &str, url: impl Into<String>) -> Self {
        let mut call = HttpCall::get(url);
        call.method.value = method.to_ascii_uppercase();
        Self {
            call,
            timeout: None,
            volatile: false,
        }
    }

    /// A GET of `url`.
    pub fn get(url: impl Into<String>) -> Self {
        Self::new("GET", url)
    }

    /// A POST to `url`.
    pub fn post(url: impl Into<String>) -> Self {
        Self::new("POST", url)
    }

    /// A header with a literal value (`headers:`; part of the step's key).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.call.headers.insert(name.into(), value.into());
        self
    }

    /// A header whose value is read from environment variable `var` when the request is
    /// sent (`secret_headers:`); only the names are in the key and records.
    pub fn secret_header(mut self, name: impl Into<String>, var: impl Into<String>) -> Self {
        self.call.secret_headers.insert(name.into(), var.into());
        self
    }

    /// The request body (`body:`).
    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.call.body = Some(body.into());
        self
    }

    /// The statuses that count as success (`expect:`; default any 2xx).
    pub fn expect(mut self, statuses: impl IntoIterator<Item = u16>) -> Self {
        self.call.expect = statuses.into_iter().collect();
        self
    }

    /// The artifact the response is written to (`output:`: files `body` and `status`);
    /// [`Flow::http`] uses the step's name when none is given.
    pub fn output(mut self, name: impl Into<String>) -> Self {
        self.call.output = Some(At::new(name.into()));
        self
    }

    /// Stopped after this long (`timeout:`).
    pub fn timeout(mut self, limit: Duration) -> Self {
        self.timeout = Some(limit);
        self
    }

    /// Never replayed from the cache (`volatile: true`).
    pub fn volatile(mut self) -> Self {
        self.volatile = true;
        self
    }

    /// The typed step, named `name` (`http: NAME`).
    pub fn into_step(self, name: &str) -> Step {
        let mut outputs = Vec::new();
        self.call.add_output(&mut outputs);
        let mut step = Step::of_kind(StepKind::Http {
            name: At::new(name.to_owned()),
            call: Box::new(self.call),
        });
        step.outputs = outputs;
        step.timeout = self.timeout.map(|t| At::new(DurationSpec(t)));
        step.volatile = self.volatile;
        step
    }
}

/// What an HTTP step gave back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpOutput {
    /// The response status.
    pub status: u16,
    /// The response body (secret header values masked).
    pub body: String,
}

/// What a plan cannot know of an HTTP step before it is sent.
const RESPONSE: &str = "the response";

impl Flow {
    /// Sends the request of `http` as step `name`; its response. A status outside
    /// `expect` fails the step (and so this call, naming the status). In a plan, the
    /// response of a request the cache would not replay is [`FlowError::Unevaluable`].
    pub async fn http(&mut self, name: &str, http: Http) -> Result<HttpOutput, FlowError> {
        let full = self.named(name);
        let http = match http.call.output {
            Some(_) => http,
            None => http.output(full.clone()),
        };
        let output = http.call.output.as_ref().map(|o| o.value.clone());
        self.step(http.into_step(&full)).await?;
        let output = output.unwrap_or_else(|| full.clone());
        // In a plan, a request that would be sent has no response yet: unevaluable.
        let status = self.read_output(&full, &output, "status", RESPONSE).await?;
        let body = self.read_output(&full, &output, "body", RESPONSE).await?;
        let status = status.trim().parse().map_err(|e| FlowError::Output {
            name: name.to_owned(),
            reason: format!("status `{status}`: {e}"),
        })?;
        Ok(HttpOutput { status, body })
    }
}

/// The Rust code of docs/http.md, compiled as doc tests so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../../docs/http.md")]
pub struct HttpGuide;
