//! What the state file records of an approval (its status, who answered and when) and
//! the answer itself: plain records, which the state file and the approval mailbox both
//! read.

use serde::{Deserialize, Serialize};

/// An answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// Go on.
    Approve,
    /// Fail the step.
    Reject,
}

impl Answer {
    /// `approve` or `reject`, as written in `on_timeout:`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "approve" => Some(Self::Approve),
            "reject" => Some(Self::Reject),
            _ => None,
        }
    }
}

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
    pub on_timeout: Option<Answer>,
    /// The question, when the step asks for a value (an `input:` step, an `ask_human`
    /// call) instead of a yes or no.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<treadle_session::HumanQuestion>,
    /// The value given (or taken at the deadline) for the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
}
