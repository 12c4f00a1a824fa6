//! The run transcript on stdout: each step as it starts and ends, with status and duration.
//!
//! Three renderings of the same [`Event`]s: plain lines (stdout is not a terminal), the
//! same lines with a spinner under a running step (a terminal), or one JSON object per
//! line (`--json`). Every string passes the [`Redactor`] first, so a key that a command
//! prints is masked before it reaches the screen or the state file.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde::Serialize;

use treadle_session::Secrets;

use super::state::{ApprovalStatus, RunStatus, StepStatus};
use crate::assert::AssertFailure;
use crate::pipeline::Kind;
use crate::pipeline::duration::format_duration;

/// Something that happened in a run.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The run began.
    RunStarted {
        /// Run id.
        run: u64,
        /// Job name.
        job: String,
        /// Pipeline file.
        pipeline: String,
    },
    /// Something the run says once, such as commands running unconfined.
    Notice {
        /// Run id.
        run: u64,
        /// The text.
        text: String,
    },
    /// A step began (an attempt of it, when `attempts` > 1).
    StepStarted {
        /// Run id.
        run: u64,
        /// The step's place in the outline.
        seq: u32,
        /// Display name.
        name: String,
        /// Its kind.
        kind: Kind,
        /// Nesting depth (0 for a job's own steps).
        depth: u32,
        /// Attempt number, from 1.
        attempt: u32,
    },
    /// A line a task printed.
    Output {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// The line, without its newline.
        line: String,
    },
    /// Something an agent step did (text, a tool call, a result, usage), as the agent
    /// module reports it.
    Agent {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// What it is: `text`, `tool_call`, `tool_result`, `usage`, ...
        what: String,
        /// Its content.
        data: serde_json::Value,
        /// One line for the plain transcript.
        #[serde(skip)]
        summary: String,
    },
    /// A step ended.
    StepFinished {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// Display name.
        name: String,
        /// Its kind.
        kind: Kind,
        /// Nesting depth.
        depth: u32,
        /// How it ended.
        status: StepStatus,
        /// Wall time.
        duration_ms: u64,
        /// A task's exit code.
        #[serde(skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// An agent's verdict.
        #[serde(skip_serializing_if = "Option::is_none")]
        verdict: Option<String>,
        /// Why it failed.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The asserts that failed, typed.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        asserts: Vec<AssertFailure>,
    },
    /// A step that will not run.
    StepSkipped {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// Display name.
        name: String,
        /// Nesting depth.
        depth: u32,
    },
    /// A step replayed from the cache (or from a resumed run's record) instead of run.
    StepCached {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// Display name.
        name: String,
        /// Its kind.
        kind: Kind,
        /// Nesting depth.
        depth: u32,
        /// The step key.
        key: String,
        /// The run that recorded it.
        from_run: u64,
    },
    /// An approval step parked the run.
    ApprovalWaiting {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// Display name.
        name: String,
        /// The step's `message:`.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// When it times out (ms since the Unix epoch).
        #[serde(skip_serializing_if = "Option::is_none")]
        deadline_ms: Option<u64>,
        /// How to answer, for the plain transcript.
        #[serde(skip)]
        summary: String,
    },
    /// An approval was answered (or timed out, or the run was interrupted).
    ApprovalAnswered {
        /// Run id.
        run: u64,
        /// The step.
        seq: u32,
        /// How it ended.
        status: ApprovalStatus,
        /// Who answered: a user, `timeout`.
        by: String,
    },
    /// The run ended.
    RunFinished {
        /// Run id.
        run: u64,
        /// How.
        status: RunStatus,
        /// Wall time.
        duration_ms: u64,
        /// Why it did not succeed.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The job's asserts that failed, typed.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        asserts: Vec<AssertFailure>,
    },
}

/// Masks secret values in text, in plain and encoded forms (the session's scrubber).
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Secrets,
}

impl Redactor {
    /// Masks each of these values (short ones are ignored: they would mask ordinary words).
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        Self {
            secrets: Secrets::new(secrets),
        }
    }

    /// The text with every form of every secret replaced by `***`.
    pub fn mask(&self, text: &str) -> String {
        self.secrets.scrub(text).into_owned()
    }

    /// The scrubber itself, for what is written elsewhere (tapes, tool results).
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }
}

/// How the transcript is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Plain lines.
    Plain,
    /// Plain lines plus spinners.
    Terminal,
    /// JSON lines.
    Json,
}

impl Style {
    /// `Json` when asked, `Terminal` when stdout is one, else `Plain`.
    pub fn detect(json: bool) -> Self {
        if json {
            Self::Json
        } else if std::io::stdout().is_terminal() {
            Self::Terminal
        } else {
            Self::Plain
        }
    }
}

/// Writes events to stdout.
pub struct Transcript {
    style: Style,
    redactor: Redactor,
    multi: Option<MultiProgress>,
    spinners: Mutex<HashMap<u32, ProgressBar>>,
    // Leaf steps running now, to label output lines when several run at once.
    running: Mutex<HashMap<u32, String>>,
    // Serialises whole lines from concurrent steps.
    out: Mutex<()>,
}

impl Transcript {
    /// A transcript in this style.
    pub fn new(style: Style, redactor: Redactor) -> Self {
        Self {
            style,
            redactor,
            multi: (style == Style::Terminal).then(MultiProgress::new),
            spinners: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            out: Mutex::new(()),
        }
    }

    /// The redactor, for text that goes elsewhere (the state file).
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Shows one event.
    pub fn emit(&self, event: &Event) {
        match self.style {
            Style::Json => {
                if let Ok(line) = serde_json::to_string(event) {
                    self.line(&self.redactor.mask(&line));
                }
            }
            Style::Plain | Style::Terminal => self.human(event),
        }
    }

    fn line(&self, text: &str) {
        // JSON lines escape control characters already; human lines carry step output.
        let text = &*super::terminal::neutralise(text);
        if let Some(multi) = &self.multi {
            // println above the spinners keeps them at the bottom.
            let _ = multi.println(text);
            return;
        }
        let _guard = self.out.lock();
        let mut out = std::io::stdout().lock();
        // A closed stdout (a pipe into `head`) must not fail the run.
        let _ = writeln!(out, "{text}");
    }

    fn step_started(&self, event: &Event) {
        let pad = |depth: u32| "  ".repeat(depth as usize);
        let Event::StepStarted {
            seq,
            name,
            kind,
            depth,
            attempt,
            ..
        } = event
        else {
            return;
        };
        if kind.is_work()
            && let Ok(mut r) = self.running.lock()
        {
            r.insert(*seq, name.clone());
        }
        let again = if *attempt > 1 {
            format!(" (attempt {attempt})")
        } else {
            String::new()
        };
        self.line(&format!("{}▶ {name} [{kind}]{again}", pad(*depth)));
        if let Some(multi) = &self.multi
            && kind.is_work()
        {
            let bar = multi.add(ProgressBar::new_spinner());
            if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
                bar.set_style(style);
            }
            bar.set_message(format!("{}{name}", pad(*depth)));
            bar.enable_steady_tick(Duration::from_millis(120));
            if let Ok(mut s) = self.spinners.lock() {
                s.insert(*seq, bar);
            }
        }
    }

    fn step_finished(&self, event: &Event) {
        let pad = |depth: u32| "  ".repeat(depth as usize);
        let Event::StepFinished {
            seq,
            name,
            depth,
            status,
            duration_ms,
            exit_code,
            verdict,
            error,
            ..
        } = event
        else {
            return;
        };
        if let Ok(mut s) = self.spinners.lock()
            && let Some(bar) = s.remove(seq)
        {
            bar.finish_and_clear();
        }
        if let Ok(mut r) = self.running.lock() {
            r.remove(seq);
        }
        let mark = if *status == StepStatus::Succeeded {
            "✓"
        } else {
            "✗"
        };
        let mut text = format!(
            "{}{mark} {name} {} in {}",
            pad(*depth),
            status.as_str(),
            format_duration(Duration::from_millis(*duration_ms))
        );
        if let Some(code) = exit_code
            && *code != 0
        {
            text.push_str(&format!(" (exit {code})"));
        }
        if let Some(v) = verdict {
            text.push_str(&format!(" → verdict {v}"));
        }
        if let Some(e) = error {
            text.push_str(&format!(": {}", self.redactor.mask(e)));
        }
        self.line(&text);
    }

    fn human(&self, event: &Event) {
        let pad = |depth: u32| "  ".repeat(depth as usize);
        match event {
            Event::RunStarted { run, job, pipeline } => {
                self.line(&format!("run {run} · job {job} · {pipeline}"));
            }
            Event::StepStarted { .. } => self.step_started(event),
            Event::Output { line, seq, .. } => {
                let label = self
                    .running
                    .lock()
                    .ok()
                    .filter(|r| r.len() > 1)
                    .and_then(|r| r.get(seq).cloned());
                let label = label.map_or_else(String::new, |n| format!("{n} "));
                self.line(&format!("  {label}│ {}", self.redactor.mask(line)));
            }
            Event::Agent { summary, .. } => {
                for line in summary.lines() {
                    self.line(&format!("  │ {}", self.redactor.mask(line)));
                }
            }
            Event::StepFinished { .. } => self.step_finished(event),
            Event::ApprovalWaiting {
                message, summary, ..
            } => {
                for line in message
                    .iter()
                    .flat_map(|m| m.lines())
                    .chain(summary.lines())
                {
                    self.line(&format!("  │ {}", self.redactor.mask(line)));
                }
            }
            Event::ApprovalAnswered { status, by, .. } => {
                self.line(&format!("  │ {} by {by}", status.as_str()));
            }
            Event::StepCached {
                name,
                kind,
                depth,
                key,
                from_run,
                ..
            } => {
                let short: String = key.chars().take(12).collect();
                self.line(&format!(
                    "{}↺ {name} [{kind}] cached: not run, replayed from run {from_run} (key {short})",
                    pad(*depth)
                ));
            }
            Event::StepSkipped { name, depth, .. } => {
                self.line(&format!("{}- {name} skipped", pad(*depth)))
            }
            Event::Notice { text, .. } => self.line(&format!("note: {text}")),
            Event::RunFinished {
                run,
                status,
                duration_ms,
                error,
                ..
            } => {
                let mut text = format!(
                    "run {run} {} in {}",
                    status.as_str(),
                    format_duration(Duration::from_millis(*duration_ms))
                );
                if let Some(e) = error {
                    text.push_str(&format!(": {}", self.redactor.mask(e)));
                }
                self.line(&text);
            }
        }
    }
}
