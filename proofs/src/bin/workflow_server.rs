//! A user's binary serving workflows written in Rust (`treadle::workflow::Server`), for
//! proofs/tests/workflow_serve.rs: examples/review_workflow.rs (its reviewer on the
//! scripted model at MODEL_URL), examples/fanout_workflow.rs, and `count`, whose typed
//! input says how many steps to run and how long each pauses.
//!
//! ```text
//! treadle-workflow-server STATE MODEL_URL   # prints `serving workflows on http://ADDR ...`
//! ```

use std::process::ExitCode;

use serde::Deserialize;
use treadle::workflow::{Agents, Flow, FlowError, Server, Shell, Workflow};

#[path = "../../../examples/review_workflow.rs"]
#[allow(dead_code)]
mod review_workflow;

#[path = "../../../examples/fanout_workflow.rs"]
#[allow(dead_code)]
mod fanout_workflow;

/// What `count` is given.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Counting {
    /// How many steps.
    pub steps: u32,
    /// How long each step sleeps, in seconds.
    pub pause: u32,
}

/// `steps` shell steps, each sleeping `pause` seconds and printing its number.
pub struct Count;

impl Workflow for Count {
    type Input = Counting;
    type Output = u32;
    const NAME: &'static str = "count";

    async fn run(&self, flow: &mut Flow, input: Counting) -> Result<u32, FlowError> {
        for i in 0..input.steps {
            let step = Shell::new("sleep \"$PAUSE\"; echo \"$STEP\"")
                .env("PAUSE", input.pause.to_string())
                .env("STEP", i.to_string());
            flow.shell(&format!("s{i}"), step).await?;
        }
        Ok(input.steps)
    }
}

/// examples/review.yml's agents, the reviewer sent to the scripted model at `url`, and
/// the fan-out's planner beside it.
fn agents(url: &str) -> Result<Agents, String> {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/review.yml");
    let yaml = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let source = format!("    source: {{ model: scripted, endpoint: \"{url}\" }}\n");
    let yaml = yaml.replacen(
        "  - name: reviewer\n",
        &format!("  - name: reviewer\n{source}"),
        1,
    );
    let planner = fanout_workflow::AGENTS
        .trim_start_matches("agents:\n")
        .replacen(
            "  - name: planner\n",
            &format!("  - name: planner\n{source}"),
            1,
        );
    let yaml = yaml.replacen("agents:\n", &format!("agents:\n{planner}"), 1);
    Agents::from_yaml(&yaml).map_err(|e| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [state, url] = args.as_slice() else {
        eprintln!("usage: treadle-workflow-server STATE MODEL_URL");
        return ExitCode::from(2);
    };
    let agents = match agents(url) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    // Until SIGTERM (or SIGKILL, which the restart test sends).
    let served = Server::new(state)
        .agents(agents)
        .register(review_workflow::Review)
        .register(fanout_workflow::Guide)
        .register(Count)
        .serve(addr)
        .await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}
