//! Rule 12, hook-fail-closed: over random batches whose guard is a real command hook
//! (`treadle_hook::CommandHook`) behaving at random per call (allow, deny by exit 2, deny by
//! JSON, crash, hang past its timeout, garbage output, SIGKILL of itself), no call whose
//! guard did not answer allow is executed; every other call is denied with a reason that
//! says why (naming the hook when it failed), journaled as the call's result; and the
//! command hook sits in rule 5's order: hooks registered before it begin before it and
//! finish after it, hooks after it begin only for the calls it allowed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use serde_json::json;
use treadle_event::{Block, EventKind};
use treadle_hook::{
    CommandHook, CommandSpec, Decision, Hook, HookCall, HookEvent, Operation, OperationOutcome,
    Payload, Recorder, Reporter,
};
use treadle_proofs::*;
use treadle_scripted::{Reply, Script, ToolCall};
use treadle_session::{FnTool, ToolError};

/// The guard: behaves as the call's path says (`allow-3`, `hang-0`, ...).
const GUARD: &str = r#"input=$(cat)
case "$input" in
  *'"allow-'*) exit 0 ;;
  *'"deny-'*) echo 'refused by policy' >&2; exit 2 ;;
  *'"json-'*) echo '{"decision": "deny", "reason": "json says no"}' ;;
  *'"crash-'*) exit 1 ;;
  *'"hang-'*) sleep 10 ;;
  *'"garbage-'*) echo '{"decision": ' ;;
  *'"kill-'*) kill -9 $$ ;;
esac
"#;

/// Each behaviour, and what the denial the model reads must say (`None`: allowed).
const BEHAVIOURS: [(&str, Option<&str>); 7] = [
    ("allow", None),
    ("deny", Some("refused by policy")),
    ("json", Some("json says no")),
    ("crash", Some("exited with code 1")),
    ("hang", Some("timeout")),
    ("garbage", Some("invalid JSON")),
    ("kill", Some("SIGKILL")),
];

const HOOK: &str = "guard";

/// One line of the shared tape: who saw what of which call.
type Tape = Arc<Mutex<Vec<(String, String)>>>;

/// A hook that writes `NAME:op.phase` lines for tool calls to the tape, by call id.
struct Taped {
    name: &'static str,
    tape: Tape,
}

#[async_trait::async_trait]
impl Hook for Taped {
    fn name(&self) -> &str {
        self.name
    }

    async fn begin(&self, call: &HookCall) -> Decision {
        self.note(call, "begin");
        Decision::Allow
    }

    async fn finish(&self, call: &HookCall, _: &OperationOutcome, _: Option<&serde_json::Value>) {
        self.note(call, "finish");
    }
}

impl Taped {
    fn note(&self, call: &HookCall, phase: &str) {
        if let Payload::ToolCall { call_id, .. } = &call.payload {
            let line = format!("{}:{}.{phase}", self.name, call.op);
            self.tape.lock().unwrap().push((call_id.clone(), line));
        }
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WriteArgs {
    path: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_call_runs_unless_its_command_guard_allowed_it() {
    for seed in 0..SCHEDULES / 2 {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let calls = rng.random_range(1..=4usize);
        let chosen: Vec<usize> = (0..calls)
            .map(|_| rng.random_range(0..BEHAVIOURS.len()))
            .collect();
        let paths: Vec<String> = chosen
            .iter()
            .enumerate()
            .map(|(i, &b)| format!("{}-{i}", BEHAVIOURS[b].0))
            .collect();
        let batch: Vec<ToolCall> = paths
            .iter()
            .map(|p| ToolCall::new("write", json!({ "path": p })))
            .collect();
        let script = Script::new([Reply::tool_calls(batch), Reply::text("done")]);
        let world = World::start(script, seed, Duration::from_micros(300)).await;

        let ran: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let ran_in_tool = ran.clone();
        let write = FnTool::new("write", "Writes a file.", move |args: WriteArgs| {
            let ran = ran_in_tool.clone();
            async move {
                ran.lock().unwrap().insert(args.path.clone());
                Ok::<_, ToolError>(format!("wrote {}", args.path))
            }
        })
        // Idempotent: no effect intents in the step, so its hooks are rule 5's skeleton.
        .effect(treadle_session::Effect::Idempotent);
        let tape: Tape = Arc::default();
        let on_tape = tape.clone();
        let reporter: Reporter = Arc::new(move |report| {
            if let Some(call) = report.call_id {
                on_tape
                    .lock()
                    .unwrap()
                    .push((call, "command:ran".to_owned()));
            }
        });
        let guard = CommandHook::new(
            CommandSpec::new(HookEvent::PreToolUse, GUARD).timeout(Duration::from_millis(300)),
        )
        .named(HOOK)
        .with_reporter(reporter);
        let recorder = Recorder::new();
        let session = world
            .session()
            .tool(write)
            .hook(recorder.clone())
            .hook(Taped {
                name: "outer",
                tape: tape.clone(),
            })
            .hook(guard)
            .hook(Taped {
                name: "inner",
                tape: tape.clone(),
            })
            .start()
            .await
            .expect("start");
        let report = tokio::time::timeout(PATIENCE, session.turn("go").run())
            .await
            .expect("the turn hung")
            .expect("run");
        assert!(report.is_done(), "seed {seed}: {report:?}");

        // Only the calls the guard allowed ran.
        let allowed: BTreeSet<String> = paths
            .iter()
            .zip(&chosen)
            .filter(|(_, b)| BEHAVIOURS[**b].1.is_none())
            .map(|(p, _)| p.clone())
            .collect();
        assert_eq!(*ran.lock().unwrap(), allowed, "seed {seed}: {paths:?}");

        // Every other call's journaled result is a denial that says why.
        let events = session
            .journal()
            .read(session.id(), 0, None)
            .expect("journal");
        let results: Vec<(String, String, bool)> = events
            .iter()
            .filter_map(|(_, e)| match &e.kind {
                EventKind::StepDone { messages, .. } => Some(messages.to_vec()),
                _ => None,
            })
            .flatten()
            .flat_map(|m| m.content)
            .filter_map(|b| match b {
                Block::ToolResult {
                    call_id,
                    content,
                    is_error,
                } => Some((call_id, content, is_error)),
                _ => None,
            })
            .collect();
        assert_eq!(results.len(), calls, "seed {seed}: {results:?}");
        let tape = tape.lock().unwrap().clone();
        let call_ids: Vec<String> = {
            let mut ids: Vec<String> = Vec::new();
            for (id, _) in &tape {
                if !ids.contains(id) {
                    ids.push(id.clone());
                }
            }
            ids
        };
        assert_eq!(call_ids.len(), calls, "seed {seed}: {tape:?}");
        // Results come back in call order (rule 6).
        for ((path, behaviour), (call_id, content, is_error)) in
            paths.iter().zip(&chosen).zip(&results)
        {
            let (name, why) = BEHAVIOURS[*behaviour];
            match why {
                None => assert!(
                    !is_error && content == &format!("wrote {path}"),
                    "seed {seed}: {content}"
                ),
                Some(why) => {
                    assert!(*is_error, "seed {seed}: {name}: {content}");
                    assert!(
                        content.starts_with("denied: "),
                        "seed {seed}: {name}: {content}"
                    );
                    assert!(content.contains(why), "seed {seed}: {name}: {content}");
                    if !matches!(name, "deny" | "json") {
                        assert!(
                            content.contains(&format!("hook {HOOK} failed")),
                            "seed {seed}: {content}"
                        );
                    }
                }
            }
            // Rule 5 with the command hook in it: outer begins, the command runs, inner
            // begins and finishes only for an allowed call, outer finishes last.
            let lines: Vec<&str> = tape
                .iter()
                .filter(|(id, _)| id == call_id)
                .map(|(_, l)| l.as_str())
                .collect();
            let expected: &[&str] = if why.is_none() {
                &[
                    "outer:tool_call.begin",
                    "command:ran",
                    "inner:tool_call.begin",
                    "inner:tool_call.finish",
                    "outer:tool_call.finish",
                ]
            } else {
                &[
                    "outer:tool_call.begin",
                    "command:ran",
                    "outer:tool_call.finish",
                ]
            };
            assert_eq!(lines, expected, "seed {seed}: {name}");
        }

        // The step's skeleton is rule 5's, with command-hooked guards in it.
        let labels: Vec<String> = recorder
            .records()
            .iter()
            .filter(|r| r.step.is_some() && r.op != Operation::ToolExecution)
            .filter(|r| r.label() != "tool_call.finish")
            .map(|r| r.label())
            .collect();
        let mut first = vec!["step.begin", "inference.begin", "inference.finish"];
        first.extend(std::iter::repeat_n("tool_call.begin", calls));
        first.extend([
            "journal_append.begin",
            "journal_append.finish",
            "step.finish",
        ]);
        assert_eq!(
            labels.get(..first.len()),
            Some(&first.iter().map(|s| s.to_string()).collect::<Vec<_>>()[..]),
            "seed {seed}: {labels:?}"
        );
        session.shutdown().await;
    }
}
