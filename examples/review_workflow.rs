//! examples/review.yml as a Rust workflow: a draft, a reviewer agent whose verdict the
//! code branches on, and a publish step. The agents come from review.yml itself.
//!
//! ```text
//! scripts/local-model start && cargo run --example review_workflow -- .treadle/state.redb
//! ```
//! Run it again with `--resume RUN` and the recorded steps give back their results.

use std::time::Duration;

use treadle::workflow::{self, AgentTask, Agents, Flow, FlowError, Options, Shell, Workflow};

/// The reviewer's instruction (review.yml's prompt).
pub const PROMPT: &str = "Do these three steps, one tool call each:
1. Call read_file with path \"draft/notes.md\".
2. Call write_file with path \"report/summary.md\" and a one-line summary of the notes as content.
3. Call verdict: approve if the notes are fine, reject if not.";

/// The draft (review.yml's first task).
pub const DRAFT: &str = "printf 'Release notes\\n\\n- faster startup\\n- fixed a crash on empty files\\n' > draft/notes.md";

/// The workflow: its output is what `publish` printed.
pub struct Review;

impl Workflow for Review {
    type Input = ();
    type Output = String;
    const NAME: &'static str = "review";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<String, FlowError> {
        flow.shell("draft", Shell::new(DRAFT).outputs(["draft"]))
            .await?;
        let review = AgentTask::new("reviewer", PROMPT)
            .inputs(["draft"])
            .outputs(["report"])
            .verdicts(["approve", "reject"])
            .timeout(Duration::from_secs(300));
        let review = flow.agent("reviewer", review).await?;
        if review.verdict.as_deref() != Some("approve") {
            let escalate = Shell::new("echo 'the reviewer rejected the draft'; exit 1");
            flow.shell("escalate", escalate).await?;
        }
        let publish =
            Shell::new("cat report/summary.md draft/notes.md").inputs(["draft", "report"]);
        Ok(flow.shell("publish", publish).await?.stdout)
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let state = args
        .next()
        .unwrap_or_else(|| ".treadle/state.redb".to_owned());
    let resume = match (args.next().as_deref(), args.next()) {
        (Some("--resume"), Some(run)) => run.parse().ok(),
        _ => None,
    };
    let yaml = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/review.yml");
    let agents = match Agents::from_file(yaml) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    let options = Options::new(state).agents(agents).resume(resume);
    match workflow::run(&Review, (), options).await {
        Ok(report) => {
            if let Ok(published) = &report.output {
                println!("{published}");
            }
            std::process::ExitCode::from(report.exit_code())
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::from(2)
        }
    }
}
