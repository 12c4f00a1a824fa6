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
//! # Deadlines and headless runs
//!
//! An approval's `timeout:` is its deadline, and `on_timeout: approve | reject` (default
//! `reject`) decides when it passes. A run whose standard input is not a terminal (CI,
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
pub mod step;

use serde::{Deserialize, Serialize};

use super::state::Store;

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for an answer.
    Pending,
    /// Approved: the run went on.
    Approved,
    /// Rejected: the step failed.
    Rejected,
    /// The run was interrupted while waiting.
    Aborted,
}

impl ApprovalStatus {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Aborted => "aborted",
        }
    }
}

/// One approval, as the state file records it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalRecord {
    /// The run.
    pub run: u64,
    /// The step's number in the run (as `treadle approve RUN N` takes it).
    pub seq: u32,
    /// The step's name.
    pub name: String,
    /// The step's `message:`.
    #[serde(default)]
    pub message: Option<String>,
    /// Where it stands.
    pub status: ApprovalStatus,
    /// When it was asked, in milliseconds since the Unix epoch.
    pub asked_ms: u64,
    /// When it times out, if it has a `timeout:`.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// When it was answered.
    #[serde(default)]
    pub answered_ms: Option<u64>,
    /// Who or what answered: a user name, `timeout`, `headless`.
    #[serde(default)]
    pub by: Option<String>,
    /// Why, when the person who answered said.
    #[serde(default)]
    pub comment: Option<String>,
    /// What the deadline answers, when there is one.
    #[serde(default)]
    pub on_timeout: Option<mailbox::Answer>,
    /// The question, when the step asks for a value (an `input:` step, an `ask_human`
    /// call) instead of a yes or no.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<treadle_session::HumanQuestion>,
    /// The value given (or taken at the deadline) for the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
}

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
