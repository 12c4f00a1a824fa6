//! Preflight: before a job's first step, is every model it reaches answering and does every
//! MCP server it grants start and offer the granted tools? `treadle validate --preflight`
//! asks this, so a dead endpoint or a wrong key fails in seconds, before a long job has
//! spent anything, rather than at its first agent step.
//!
//! A model is probed with the smallest real request: one user message, `max_tokens: 1`, not
//! streamed, with the agent's key. Each endpoint and model pair is probed once, however many
//! agents share it. An MCP server is started exactly as an agent step starts it (so the
//! granted tools are checked against what it offers) and stopped again.

use std::time::{Duration, Instant};

use serde_json::json;

use super::mcp::{McpToolsError, StepServers};
use crate::pipeline::mcp::server_of;
use crate::pipeline::model::{self, ResolvedModel};
use crate::pipeline::outline::Outline;
use crate::pipeline::{Job, Loaded};

/// How long one probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// The most bytes of an endpoint's error body shown.
const BODY_PREVIEW: usize = 300;

/// Why a preflight check failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The model's source does not resolve (unknown provider, no key...).
    #[error("{message} ({hint})")]
    Source {
        /// What is wrong.
        message: String,
        /// How to fix it.
        hint: String,
    },
    /// The model's key variable is not set.
    #[error("environment variable {0} is not set")]
    NoKey(String),
    /// No HTTP client could be made (the TLS backend did not start, say).
    #[error("cannot make an HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// The endpoint did not answer (the key scrubbed from the detail).
    #[error("no answer from {url}: {detail}")]
    NoAnswer {
        /// Where.
        url: String,
        /// Why.
        detail: String,
    },
    /// The endpoint answered with an error status (the key scrubbed from the body).
    #[error("{url} answered HTTP {status}: {body}")]
    Status {
        /// Where.
        url: String,
        /// The status with its reason.
        status: String,
        /// The start of the body.
        body: String,
    },
    /// An MCP server did not start, or does not offer a tool the grant names
    /// ([`McpToolsError::Missing`]: the grant is to be fixed, not the server).
    #[error(transparent)]
    Server(McpToolsError),
}

/// One thing preflight checked.
#[derive(Debug)]
pub struct Probe {
    /// What was checked: `model local/qwen at http://...` or `MCP server fixture (agent calc)`.
    pub what: String,
    /// `Ok(how long it took)` or why it failed.
    pub result: Result<Duration, ProbeError>,
}

impl Probe {
    /// Whether the check passed.
    pub fn ok(&self) -> bool {
        self.result.is_ok()
    }
}

/// Checks every model and MCP server the agent steps of `job` use, in the order the job
/// first reaches them.
pub async fn preflight(loaded: &Loaded, job: &Job) -> Vec<Probe> {
    let mut agents: Vec<String> = Vec::new();
    for entry in Outline::of(job).entries {
        if let Some(agent) = entry.agent
            && !agents.contains(&agent)
        {
            agents.push(agent);
        }
    }
    let mut probes = Vec::new();
    let mut models: Vec<(String, String)> = Vec::new();
    for name in &agents {
        let Some(agent) = loaded.agent(name) else {
            continue;
        };
        match model::resolve(&agent.source, agent.name.pos, &model::process_env) {
            Ok(resolved) => {
                let pair = (resolved.base_url.clone(), resolved.model.clone());
                if !models.contains(&pair) {
                    models.push(pair);
                    probes.push(probe_model(&resolved).await);
                }
            }
            Err(e) => probes.push(Probe {
                what: format!("model of agent {name}"),
                result: Err(ProbeError::Source {
                    message: e.to_string(),
                    hint: e.hint(),
                }),
            }),
        }
        probes.extend(probe_servers(agent).await);
    }
    probes
}

/// Sends the smallest request the model can answer.
async fn probe_model(model: &ResolvedModel) -> Probe {
    let what = format!(
        "model {}/{} at {}",
        model.provider, model.model, model.base_url
    );
    let started = Instant::now();
    let result = ask(model).await.map(|()| started.elapsed());
    Probe { what, result }
}

async fn ask(model: &ResolvedModel) -> Result<(), ProbeError> {
    let key = match &model.api_key_env {
        Some(var) => Some(
            crate::environ::var(var)
                .map(|k| k.trim().to_owned())
                .ok_or_else(|| ProbeError::NoKey(var.clone()))?,
        ),
        None => None,
    };
    treadle_session::tls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .build()
        .map_err(ProbeError::Client)?;
    let url = format!("{}/chat/completions", model.base_url.trim_end_matches('/'));
    let mut request = client.post(&url).json(&json!({
        "model": model.model,
        "messages": [{"role": "user", "content": "Reply with one word: ready"}],
        "max_tokens": 1,
        "stream": false,
    }));
    if let Some(key) = &key {
        request = request.bearer_auth(key);
    }
    let scrub = |text: String| match &key {
        Some(key) if !key.is_empty() => text.replace(key.as_str(), "***"),
        _ => text,
    };
    let response = request.send().await.map_err(|e| ProbeError::NoAnswer {
        url: url.clone(),
        detail: scrub(error_chain(&e)),
    })?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let body = response.text().await.unwrap_or_default();
    let body = crate::tools::truncate(body.trim().to_owned(), BODY_PREVIEW, " …");
    Err(ProbeError::Status {
        url,
        status: status.to_string(),
        body: scrub(body),
    })
}

/// Starts the agent's MCP servers that its grant names, then stops them.
async fn probe_servers(agent: &crate::pipeline::Agent) -> Vec<Probe> {
    let grant: Vec<String> = agent
        .grant()
        .into_iter()
        .flatten()
        .map(|t| t.value)
        .filter(|t| server_of(t).is_some())
        .collect();
    let configs = crate::pipeline::mcp::configs(agent);
    let mut probes = Vec::new();
    for config in &configs {
        let named: Vec<&str> = grant
            .iter()
            .map(String::as_str)
            .filter(|g| server_of(g) == Some(config.name.as_str()))
            .collect();
        if named.is_empty() {
            continue;
        }
        let started = Instant::now();
        let result = match StepServers::start(std::slice::from_ref(config), &named).await {
            Ok((servers, _tools)) => {
                servers.shutdown().await;
                Ok(started.elapsed())
            }
            Err(e) => Err(ProbeError::Server(e)),
        };
        probes.push(Probe {
            what: format!("MCP server {} (agent {})", config.name, agent.name.value),
            result,
        });
    }
    probes
}

/// An error and its sources, which say what really went wrong (refused, DNS, TLS).
pub(super) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}
