//! A release that waits for people, written in Rust: a typed answer from a person
//! (`human_input`), a labelled branch (`when`), an approval two of three assignees must
//! give, escalated to an on-call lead at its deadline, and a triage decision an agent makes
//! with a confidence, asked of a person when it is unsure (`decision`).
//!
//! ```text
//! cargo run --example people_workflow -- .treadle/state.redb
//! # from another terminal:
//! treadle approvals --state .treadle/state.redb
//! treadle answer 1 rollout --state .treadle/state.redb --json '{"replicas": 3, "canary": true}'
//! ```

use std::time::Duration;

use serde::Deserialize;
use treadle::workflow::{self, AgentTask, Approval, Ask, Escalation, Flow, FlowError, Options};
use treadle::workflow::{Shell, Workflow};

/// What the person answers: how to roll out.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct Rollout {
    /// How many replicas to run.
    pub replicas: u32,
    /// Whether a canary goes first.
    pub canary: bool,
}

/// The release: asks how to roll out, waits for the approval, deploys.
pub struct Release;

impl Workflow for Release {
    type Input = ();
    type Output = u32;
    const NAME: &'static str = "release";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<u32, FlowError> {
        let ask = Ask::new("How many replicas, and a canary first?").deadline(HOUR);
        let rollout: Rollout = flow.human_input("rollout", ask).await?;
        if flow.when("canary", rollout.canary).await? {
            flow.shell("canary-up", Shell::new("echo canary up"))
                .await?;
        }
        let gate = Approval::new()
            .message("Ship it?")
            .assignees(["alice", "bob", "carol"])
            .approvers(2)
            .deadline(HOUR)
            .on_deadline(Escalation::to(["ops-lead"]));
        flow.approval("ship", gate).await?;
        let deploy = format!("echo deploying {} replicas", rollout.replicas);
        flow.shell("deploy", Shell::new(deploy)).await?;
        Ok(rollout.replicas)
    }
}

const HOUR: Duration = Duration::from_secs(3600);

/// Where an issue goes.
#[derive(Debug, Deserialize, schemars::JsonSchema, PartialEq, Eq)]
pub struct Routing {
    /// The team that takes it.
    pub team: String,
}

/// The agent that routes issues.
pub const AGENTS: &str = "agents:
  - name: triager
    system: You route issues to teams. Answer with JSON only.
    tools: []
    temperature: 0
";

/// Triage: an agent routes the issue; below 0.8 confidence a person confirms.
pub struct Triage;

impl Workflow for Triage {
    type Input = String;
    type Output = Routing;
    const NAME: &'static str = "triage";

    async fn run(&self, flow: &mut Flow, issue: String) -> Result<Routing, FlowError> {
        let task = AgentTask::new("triager", format!("Which team takes this issue? {issue}"))
            .verdicts(["route"])
            .min_confidence(0.8)
            .timeout(HOUR);
        flow.decision("route", task).await
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let state = std::env::args()
        .nth(1)
        .unwrap_or_else(|| ".treadle/state.redb".to_owned());
    match workflow::run(&Release, (), Options::new(state)).await {
        Ok(report) => {
            if let Ok(replicas) = &report.output {
                println!("deployed {replicas} replicas");
            }
            std::process::ExitCode::from(report.exit_code())
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::from(2)
        }
    }
}
