//! [`MailboxAsker`]: an agent step's questions for a person (a `permissions:` rule that
//! says `ask`, a verdict below `min_confidence:`) parked as approvals of that step.
//!
//! The question is recorded in the state file and published in the control directory under
//! the agent step's number, exactly like an approval step, so `treadle approvals` lists it and
//! `treadle approve RUN N` / `treadle reject RUN N` (or the server's API) answer it from
//! another process. One question of a step waits at a time (a step has one number), so
//! parallel tool calls that all ask are asked one after another.
//!
//! The deadline is the step's `timeout:` (then rejected). As for approval steps, a headless
//! run without a `timeout:` refuses at once: it would wait for nobody.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::mailbox::{Answer, Mailbox, Pending};
use super::step::{WaitEnd, wait_for};
use super::{ApprovalRecord, ApprovalStatus};
use crate::agent::{Answered, Asker, Question};
use crate::clock::now_ms;
use crate::run::transcript::Event;

/// Asks through the approval mailbox of the run's state file.
pub(crate) struct MailboxAsker {
    /// The step that asks: its run, number, name and job, the state file and transcript,
    /// how its questions are answered, and whether anyone can answer.
    step: super::question::Asker,
    /// The step's `timeout:`.
    deadline: Option<Duration>,
    cancel: CancellationToken,
    /// One question at a time.
    turn: tokio::sync::Mutex<()>,
}

impl MailboxAsker {
    /// The asker of `step`'s agent questions, each waiting until `deadline` or `cancel`:
    /// the one way it is built, for a running step and for a worker's question whose walk
    /// is gone (`dist::asks`).
    pub(crate) fn new(
        step: super::question::Asker,
        deadline: Option<Duration>,
        cancel: CancellationToken,
    ) -> Self {
        Self {
            step,
            deadline,
            cancel,
            turn: tokio::sync::Mutex::new(()),
        }
    }

    async fn record(&self, record: ApprovalRecord) {
        let store = self.step.store.clone();
        // A lost record must not block the answer: the mailbox carries the question.
        let _ = tokio::task::spawn_blocking(move || store.put_approval(&record)).await;
    }

    fn answered(&self, status: ApprovalStatus, by: &str) {
        self.step.transcript.emit(&Event::ApprovalAnswered {
            run: self.step.run,
            seq: self.step.seq,
            status,
            by: by.to_owned(),
        });
    }
}

#[async_trait::async_trait]
impl Asker for MailboxAsker {
    async fn ask(&self, question: Question) -> Answered {
        let _one = self.turn.lock().await;
        let asked_ms = now_ms();
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let mut record = ApprovalRecord {
            run: self.step.run,
            seq: self.step.seq,
            name: self.step.name.clone(),
            message: Some(format!("{}: {}", question.kind.as_str(), question.message)),
            status: ApprovalStatus::Pending,
            asked_ms,
            deadline_ms: self.deadline.map(|d| asked_ms.saturating_add(millis(d))),
            answered_ms: None,
            by: None,
            comment: None,
            on_timeout: self.deadline.map(|_| Answer::Reject),
            question: None,
            value: None,
            policy: None,
            answers: Vec::new(),
            escalated_ms: None,
        };
        if !self.step.can_ask(self.deadline) {
            record.status = ApprovalStatus::Rejected;
            record.answered_ms = Some(asked_ms);
            record.by = Some("headless".to_owned());
            self.record(record).await;
            self.answered(ApprovalStatus::Rejected, "headless");
            return Answered::refused("headless (no terminal and no `timeout:` on the step)");
        }
        self.record(record.clone()).await;
        let mailbox = Mailbox::of_state(self.step.store.path());
        let pending = Pending {
            run: self.step.run,
            seq: self.step.seq,
            name: self.step.name.clone(),
            message: record.message.clone(),
            job: self.step.job.clone(),
            asked_ms,
            deadline_ms: record.deadline_ms,
            on_timeout: Answer::Reject,
            pid: std::process::id(),
            question: None,
            policy: None,
        };
        if let Err(e) = mailbox.park(&pending) {
            return Answered::refused(format!("nobody (the question could not be parked: {e})"));
        }
        let answer = format!(
            "{} {}{}",
            self.step.run, self.step.seq, self.step.answer_args
        );
        self.step.transcript.emit(&Event::ApprovalWaiting {
            run: self.step.run,
            seq: self.step.seq,
            name: self.step.name.clone(),
            message: record.message.clone(),
            deadline_ms: record.deadline_ms,
            summary: format!(
                "waiting for a person ({}): `treadle approve {answer}` or `treadle reject {answer}`",
                question.kind.as_str()
            ),
        });
        let outcome = wait_for(
            &mailbox,
            self.step.run,
            self.step.seq,
            self.deadline,
            &self.cancel,
        )
        .await;
        let _ = mailbox.clear(self.step.run, self.step.seq);
        let answered = match outcome {
            Ok(WaitEnd::Answered(reply)) => Answered {
                approved: reply.answer == Answer::Approve,
                by: reply.by,
                comment: reply.comment,
            },
            Ok(WaitEnd::TimedOut) => Answered::refused("timeout"),
            Ok(WaitEnd::Aborted) => Answered::refused("treadle (the step was interrupted)"),
            Err(e) => Answered::refused(format!("nobody ({e})")),
        };
        let status = if answered.approved {
            ApprovalStatus::Approved
        } else {
            ApprovalStatus::Rejected
        };
        record.status = status;
        record.answered_ms = Some(now_ms());
        record.by = Some(answered.by.clone());
        record.comment = answered.comment.clone();
        self.record(record).await;
        self.answered(status, &answered.by);
        answered
    }
}
