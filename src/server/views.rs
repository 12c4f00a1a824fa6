//! The JSON shapes of the API (see docs/server.md): a run, its steps as a tree, a served
//! pipeline. They are built from the state file's records and read back by the CLI, which
//! prints them as it prints the records themselves.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::run::failure::FailureKind;
use crate::run::spent::RunSpent;
use crate::run::state::{RunRecord, RunStatus, StepRecord, StepStatus};

/// A pipeline the server serves.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PipelineView {
    /// Its name: the file's stem, unique among the served files.
    pub name: String,
    /// The file, as the server was given it.
    pub file: String,
    /// Its jobs.
    pub jobs: Vec<String>,
    /// The `((vars))` its text uses, sorted: what the page's start form asks for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vars: Vec<String>,
    /// A workflow written in Rust (`super::workflows`): the JSON Schema of the `input` a run of
    /// it is started with (it has no file: `file` is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<serde_json::Value>,
}

/// A run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunView {
    /// Run id.
    pub id: u64,
    /// The pipeline's name (its file's stem).
    pub pipeline: String,
    /// The pipeline file as the run recorded it.
    pub file: String,
    /// The job.
    pub job: String,
    /// How it stands.
    pub status: RunStatus,
    /// Start (ms since the Unix epoch).
    pub started_ms: u64,
    /// Wall time, once ended.
    pub duration_ms: Option<u64>,
    /// Who started it: `cli`, `web` or `api`.
    pub trigger: String,
    /// Tokens its agent steps spent (`None`: it has no agent step), those replayed from
    /// the cache at what they recorded when they ran.
    pub tokens: Option<u64>,
    /// What they cost (`None`: no agent step, or one without a price: "unpriced").
    pub cost_usd: Option<f64>,
    /// The part of `tokens` replayed from the cache (`None`: no step was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_tokens: Option<u64>,
    /// The part of `cost_usd` replayed from the cache (`None`: no step was, or unpriced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_cost_usd: Option<f64>,
    /// Why it did not succeed.
    pub error: Option<String>,
    /// The kind of that failure (`timeout`, `exit_status`, ...; see docs/pipelines.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureKind>,
    /// Its steps as a tree (only in `GET /api/v1/runs/{id}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepNode>>,
    /// The run this one was forked from and where (`treadle run --fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
    /// What it waits on, while running: a person's approval or answer, and its deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<crate::run::waiting::Waiting>,
    /// Marked running, but no process runs it (the one that did stopped, and this server
    /// did not adopt it, `--no-adopt`): interrupted, resumable with `treadle run --resume`.
    #[serde(default)]
    pub interrupted: bool,
}

/// Where a forked run comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkedFrom {
    /// The run forked.
    pub run: u64,
    /// The point: `STEP` or `STEP/TURN`, as it was asked (a name or an outline path).
    pub at: String,
    /// The name of the step forked at (`None`: not found in the run's steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// A step of a run, with the steps inside it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepNode {
    /// Its place in the plan outline.
    pub seq: u32,
    /// Where it is in the plan, e.g. `2/in_parallel/0`.
    pub path: String,
    /// Display name.
    pub name: String,
    /// Kind (`task`, `agent`, `do`, ...).
    pub kind: String,
    /// How it stands.
    pub status: StepStatus,
    /// Taken from the cache instead of run.
    pub cached: bool,
    /// The run it was cached from.
    pub from_run: Option<u64>,
    /// Start (ms since the Unix epoch).
    pub started_ms: Option<u64>,
    /// Wall time (all attempts).
    pub duration_ms: Option<u64>,
    /// A task's exit code.
    pub exit_code: Option<i32>,
    /// Attempts made.
    pub attempts: u32,
    /// An agent's verdict.
    pub verdict: Option<String>,
    /// The reason said with it: an agent's with its verdict, a workflow's for a skipped
    /// branch (`skip(label, reason)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// The kind of that failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureKind>,
    /// Tokens an agent step spent (taken from the cache, `cached`: what it spent when it
    /// ran, replayed).
    pub tokens: Option<u64>,
    /// Their cost (`None`: unpriced, or not an agent step).
    pub cost_usd: Option<f64>,
    /// An agent step's usage as recorded (model, token counts, cost).
    pub usage: Option<Value>,
    /// The end of its output.
    pub output_tail: String,
    /// `keep_on_failure:`: the outputs it kept when it failed, and where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<crate::run::state_records::Kept>,
    /// The run whose kept outputs it started from (a `--rerun`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_kept: Option<u64>,
    /// The `treadle worker` that took it (`--nats`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The steps inside it (a block's).
    pub children: Vec<StepNode>,
}

/// The name a pipeline file is served under: its stem.
pub fn pipeline_name(file: &str) -> String {
    Path::new(file)
        .file_stem()
        .map_or_else(|| file.to_owned(), |s| s.to_string_lossy().into_owned())
}

impl RunView {
    /// The view of a run, from its record and steps.
    pub fn of(run: &RunRecord, steps: &[StepRecord], trigger: &str) -> Self {
        let sums = RunSpent::of(steps);
        let (all, replayed) = (sums.total(), sums.replayed);
        Self {
            id: run.id,
            pipeline: pipeline_name(&run.pipeline),
            file: run.pipeline.clone(),
            job: run.job.clone(),
            status: run.status,
            started_ms: run.started_ms,
            duration_ms: run.duration_ms,
            trigger: trigger.to_owned(),
            tokens: (all.agents > 0).then_some(all.tokens()),
            cost_usd: all.cost_usd(),
            replayed_tokens: (replayed.agents > 0).then_some(replayed.tokens()),
            replayed_cost_usd: replayed.cost_usd(),
            error: run.error.clone(),
            failure: run.failure,
            steps: None,
            forked_from: None,
            waiting: None,
            interrupted: false,
        }
    }

    /// The record this view was made of (for the CLI, which prints records).
    pub fn record(&self) -> RunRecord {
        RunRecord {
            id: self.id,
            pipeline: self.file.clone(),
            job: self.job.clone(),
            status: self.status,
            started_ms: self.started_ms,
            duration_ms: self.duration_ms,
            error: self.error.clone(),
            failure: self.failure,
        }
    }
}

impl StepNode {
    fn of(step: &StepRecord) -> Self {
        let spent = crate::run::spent::of_step(step).map(|(s, _)| s);
        Self {
            seq: step.seq,
            path: step.path.clone(),
            name: step.name.clone(),
            kind: step.kind.clone(),
            status: step.status,
            cached: step.cached_from.is_some(),
            from_run: step.cached_from,
            started_ms: step.started_ms,
            duration_ms: step.duration_ms,
            exit_code: step.produced.exit_code,
            attempts: step.attempts,
            verdict: step.produced.verdict.clone(),
            note: step.produced.note.clone(),
            error: step.error.clone(),
            failure: step.failure,
            tokens: spent.map(|s| s.tokens()),
            cost_usd: spent.and_then(|s| s.cost_usd()),
            usage: step.produced.usage.clone(),
            output_tail: step.produced.stdout_tail.clone(),
            kept: step.kept.clone(),
            from_kept: step.from_kept,
            worker: step.worker.clone(),
            children: Vec::new(),
        }
    }

    /// The record this node was made of.
    pub fn record(&self) -> StepRecord {
        StepRecord {
            seq: self.seq,
            path: self.path.clone(),
            name: self.name.clone(),
            kind: self.kind.clone(),
            status: self.status,
            started_ms: self.started_ms,
            duration_ms: self.duration_ms,
            attempts: self.attempts,
            produced: crate::run::state::Produced {
                exit_code: self.exit_code,
                stdout_tail: self.output_tail.clone(),
                streams: None,
                verdict: self.verdict.clone(),
                note: self.note.clone(),
                usage: self.usage.clone(),
            },
            error: self.error.clone(),
            failure: self.failure,
            cached_from: self.from_run,
            kept: self.kept.clone(),
            from_kept: self.from_kept,
            worker: self.worker.clone(),
        }
    }

    /// The nodes in plan order, parents before their children (as the state file has them).
    pub fn flatten(nodes: &[StepNode], out: &mut Vec<StepRecord>) {
        for n in nodes {
            out.push(n.record());
            Self::flatten(&n.children, out);
        }
    }
}

/// The parent of an outline path: `2/in_parallel/0` is inside `2`; `3/do/1/try` inside `3/do/1`.
fn parent_path<'a>(path: &'a str, paths: &[&str]) -> Option<&'a str> {
    let mut cut = path;
    while let Some(i) = cut.rfind('/') {
        cut = &cut[..i];
        if paths.contains(&cut) {
            return Some(cut);
        }
    }
    None
}

/// The steps of a run (in plan order) as a tree, each under the nearest step whose path is
/// a prefix of its own.
pub fn tree(steps: &[StepRecord]) -> Vec<StepNode> {
    let paths: Vec<&str> = steps.iter().map(|s| s.path.as_str()).collect();
    let mut roots: Vec<StepNode> = Vec::new();
    // Plan order puts a block before what is inside it, so a parent is always placed first.
    for step in steps {
        let node = StepNode::of(step);
        match parent_path(&step.path, &paths) {
            Some(parent) => {
                if let Some(p) = find(&mut roots, parent) {
                    p.children.push(node);
                } else {
                    roots.push(node);
                }
            }
            None => roots.push(node),
        }
    }
    roots
}

fn find<'a>(nodes: &'a mut [StepNode], path: &str) -> Option<&'a mut StepNode> {
    for n in nodes {
        if n.path == path {
            return Some(n);
        }
        if path.starts_with(&format!("{}/", n.path))
            && let Some(found) = find(&mut n.children, path)
        {
            return Some(found);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(seq: u32, path: &str) -> StepRecord {
        StepRecord::pending(seq, path.into(), path.into(), "task".into())
    }

    #[test]
    fn blocks_hold_their_steps_and_flatten_back_in_plan_order() {
        let steps = vec![
            step(0, "0"),
            step(1, "1"),
            step(2, "1/in_parallel/0"),
            step(3, "1/in_parallel/1"),
            step(4, "1/in_parallel/1/do/0"),
            step(5, "2"),
        ];
        let t = tree(&steps);
        assert_eq!(t.len(), 3);
        assert_eq!(t[1].children.len(), 2);
        assert_eq!(t[1].children[1].children[0].path, "1/in_parallel/1/do/0");
        let mut flat = Vec::new();
        StepNode::flatten(&t, &mut flat);
        let seqs: Vec<u32> = flat.iter().map(|s| s.seq).collect();
        assert_eq!(seqs, [0, 1, 2, 3, 4, 5]);
    }
}
