//! Step keys: what a step is, hashed, so that an unchanged step can be recognised.
//!
//! A key is blake3 over four parts, kept apart in [`KeyParts`] so that `treadle plan` can
//! say which one changed:
//! * the step's **kind** (`task`, `agent`, `get`, `put`, `approval`);
//! * its **effective configuration** ([`config`]), as canonical JSON: for a task the
//!   command, `env`, the input and output names and `assert`; for an agent the resolved
//!   model and endpoint, the system prompt, the granted tools with their schemas, the
//!   prompt, the verdicts (and `verdict_from_text`), `assert`, `env`, `commit` and the
//!   artifact names; for `get` the resource's type and source and the version fetched;
//! * the **content digest of each input** artifact tree;
//! * the **key of the step before it** ([`super::chain`]);
//! * for a step with `context: { from }`, **the decisions it reads** ([`Delivered`]).
//!
//! [`step_key`] is the one function that puts them together: the run (and so `--resume`,
//! `--replay` and a run whose steps go to NATS workers) and `treadle plan` call it, each
//! with the facts it has ([`KeyFacts`]), so `plan` predicts the very key the run computes.
//!
//! Left out on purpose: `timeout`, `attempts`, budgets and `max_turns` (they bound how a
//! step runs, not what it computes), the step's hooks (they are steps with keys of their
//! own) and its name.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::digest::Digest;
use crate::agent::{AgentStep, BuildError};
use crate::pipeline::at::values;
use crate::pipeline::{
    AgentCall, GetStep, InputStep, Kind, PutStep, ResolvedResource, RunSpec, Step, StepKind,
};

/// Everything a step's key is made of besides the step itself, as the caller knows it:
/// the run from the artifacts and records it has, `plan` from the cache's records.
pub struct KeyFacts<'a> {
    /// Each input's tree digest, by artifact name.
    pub inputs: BTreeMap<String, Digest>,
    /// A `get`'s resolved version (the commit).
    pub version: Option<&'a str>,
    /// An agent step as built to run, asked for when the step is one: the run gives the
    /// one value it builds once and runs, `plan` builds it as the run would.
    pub agent: &'a dyn Fn(&AgentCall) -> Result<Arc<AgentStep>, BuildError>,
    /// An `across:` cell's values, by variable.
    pub cell: Option<&'a BTreeMap<String, String>>,
    /// The decisions the step reads through `context: { from }`.
    pub delivered: &'a [Delivered],
    /// The key of the step before it.
    pub prev: Digest,
}

/// The key of `step` with `facts`: the one place a key is computed.
pub fn step_key(step: &Step, facts: &KeyFacts<'_>) -> Result<KeyParts, ConfigError> {
    let config = config(step, facts.version, facts.agent)?;
    Ok(KeyParts {
        kind: Kind::of(step).to_string(),
        config: config_digest(&with_cell(config, facts.cell)),
        inputs: facts.inputs.clone(),
        prev: facts.prev,
        context: context_view(step, facts.delivered).map(|v| config_digest(&v)),
    })
}

/// One sender's decision, as much of it as a `context: { from }` reader asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    /// The sender's step name.
    pub step: String,
    /// Its verdict.
    pub verdict: String,
    /// With `note` and `full`: the reason it gave.
    pub note: Option<String>,
    /// With `full`: the end of its answer.
    pub answer: Option<String>,
}

/// A sender's decision as a run knows it: verdict, reason and the end of its answer.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    /// The verdict.
    pub verdict: String,
    /// The reason given with it.
    pub note: Option<String>,
    /// The end of the answer (the record's tail).
    pub tail: String,
}

/// What `step` reads of the senders its `context: { from }` names, in that order;
/// `decision` gives a sender's decision in this run (`None`: it made none yet).
pub fn delivered(step: &Step, decision: impl Fn(&str) -> Option<Decision>) -> Vec<Delivered> {
    let Some(context) = &step.context else {
        return Vec::new();
    };
    context
        .value
        .from
        .iter()
        .filter_map(|(sender, level)| {
            let d = decision(sender)?;
            let level = level.value.as_str();
            Some(Delivered {
                step: sender.clone(),
                verdict: d.verdict,
                note: (level != "verdict").then(|| d.note.unwrap_or_default()),
                answer: (level == "full").then_some(d.tail),
            })
        })
        .collect()
}

/// What a reader's key holds of `context: { from }`: the declaration and what it delivered.
fn context_view(step: &Step, delivered: &[Delivered]) -> Option<Value> {
    let context = step.context.as_ref()?;
    let from: Vec<Value> = context
        .value
        .from
        .iter()
        .map(|(s, level)| json!([s, level.value]))
        .collect();
    let got: Vec<Value> = delivered
        .iter()
        .map(|d| json!([d.step, d.verdict, d.note, d.answer]))
        .collect();
    Some(json!({ "from": from, "delivered": got }))
}

/// The parts a step key is made of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyParts {
    /// Kind key.
    pub kind: String,
    /// Digest of the canonical configuration.
    pub config: Digest,
    /// Each input's tree digest, by artifact name.
    pub inputs: BTreeMap<String, Digest>,
    /// The key of the step before it ([`Digest::ZERO`] for the first).
    pub prev: Digest,
    /// What `context: { from }` delivered (`None`: the step reads no decisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Digest>,
}

impl KeyParts {
    /// The key.
    pub fn key(&self) -> Digest {
        let mut h = blake3::Hasher::new();
        h.update(b"treadle-step-key-v1\0");
        h.update(self.kind.as_bytes());
        h.update(b"\0");
        h.update(&self.config.0);
        for (name, d) in &self.inputs {
            h.update(&(name.len() as u64).to_le_bytes());
            h.update(name.as_bytes());
            h.update(&d.0);
        }
        h.update(&self.prev.0);
        // Only a reader of decisions hashes this part, so other steps keep their keys.
        if let Some(c) = &self.context {
            h.update(b"context\0");
            h.update(&c.0);
        }
        h.finalize().into()
    }

    /// What differs from `old`, as short phrases (empty when nothing does).
    pub fn changes(&self, old: &KeyParts) -> Vec<String> {
        let mut out = Vec::new();
        if self.kind != old.kind {
            out.push(format!("kind changed ({} → {})", old.kind, self.kind));
        }
        if self.config != old.config {
            out.push("configuration changed".to_owned());
        }
        for (name, d) in &self.inputs {
            match old.inputs.get(name) {
                Some(o) if o == d => {}
                Some(_) => out.push(format!("input `{name}` changed")),
                None => out.push(format!("input `{name}` is new")),
            }
        }
        for name in old.inputs.keys().filter(|n| !self.inputs.contains_key(*n)) {
            out.push(format!("input `{name}` was removed"));
        }
        if self.prev != old.prev {
            out.push("the step before it changed".to_owned());
        }
        if self.context != old.context {
            out.push("a decision it reads changed".to_owned());
        }
        out
    }
}

/// Why a step's configuration could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The agent step could not be built (its model, say, cannot be resolved).
    #[error(transparent)]
    Agent(#[from] BuildError),
}

fn run_json(run: &RunSpec) -> Value {
    match run {
        RunSpec::Shell(line) => json!({ "shell": line }),
        RunSpec::Exec(c) => json!({ "path": c.path, "args": c.args, "dir": c.dir }),
    }
}

/// The canonical configuration of a leaf step, as JSON. `version` is a `get`'s resolved
/// version (the commit), `agent` an agent step as built to run; other kinds ignore them.
fn config(
    step: &Step,
    version: Option<&str>,
    agent: &dyn Fn(&AgentCall) -> Result<Arc<AgentStep>, BuildError>,
) -> Result<Value, ConfigError> {
    let common = json!({
        "inputs": values(&step.inputs),
        "outputs": values(&step.outputs),
        "env": step.env,
        "assert": step.assert.as_ref().map(|a| serde_json::to_value(&a.value).unwrap_or(Value::Null)),
    });
    let kind = &step.kind;
    let specific = match kind {
        StepKind::Task { run, .. } => json!({ "run": run_json(&run.value) }),
        StepKind::Agent(call) => agent_config(step, call, &*agent(call)?),
        StepKind::Get(GetStep { typed, params, .. })
        | StepKind::Put(PutStep { typed, params, .. }) => {
            // Resolved at load, the step holds its resource as written and its type.
            let resource = &typed.spec;
            let mut config = json!({
                "type": resource.kind.value,
                "source": resource.source,
                "params": params,
                "version": version,
            });
            // A scripted type's scripts decide what a get fetches: a changed script is a
            // changed step. (Left out for built-in types: their keys stay as they were.)
            if let ResolvedResource::Scripted(t) = &typed.kind {
                let text =
                    |s: &Option<crate::pipeline::At<String>>| s.as_ref().map(|s| s.value.clone());
                config["scripts"] = json!({
                    "check": text(&t.config.check),
                    "in": text(&t.config.in_),
                    "out": text(&t.config.out),
                    "image": text(&t.image),
                });
            }
            config
        }
        StepKind::Approval { message, .. } => json!({ "message": message }),
        StepKind::Input(InputStep {
            question,
            schema,
            choices,
            default,
            ..
        }) => json!({
            "question": question.as_ref().map(|q| &q.value),
            "schema": schema,
            "choices": choices,
            "default": default,
        }),
        StepKind::LoadVar { name, file } => {
            json!({ "load_var": name.value, "file": file.as_ref().map(|f| &f.value) })
        }
        StepKind::Http { call, .. } => call.key_json(),
        StepKind::Do(_)
        | StepKind::InParallel(_)
        | StepKind::Try(_)
        | StepKind::Race(_)
        | StepKind::Ensemble(_) => Value::Null,
    };
    Ok(json!({ "kind": kind.key(), "common": common, "step": specific }))
}

// The agent's part is a view of the very value the runner gets; routes and `commit` are
// the step's (where a verdict goes, what happens to the work after).
fn agent_config(step: &Step, call: &AgentCall, agent: &AgentStep) -> Value {
    let verdicts: Vec<(String, String)> = step
        .routes()
        .into_iter()
        .map(|(v, t)| (v.to_owned(), t.value.clone()))
        .collect();
    let mut config = agent.key_view();
    if let Value::Object(map) = &mut config {
        map.insert("verdicts".to_owned(), json!(verdicts));
        map.insert("commit".to_owned(), json!(call.commit));
    }
    config
}

/// The configuration of one `across:` cell: its step's with the cell's values, which set
/// it apart from its siblings (they chain to the same step before the block).
fn with_cell(mut config: Value, cell: Option<&BTreeMap<String, String>>) -> Value {
    if let (Some(vars), Value::Object(map)) = (cell, &mut config) {
        map.insert("cell".to_owned(), json!(vars));
    }
    config
}

/// The digest of a configuration.
fn config_digest(config: &Value) -> Digest {
    blake3::hash(config.to_string().as_bytes()).into()
}
