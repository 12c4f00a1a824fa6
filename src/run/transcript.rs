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

use super::error_lines::error_lines;
use super::event_log::EventLog;
use super::state::StepStatus;
use crate::pipeline::duration::format_duration;

pub use super::event::Event;
pub use super::redactor::Redactor;

/// How the transcript is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Plain lines.
    Plain,
    /// Plain lines plus spinners.
    Terminal,
    /// JSON lines.
    Json,
    /// Nothing printed: the run's followers see it through its journal (`treadle serve`).
    Quiet,
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

/// Where a transcript also sends each enduring event line (masked) and each token delta: a
/// worker (`treadle worker`) sends its step's events to the server that runs the plan.
pub trait EventSink: Send + Sync {
    /// One enduring event, as its JSON line.
    fn event(&self, json: &str);
    /// A piece of an agent step's streamed text.
    fn token(&self, step: u32, text: &str);
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
    // Where enduring events are journaled and published (see `super::journal`).
    journal: Option<std::sync::Arc<EventLog>>,
    // The first failure to journal an event, said once.
    journal_failed: std::sync::atomic::AtomicBool,
    // Where events go besides the journal (a worker's step, see `EventSink`).
    sink: Option<std::sync::Arc<dyn EventSink>>,
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
            journal: None,
            journal_failed: std::sync::atomic::AtomicBool::new(false),
            sink: None,
        }
    }

    /// The same transcript, also sending every event and token delta to `sink`.
    pub fn with_sink(mut self, sink: std::sync::Arc<dyn EventSink>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Journals and shows an event line that another process emitted (masked there, and
    /// masked again here): a step run by a worker.
    pub fn emit_line(&self, json: &str) {
        let line = self.redactor.mask(json);
        self.journal(&line);
        if let Some(sink) = &self.sink {
            sink.event(&line);
        }
        self.replay(&line);
    }

    /// The same transcript, also journaling every event in `journal`.
    pub fn with_journal(mut self, journal: std::sync::Arc<EventLog>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// Publishes a piece of an agent step's streamed text to the run's live followers
    /// (never printed, never journaled).
    pub fn token(&self, step: u32, text: &str) {
        if let Some(journal) = &self.journal {
            journal.token(step, &self.redactor.mask(text));
        }
        if let Some(sink) = &self.sink {
            sink.token(step, &self.redactor.mask(text));
        }
    }

    /// Shows one event line as [`Transcript::emit`] showed it in another process (a run
    /// followed through `treadle serve`): JSON lines as they are, else rendered again.
    pub fn replay(&self, json: &str) {
        match self.style {
            Style::Json => self.line(json),
            Style::Quiet => {}
            Style::Plain | Style::Terminal => {
                if let Ok(event) = serde_json::from_str::<Event>(json) {
                    self.human(&event);
                }
            }
        }
    }

    /// Journals one event line (masked already); a failure is said once and the run goes on.
    fn journal(&self, line: &str) {
        let Some(journal) = &self.journal else { return };
        if let Err(e) = journal.record(line)
            && !self
                .journal_failed
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            crate::console::tell!(
                "treadle: cannot journal run {}'s events: {e}",
                journal.run()
            );
        }
    }

    /// The redactor, for text that goes elsewhere (the state file).
    pub fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    /// Shows one event.
    pub fn emit(&self, event: &Event) {
        let json = self.json_of(event);
        if let Some(line) = &json {
            self.journal(line);
        }
        self.show(event, json);
    }

    /// Shows the run's last event, journaled durably in one transaction with `also` (the
    /// record of the run's end, see [`EventLog::record_with`]). Without a journal, `also`
    /// is not run: `Ok(false)`.
    pub fn emit_ending(
        &self,
        event: &Event,
        also: impl FnOnce(&redb::WriteTransaction) -> Result<(), super::state::StateError>,
    ) -> Result<bool, super::state::StateError> {
        let json = self.json_of(event);
        let recorded = match (&self.journal, &json) {
            (Some(journal), Some(line)) => journal.record_with(line, also).map(|_| true),
            _ => Ok(false),
        };
        self.show(event, json);
        recorded
    }

    /// Journals `events` in one transaction with `also` (the step's record, its cache
    /// result) at `durability`, then publishes them (`EventLog::record_all_with`); shown
    /// by [`Transcript::show_all`] once the commit is made durable. Without a journal,
    /// `also` is not run: `Ok(false)`, and the caller writes it alone.
    pub fn journal_all_with(
        &self,
        lines: &[Option<String>],
        durability: redb::Durability,
        also: impl FnOnce(&redb::WriteTransaction) -> Result<(), super::state::StateError>,
    ) -> Result<bool, super::state::StateError> {
        let Some(journal) = &self.journal else {
            return Ok(false);
        };
        let lines: Vec<&str> = lines.iter().flatten().map(String::as_str).collect();
        journal
            .record_all_with(&lines, durability, also)
            .map(|_| true)
    }

    /// The masked JSON lines of `events`, for [`Transcript::journal_all_with`] and
    /// [`Transcript::show_all`].
    pub fn lines_of(&self, events: &[Event]) -> Vec<Option<String>> {
        events.iter().map(|e| self.json_of(e)).collect()
    }

    /// Shows `events` (journaled already, by [`Transcript::journal_all_with`]), with their
    /// lines from [`Transcript::lines_of`].
    pub fn show_all(&self, events: &[Event], lines: Vec<Option<String>>) {
        for (event, json) in events.iter().zip(lines) {
            self.show(event, json);
        }
    }

    /// The event as its masked JSON line, when something takes lines.
    fn json_of(&self, event: &Event) -> Option<String> {
        (self.style == Style::Json || self.journal.is_some() || self.sink.is_some())
            .then(|| serde_json::to_string(event).ok())
            .flatten()
            .map(|line| self.redactor.mask(&line))
    }

    /// Sends an event (journaled already, when it is) to the sink and the terminal.
    fn show(&self, event: &Event, json: Option<String>) {
        if let (Some(line), Some(sink)) = (&json, &self.sink) {
            sink.event(line);
        }
        match self.style {
            Style::Json => {
                if let Some(line) = &json {
                    self.line(line);
                }
            }
            Style::Plain | Style::Terminal => self.human(event),
            Style::Quiet => {}
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
                    "{}↺ {name} [{kind}] cached: not run, cached from run {from_run} (key {short})",
                    pad(*depth)
                ));
            }
            Event::StepSkipped {
                name,
                depth,
                reason,
                ..
            } => {
                let why = reason
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                self.line(&format!("{}- {name} skipped{why}", pad(*depth)))
            }
            Event::StepQueued { name, depth, .. } => self.line(&format!(
                "{}⋯ {name} queued: waiting for a worker",
                pad(*depth)
            )),
            Event::StepTaken {
                name,
                depth,
                worker,
                ..
            } => self.line(&format!("{}▶ {name} running on {worker}", pad(*depth))),
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
                // The error under it, a clause a line: on one line it ran to ~900
                // characters (issue 40).
                let lines = error.as_ref().map(|e| error_lines(&self.redactor.mask(e)));
                if lines.is_some() {
                    text.push(':');
                }
                self.line(&text);
                for line in lines.unwrap_or_default() {
                    self.line(&line);
                }
            }
        }
    }
}
