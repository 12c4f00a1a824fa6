//! The wire protocol of command hooks, Claude Code's: the JSON envelope a hook reads on
//! stdin, and how its exit code and stdout become an [`Answer`] (or a [`Failure`]).
//!
//! Both vocabularies are read: treadle's own (`decision`, `reason`, `updated_input`,
//! `additional_context`) and Claude Code's (`decision: approve|block`,
//! `hookSpecificOutput.permissionDecision`, `permissionDecisionReason`, `updatedInput`,
//! `additionalContext`, `continue: false` with `stopReason`). Where both are given, Claude
//! Code's `hookSpecificOutput` wins, as it does there.
//!
//! Claude Code's file tools name their file `file_path`, where treadle's (and most tools)
//! say `path`: a tool input with a string `path` and no `file_path` is sent with
//! `file_path` beside it, and an `updated_input` that names the file `file_path` for such a
//! tool has it put back as `path` ([`own_names`]), so a Claude Code hook reading or rewriting
//! `.tool_input.file_path` works unchanged.

use std::fmt;

use serde_json::{Map, Value, json};

use crate::call::{HookCall, Payload};
use crate::command_process::{End, Ran};
use crate::command_spec::HookEvent;

/// Where a hook runs, for its envelope: the names of the run, job and step, and the
/// directories. All optional: a library session has none of the pipeline's names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookContext {
    pub run: Option<String>,
    pub job: Option<String>,
    pub step: Option<String>,
    /// The step directory (`step_dir` in the envelope).
    pub step_dir: Option<std::path::PathBuf>,
    /// The hook's working directory (`cwd`); the process's own when `None`.
    pub cwd: Option<std::path::PathBuf>,
}

/// What one hook command answered.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Answer {
    pub verdict: Verdict,
    pub reason: Option<String>,
    /// A pre-tool hook's new arguments (a JSON object).
    pub updated_input: Option<Value>,
    pub additional_context: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Verdict {
    /// No decision given: go on.
    #[default]
    Proceed,
    Allow,
    Deny,
    Ask,
}

/// Why a hook gave no answer.
#[derive(Debug)]
pub(crate) enum Failure {
    Exit(i32),
    Signal(i32),
    TimedOut(std::time::Duration),
    OutputOpen(std::time::Duration),
    NotStarted(std::io::Error),
    Garbage(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Exit(code) => write!(f, "it exited with code {code} (0 goes on, 2 blocks)"),
            Failure::Signal(9) => f.write_str("it was killed (signal 9, SIGKILL)"),
            Failure::Signal(signal) => write!(f, "it was killed by signal {signal}"),
            Failure::TimedOut(limit) => {
                write!(
                    f,
                    "it did not answer within its timeout of {limit:?} and was killed"
                )
            }
            Failure::OutputOpen(limit) => write!(
                f,
                "it exited, but a process it left behind kept its output open past its \
                 timeout of {limit:?}, so its answer may be incomplete"
            ),
            Failure::NotStarted(error) => write!(f, "it could not be started: {error}"),
            Failure::Garbage(why) => write!(f, "its output is not a decision: {why}"),
        }
    }
}

/// The envelope for `event` about `call` (and, after a tool ran, its `output`).
pub(crate) fn envelope(
    event: HookEvent,
    call: &HookCall,
    output: Option<&Value>,
    context: &HookContext,
) -> Value {
    let mut env = json!({
        "hook_event_name": event.claude_name(),
        "event": event.name(),
        "session_id": call.session.to_string(),
        "loop_id": call.loop_id.to_string(),
        "turn_id": call.turn.map(|t| t.to_string()),
        "step_id": call.step.map(|s| s.to_string()),
        "run": context.run,
        "job": context.job,
        "step": context.step,
        "step_dir": context.step_dir,
        "cwd": context.cwd,
        "permission_mode": "default",
    });
    let Value::Object(map) = &mut env else {
        return env;
    };
    match &call.payload {
        Payload::ToolCall {
            call_id,
            name,
            arguments,
        }
        | Payload::ToolExecution {
            call_id,
            name,
            arguments,
        } => {
            map.insert("tool_name".into(), json!(name));
            map.insert("tool_input".into(), claude_names(arguments));
            map.insert("tool_use_id".into(), json!(call_id));
            if event == HookEvent::PostToolUse {
                map.insert(
                    "tool_response".into(),
                    output.cloned().unwrap_or(Value::Null),
                );
            }
        }
        Payload::Turn { input, .. } => {
            map.insert("prompt".into(), json!(input));
            if event == HookEvent::Stop {
                map.insert("stop_hook_active".into(), json!(false));
                map.insert(
                    "last_message".into(),
                    output.cloned().unwrap_or(Value::Null),
                );
            }
        }
        Payload::Compaction { .. } => {
            map.insert("trigger".into(), json!("auto"));
        }
        _ => {}
    }
    env
}

/// Whether a tool's arguments name their file `path` (a string) and not `file_path`.
fn names_path(arguments: &Value) -> bool {
    arguments.get("path").is_some_and(Value::is_string) && arguments.get("file_path").is_none()
}

/// `arguments` as a Claude Code hook expects them: `file_path` beside a file's `path`.
fn claude_names(arguments: &Value) -> Value {
    let mut input = arguments.clone();
    if names_path(arguments)
        && let Value::Object(map) = &mut input
        && let Some(path) = arguments.get("path")
    {
        map.insert("file_path".into(), path.clone());
    }
    input
}

/// `answer` with a rewrite of `call`'s arguments in the tool's own names: a `file_path`
/// given for a tool whose file is `path` becomes its `path` (the envelope sent both; a
/// Claude Code hook changes the one it knows).
pub(crate) fn own_names(mut answer: Answer, call: &HookCall) -> Answer {
    let original = match &call.payload {
        Payload::ToolCall { arguments, .. } => arguments,
        _ => return answer,
    };
    if names_path(original)
        && let Some(Value::Object(updated)) = &mut answer.updated_input
        && let Some(file) = updated.remove("file_path")
    {
        let path_unchanged = updated.get("path") == original.get("path");
        if path_unchanged || !updated.contains_key("path") {
            updated.insert("path".into(), file);
        }
    }
    answer
}

/// Reads a hook's end and output: exit 0 goes on (with the decision its stdout may hold),
/// exit 2 blocks with stderr as the reason, anything else is a [`Failure`].
pub(crate) fn answer(ran: &Ran) -> Result<Answer, Failure> {
    match &ran.end {
        End::Exited(0) => parse_stdout(&ran.stdout),
        End::Exited(2) => Ok(Answer {
            verdict: Verdict::Deny,
            reason: Some(reason_or(&ran.stderr, "blocked by a hook (exit code 2)")),
            ..Answer::default()
        }),
        End::Exited(code) => Err(Failure::Exit(*code)),
        End::Signaled(signal) => Err(Failure::Signal(*signal)),
        End::TimedOut(limit) => Err(Failure::TimedOut(*limit)),
        End::OutputOpen(limit) => Err(Failure::OutputOpen(*limit)),
        End::NotStarted(error) => Err(Failure::NotStarted(std::io::Error::new(
            error.kind(),
            error.to_string(),
        ))),
    }
}

fn reason_or(text: &str, fallback: &str) -> String {
    let text = text.trim();
    if text.is_empty() {
        fallback.to_owned()
    } else {
        text.to_owned()
    }
}

/// Stdout of a hook that exited 0. Text that does not start with `{` is output for the
/// transcript, not a decision (a Claude Code hook may print progress); text that does
/// must be a whole JSON decision object, or the hook failed. A UTF-8 byte order mark
/// before it (PowerShell's and some editors' habit) is not text: it is skipped.
fn parse_stdout(stdout: &str) -> Result<Answer, Failure> {
    let text = stdout.trim_start_matches('\u{feff}').trim();
    if !text.starts_with('{') {
        // A decision after other output would be ignored by a reader that only looks at
        // the start: fail closed on it rather than let a deny pass as progress text.
        if text.lines().any(|line| line.trim_start().starts_with('{')) {
            return Err(Failure::Garbage(
                "a JSON object follows other output; a decision must be the whole stdout \
                 (print progress on stderr)"
                    .to_owned(),
            ));
        }
        return Ok(Answer::default());
    }
    let object: Map<String, Value> =
        serde_json::from_str(text).map_err(|e| Failure::Garbage(format!("invalid JSON ({e})")))?;
    let specific = match object.get("hookSpecificOutput") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(other) => {
            return Err(Failure::Garbage(format!(
                "hookSpecificOutput must be an object, got {other}"
            )));
        }
    };
    let mut answer = Answer::default();
    if let Some(decision) = object.get("decision") {
        answer.verdict = verdict(decision, "decision")?;
    }
    if let Some(decision) = specific.get("permissionDecision") {
        answer.verdict = verdict(decision, "permissionDecision")?;
    }
    if object.get("continue") == Some(&Value::Bool(false)) {
        answer.verdict = Verdict::Deny;
        answer.reason = text_field(&object, "stopReason")?;
    }
    for (map, key) in [(&object, "reason"), (&specific, "permissionDecisionReason")] {
        if let Some(reason) = text_field(map, key)? {
            answer.reason = Some(reason);
        }
    }
    for (map, key) in [(&object, "updated_input"), (&specific, "updatedInput")] {
        match map.get(key) {
            None | Some(Value::Null) => {}
            Some(input @ Value::Object(_)) => answer.updated_input = Some(input.clone()),
            Some(other) => {
                return Err(Failure::Garbage(format!(
                    "{key} must be an object of arguments, got {other}"
                )));
            }
        }
    }
    for (map, key) in [
        (&object, "additional_context"),
        (&specific, "additionalContext"),
    ] {
        if let Some(context) = text_field(map, key)? {
            answer.additional_context = Some(context);
        }
    }
    Ok(answer)
}

fn verdict(value: &Value, key: &str) -> Result<Verdict, Failure> {
    let word = match value {
        // Claude Code reads an absent or empty decision as "no decision".
        Value::Null => return Ok(Verdict::Proceed),
        Value::String(word) => word.as_str(),
        _ => "",
    };
    match word {
        "allow" | "approve" => Ok(Verdict::Allow),
        "deny" | "block" => Ok(Verdict::Deny),
        "ask" => Ok(Verdict::Ask),
        "" if value.is_string() => Ok(Verdict::Proceed),
        _ => Err(Failure::Garbage(format!(
            "{key} must be \"allow\", \"deny\" or \"ask\", got {value}"
        ))),
    }
}

fn text_field(map: &Map<String, Value>, key: &str) -> Result<Option<String>, Failure> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(Failure::Garbage(format!(
            "{key} must be a string, got {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32, stdout: &str, stderr: &str) -> Ran {
        Ran {
            end: End::Exited(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
        }
    }

    #[test]
    fn exit_codes() {
        assert_eq!(
            answer(&exited(0, "", "")).unwrap().verdict,
            Verdict::Proceed
        );
        assert_eq!(
            answer(&exited(0, "checked\n", "")).unwrap().verdict,
            Verdict::Proceed
        );
        let blocked = answer(&exited(2, "", "no pushing\n")).unwrap();
        assert_eq!(blocked.verdict, Verdict::Deny);
        assert_eq!(blocked.reason.as_deref(), Some("no pushing"));
        assert!(matches!(answer(&exited(1, "", "")), Err(Failure::Exit(1))));
        assert!(matches!(
            answer(&exited(127, "", "")),
            Err(Failure::Exit(127))
        ));
    }

    #[test]
    fn both_vocabularies() {
        let ours = answer(&exited(
            0,
            r#"{"decision":"deny","reason":"not today","additional_context":"see policy"}"#,
            "",
        ))
        .unwrap();
        assert_eq!(ours.verdict, Verdict::Deny);
        assert_eq!(ours.reason.as_deref(), Some("not today"));
        assert_eq!(ours.additional_context.as_deref(), Some("see policy"));
        let claude = answer(&exited(
            0,
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"sure?","updatedInput":{"command":"ls"}}}"#,
            "",
        ))
        .unwrap();
        assert_eq!(claude.verdict, Verdict::Ask);
        assert_eq!(claude.reason.as_deref(), Some("sure?"));
        assert_eq!(claude.updated_input, Some(json!({"command": "ls"})));
        let legacy = answer(&exited(0, r#"{"decision":"block","reason":"no"}"#, "")).unwrap();
        assert_eq!(legacy.verdict, Verdict::Deny);
        let stop = answer(&exited(0, r#"{"continue":false,"stopReason":"halt"}"#, "")).unwrap();
        assert_eq!(
            (stop.verdict, stop.reason.as_deref()),
            (Verdict::Deny, Some("halt"))
        );
    }

    #[test]
    fn a_byte_order_mark_before_a_decision_is_skipped() {
        let denied = answer(&exited(0, "\u{feff}{\"decision\":\"deny\"}\n", "")).unwrap();
        assert_eq!(denied.verdict, Verdict::Deny);
        assert_eq!(
            answer(&exited(0, "\u{feff}checked\n", "")).unwrap().verdict,
            Verdict::Proceed
        );
    }

    #[test]
    fn garbage_is_a_failure() {
        for bad in [
            "{not json",
            r#"{"decision":"maybe"}"#,
            r#"{"decision":true}"#,
            r#"{"updated_input":"ls"}"#,
            r#"{"hookSpecificOutput":[]}"#,
            r#"{"reason":7}"#,
            "checking...\n{\"decision\":\"deny\"}",
        ] {
            assert!(
                matches!(answer(&exited(0, bad, "")), Err(Failure::Garbage(_))),
                "{bad}"
            );
        }
    }

    fn write_call(arguments: Value) -> HookCall {
        HookCall::new(
            treadle_event::SessionId::new(),
            treadle_event::LoopId::new(),
            Payload::ToolCall {
                call_id: "c1".into(),
                name: "write_file".into(),
                arguments,
            },
        )
    }

    #[test]
    fn a_file_is_file_path_to_a_claude_code_hook_and_path_to_the_tool() {
        let call = write_call(json!({"path": "a.txt", "content": "x"}));
        let env = envelope(HookEvent::PreToolUse, &call, None, &HookContext::default());
        assert_eq!(env["tool_input"]["file_path"], "a.txt");
        assert_eq!(env["tool_input"]["path"], "a.txt");
        // A Claude Code hook rewrites the field it knows, and sends the rest back.
        let claude = r#"{"hookSpecificOutput":{"permissionDecision":"allow","updatedInput":{"file_path":"b.txt","path":"a.txt","content":"y"}}}"#;
        let rewritten = own_names(answer(&exited(0, claude, "")).unwrap(), &call);
        assert_eq!(
            rewritten.updated_input,
            Some(json!({"path": "b.txt", "content": "y"}))
        );
        // Its own `path` changed: that one is the tool's.
        let ours = r#"{"updated_input":{"file_path":"b.txt","path":"c.txt","content":"y"}}"#;
        let rewritten = own_names(answer(&exited(0, ours, "")).unwrap(), &call);
        assert_eq!(
            rewritten.updated_input,
            Some(json!({"path": "c.txt", "content": "y"}))
        );
        // A tool whose input has its own `file_path` is sent and given back as it is.
        let call = write_call(json!({"path": "a", "file_path": "f"}));
        let env = envelope(HookEvent::PreToolUse, &call, None, &HookContext::default());
        assert_eq!(env["tool_input"], json!({"path": "a", "file_path": "f"}));
    }
}
