//! `fallback:` before a run's first step: the source each agent with a `fallback:` chain
//! starts on. Its primary is probed; when it cannot be reached, its fallbacks are probed
//! in order and the first that answers serves every step of that agent in the run. When
//! none answers, the run fails before anything is spent, naming each source and why.
//!
//! The probe asks only whether the endpoint answers at all (`GET {base}/models`): any
//! HTTP answer below 500 counts, since a refusal (a bad key, an unknown model) is an
//! answer that switching would hide, the rule the mid-step cascade follows as well
//! (`failover.rs`). Only an endpoint that cannot be reached, does not answer in time or
//! answers 5xx is down. It spends no tokens, so no model is asked anything.
//!
//! Sub-agents are picked for the same way (they have no mid-step cascade of their own).
//! Agents without `fallback:` are not probed here (there is nothing to pick from;
//! `treadle validate --preflight` probes every model), nor are those with
//! `preflight: false`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::pipeline::model::{self, CLI_PROVIDER, ResolvedModel, process_env};
use crate::pipeline::outline::Outline;
use crate::pipeline::{Agent, Job, Loaded};

use super::spec::AgentStep;

/// How long one probe may take when `defaults: preflight: timeout:` does not say.
pub const PICK_TIMEOUT: Duration = Duration::from_secs(10);

/// The source an agent starts on, when it is not its primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picked {
    /// The agent.
    pub agent: String,
    /// Which `fallback:` entry serves (0: the first).
    pub fallback: usize,
    /// What to tell the run: which sources were down and which one serves.
    pub note: String,
}

/// Why a run cannot start: an agent none of whose sources answers.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("preflight: no source of agent `{agent}` answers, so no step was run: {}", .down.join("; "))]
pub struct NoSource {
    /// The agent.
    pub agent: String,
    /// Each source and why it is down.
    pub down: Vec<String>,
}

/// Probes the sources of every agent with a `fallback:` chain that `job` reaches and that
/// is not in `probed` (a workflow's job grows: its agents are probed as its steps first
/// reach them); the agents that start on a fallback, and the agents this call probed.
pub async fn pick(
    loaded: &Loaded,
    job: &Job,
    probed: &HashSet<String>,
) -> Result<(Vec<Picked>, Vec<String>), NoSource> {
    let preflight = loaded
        .pipeline
        .defaults
        .as_ref()
        .and_then(|d| d.preflight.as_ref());
    if preflight
        .and_then(|p| p.disabled.as_ref())
        .is_some_and(|d| d.value)
    {
        return Ok((Vec::new(), Vec::new()));
    }
    let timeout = preflight
        .and_then(|p| p.timeout.as_ref())
        .map_or(PICK_TIMEOUT, |t| t.value.0);
    let (mut picked, mut newly) = (Vec::new(), Vec::new());
    for name in reached(loaded, job) {
        if probed.contains(&name) {
            continue;
        }
        let Some(agent) = loaded.agent(&name) else {
            continue;
        };
        if agent.fallback.is_empty() || agent.preflight == Some(false) {
            continue;
        }
        if let Some(p) = pick_one(agent, timeout).await? {
            picked.push(p);
        }
        newly.push(name);
    }
    Ok((picked, newly))
}

/// The agents `job` reaches, in the order it first does: those of its agent steps, then
/// (breadth first) the sub-agents they may call, which run on the source picked here
/// too but have no mid-step cascade of their own.
fn reached(loaded: &Loaded, job: &Job) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for entry in Outline::of(job).entries {
        if let Some(name) = entry.agent
            && !names.contains(&name)
        {
            names.push(name);
        }
    }
    let mut i = 0;
    while i < names.len() {
        let subs = loaded.agent(&names[i]).into_iter().flat_map(|a| {
            a.delegates()
                .map(|d| d.agent.value.clone())
                .collect::<Vec<_>>()
        });
        for sub in subs {
            if !names.contains(&sub) {
                names.push(sub);
            }
        }
        i += 1;
    }
    names
}

/// The step of `agent` (and its sub-agents, at any depth) on the sources `picked` says:
/// the `fallback:` entry each starts on, by agent.
pub fn on_picked(mut step: AgentStep, agent: &str, picked: &HashMap<String, usize>) -> AgentStep {
    if let Some(&i) = picked.get(agent) {
        step = step.starting_on(i);
    }
    for d in &mut step.granted.delegates {
        *d.step = on_picked((*d.step).clone(), &d.name, picked);
    }
    step
}

/// The first source of `agent` that answers; `None` when it is the primary.
async fn pick_one(agent: &Agent, timeout: Duration) -> Result<Option<Picked>, NoSource> {
    let name = agent.name.value.clone();
    let mut sources = vec![&agent.source];
    sources.extend(agent.fallback.iter().map(|f| &f.source));
    let mut down = Vec::new();
    for (index, source) in sources.into_iter().enumerate() {
        // A source that does not resolve is down (the load checks said why already).
        let resolved = match model::resolve(source, agent.name.pos, &process_env) {
            Ok(m) => m,
            Err(e) => {
                down.push(format!("source {}: {e}", index + 1));
                continue;
            }
        };
        // A CLI-backed source is a command, not an endpoint: it is taken as it is.
        let answer = if resolved.provider == CLI_PROVIDER {
            Ok(())
        } else {
            reachable(&resolved, timeout).await
        };
        match answer {
            Ok(()) if index == 0 => return Ok(None),
            Ok(()) => {
                let note = format!(
                    "agent.failover: preflight: {}; `{}` serves agent `{name}` in this run",
                    down.join("; "),
                    resolved.model
                );
                return Ok(Some(Picked {
                    agent: name,
                    fallback: index - 1,
                    note,
                }));
            }
            Err(why) => down.push(format!(
                "`{}` at {}: {why}",
                resolved.model, resolved.base_url
            )),
        }
    }
    Err(NoSource { agent: name, down })
}

/// Why a source's endpoint is passed over.
#[derive(Debug, thiserror::Error)]
enum Down {
    /// No HTTP client could be made.
    #[error("cannot make an HTTP client: {0}")]
    Client(reqwest::Error),
    /// It answered with a server error.
    #[error("answered HTTP {0}")]
    ServerError(reqwest::StatusCode),
    /// It did not answer in time.
    #[error("no answer within {}s", .0.as_secs())]
    Timeout(Duration),
    /// It cannot be reached.
    #[error("unreachable ({})", super::preflight::error_chain(.0))]
    Unreachable(reqwest::Error),
}

/// Whether the endpoint of `model` answers: `Err` says why not.
async fn reachable(model: &ResolvedModel, timeout: Duration) -> Result<(), Down> {
    treadle_session::tls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(Down::Client)?;
    let url = format!("{}/models", model.base_url.trim_end_matches('/'));
    match client.get(&url).send().await {
        Ok(r) if r.status().is_server_error() => Err(Down::ServerError(r.status())),
        Ok(_) => Ok(()),
        Err(e) if e.is_timeout() => Err(Down::Timeout(timeout)),
        Err(e) => Err(Down::Unreachable(e)),
    }
}

impl AgentStep {
    /// The step as it starts on its `fallback:` entry `index` (a pre-run pick): that
    /// source serves, and the entries after it remain for the mid-step cascade.
    pub fn starting_on(mut self, index: usize) -> Self {
        if let Some(model) = self.fallbacks.get(index).cloned() {
            self.model = model;
            self.fallbacks = self.fallbacks.split_off(index + 1);
        }
        self
    }
}
