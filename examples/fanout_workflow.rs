//! A typed fan-out YAML cannot express: an agent answers with a typed outline (its JSON
//! checked against `Outline`'s schema), and the workflow runs one step per chapter it
//! names, a number known only once the answer is in, then joins them.
//!
//! ```text
//! scripts/local-model start && cargo run --example fanout_workflow -- .treadle/state.redb
//! ```

use serde::Deserialize;
use treadle::workflow::{self, AgentTask, Agents, Flow, FlowError, Options, Shell, Workflow};

/// The agent's answer: the chapters of a short guide.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct Outline {
    /// One title per chapter, in order.
    pub chapters: Vec<String>,
}

/// The agent the outline comes from.
pub const AGENTS: &str = "agents:
  - name: planner
    system: You plan short guides. Answer with JSON only.
    tools: []
    temperature: 0
";

/// The workflow: given a subject, the guide's text.
pub struct Guide;

impl Workflow for Guide {
    type Input = String;
    type Output = String;
    const NAME: &'static str = "guide";

    async fn run(&self, flow: &mut Flow, subject: String) -> Result<String, FlowError> {
        let ask = AgentTask::new(
            "planner",
            format!("List 2 to 5 chapter titles for a guide to {subject}."),
        );
        let outline = flow.agent("outline", ask.output::<Outline>()).await?;
        let mut chapters = Vec::new();
        for (i, title) in outline.chapters.iter().enumerate() {
            let out = format!("chapter{i}");
            // The title goes in through the environment, never into the command line.
            let write = Shell::new(format!(
                "printf '%s. %s\\n' {} \"$TITLE\" > {out}/text.md",
                i + 1
            ))
            .env("TITLE", title)
            .outputs([out.as_str()]);
            flow.shell(&out, write).await?;
            chapters.push(out);
        }
        let files: Vec<String> = chapters.iter().map(|c| format!("{c}/text.md")).collect();
        let join = Shell::new(format!("cat {}", files.join(" "))).inputs(chapters);
        Ok(flow.shell("guide", join).await?.stdout)
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let state = std::env::args()
        .nth(1)
        .unwrap_or_else(|| ".treadle/state.redb".to_owned());
    let agents = match Agents::from_yaml(AGENTS) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    let options = Options::new(state).agents(agents);
    match workflow::run(&Guide, "sourdough bread".to_owned(), options).await {
        Ok(report) => {
            if let Ok(guide) = &report.output {
                print!("{guide}");
            }
            std::process::ExitCode::from(report.exit_code())
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::from(2)
        }
    }
}
