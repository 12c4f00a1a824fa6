//! Agent steps against the scripted OpenAI-compatible server: tools confined to the step
//! directory, recorded calls, verdicts and their reminder, token budgets and cost.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use treadle::agent::{
    AgentEvent, AgentOutcome, AgentStatus, AgentStep, BudgetScope, Cost, ModelPrice, TokenBudget,
    run_agent_step,
};
use treadle::pipeline::{Pos, ResolvedModel};
use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::Journal;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A step directory with `in/a.txt` and an empty `out/`, and a journal beside it.
struct Fixture {
    dir: tempfile::TempDir,
    journal: Journal,
}

impl Fixture {
    fn new() -> Result<Self, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("step/in"))?;
        std::fs::create_dir_all(dir.path().join("step/out"))?;
        std::fs::write(dir.path().join("step/in/a.txt"), "the answer is 42\n")?;
        std::fs::write(dir.path().join("secret.txt"), "outside\n")?;
        let journal = Journal::open(dir.path().join("journal.redb"))?;
        Ok(Self { dir, journal })
    }

    fn step_dir(&self) -> PathBuf {
        self.dir.path().join("step")
    }

    fn step(&self, server: &ScriptedServer, tools: &[&str]) -> AgentStep {
        AgentStep {
            name: "answer".into(),
            model: ResolvedModel {
                provider: "local".into(),
                model: "scripted".into(),
                base_url: server.base_url().to_owned(),
                api_key_env: None,
                pos: Pos::default(),
                key_pos: Pos::default(),
            },
            fallbacks: Vec::new(),
            system: Some("You answer questions about files.".into()),
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            prompt: "Read in/a.txt and write the answer to out/answer.txt.".into(),
            verdicts: Vec::new(),
            verdict_from_text: false,
            max_turns: Some(10),
            budgets: Vec::new(),
            prices: Default::default(),
            dir: self.step_dir(),
            env: Vec::new(),
            pass_env: Vec::new(),
            confined: true,
            network: None,
            secret_vars: Vec::new(),
            temperature: None,
            dials: Default::default(),
            model_idle: None,
            model_response: None,
            attempts: None,
            string_tool_choice: false,
            model_call: None,
            mcp: Vec::new(),
            conversation: Default::default(),
            controls: Default::default(),
            answerer: None,
            unfinished_effects: Default::default(),
            granted: Default::default(),
            parent: None,
            cli: Default::default(),
            owed_files: Vec::new(),
            handed: Vec::new(),
        }
    }

    async fn run(
        &self,
        step: &AgentStep,
    ) -> Result<(AgentOutcome, Vec<AgentEvent>), Box<dyn std::error::Error>> {
        let seen = Mutex::new(Vec::new());
        let observer = |event: AgentEvent| {
            if let Ok(mut seen) = seen.lock() {
                seen.push(event);
            }
        };
        let outcome =
            run_agent_step(step, &self.journal, &observer, &CancellationToken::new()).await?;
        let events = seen.into_inner().unwrap_or_default();
        Ok((outcome, events))
    }
}

/// The tool results the model was sent in a request, in order.
fn tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
async fn tools_write_files_record_calls_and_refuse_escapes() -> TestResult {
    let fixture = Fixture::new()?;
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("read_file", json!({"path": "in/a.txt"})),
        Reply::tool_call(
            "write_file",
            json!({"path": "out/answer.txt", "content": "42"}),
        ),
        Reply::tool_call("read_file", json!({"path": "../secret.txt"})),
        Reply::text("done"),
    ]))
    .await?;
    let step = fixture.step(&server, &["read_file", "write_file"]);
    let (outcome, events) = fixture.run(&step).await?;

    assert_eq!(outcome.status, AgentStatus::Succeeded);
    assert_eq!(outcome.text, "done");
    assert_eq!(read(&fixture.step_dir().join("out/answer.txt")), "42");
    assert_eq!(read(&fixture.dir.path().join("secret.txt")), "outside\n");

    let names: Vec<&str> = outcome.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["read_file", "write_file", "read_file"]);
    assert_eq!(outcome.tool_calls[0].result, "the answer is 42\n");
    assert_eq!(
        outcome.tool_calls[1].arguments,
        json!({"path": "out/answer.txt", "content": "42"})
    );
    let refused = &outcome.tool_calls[2];
    assert!(refused.is_error);
    assert_eq!(
        refused.result,
        r#"path "../secret.txt" is outside the step directory; use a path relative to it"#
    );

    // The model read the refusal as the call's result, and the turn went on.
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    let last = tool_results(&requests[3].body);
    assert_eq!(last.len(), 3);
    assert!(last[2].contains("outside the step directory"), "{last:?}");
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(offered, ["read_file", "write_file"]);

    // The transcript saw the prompts and one timing per model call (issue 30) ...
    let timed = |what: &str| events.iter().filter(|e| e.what() == what).count();
    assert_eq!(
        (timed("prompt"), timed("model_call")),
        (2, 4),
        "system, prompt; 4 calls"
    );
    // ... and each call, each result, the text and then the usage.
    let events: Vec<&AgentEvent> = events
        .iter()
        .filter(|e| !matches!(e.what(), "prompt" | "model_call"))
        .collect();
    let whats: Vec<&str> = events.iter().map(|e| e.what()).collect();
    assert_eq!(
        whats,
        [
            "tool_call",
            "tool_result",
            "tool_call",
            "tool_result",
            "tool_call",
            "tool_result",
            "text",
            "usage"
        ]
    );
    assert_eq!(*events[6], AgentEvent::Text("done".into()));
    Ok(())
}

#[tokio::test]
async fn a_verdict_is_recorded_from_the_verdict_tool() -> TestResult {
    let fixture = Fixture::new()?;
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call(
            "verdict",
            json!({"verdict": "approve", "reason": "looks fine"}),
        ),
        Reply::text("Approved."),
    ]))
    .await?;
    let mut step = fixture.step(&server, &["read_file"]);
    step.verdicts = vec!["approve".into(), "reject".into()];
    let (outcome, _) = fixture.run(&step).await?;

    assert_eq!(outcome.status, AgentStatus::Succeeded);
    assert_eq!(outcome.verdict.as_deref(), Some("approve"));
    assert_eq!(outcome.verdict_reason.as_deref(), Some("looks fine"));
    let requests = server.requests();
    let verdict_tool = requests[0].body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["function"]["name"] == "verdict")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        verdict_tool["function"]["parameters"]["properties"]["choice"]["enum"],
        json!(["approve", "reject"])
    );
    Ok(())
}

#[tokio::test]
async fn a_missing_verdict_is_asked_for_once_more() -> TestResult {
    let fixture = Fixture::new()?;
    let server = ScriptedServer::start(Script::new([
        Reply::text("It looks risky."),
        Reply::tool_call("verdict", json!({"verdict": "maybe", "reason": "unsure"})),
        Reply::tool_call("verdict", json!({"verdict": "reject", "reason": "risky"})),
        Reply::text(""),
    ]))
    .await?;
    let mut step = fixture.step(&server, &[]);
    step.verdicts = vec!["approve".into(), "reject".into()];
    let (outcome, events) = fixture.run(&step).await?;

    assert_eq!(outcome.status, AgentStatus::Succeeded);
    assert_eq!(outcome.verdict.as_deref(), Some("reject"));
    // The answer stays the first turn's text: the reminder's answer said nothing.
    assert_eq!(outcome.text, "It looks risky.");
    let requests = server.requests();
    let reminder = requests[1].body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].clone())
        .unwrap_or_default();
    assert_eq!(
        reminder,
        json!("You must call the verdict tool with one of: approve, reject.")
    );
    // The invalid verdict was refused with a result the model read.
    assert!(outcome.tool_calls[0].is_error);
    assert!(events.iter().any(|e| matches!(e, AgentEvent::Notice(_))));
    Ok(())
}

#[tokio::test]
async fn no_verdict_after_the_reminder_fails_the_step() -> TestResult {
    let fixture = Fixture::new()?;
    let server = ScriptedServer::start(Script::new([
        Reply::text("Fine."),
        Reply::text("Still fine."),
    ]))
    .await?;
    let mut step = fixture.step(&server, &[]);
    step.verdicts = vec!["approve".into(), "reject".into()];
    let (outcome, _) = fixture.run(&step).await?;

    assert_eq!(
        outcome.status,
        AgentStatus::NoVerdict {
            allowed: vec!["approve".into(), "reject".into()]
        }
    );
    assert_eq!(outcome.verdict, None);
    assert_eq!(server.requests().len(), 2);
    assert_eq!(
        outcome.status.error().unwrap_or_default(),
        "the agent did not call the verdict tool with one of: approve, reject"
    );
    Ok(())
}

#[tokio::test]
async fn a_spent_budget_stops_the_next_model_call() -> TestResult {
    let fixture = Fixture::new()?;
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("read_file", json!({"path": "in/a.txt"})).usage(120, 30),
        Reply::text("never sent"),
    ]))
    .await?;
    let mut step = fixture.step(&server, &["read_file"]);
    step.budgets = vec![TokenBudget {
        scope: BudgetScope::Step,
        limit: 100,
        spent_before: 0,
    }];
    step.prices.insert(
        step.model.model.clone(),
        ModelPrice {
            prompt: 1.0,
            completion: 2.0,
            cached: None,
        },
    );
    let (outcome, events) = fixture.run(&step).await?;

    assert_eq!(server.requests().len(), 1, "a second model call was made");
    assert_eq!(
        outcome.status,
        AgentStatus::BudgetExceeded {
            spent: 150,
            limit: 100,
            scope: "step".into()
        }
    );
    // The committed step and its tool call stay recorded.
    assert_eq!(outcome.tool_calls.len(), 1);
    assert_eq!(outcome.usage.total(), 150);
    assert_eq!(outcome.model, "scripted");
    let expected = (120.0 * 1.0 + 30.0 * 2.0) / 1_000_000.0;
    assert_eq!(outcome.cost, Cost::Priced { usd: expected });
    assert!(matches!(events.last(), Some(AgentEvent::Usage { .. })));
    Ok(())
}

#[tokio::test]
async fn a_job_budget_spent_by_earlier_steps_stops_the_first_call() -> TestResult {
    let fixture = Fixture::new()?;
    let server = ScriptedServer::start(Script::new([Reply::text("never sent")])).await?;
    let mut step = fixture.step(&server, &[]);
    step.budgets = vec![TokenBudget {
        scope: BudgetScope::Job,
        limit: 1000,
        spent_before: 1000,
    }];
    let (outcome, _) = fixture.run(&step).await?;
    assert_eq!(server.requests().len(), 0);
    assert!(matches!(outcome.status, AgentStatus::BudgetExceeded { .. }));
    assert_eq!(outcome.cost, Cost::Unpriced);
    Ok(())
}

#[tokio::test]
async fn an_unknown_tool_is_a_configuration_error() -> TestResult {
    let fixture = Fixture::new()?;
    let server = ScriptedServer::start(Script::new([])).await?;
    let step = fixture.step(&server, &["read_file", "delete_everything"]);
    let seen = |_: AgentEvent| {};
    let result = run_agent_step(&step, &fixture.journal, &seen, &CancellationToken::new()).await;
    let error = result.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        error.starts_with("unknown tool \"delete_everything\""),
        "{error}"
    );
    Ok(())
}

#[tokio::test]
async fn a_symlink_out_of_the_step_directory_is_refused() -> TestResult {
    let fixture = Fixture::new()?;
    std::os::unix::fs::symlink(fixture.dir.path(), fixture.step_dir().join("up"))?;
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("read_file", json!({"path": "up/secret.txt"})),
        Reply::text("done"),
    ]))
    .await?;
    let step = fixture.step(&server, &["read_file"]);
    let (outcome, _) = fixture.run(&step).await?;
    let call = &outcome.tool_calls[0];
    assert!(call.is_error);
    assert_eq!(
        call.result,
        r#"path "up/secret.txt" leads outside the step directory through a symlink; use a path inside it"#
    );
    assert!(!call.result.contains("outside\n"));
    Ok(())
}

#[tokio::test]
async fn cancelling_interrupts_the_turn() -> TestResult {
    let fixture = Fixture::new()?;
    let server = ScriptedServer::start(Script::new([
        Reply::text("thinking about it").block_after(1)
    ]))
    .await?;
    let step = fixture.step(&server, &[]);
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        trigger.cancel();
    });
    let quiet = treadle::agent::Quiet;
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        run_agent_step(&step, &fixture.journal, &quiet, &cancel),
    )
    .await??;
    assert!(
        matches!(outcome.status, AgentStatus::Interrupted { .. }),
        "{:?}",
        outcome.status
    );
    Ok(())
}

/// The local model's habit that made `examples/review.yml` run to its timeout: after the
/// verdict it kept writing the same file. The verdict now ends the step after one more call.
#[tokio::test]
async fn a_recorded_verdict_ends_the_step_after_one_more_model_call() -> TestResult {
    let fixture = Fixture::new()?;
    let server = ScriptedServer::start(Script::from_fn(|body| {
        let results = tool_results(body).len();
        match results {
            0 => Reply::tool_call("write_file", json!({"path": "out/s.md", "content": "ok"})),
            1 => Reply::tool_call("verdict", json!({"verdict": "approve", "reason": "fine"})),
            // From here on the model would loop forever.
            _ => Reply::tool_call("write_file", json!({"path": "out/s.md", "content": "ok"})),
        }
    }))
    .await?;
    let mut step = fixture.step(&server, &["write_file"]);
    step.verdicts = vec!["approve".into(), "reject".into()];
    let (outcome, _) = fixture.run(&step).await?;
    assert_eq!(outcome.status, AgentStatus::Succeeded);
    assert_eq!(outcome.verdict.as_deref(), Some("approve"));
    assert_eq!(
        server.request_count(),
        3,
        "one model call after the verdict"
    );
    // The call made after the verdict was not run.
    let writes = outcome
        .tool_calls
        .iter()
        .filter(|c| c.name == "write_file" && !c.is_error)
        .count();
    assert_eq!(writes, 1);
    Ok(())
}

#[tokio::test]
async fn a_model_stuck_repeating_a_call_fails_the_step_with_a_clear_cause() -> TestResult {
    let fixture = Fixture::new()?;
    let server = ScriptedServer::start(Script::from_fn(|_| {
        Reply::tool_call("read_file", json!({"path": "in/a.txt"}))
    }))
    .await?;
    let mut step = fixture.step(&server, &["read_file"]);
    step.max_turns = None;
    let (outcome, _) = fixture.run(&step).await?;
    match &outcome.status {
        AgentStatus::Failed { error, cause } => {
            assert_eq!(*cause, treadle_session::event::FailureCause::Repeated);
            assert!(
                error.contains("stuck in a loop") && error.contains("read_file"),
                "{error}"
            );
        }
        other => panic!("expected a loop failure, got {other:?}"),
    }
    // The default limit lets three copies pass, nudges the fourth and stops at the fifth:
    // far below the default max_turns.
    assert_eq!(server.request_count(), 5);
    Ok(())
}

#[tokio::test]
async fn an_agent_without_max_turns_gets_a_step_sized_limit() -> TestResult {
    let fixture = Fixture::new()?;
    // Always a different call, so loop detection never fires: only max_turns stops it.
    let server = ScriptedServer::start(Script::from_fn(|body| {
        let n = tool_results(body).len();
        Reply::tool_call("list_dir", json!({"path": format!("in/{n}")}))
    }))
    .await?;
    let mut step = fixture.step(&server, &["list_dir"]);
    step.max_turns = None;
    assert_eq!(step.model_call_limit(), treadle::agent::DEFAULT_MAX_TURNS);
    let (outcome, _) = fixture.run(&step).await?;
    assert!(
        matches!(&outcome.status, AgentStatus::Failed { error, .. } if error.contains("limit of 30 steps")),
        "{:?}",
        outcome.status
    );
    assert_eq!(server.request_count(), 30);
    step.max_turns = Some(0);
    assert_eq!(step.model_call_limit(), u32::MAX, "0 means no limit");
    Ok(())
}
