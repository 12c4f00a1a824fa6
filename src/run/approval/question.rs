//! Questions a run parks for a person, answered with a JSON value that must fit a schema:
//! the one way a pipeline parks a question at a gate. `input:` steps and an agent step's
//! `ask_human` calls both use [`Asker`].
//!
//! A question goes where approvals go: it is recorded in the state file as a pending
//! [`ApprovalRecord`] carrying the question, published in the control directory as a
//! [`Pending`] with its `question`, and answered by `treadle answer RUN STEP --json '...'`
//! (or the server's API), which refuses a value that does not fit before writing it. The
//! waiting run checks the value again (a file written by hand is not trusted), records it
//! and clears the files. At the deadline the question's default is taken, or the question
//! times out. A run nobody can answer (stdin not a terminal, no server, no deadline) does
//! not ask at all: it would wait forever (fail closed).

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use treadle_session::HumanQuestion;

use super::mailbox::{Answer, Mailbox, Pending, check_reply};
use super::step::{WaitEnd, wait_for};
use super::{ApprovalRecord, ApprovalStatus};
use crate::clock::now_ms;
use crate::run::state::Store;
use crate::run::transcript::{Event, Transcript};

/// How a question ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Asked {
    /// A value that fits, from `by` (or the default at the deadline, `by: "timeout"`).
    Answered {
        value: serde_json::Value,
        by: String,
    },
    /// The person refused to answer (`treadle reject`), or gave a value that does not fit.
    Declined { reason: String },
    /// The deadline passed and the question has no default.
    TimedOut,
    /// Nobody can answer in this run.
    Unanswerable { reason: String },
    /// The step was cancelled while it waited.
    Aborted,
    /// The control directory could not be used.
    Failed { reason: String },
}

/// Asks the questions of one step of one run. Cheap to clone; owns what it needs, so an
/// agent's session can ask from its own task.
#[derive(Clone)]
pub struct Asker {
    pub(crate) store: Arc<Store>,
    pub(crate) transcript: Arc<Transcript>,
    pub(crate) run: u64,
    pub(crate) seq: u32,
    pub(crate) name: String,
    pub(crate) job: String,
    /// What follows `RUN N` in the command that answers (the pipeline file or `--state`).
    pub(crate) answer_args: String,
    /// Someone can answer though stdin is not a terminal (`treadle serve` runs it).
    pub(crate) answerable: bool,
}

impl std::fmt::Debug for Asker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Asker(run {} step {})", self.run, self.seq)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Asker {
    /// Whether anyone can answer a question that waits `deadline` (fail closed: without a
    /// deadline a run nobody watches would wait forever).
    pub fn can_ask(&self, deadline: Option<Duration>) -> bool {
        deadline.is_some() || self.answerable || std::io::stdin().is_terminal()
    }

    /// Parks `question` until it is answered, its deadline passes or `cancel` fires.
    pub async fn ask(
        &self,
        question: HumanQuestion,
        deadline: Option<Duration>,
        cancel: &CancellationToken,
    ) -> Asked {
        if !self.can_ask(deadline) {
            return Asked::Unanswerable {
                reason: format!(
                    "nobody can answer `{}`: this run is headless (stdin is not a terminal) \
                     and the question has no deadline; give the step a `timeout:`",
                    question.question
                ),
            };
        }
        let asked_ms = now_ms();
        let deadline_ms = deadline.map(|d| asked_ms.saturating_add(millis(d)));
        let mut record = ApprovalRecord {
            run: self.run,
            seq: self.seq,
            name: self.name.clone(),
            message: Some(question.question.clone()),
            status: ApprovalStatus::Pending,
            asked_ms,
            deadline_ms,
            answered_ms: None,
            by: None,
            comment: None,
            question: Some(question.clone()),
            value: None,
            // The deadline takes the question's default (or fails it), not approve/reject.
            on_timeout: None,
            policy: None,
            answers: Vec::new(),
            escalated_ms: None,
        };
        self.record(&record).await;
        let mailbox = Mailbox::of_state(self.store.path());
        let pending = Pending {
            run: self.run,
            seq: self.seq,
            name: self.name.clone(),
            message: Some(question.question.clone()),
            job: self.job.clone(),
            asked_ms,
            deadline_ms,
            on_timeout: Answer::Reject,
            pid: std::process::id(),
            question: Some(question.clone()),
            policy: None,
        };
        if let Err(e) = mailbox.park(&pending) {
            return Asked::Failed {
                reason: format!("cannot park the question: {e}"),
            };
        }
        self.announce(&pending, &question);
        let waited = wait_for(&mailbox, self.run, self.seq, deadline, cancel).await;
        let cleared = mailbox.clear(self.run, self.seq);
        let asked = match (waited, cleared) {
            (Err(e), _) | (Ok(_), Err(e)) => Asked::Failed {
                reason: e.to_string(),
            },
            (Ok(WaitEnd::Aborted), _) => Asked::Aborted,
            (Ok(WaitEnd::TimedOut), _) => match question.default.clone() {
                Some(value) => Asked::Answered {
                    value,
                    by: "timeout".to_owned(),
                },
                None => Asked::TimedOut,
            },
            (Ok(WaitEnd::Answered(reply)), _) => match check_reply(&pending, &reply) {
                Err(wrong) => Asked::Declined {
                    reason: wrong.to_string(),
                },
                Ok(()) => match (reply.answer, reply.value) {
                    (Answer::Approve, Some(value)) => Asked::Answered {
                        value,
                        by: reply.by,
                    },
                    _ => Asked::Declined {
                        reason: reply
                            .comment
                            .unwrap_or_else(|| format!("{} declined to answer", reply.by)),
                    },
                },
            },
        };
        self.settle(&mut record, &asked).await;
        asked
    }

    /// Records how the question ended and shows it.
    async fn settle(&self, record: &mut ApprovalRecord, asked: &Asked) {
        let (status, by) = match asked {
            Asked::Answered { by, .. } => (ApprovalStatus::Approved, by.clone()),
            Asked::Declined { .. } => (ApprovalStatus::Rejected, "someone".to_owned()),
            Asked::TimedOut => (ApprovalStatus::Rejected, "timeout".to_owned()),
            Asked::Aborted | Asked::Failed { .. } | Asked::Unanswerable { .. } => {
                (ApprovalStatus::Aborted, "treadle".to_owned())
            }
        };
        record.status = status;
        record.answered_ms = Some(now_ms());
        record.by = Some(by.clone());
        if let Asked::Answered { value, .. } = asked {
            record.value = Some(value.clone());
        }
        if let Asked::Declined { reason } = asked {
            record.comment = Some(reason.clone());
        }
        self.record(record).await;
        self.transcript.emit(&Event::ApprovalAnswered {
            run: self.run,
            seq: self.seq,
            status,
            by,
        });
    }

    /// Shows that the run waits for an answer, and how to give it.
    fn announce(&self, pending: &Pending, question: &HumanQuestion) {
        let (run, seq) = (self.run, self.seq);
        let choices = if question.choices.is_empty() {
            format!("an answer fitting {}", question.schema)
        } else {
            format!("one of {}", question.choices.join(", "))
        };
        self.transcript.emit(&Event::ApprovalWaiting {
            run,
            seq,
            name: self.name.clone(),
            message: Some(question.question.clone()),
            deadline_ms: pending.deadline_ms,
            summary: format!(
                "waiting for an answer to \"{}\" ({choices}): `treadle answer {run} {seq}{} \
                 --json '...'`",
                question.question, self.answer_args
            ),
        });
    }

    async fn record(&self, record: &ApprovalRecord) {
        let (store, record) = (self.store.clone(), record.clone());
        let written = tokio::task::spawn_blocking(move || store.put_approval(&record)).await;
        if let Ok(Err(e)) = written {
            tracing::warn!(error = %e, "could not record a question in the state file");
        }
    }
}
