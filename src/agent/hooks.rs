//! The command hooks of an agent step ([`StepHooks`]): the pipeline's `hooks:` made into
//! `treadle_hook::CommandHook`s (the library's own type) that start confined like tasks,
//! with no API key in their environment, and report to the step's transcript.
//!
//! * Processes: each hook runs under a keeper ([`crate::keeper`]), like a task: what it
//!   started dies when it exits, overruns or is abandoned, and when treadle dies.
//! * Confinement: Landlock ([`crate::confine::spawn_reading`]): the step directory is
//!   writable, the project (the pipeline's directory) readable and executable, the system
//!   directories readable; nothing else.
//! * Environment: treadle's allow-list ([`crate::environ::command_env`], which never holds
//!   a key), `TREADLE_PROJECT_DIR` / `CLAUDE_PROJECT_DIR` (the project) and
//!   `TREADLE_STEP_DIR`, absolute paths as in Claude Code; in a run, the run's
//!   `TREADLE_RUN_MARK`, as tasks have it, so `--resume` finds a hook's escaped children.
//! * Working directory: the project, so `./hooks/check.sh` means what it does in Claude Code.
//! * Transcript: each run is one notice (`hook NAME: what came of it`), then its stdout and
//!   stderr lines.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;
use treadle_hook::{
    CommandHook, HookContext, HookEvent, HookReport, Launched, Launcher, OnHookError, Reporter,
};

use super::observe::AgentEvent;
use crate::pipeline::hook_def::NamedSpec;

/// The command hooks an agent step runs with, and the names its envelopes carry.
#[derive(Debug, Clone, Default)]
pub struct StepHooks {
    /// Those of `defaults:`, then the agent's own.
    pub specs: Vec<NamedSpec>,
    /// The pipeline's directory: the hooks' working directory, readable to them.
    pub project: PathBuf,
    /// The run (its number), for the envelope.
    pub run: Option<String>,
    /// The job's name, for the envelope.
    pub job: Option<String>,
    /// The run's [`crate::keeper::MARK`] value, which every hook process carries: a hook's
    /// child that escaped a keeper killed with treadle is found and killed by `--resume`.
    pub mark: Option<String>,
}

impl StepHooks {
    /// The hooks of `agent` in `loaded`.
    pub fn read(loaded: &crate::pipeline::Loaded, agent: &crate::pipeline::Agent) -> Self {
        Self {
            specs: loaded.pipeline.hook_specs(agent),
            project: loaded.dir.clone(),
            run: None,
            job: None,
            mark: None,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Whether a hook may answer `ask` (a `pre_tool_use` hook), so the step needs someone
    /// to take the question to.
    pub fn may_ask(&self) -> bool {
        self.specs
            .iter()
            .any(|s| s.spec.event == HookEvent::PreToolUse)
    }

    /// What the step's cache key hashes: each hook's event, matcher, command and failure
    /// policy (a changed hook can change what the step does); `None` without hooks, so
    /// other steps' keys stay as they were.
    pub fn key_view(&self) -> Option<Value> {
        if self.specs.is_empty() {
            return None;
        }
        let hooks = self
            .specs
            .iter()
            .map(|s| {
                json!({
                    "event": s.spec.event.name(),
                    "matcher": s.spec.matcher.as_str(),
                    "command": s.spec.command,
                    "on_hook_error": s.spec.on_error.name(),
                })
            })
            .collect();
        Some(Value::Array(hooks))
    }

    /// The hooks of the step named `step` working in `dir`, reporting into `reports`
    /// (a [`super::hook_order::HookLines`], which shows each where it belongs).
    pub fn build(
        &self,
        step: &str,
        dir: &Path,
        reports: UnboundedSender<HookReport>,
    ) -> Vec<Arc<CommandHook>> {
        if self.specs.is_empty() {
            return Vec::new();
        }
        // Absolute, as Claude Code gives them: a hook that changes directory still finds
        // the project and its step (a relative `.` would then name somewhere else).
        let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let launcher: Arc<dyn Launcher> = Arc::new(Confined {
            dir: absolute(dir),
            project: absolute(&self.project),
            mark: self.mark.clone(),
        });
        let reporter: Reporter = Arc::new(move |report| {
            // The receiver is gone only once the step ended; nothing is left to show.
            let _ = reports.send(report);
        });
        let context = HookContext {
            run: self.run.clone(),
            job: self.job.clone(),
            step: Some(step.to_owned()),
            step_dir: Some(dir.to_path_buf()),
            cwd: Some(self.project.clone()),
        };
        self.specs
            .iter()
            .map(|named| {
                let opt_out =
                    if named.spec.on_error == OnHookError::Allow && named.spec.event.is_guard() {
                        " [on_hook_error: allow]"
                    } else {
                        ""
                    };
                let name = format!("{}{opt_out} `{}`", named.name, short(&named.spec.command));
                Arc::new(
                    CommandHook::new(named.spec.clone())
                        .named(name)
                        .with_context(context.clone())
                        .with_launcher(launcher.clone())
                        .with_reporter(reporter.clone()),
                )
            })
            .collect()
    }
}

/// The first line of a command, cut to 60 characters.
fn short(command: &str) -> String {
    let first = command.trim().lines().next().unwrap_or_default();
    let mut cut: String = first.chars().take(60).collect();
    if cut.len() < command.trim().len() {
        cut.push('…');
    }
    cut
}

/// A report as transcript notices: what came of the run, then what the hook printed.
pub(super) fn transcript_lines(report: &HookReport) -> Vec<AgentEvent> {
    let tool = report
        .tool
        .as_ref()
        .map_or_else(String::new, |t| format!(" on {t}"));
    let mut lines = vec![AgentEvent::Notice(format!(
        "hook {}{tool}: {} ({} ms)",
        report.hook,
        report.effect,
        report.elapsed.as_millis()
    ))];
    if let Some(context) = &report.additional_context {
        lines.push(AgentEvent::Notice(format!(
            "hook additional_context: {context}"
        )));
    }
    for (stream, text) in [("stdout", &report.stdout), ("stderr", &report.stderr)] {
        for line in text.lines().filter(|l| !l.trim().is_empty()).take(50) {
            lines.push(AgentEvent::Notice(format!("hook {stream}: {line}")));
        }
    }
    lines
}

/// Starts hook commands like tasks: the allow-listed environment, and Landlock keeping
/// them to the step directory (writable) and the project (readable).
struct Confined {
    dir: PathBuf,
    project: PathBuf,
    /// The run's leftover mark, when the hooks run for a run.
    mark: Option<String>,
}

impl Launcher for Confined {
    fn launch(&self, mut command: tokio::process::Command) -> Launched {
        let project = self.project.display().to_string();
        let mut extra = vec![
            ("TREADLE_PROJECT_DIR".to_owned(), project.clone()),
            ("CLAUDE_PROJECT_DIR".to_owned(), project),
            (
                "TREADLE_STEP_DIR".to_owned(),
                self.dir.display().to_string(),
            ),
        ];
        // How a resume finds what the hook left if treadle and its keeper are killed.
        if let Some(mark) = &self.mark {
            extra.push((crate::keeper::MARK.to_owned(), mark.clone()));
        }
        crate::environ::set_command_env(&mut command, &[], extra.iter().map(|(k, v)| (k, v)));
        // The keeper, as for tasks: nothing the hook starts (a background or `setsid`
        // child) outlives its end, its timeout, or treadle, even killed with SIGKILL. Its
        // `pre_exec` work runs before Landlock's (the spawning thread is confined, so the
        // keeper and the command both are). No PID namespace: a Landlock-confined process
        // may not mount the `/proc` it would need (docs/security.md, the hooks' row).
        crate::keeper::keep(&mut command, false);
        // SAFETY: runs in the hook's command between fork and exec (after the keeper's
        // fork); `drop_ptrace` makes system calls only. Without `CAP_SYS_PTRACE` a hook
        // cannot read treadle's memory, as a task cannot.
        unsafe {
            command.pre_exec(|| {
                crate::confine::drop_ptrace();
                Ok(())
            });
        }
        let (dir, project) = (self.dir.clone(), self.project.clone());
        Box::pin(async move {
            crate::confine::spawn_reading(command, &dir, &[project])
                .await
                .map_err(|e| match e {
                    crate::confine::ConfineError::Start(io) => io,
                    other => std::io::Error::other(other.to_string()),
                })
        })
    }

    /// Asks the keeper to stop: it kills the hook's whole tree, then exits.
    fn stop(&self, child: &tokio::process::Child) {
        crate::keeper::stop(child);
    }

    /// Nothing: the keeper killed the hook's whole tree when the hook exited, before it
    /// exited itself.
    fn left_behind(&self, _pid: u32) {}
}
