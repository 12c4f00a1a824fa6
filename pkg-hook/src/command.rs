//! [`CommandHook`]: a [`Hook`] that runs a command for each operation it matches and reads
//! its answer by Claude Code's hook protocol, failing closed where it guards.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use treadle_event::{LoopId, SessionId};

use crate::call::{HookCall, OperationOutcome, Payload};
use crate::command_process::{self, Launcher, PlainLauncher};
use crate::command_protocol::{self, Answer, Failure, HookContext, Verdict};
use crate::command_spec::{CommandSpec, HookEvent, OnHookError};
use crate::hook::{Decision, Hook};

/// Receives a [`HookReport`] after every run of a command hook (for a transcript or a log).
/// Called on the runtime's task: it should hand the report on, not block.
pub type Reporter = Arc<dyn Fn(HookReport) + Send + Sync>;

/// One run of a command hook: what it printed and what came of it.
#[derive(Debug, Clone, PartialEq)]
pub struct HookReport {
    /// The hook's [`Hook::name`].
    pub hook: String,
    pub event: HookEvent,
    /// The tool, for tool events.
    pub tool: Option<String>,
    /// The tool call's id, for tool events.
    pub call_id: Option<String>,
    pub stdout: String,
    pub stderr: String,
    /// The `additional_context` it gave (reported only: it does not reach the model yet).
    pub additional_context: Option<String>,
    pub effect: HookEffect,
    pub elapsed: Duration,
}

/// What came of one run of a command hook.
#[derive(Debug, Clone, PartialEq)]
pub enum HookEffect {
    /// It gave no decision (exit 0, no JSON): the operation goes on.
    Proceeded,
    /// It allowed the operation explicitly.
    Allowed,
    /// It rewrote a tool call's arguments (and allowed it).
    Rewrote(Value),
    /// It blocked the operation (a guard's answer).
    Denied(String),
    /// An observer (an event after the operation, such as `post_tool_use`) answered as a
    /// block would: it cannot block, the operation had run; its reason is reported.
    Objected(String),
    /// It asked for a person's approval.
    Asked(String),
    /// It gave no answer. `denied`: the guarded operation is denied for it; `false` for
    /// observers and for guards with `on_hook_error: allow`.
    Failed { failure: String, denied: bool },
}

impl fmt::Display for HookEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookEffect::Proceeded => f.write_str("went on"),
            HookEffect::Allowed => f.write_str("allowed"),
            HookEffect::Rewrote(arguments) => write!(f, "rewrote the arguments to {arguments}"),
            HookEffect::Denied(reason) => write!(f, "blocked: {reason}"),
            HookEffect::Objected(reason) => {
                write!(f, "objected (it cannot block: the call had run): {reason}")
            }
            HookEffect::Asked(question) => write!(f, "asked for approval: {question}"),
            HookEffect::Failed {
                failure,
                denied: true,
            } => write!(f, "FAILED ({failure}); denied (fail closed)"),
            HookEffect::Failed {
                failure,
                denied: false,
            } => write!(f, "FAILED ({failure}); went on"),
        }
    }
}

/// A hook that runs a command (`sh -c`) on one [`HookEvent`], with a JSON envelope on its
/// stdin, and reads its answer by Claude Code's protocol: exit 0 goes on, exit 2 blocks
/// with stderr as the reason, and a JSON object on stdout may decide (`allow`, `deny`,
/// `ask`), rewrite a tool call's arguments, or add context.
///
/// Unlike Claude Code, a guard hook (`pre_tool_use`, `user_prompt_submit`) that fails
/// (another exit code, its timeout, a signal, JSON that does not parse, a command that
/// cannot start) **denies**, naming itself and the failure, unless its spec says
/// [`OnHookError::Allow`]. Observer hooks that fail are reported and change nothing.
///
/// Operations a hook does not match start no process.
///
/// ```
/// use std::time::Duration;
/// use treadle_event::{LoopId, SessionId};
/// use treadle_hook::{CommandHook, CommandSpec, HookCall, HookEvent, HookRunner, Matcher, Payload};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let no_push = CommandSpec::new(
///     HookEvent::PreToolUse,
///     r#"grep -q 'git push' && { echo 'pushing is for people' >&2; exit 2; }; exit 0"#,
/// )
/// .matching(Matcher::new("run_shell").unwrap())
/// .timeout(Duration::from_secs(5));
/// let runner = HookRunner::new(vec![std::sync::Arc::new(CommandHook::new(no_push))]);
///
/// let push = Payload::ToolCall {
///     call_id: "c1".into(),
///     name: "run_shell".into(),
///     arguments: serde_json::json!({ "command": "git push origin main" }),
/// };
/// let denied = runner
///     .begin(HookCall::new(SessionId::new(), LoopId::new(), push))
///     .await
///     .unwrap_err();
/// assert_eq!(denied.reason, "pushing is for people");
/// # }
/// ```
pub struct CommandHook {
    spec: CommandSpec,
    name: String,
    context: HookContext,
    env: Vec<(String, String)>,
    launcher: Arc<dyn Launcher>,
    reporter: Option<Reporter>,
}

impl CommandHook {
    /// A hook running `spec`, started as it is ([`PlainLauncher`]), named after its event
    /// and command.
    pub fn new(spec: CommandSpec) -> Self {
        let first = spec.command.lines().next().unwrap_or_default();
        let mut short: String = first.chars().take(60).collect();
        if first.chars().count() > 60 || spec.command.trim_end().lines().count() > 1 {
            short.push('…');
        }
        Self {
            name: format!("{} `{short}`", spec.event),
            spec,
            context: HookContext::default(),
            env: Vec::new(),
            launcher: Arc::new(PlainLauncher),
            reporter: None,
        }
    }

    /// Names the hook (in denials, reports and logs).
    #[must_use]
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Where the hook runs: the names in its envelope and its working directory.
    #[must_use]
    pub fn with_context(mut self, context: HookContext) -> Self {
        self.context = context;
        self
    }

    /// Variables set in the hook's environment (after the launcher's own preparation is
    /// applied, the launcher may still remove them).
    #[must_use]
    pub fn with_env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }

    /// Starts the hook's commands through `launcher` (environment, confinement).
    #[must_use]
    pub fn with_launcher(mut self, launcher: Arc<dyn Launcher>) -> Self {
        self.launcher = launcher;
        self
    }

    /// Hands a [`HookReport`] of every run to `reporter`.
    #[must_use]
    pub fn with_reporter(mut self, reporter: Reporter) -> Self {
        self.reporter = Some(reporter);
        self
    }

    pub fn spec(&self) -> &CommandSpec {
        &self.spec
    }

    /// Runs a `session_start` or `session_end` hook (the owner of the session calls this,
    /// since a session's start and end are not operations of the runner). Does nothing for
    /// a hook on another event. Its answer changes nothing; a failure is reported.
    pub async fn notify(&self, event: HookEvent, session: SessionId, loop_id: LoopId) {
        if event != self.spec.event {
            return;
        }
        let call = HookCall::new(session, loop_id, Payload::Step { index: 0 });
        self.fire(&call, None).await;
    }

    /// Whether this hook runs for `call`'s begin.
    fn runs_at_begin(&self, call: &HookCall) -> bool {
        match (self.spec.event, &call.payload) {
            (HookEvent::PreToolUse, Payload::ToolCall { name, .. }) => {
                self.spec.matcher.matches(name)
            }
            (HookEvent::UserPromptSubmit, Payload::Turn { .. })
            | (HookEvent::PreCompact, Payload::Compaction { .. }) => true,
            _ => false,
        }
    }

    /// Whether this hook runs for `call`'s finish with `outcome`: after a tool ran (its
    /// failure is a result too), and after a turn that ended with an answer or an error.
    fn runs_at_finish(&self, call: &HookCall, outcome: &OperationOutcome) -> bool {
        let ended = matches!(
            outcome,
            OperationOutcome::Completed | OperationOutcome::Failed { .. }
        );
        match (self.spec.event, &call.payload) {
            (HookEvent::PostToolUse, Payload::ToolExecution { name, .. }) => {
                ended && self.spec.matcher.matches(name)
            }
            (HookEvent::Stop, Payload::Turn { .. }) => ended,
            _ => false,
        }
    }

    /// Runs the command about `call` and turns its answer into a decision.
    async fn fire(&self, call: &HookCall, output: Option<&Value>) -> Decision {
        let event = self.spec.event;
        let envelope = command_protocol::envelope(event, call, output, &self.context);
        let input = serde_json::to_vec(&envelope).unwrap_or_default();
        let cwd = self
            .context
            .cwd
            .clone()
            .unwrap_or_else(|| std::path::PathBuf::from("."));
        let started = Instant::now();
        let ran = command_process::run(
            self.launcher.as_ref(),
            &self.spec.command,
            &cwd,
            &self.env,
            input,
            self.spec.timeout,
        )
        .await;
        let answer = command_protocol::answer(&ran).map(|a| command_protocol::own_names(a, call));
        let additional_context = answer
            .as_ref()
            .ok()
            .and_then(|a| a.additional_context.clone());
        let (decision, effect) = self.decide(answer);
        if let Some(reporter) = &self.reporter {
            reporter(HookReport {
                hook: self.name.clone(),
                event,
                tool: call.payload.tool_name().map(str::to_owned),
                call_id: match &call.payload {
                    Payload::ToolCall { call_id, .. } | Payload::ToolExecution { call_id, .. } => {
                        Some(call_id.clone())
                    }
                    _ => None,
                },
                stdout: ran.stdout,
                stderr: ran.stderr,
                additional_context,
                effect,
                elapsed: started.elapsed(),
            });
        }
        decision
    }

    /// The decision for the runner, and what to report. Observers' decisions are returned
    /// too: the runner ignores them on operations that are not guards.
    fn decide(&self, answer: Result<Answer, Failure>) -> (Decision, HookEffect) {
        let guard = self.spec.event.is_guard();
        let answer = match answer {
            Ok(answer) => answer,
            Err(failure) => {
                let denied = guard && self.spec.on_error == OnHookError::Deny;
                let effect = HookEffect::Failed {
                    failure: failure.to_string(),
                    denied,
                };
                if !denied {
                    return (Decision::Allow, effect);
                }
                let reason = format!(
                    "hook {} failed: {failure}; denied because a guard hook that does not \
                     answer denies (on_hook_error: deny)",
                    self.name
                );
                return (Decision::deny(reason), effect);
            }
        };
        match answer.verdict {
            Verdict::Deny if !guard => {
                let reason = answer
                    .reason
                    .unwrap_or_else(|| format!("hook {} objected", self.name));
                (Decision::deny(reason.clone()), HookEffect::Objected(reason))
            }
            Verdict::Deny => {
                let reason = answer
                    .reason
                    .unwrap_or_else(|| format!("blocked by hook {}", self.name));
                (Decision::deny(reason.clone()), HookEffect::Denied(reason))
            }
            Verdict::Ask => {
                let question = answer
                    .reason
                    .unwrap_or_else(|| format!("hook {} asks for approval", self.name));
                (Decision::ask(question.clone()), HookEffect::Asked(question))
            }
            Verdict::Allow | Verdict::Proceed => match answer.updated_input {
                Some(arguments) if self.spec.event == HookEvent::PreToolUse => (
                    Decision::rewrite(arguments.clone()),
                    HookEffect::Rewrote(arguments),
                ),
                _ if answer.verdict == Verdict::Allow => (Decision::Allow, HookEffect::Allowed),
                _ => (Decision::Allow, HookEffect::Proceeded),
            },
        }
    }
}

impl fmt::Debug for CommandHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommandHook")
            .field("name", &self.name)
            .field("spec", &self.spec)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl Hook for CommandHook {
    fn name(&self) -> &str {
        &self.name
    }

    async fn begin(&self, call: &HookCall) -> Decision {
        if !self.runs_at_begin(call) {
            return Decision::Allow;
        }
        self.fire(call, None).await
    }

    async fn finish(&self, call: &HookCall, outcome: &OperationOutcome, output: Option<&Value>) {
        if self.runs_at_finish(call, outcome) {
            // An observer's answer changes nothing; its report says what it was.
            let _ = self.fire(call, output).await;
        }
    }
}
