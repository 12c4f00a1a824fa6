//! What travels between the server and its workers: a step to run ([`StepJob`]) and how it
//! went ([`StepResult`]), as JSON.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::run::exec::{Done, Status};
use crate::run::failure::{FailureKind, StepFailure};
use crate::run::state::StepRecord;

/// An artifact directory in the object store.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Carried {
    /// The artifact's name in the pipeline.
    pub name: String,
    /// The object's name: the blake3 digest of the packed directory.
    pub digest: String,
}

/// One attempt of one step, for a worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepJob {
    /// The attempt's id (`super::attempt_id`); its result is stored under it. Named `key`
    /// on the wire, as workers of earlier versions read it.
    #[serde(rename = "key")]
    pub attempt_id: super::attempt_id::AttemptId,
    /// The run's id on the server.
    pub run: u64,
    /// The step's outline seq.
    pub seq: u32,
    /// Which attempt.
    pub attempt: u32,
    /// The pipeline file as the server names it.
    pub file: PathBuf,
    /// The pipeline's text, vars filled in, as the server loaded it.
    pub source: String,
    /// The job.
    pub job: String,
    /// The vars `load_var:` steps captured so far.
    pub vars: BTreeMap<String, String>,
    /// The step's inputs.
    pub inputs: Vec<Carried>,
    /// Tokens the run spent so far (the job's budget).
    pub tokens_spent: u64,
    /// Millionths of a dollar the run spent so far (the job's dollar budget).
    #[serde(default)]
    pub micro_usd_spent: u64,
    /// An agent step: its worker holds the step's session through a lease
    /// ([`super::lease`]).
    #[serde(default)]
    pub agent: bool,
    /// The `across:` cell this run of the step is, with its values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cell: Option<crate::run::cell::CellValues>,
}

/// How a step attempt ended, as a worker reports it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepResult {
    /// `succeeded`, `failed`, `errored`, `aborted`, or `cancelled` (the server gave up on it
    /// before any worker finished it).
    pub status: String,
    /// Why, when not well.
    pub error: Option<String>,
    /// The kind of that failure (absent from workers that did not send kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureKind>,
    /// Where an agent's verdict sends the plan.
    pub route: Option<String>,
    /// The step's record (exit code, output tail, verdict, usage).
    pub record: Option<StepRecord>,
    /// Its enduring events, JSON lines in order.
    pub events: Vec<String>,
    /// Its outputs.
    pub outputs: Vec<Carried>,
    /// Tokens spent.
    pub tokens: u64,
    /// Millionths of a dollar spent.
    #[serde(default)]
    pub micro_usd: u64,
    /// Which worker ran it.
    pub worker: String,
}

/// The status word of a server that gave up on a step.
pub const CANCELLED: &str = "cancelled";

impl StepResult {
    /// The result a server records when it gives up on a step (cancelled, timed out).
    pub fn cancelled() -> Self {
        Self {
            status: CANCELLED.to_owned(),
            error: None,
            failure: None,
            route: None,
            record: None,
            events: Vec::new(),
            outputs: Vec::new(),
            tokens: 0,
            micro_usd: 0,
            worker: String::new(),
        }
    }

    /// The walker's view of it.
    pub fn done(&self) -> Done {
        let status = match self.status.as_str() {
            "succeeded" => Status::Succeeded,
            "failed" => Status::Failed,
            "aborted" => Status::Aborted,
            _ => Status::Errored,
        };
        let kind = self.failure.unwrap_or(FailureKind::Other);
        Done {
            status,
            failure: self.error.clone().map(|m| StepFailure::new(kind, m)),
            route: self.route.clone(),
            asserts: Vec::new(),
            masked: None,
        }
    }
}
