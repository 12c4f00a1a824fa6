//! Waiting for a question's answer (an `input:` step, an agent's question): until one
//! comes, its deadline passes or the step is cancelled. Approval steps wait on their votes
//! instead ([`super::quorum`], `run::exec::approval_step`).

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::ApprovalStatus;
use super::mailbox::{ANSWERED, Answer, Mailbox, MailboxError, POLL, Reply};

/// How a wait ended.
pub(crate) enum WaitEnd {
    Answered(Reply),
    TimedOut,
    Aborted,
}

/// The status an answer gives an approval's record.
pub(crate) fn status_of(answer: Answer) -> ApprovalStatus {
    match answer {
        Answer::Approve => ApprovalStatus::Approved,
        Answer::Reject => ApprovalStatus::Rejected,
    }
}

/// Polls for an answer until one comes, the deadline passes or the step is cancelled.
pub(crate) async fn wait_for(
    mailbox: &Mailbox,
    run: u64,
    seq: u32,
    deadline: Option<Duration>,
    cancel: &CancellationToken,
) -> Result<WaitEnd, MailboxError> {
    let started = Instant::now();
    loop {
        if let Some(reply) = mailbox.reply(run, seq)? {
            return Ok(WaitEnd::Answered(reply));
        }
        let left = deadline.map(|d| d.saturating_sub(started.elapsed()));
        if left.is_some_and(|l| l.is_zero()) {
            return Ok(WaitEnd::TimedOut);
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
