//! `CommandHook` with real hook processes (`sh -c`): every way a guard can answer or fail,
//! the envelope it reads, Claude Code's own output fields, and that unmatched calls start
//! no process.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use treadle_event::{LoopId, SessionId};
use treadle_hook::{
    Authorization, CommandHook, CommandSpec, HookCall, HookContext, HookEffect, HookEvent,
    HookReport, HookRunner, Matcher, OnHookError, OperationOutcome, Payload, Reporter,
};

fn tool_call(name: &str, arguments: Value) -> HookCall {
    HookCall::new(
        SessionId::new(),
        LoopId::new(),
        Payload::ToolCall {
            call_id: "c1".into(),
            name: name.into(),
            arguments,
        },
    )
}

fn guard(command: &str) -> CommandSpec {
    CommandSpec::new(HookEvent::PreToolUse, command).timeout(Duration::from_secs(10))
}

fn reports() -> (Reporter, Arc<Mutex<Vec<HookReport>>>) {
    let seen: Arc<Mutex<Vec<HookReport>>> = Arc::default();
    let sink = seen.clone();
    let reporter: Reporter = Arc::new(move |r| sink.lock().unwrap().push(r));
    (reporter, seen)
}

async fn decide(spec: CommandSpec, call: HookCall) -> Result<Authorization, treadle_hook::Denied> {
    let hook = CommandHook::new(spec).named("h");
    HookRunner::new(vec![Arc::new(hook)]).authorize(call).await
}

async fn finish(auth: Authorization) -> HookCall {
    let (active, call) = match auth {
        Authorization::Allowed(active) => {
            let call = active.call().clone();
            (active, call)
        }
        Authorization::Ask { active, .. } => {
            let call = active.call().clone();
            (active, call)
        }
        _ => panic!("an answer this test does not know"),
    };
    active.finish(OperationOutcome::Completed, None).await;
    call
}

#[tokio::test]
async fn exit_2_blocks_with_stderr_as_the_reason() {
    let denied = decide(
        guard("echo 'no pushing here' >&2; exit 2"),
        tool_call("run_shell", json!({})),
    )
    .await
    .unwrap_err();
    assert_eq!(denied.hook, "h");
    assert_eq!(denied.reason, "no pushing here");
}

#[tokio::test]
async fn a_json_decision_blocks_and_allows() {
    let denied = decide(
        guard(r#"echo '{"decision":"deny","reason":"not on fridays"}'"#),
        tool_call("run_shell", json!({})),
    )
    .await
    .unwrap_err();
    assert_eq!(denied.reason, "not on fridays");
    let allowed = decide(
        guard(r#"echo '{"decision":"allow"}'"#),
        tool_call("run_shell", json!({})),
    )
    .await
    .unwrap();
    assert!(matches!(allowed, Authorization::Allowed(_)));
    finish(allowed).await;
}

#[tokio::test]
async fn every_failure_of_a_guard_denies_and_names_the_hook() {
    let cases = [
        ("exit 1", "exited with code 1"),
        ("false", "exited with code 1"),
        ("exit 70", "exited with code 70"),
        ("no-such-command-anywhere --flag", "exited with code 127"),
        ("echo '{\"decision\": ' ; exit 0", "invalid JSON"),
        ("echo '{\"decision\":\"perhaps\"}'", "must be \"allow\""),
        ("kill -9 $$", "SIGKILL"),
        ("sleep 30", "timeout"),
    ];
    for (command, why) in cases {
        let spec = guard(command).timeout(Duration::from_millis(500));
        let started = Instant::now();
        let denied = decide(spec, tool_call("run_shell", json!({})))
            .await
            .expect_err(command);
        assert!(
            denied.reason.contains("hook h failed"),
            "{command}: {}",
            denied.reason
        );
        assert!(denied.reason.contains(why), "{command}: {}", denied.reason);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{command} took {:?}",
            started.elapsed()
        );
    }
}

#[tokio::test]
async fn a_command_that_cannot_start_denies() {
    let spec = guard("true");
    let context = HookContext {
        cwd: Some("/no/such/directory/for/hooks".into()),
        ..HookContext::default()
    };
    let hook = CommandHook::new(spec).named("h").with_context(context);
    let denied = HookRunner::new(vec![Arc::new(hook)])
        .begin(tool_call("run_shell", json!({})))
        .await
        .unwrap_err();
    assert!(
        denied.reason.contains("could not be started"),
        "{}",
        denied.reason
    );
}

#[tokio::test]
async fn on_hook_error_allow_lets_the_call_through_and_reports_it() {
    let (reporter, seen) = reports();
    let hook = CommandHook::new(guard("exit 3").on_error(OnHookError::Allow))
        .named("advisor")
        .with_reporter(reporter);
    let active = HookRunner::new(vec![Arc::new(hook)])
        .begin(tool_call("run_shell", json!({})))
        .await
        .expect("allowed by the opt-out");
    active.finish(OperationOutcome::Completed, None).await;
    let seen = seen.lock().unwrap();
    assert!(
        matches!(&seen[0].effect, HookEffect::Failed { denied: false, failure } if failure.contains("code 3")),
        "{:?}",
        seen[0].effect
    );
}

#[tokio::test]
async fn updated_input_rewrites_the_call_for_later_hooks_and_the_caller() {
    let rewrite = guard(r#"echo '{"updated_input":{"command":"git status"}}'"#);
    // The second guard sees the rewritten input, not the model's.
    let second = guard(r#"grep -q '"git status"' || { echo 'saw the old input' >&2; exit 2; }"#);
    let runner = HookRunner::new(vec![
        Arc::new(CommandHook::new(rewrite)),
        Arc::new(CommandHook::new(second)),
    ]);
    let auth = runner
        .authorize(tool_call("run_shell", json!({"command": "git push"})))
        .await
        .unwrap();
    let call = finish(auth).await;
    match call.payload {
        Payload::ToolCall { arguments, .. } => {
            assert_eq!(arguments, json!({"command": "git status"}))
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn ask_is_handed_back_with_the_question() {
    let auth = decide(
        guard(r#"echo '{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"deploy to prod?"}}'"#),
        tool_call("run_shell", json!({})),
    )
    .await
    .unwrap();
    match &auth {
        Authorization::Ask { question, hook, .. } => {
            assert_eq!(question, "deploy to prod?");
            assert_eq!(hook, "h");
        }
        other => panic!("{other:?}"),
    }
    finish(auth).await;
}

#[tokio::test]
async fn the_envelope_carries_claude_codes_fields_and_treadles() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("envelope.json");
    let spec = guard(&format!("cat > {}", out.display()));
    let context = HookContext {
        run: Some("run-1".into()),
        job: Some("build".into()),
        step: Some("fix".into()),
        step_dir: Some(dir.path().to_path_buf()),
        cwd: Some(dir.path().to_path_buf()),
    };
    let hook = CommandHook::new(spec).with_context(context);
    let call = tool_call("run_shell", json!({"command": "ls"}));
    let session = call.session;
    let active = HookRunner::new(vec![Arc::new(hook)])
        .begin(call)
        .await
        .unwrap();
    active.finish(OperationOutcome::Completed, None).await;
    let env: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(env["hook_event_name"], "PreToolUse");
    assert_eq!(env["event"], "pre_tool_use");
    assert_eq!(env["tool_name"], "run_shell");
    assert_eq!(env["tool_input"]["command"], "ls");
    assert_eq!(env["tool_use_id"], "c1");
    assert_eq!(env["session_id"], session.to_string());
    assert_eq!(
        (
            env["run"].as_str(),
            env["job"].as_str(),
            env["step"].as_str()
        ),
        (Some("run-1"), Some("build"), Some("fix"))
    );
    assert_eq!(env["step_dir"], dir.path().display().to_string());
}

#[tokio::test]
async fn post_tool_use_gets_the_result_and_cannot_change_the_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("post.json");
    let spec = CommandSpec::new(
        HookEvent::PostToolUse,
        format!("cat > {}; echo 'too late' >&2; exit 2", out.display()),
    );
    let (reporter, seen) = reports();
    let hook = CommandHook::new(spec).with_reporter(reporter);
    let runner = HookRunner::new(vec![Arc::new(hook)]);
    let exec = HookCall::new(
        SessionId::new(),
        LoopId::new(),
        Payload::ToolExecution {
            call_id: "c9".into(),
            name: "write_file".into(),
            arguments: json!({"path": "a.rs"}),
        },
    );
    let active = runner
        .begin(exec)
        .await
        .expect("an execution is not a guard");
    active
        .finish(OperationOutcome::Completed, Some(json!("wrote a.rs")))
        .await;
    let env: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(env["hook_event_name"], "PostToolUse");
    assert_eq!(env["tool_response"], "wrote a.rs");
    assert_eq!(
        seen.lock().unwrap()[0].effect,
        HookEffect::Objected("too late".into())
    );
    // It cannot block, so it is never said to have.
    let said = seen.lock().unwrap()[0].effect.to_string();
    assert!(!said.starts_with("blocked"), "{said}");
}

#[tokio::test]
async fn a_call_the_matcher_does_not_match_starts_no_process() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("ran");
    let spec =
        guard(&format!("touch {}", mark.display())).matching(Matcher::new("run_shell").unwrap());
    let active = HookRunner::new(vec![Arc::new(CommandHook::new(spec))])
        .begin(tool_call("read_file", json!({})))
        .await
        .unwrap();
    active.finish(OperationOutcome::Completed, None).await;
    assert!(!mark.exists(), "the hook ran for a tool it does not match");
}

#[tokio::test]
async fn a_hook_that_leaves_a_background_process_does_not_hold_the_call() {
    let started = Instant::now();
    let auth = decide(
        guard("sleep 20 & exit 0"),
        tool_call("run_shell", json!({})),
    )
    .await
    .unwrap();
    finish(auth).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Whether `pid` still runs (a zombie has ended).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

#[tokio::test]
async fn a_deny_with_a_background_child_holding_stdout_denies_and_the_child_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child");
    let command = format!(
        r#"echo '{{"decision":"deny","reason":"not with a child"}}'; sleep 30 & echo $! > {}"#,
        pidfile.display()
    );
    let started = Instant::now();
    let denied = decide(guard(&command), tool_call("run_shell", json!({})))
        .await
        .expect_err("the deny was read as going on");
    assert_eq!(denied.reason, "not with a child");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let child = std::fs::read_to_string(&pidfile).unwrap();
    // Its output closes as it dies, a moment before it is a zombie.
    let dying = Instant::now();
    while running(child.trim()) {
        assert!(
            dying.elapsed() < Duration::from_secs(2),
            "the hook's background child {child} outlived it"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
async fn output_held_open_past_the_timeout_by_an_escaped_child_denies() {
    // `setsid` takes the child out of the hook's process group, beyond the plain
    // launcher's reach: its output stays open, so the answer may be incomplete.
    // The hook waits until its child has a session of its own (field 6 of its stat).
    let spec = guard(
        r#"echo '{"decision":"allow"}'; setsid sleep 3 & p=$!
        until [ "$(cut -d' ' -f6 /proc/$p/stat)" = "$p" ]; do :; done"#,
    )
    .timeout(Duration::from_millis(500));
    let started = Instant::now();
    let denied = decide(spec, tool_call("run_shell", json!({})))
        .await
        .expect_err("an answer read before the output ended was taken");
    assert!(
        denied.reason.contains("kept its output open"),
        "{}",
        denied.reason
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_deny_after_a_byte_order_mark_denies() {
    let denied = decide(
        guard(r#"printf '\357\273\277{"decision":"deny","reason":"bom"}\n'"#),
        tool_call("run_shell", json!({})),
    )
    .await
    .expect_err("a BOM-prefixed deny was read as text");
    assert_eq!(denied.reason, "bom");
}
