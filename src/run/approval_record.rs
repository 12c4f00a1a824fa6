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
    /// Who may answer and how many must approve (`None`: anyone, one answer decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// Every answer taken, in the order they came (who, when, what).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<Vote>,
    /// When the deadline escalated it to `policy.escalate_to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalated_ms: Option<u64>,
}

impl ApprovalRecord {
    /// A pending record of step `seq` (`name`) of `run`, asked now, with nothing else set.
    pub fn asked(run: u64, seq: u32, name: &str, asked_ms: u64) -> Self {
        Self {
            run,
            seq,
            name: name.to_owned(),
            message: None,
            status: ApprovalStatus::Pending,
            asked_ms,
            deadline_ms: None,
            answered_ms: None,
            by: None,
            comment: None,
            on_timeout: None,
            question: None,
            value: None,
            policy: None,
            answers: Vec::new(),
            escalated_ms: None,
        }
    }
}

/// Who may answer an approval and how many must approve: what the run keeps of the step's
/// `assignees:`, `approvers:` and `escalate_to:`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// The user names allowed to answer (anyone when empty).
    #[serde(default)]
    pub assignees: Vec<String>,
    /// How many distinct people must approve; one rejection rejects.
    #[serde(default = "one")]
    pub approvers: u32,
    /// Who may answer once the deadline escalated it (one of them decides alone).
    #[serde(default)]
    pub escalate_to: Vec<String>,
    /// Whether the deadline has escalated it: from then on only `escalate_to` answers.
    #[serde(default)]
    pub escalated: bool,
}

fn one() -> u32 {
    1
}

impl Policy {
    /// Anyone may answer and one approval suffices: what an approval without a policy
    /// behaves like.
    pub fn trivial() -> Self {
        Self {
            approvers: 1,
            ..Self::default()
        }
    }

    /// Whether `by` may answer now.
    pub fn may_answer(&self, by: &str) -> bool {
        let names = self.answerers();
        names.is_empty() || names.iter().any(|n| n == by)
    }

    /// Who may answer now (anyone when empty).
    pub fn answerers(&self) -> &[String] {
        if self.escalated {
            &self.escalate_to
        } else {
            &self.assignees
        }
    }

    /// The decision `votes` make under this policy, if they make one: one rejection
    /// rejects, `approvers` distinct approvals approve, and once escalated one answer of
    /// `escalate_to` decides. Votes of people who may not answer now are not counted.
    pub fn tally<'v>(&self, votes: &'v [Vote]) -> Option<(Answer, &'v Vote)> {
        let counted: Vec<&Vote> = votes.iter().filter(|v| self.may_answer(&v.by)).collect();
        if let Some(no) = counted.iter().find(|v| v.answer == Answer::Reject) {
            return Some((Answer::Reject, no));
        }
        let need = if self.escalated {
            1
        } else {
            self.approvers.max(1)
        };
        let mut yes: Vec<&str> = counted.iter().map(|v| v.by.as_str()).collect();
        yes.sort_unstable();
        yes.dedup();
        let last = counted.last()?;
        (yes.len() >= need as usize).then_some((Answer::Approve, *last))
    }
}

/// One person's answer to an approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vote {
    /// Who answered.
    pub by: String,
    /// Approve or reject.
    pub answer: Answer,
    /// When (ms since the Unix epoch).
    pub at_ms: u64,
    /// Why, when they said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(by: &str, answer: Answer, at_ms: u64) -> Vote {
        Vote {
            by: by.to_owned(),
            answer,
            at_ms,
            comment: None,
        }
    }

    #[test]
    fn a_record_written_before_policies_reads_with_none() {
        let old = r#"{"run":3,"seq":1,"name":"deploy","message":"Ship?","status":"approved",
            "asked_ms":10,"deadline_ms":null,"answered_ms":20,"by":"pat","comment":null,
            "on_timeout":null}"#;
        let r: ApprovalRecord = serde_json::from_str(old).expect("an old record reads");
        assert_eq!(r.by.as_deref(), Some("pat"));
        assert!(r.policy.is_none() && r.answers.is_empty() && r.escalated_ms.is_none());
        let p: Policy = serde_json::from_str(r#"{"assignees":["a"]}"#).expect("policy");
        assert_eq!(p.approvers, 1, "a policy without approvers needs one");
    }

    #[test]
    fn the_tally_counts_distinct_assignees_and_one_rejection_rejects() {
        let policy = Policy {
            assignees: vec!["alice".into(), "bob".into()],
            approvers: 2,
            escalate_to: vec!["ops".into()],
            escalated: false,
        };
        let alice = vote("alice", Answer::Approve, 1);
        assert!(policy.tally(std::slice::from_ref(&alice)).is_none());
        // A stranger's file (written by hand) is not counted.
        let stranger = vote("mallory", Answer::Approve, 2);
        assert!(policy.tally(&[alice.clone(), stranger]).is_none());
        let both = [alice.clone(), vote("bob", Answer::Approve, 3)];
        assert_eq!(policy.tally(&both).map(|(a, _)| a), Some(Answer::Approve));
        let no = [alice.clone(), vote("bob", Answer::Reject, 3)];
        let (answer, by) = policy.tally(&no).expect("decided");
        assert_eq!((answer, by.by.as_str()), (Answer::Reject, "bob"));
        // Escalated: the assignees no longer count, one of escalate_to decides.
        let escalated = Policy {
            escalated: true,
            ..policy
        };
        assert!(escalated.tally(std::slice::from_ref(&alice)).is_none());
        let ops = [alice, vote("ops", Answer::Approve, 4)];
        assert_eq!(escalated.tally(&ops).map(|(a, _)| a), Some(Answer::Approve));
    }
}
