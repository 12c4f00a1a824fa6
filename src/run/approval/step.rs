//! Running an approval step: record it, publish it in the control directory, wait for an
//! answer, the deadline or Ctrl-C, and record how it ended.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::mailbox::{ANSWERED, Answer, Mailbox, MailboxError, POLL, Pending, Reply};
use super::{ApprovalRecord, ApprovalStatus};
use crate::pipeline::duration::format_duration;
use crate::pipeline::outline::Entry;
use crate::pipeline::{At, Step};
use crate::run::exec::{Ctx, Done, now_ms};
use crate::run::transcript::Event;

/// How a wait ended.
pub(super) enum WaitEnd {
    Answered(Reply),
    TimedOut(Answer),
    Aborted,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl<'a> Ctx<'a> {
    /// Runs an `approval:` step; its `timeout:` is the deadline (the walker does not apply
    /// it, so that `on_timeout` can decide).
    pub(crate) async fn approval(
        &'a self,
        step: &'a Step,
        (message, on_timeout): (&'a Option<String>, Option<&'a At<String>>),
        entry: &'a Entry,
        cancel: CancellationToken,
    ) -> Done {
        let deadline = step.timeout.as_ref().map(|t| t.value.0);
        let on_timeout = on_timeout
            .and_then(|t| Answer::parse(&t.value))
            .unwrap_or(Answer::Reject);
        let asked_ms = now_ms();
        let mut record = ApprovalRecord {
            run: self.run,
            seq: entry.seq,
            name: entry.name.clone(),
            message: message.clone(),
            status: ApprovalStatus::Pending,
            asked_ms,
            deadline_ms: deadline.map(|d| asked_ms.saturating_add(millis(d))),
            answered_ms: None,
            by: None,
            comment: None,
            on_timeout: deadline.map(|_| on_timeout),
            question: None,
            value: None,
        };
        // Fail closed: without a deadline, a run nobody watches would wait forever.
        if deadline.is_none() && !self.answerable && !std::io::stdin().is_terminal() {
            record.status = ApprovalStatus::Rejected;
            record.answered_ms = Some(asked_ms);
            record.by = Some("headless".to_owned());
            self.record_approval(&record).await;
            return Done::failed(format!(
                "approval `{}` was rejected: this run is headless (stdin is not a terminal) and \
                 the approval has no `timeout:`; give it one to wait for `treadle approve`",
                entry.name
            ));
        }
        self.record_approval(&record).await;
        let mailbox = Mailbox::of_state(self.store.path());
        let pending = Pending {
            run: self.run,
            seq: entry.seq,
            name: entry.name.clone(),
            message: message.clone(),
            job: self.job.name.value.clone(),
            asked_ms,
            deadline_ms: record.deadline_ms,
            on_timeout,
            pid: std::process::id(),
            question: None,
        };
        if let Err(e) = mailbox.park(&pending) {
            return Done::errored(format!("cannot park the run for approval: {e}"));
        }
        let (run, seq) = (self.run, entry.seq);
        self.announce(step, entry, &pending);
        let outcome = wait_for(&mailbox, run, seq, deadline, on_timeout, &cancel).await;
        let cleared = mailbox.clear(run, seq);
        let (status, by) = match &outcome {
            Ok(WaitEnd::Answered(r)) => (status_of(r.answer), r.by.clone()),
            Ok(WaitEnd::TimedOut(a)) => (status_of(*a), "timeout".to_owned()),
            Ok(WaitEnd::Aborted) | Err(_) => (ApprovalStatus::Aborted, "treadle".to_owned()),
        };
        record.status = status;
        record.answered_ms = Some(now_ms());
        record.by = Some(by.clone());
        if let Ok(WaitEnd::Answered(r)) = &outcome {
            record.comment = r.comment.clone();
        }
        self.record_approval(&record).await;
        let outcome = match (outcome, cleared) {
            (Err(e), _) | (Ok(_), Err(e)) => {
                return Done::errored(format!("approval `{}`: {e}", entry.name));
            }
            (Ok(o), Ok(())) => o,
        };
        self.emit(Event::ApprovalAnswered {
            run,
            seq,
            status,
            by: by.clone(),
        });
        match (outcome, status) {
            (WaitEnd::Aborted, _) => self.cancelled(),
            (_, ApprovalStatus::Approved) => Done::ok(),
            (WaitEnd::TimedOut(_), _) => Done::failed(format!(
                "approval `{}` timed out and was rejected (on_timeout)",
                entry.name
            )),
            _ => Done::failed(format!("approval `{}` was rejected by {by}", entry.name)),
        }
    }

    /// Shows that the run waits, and how to answer.
    fn announce(&self, step: &Step, entry: &Entry, pending: &Pending) {
        let (run, seq) = (self.run, entry.seq);
        let answer = format!("{run} {seq}{}", self.answer_args());
        let deadline = step.timeout.as_ref().map(|t| t.value.0);
        let wait = deadline.map_or_else(String::new, |d| {
            let then = match pending.on_timeout {
                Answer::Approve => "approve",
                Answer::Reject => "reject",
            };
            format!(" (on_timeout after {}: {then})", format_duration(d))
        });
        self.emit(Event::ApprovalWaiting {
            run,
            seq,
            name: entry.name.clone(),
            message: pending.message.clone(),
            deadline_ms: pending.deadline_ms,
            summary: format!(
                "waiting for approval: `treadle approve {answer}` or `treadle reject {answer}`{wait}"
            ),
        });
    }

    /// The arguments after `RUN N` that `treadle approve` needs to find this run's state.
    pub(crate) fn answer_args(&self) -> String {
        let file = self.loaded.file.display().to_string();
        let default = crate::run::state_path(&self.loaded.file, None);
        if self.store.path() == default {
            if file == crate::pipeline::DEFAULT_FILE {
                String::new()
            } else {
                format!(" {file}")
            }
        } else {
            format!(" --state {}", self.store.path().display())
        }
    }

    async fn record_approval(&self, record: &ApprovalRecord) {
        let record = record.clone();
        self.write_state(move |store| store.put_approval(&record))
            .await;
    }
}

fn status_of(answer: Answer) -> ApprovalStatus {
    match answer {
        Answer::Approve => ApprovalStatus::Approved,
        Answer::Reject => ApprovalStatus::Rejected,
    }
}

/// Polls for an answer until one comes, the deadline passes or the step is cancelled.
pub(super) async fn wait_for(
    mailbox: &Mailbox,
    run: u64,
    seq: u32,
    deadline: Option<Duration>,
    on_timeout: Answer,
    cancel: &CancellationToken,
) -> Result<WaitEnd, MailboxError> {
    let started = Instant::now();
    loop {
        if let Some(reply) = mailbox.reply(run, seq)? {
            return Ok(WaitEnd::Answered(reply));
        }
        let left = deadline.map(|d| d.saturating_sub(started.elapsed()));
        if left.is_some_and(|l| l.is_zero()) {
            return Ok(WaitEnd::TimedOut(on_timeout));
        }
        let nap = left.map_or(POLL, |l| l.min(POLL));
        tokio::select! {
            () = cancel.cancelled() => return Ok(WaitEnd::Aborted),
            () = tokio::time::sleep(nap) => {}
            // An answer written in this process (`treadle serve`): read it now.
            () = ANSWERED.notified() => {}
        }
    }
}
