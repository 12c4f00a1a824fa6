//! Waiting for an approval step's answers: each new vote, the deadline, or cancellation is
//! one [`Turn`]; the step (`run::exec::approval_step`) records each turn and asks the
//! policy whether the votes decide. What the deadline does is an [`OnTimeout`].

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::mailbox::{ANSWERED, Answer, Mailbox, MailboxError, POLL};
use crate::run::approval_record::Vote;

/// What an approval's deadline does (`on_timeout:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnTimeout {
    /// Approve or reject in place of a person.
    Answer(Answer),
    /// Let the policy's `escalate_to` answer, until the second deadline (if any), which
    /// rejects.
    Escalate,
}

impl OnTimeout {
    /// `approve`, `reject` or `escalate`; anything else (refused at load) rejects.
    pub(crate) fn parse(text: Option<&str>) -> Self {
        match text {
            Some("escalate") => Self::Escalate,
            Some(t) => Self::Answer(Answer::parse(t).unwrap_or(Answer::Reject)),
            None => Self::Answer(Answer::Reject),
        }
    }

    /// What it says, as `on_timeout:` is written.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Answer(Answer::Approve) => "approve",
            Self::Answer(Answer::Reject) => "reject",
            Self::Escalate => "escalate",
        }
    }
}

/// What happened while the step waited.
pub(crate) enum Turn {
    /// More answers came: all of them so far, oldest first.
    Votes(Vec<Vote>),
    /// The current deadline passed.
    Deadline,
    /// The step was cancelled.
    Aborted,
}

/// Waits until more than `seen` answers are in, `until` passes, or `cancel` fires.
pub(crate) async fn next_turn(
    mailbox: &Mailbox,
    (run, seq): (u64, u32),
    seen: usize,
    until: Option<Instant>,
    cancel: &CancellationToken,
) -> Result<Turn, MailboxError> {
    loop {
        let votes = mailbox.votes(run, seq)?;
        if votes.len() > seen {
            return Ok(Turn::Votes(votes));
        }
        let left = until.map(|u| u.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return Ok(Turn::Deadline);
        }
        let nap = left.map_or(POLL, |l: Duration| l.min(POLL));
        tokio::select! {
            () = cancel.cancelled() => return Ok(Turn::Aborted),
            () = tokio::time::sleep(nap) => {}
            // An answer written in this process (`treadle serve`): read it now.
            () = ANSWERED.notified() => {}
        }
    }
}
