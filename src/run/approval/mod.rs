//! Approval steps: a run parks until a person answers, from another terminal.
//!
//! # Design
//!
//! The running `treadle run` holds `.treadle/state.redb` open, and redb lets one process
//! open a file at a time, so `treadle approve` cannot write the answer into the state
//! file. Instead the two processes meet in a small control directory beside it,
//! `.treadle/state.approvals/` (named after the state file, so `--state` files do not
//! share one), see [`mailbox`]:
//!
//! * the waiting run records the approval in the state file as `pending` (that is the
//!   durable record) and writes `RUN-SEQ.pending.json` (who waits, for what, until when);
//! * `treadle approvals` lists the pending files; `treadle approve RUN N` and
//!   `treadle reject RUN N` write `RUN-SEQ.answer.json`, atomically and first answer wins
//!   (a hard link of a complete temporary file);
//! * the waiting run polls for the answer (every [`mailbox::POLL`]), records it in the
//!   state file itself, and removes both files.
//!
//! A step can also park a *question* (see [`question`]): the pending file then carries
//! the question and the JSON Schema of its answer, and `treadle answer RUN STEP --json
//! '...'` writes the value, refused with the reason when it does not fit. `input:` steps
//! and an agent's `ask_human` calls ask this way.
//!
//! Files instead of a socket: nothing to keep listening, an answer given while the run is
//! between polls is not lost, and everything is plain files a person can inspect.
//!
//! # Who answers, how many, and deadlines
//!
//! An approval's `assignees:` are the only names whose answers are taken (the mailbox
//! refuses anyone else before writing anything); `approvers: N` needs N distinct
//! approvals, and one rejection rejects. Each answer is kept in the approval's record
//! (who, when, what), as it comes. See [`quorum`].
//!
//! An approval's `timeout:` is its deadline, and `on_timeout: approve | reject | escalate`
//! (default `reject`) decides when it passes. `escalate` keeps the step waiting, from then
//! on for one answer of `escalate_to:` (the assignees' turn is over), until the optional
//! `escalate_timeout:`, which rejects. A run whose standard input is not a terminal (CI,
//! a test) is headless: an approval there without a `timeout:` is rejected at once, since
//! it could wait forever for nobody (fail closed). With a `timeout:` it waits for an
//! answer from `treadle approve` up to the deadline, headless or not.
//!
//! # Agent steps' questions
//!
//! An agent step's `permissions:` rule that says `ask`, and a verdict below its
//! `min_confidence:`, park the same way under the agent step's number ([`ask`]), with the
//! step's `timeout:` as the deadline.

pub(crate) mod ask;
pub mod mailbox;
pub mod question;
pub(crate) mod quorum;
pub mod step;

use super::state::Store;

pub use super::approval_record::{ApprovalRecord, ApprovalStatus, Policy, Vote};

/// Closes the approvals a killed run left waiting (SIGKILL gives it no chance to): each
/// is recorded as aborted and its control files are removed, so `treadle approvals` no
/// longer lists it. Called when that run is resumed, which proves it is over.
pub fn close_abandoned(store: &Store, run: u64) -> Result<(), CloseError> {
    let mailbox = mailbox::Mailbox::of_state(store.path());
    let waiting = mailbox.pending()?;
    for p in waiting.iter().filter(|p| p.run == run) {
        mailbox.clear(p.run, p.seq)?;
    }
    let records = store.approvals()?;
    for mut r in records
        .into_iter()
        .filter(|r| r.run == run && r.status == ApprovalStatus::Pending)
    {
        r.status = ApprovalStatus::Aborted;
        store.put_approval(&r)?;
    }
    Ok(())
}

/// Why a killed run's waiting approvals could not be closed.
#[derive(Debug, thiserror::Error)]
pub enum CloseError {
    /// The control directory.
    #[error(transparent)]
    Mailbox(#[from] mailbox::MailboxError),
    /// The state file.
    #[error(transparent)]
    State(#[from] super::state::StateError),
}
