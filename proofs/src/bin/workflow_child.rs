//! The workflow the resume proof (proofs/tests/workflow_resume.rs) kills and resumes:
//! `STEPS` shell steps, each appending its number to a counter file outside the project
//! (so every run of a step is counted), the ones from `CHANGED` on with another variant
//! in their environment (a changed configuration, so a changed key).
//!
//!
//! It also runs a second workflow, for the proof that an agent step stopped mid-way in a
//! workflow goes on in its session (proofs/tests/workflow_agent_resume.rs): one agent step
//! that writes `out/a`, `out/b`, `out/c`, then a shell step that shows them. The model is
//! the one `TREADLE_LOCAL_URL` names.
//!
//! ```text
//! treadle-workflow-child run STATE COUNTER STEPS CHANGED [RUN]   # RUN: the run it resumes,
//!                                                                # or `last` (resume_last)
//! treadle-workflow-child agent STATE [RUN]                       # the writer workflow
//! treadle-workflow-child records STATE                           # the latest run, as JSON
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use treadle::run::Store;
use treadle::workflow::{self, AgentTask, Agents, Flow, FlowError, Options, Shell, Workflow};

/// What the workflow is given.
pub struct Counted {
    /// The file each step appends its number to.
    pub counter: PathBuf,
    /// How many steps.
    pub steps: u32,
    /// The first step of the second variant.
    pub changed: u32,
}

/// The workflow.
pub struct Counter;

impl Workflow for Counter {
    type Input = Counted;
    type Output = ();
    const NAME: &'static str = "counter";

    async fn run(&self, flow: &mut Flow, input: Counted) -> Result<(), FlowError> {
        for i in 0..input.steps {
            let variant = if i >= input.changed { "b" } else { "a" };
            let count = Shell::new("printf '%s\\n' \"$STEP\" >> \"$COUNTER\"; sleep 0.05")
                .env("STEP", i.to_string())
                .env("COUNTER", input.counter.display().to_string())
                .env("VARIANT", variant)
                // Only a resume may bring it back, never the cache; it writes outside.
                .volatile()
                .unconfined();
            flow.shell(&format!("s{i}"), count).await?;
        }
        Ok(())
    }
}

/// One agent step that writes three files, then a shell step that shows them.
pub struct Writer;

impl Workflow for Writer {
    type Input = ();
    type Output = String;
    const NAME: &'static str = "writer";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<String, FlowError> {
        let task = AgentTask::new("writer", "Write out/a, out/b and out/c, then say done.")
            .outputs(["out"]);
        flow.agent("write", task).await?;
        let show = Shell::new("echo \"files:$(cat out/a out/b out/c)\"").inputs(["out"]);
        Ok(flow.shell("show", show).await?.stdout)
    }
}

/// Runs [`Writer`] in `state`, resuming run `resume`; prints its output.
async fn writer(state: &str, resume: Option<u64>) -> ExitCode {
    let agents = match Agents::from_yaml("agents:\n  - name: writer\n    tools: [write_file]\n") {
        Ok(agents) => agents,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let options = Options::new(state).agents(agents).resume(resume);
    match workflow::run(&Writer, (), options).await {
        Ok(report) => {
            match &report.output {
                Ok(out) => print!("{out}"),
                Err(e) => eprintln!("{e}"),
            }
            ExitCode::from(report.exit_code())
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

/// The latest run of `state` and its steps' statuses, as one JSON line.
fn records(state: &str) -> Result<String, treadle::run::StateError> {
    let store = Store::open(std::path::Path::new(state))?;
    let Some(run) = store.runs()?.into_iter().map(|r| r.id).max() else {
        return Ok("{}".to_owned());
    };
    let steps: Vec<serde_json::Value> = store
        .steps(run)?
        .into_iter()
        .map(|s| serde_json::json!({ "name": s.name, "status": s.status.as_str() }))
        .collect();
    let status = store.run(run)?.status.as_str();
    Ok(serde_json::json!({ "run": run, "status": status, "steps": steps }).to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["records", state] => match records(state) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(2)
            }
        },
        ["agent", state, rest @ ..] => {
            writer(state, rest.first().and_then(|r| r.parse().ok())).await
        }
        ["run", state, counter, steps, changed, rest @ ..] => {
            let (Ok(steps), Ok(changed)) = (steps.parse(), changed.parse()) else {
                eprintln!("STEPS and CHANGED are numbers");
                return ExitCode::from(2);
            };
            let input = Counted {
                counter: PathBuf::from(counter),
                steps,
                changed,
            };
            let options = match rest.first() {
                Some(&"last") => Options::new(*state).resume_last(),
                run => Options::new(*state).resume(run.and_then(|r| r.parse().ok())),
            };
            match workflow::run(&Counter, input, options).await {
                Ok(report) => {
                    if let Some(old) = report.resumed {
                        println!("resumed {old}");
                    }
                    ExitCode::from(report.exit_code())
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(2)
                }
            }
        }
        _ => {
            eprintln!(
                "usage: treadle-workflow-child run STATE COUNTER STEPS CHANGED [RUN|last] | agent STATE [RUN] | records STATE"
            );
            ExitCode::from(2)
        }
    }
}
