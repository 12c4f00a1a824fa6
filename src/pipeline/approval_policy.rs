//! An approval step's policy, typed: who may answer (`assignees:`), how many must approve
//! (`approvers:`), and what its deadline does (`on_timeout: approve | reject | escalate`,
//! with `escalate_to:` and `escalate_timeout:`), with the checks that refuse a policy
//! nobody could satisfy. What the run keeps of it is `run::approval::Policy`.

use super::at::{At, Pos};
use super::diagnostic::{Finding, Problem};
use super::duration::DurationSpec;
use super::step_keys::Approval;

/// The values `on_timeout:` takes.
pub const ON_TIMEOUT: [&str; 3] = ["approve", "reject", "escalate"];

/// The policy of one approval step (all empty: anyone answers, one approval suffices).
#[derive(Debug, Clone, Default)]
pub struct ApprovalPolicy {
    /// The user names allowed to answer before the deadline (anyone when empty).
    pub assignees: Vec<At<String>>,
    /// How many distinct people must approve.
    pub approvers: Option<At<u32>>,
    /// Who may answer once the deadline escalated the approval.
    pub escalate_to: Vec<At<String>>,
    /// How long an escalated approval waits before it is rejected.
    pub escalate_timeout: Option<At<DurationSpec>>,
}

impl ApprovalPolicy {
    /// The policy written in the mapping form of `approval:` (none for the name form).
    pub fn of(approval: &Approval) -> Self {
        match approval {
            Approval::Name(_) => Self::default(),
            Approval::Spec(s) => Self {
                assignees: s.assignees.clone(),
                approvers: s.approvers.clone(),
                escalate_to: s.escalate_to.clone(),
                escalate_timeout: s.escalate_timeout.clone(),
            },
        }
    }

    /// How many approvals it takes.
    pub fn quorum(&self) -> u32 {
        self.approvers.as_ref().map_or(1, |a| a.value)
    }

    /// What is wrong with it given the step's `on_timeout:` and whether it has a
    /// `timeout:`; `at` locates problems of keys that are not written.
    pub fn problems(
        &self,
        on_timeout: Option<&At<String>>,
        has_deadline: bool,
        at: Pos,
    ) -> Vec<Finding> {
        let mut out = Vec::new();
        let mut push = |pos: Pos, message: String, hint: &str| {
            out.push((pos, Problem::InvalidValue, message, hint.to_owned()));
        };
        if let Some(n) = &self.approvers {
            let named = self.assignees.len();
            if n.value == 0 {
                push(
                    n.pos,
                    "`approvers` is 0: nobody's approval would be needed".to_owned(),
                    "write `approvers: 1` or more, or leave it out (one approval)",
                );
            } else if named > 0 && n.value as usize > named {
                push(
                    n.pos,
                    format!(
                        "`approvers: {}` but only {named} `assignees` may answer",
                        n.value
                    ),
                    "name at least as many `assignees` as `approvers`, or lower `approvers`",
                );
            }
        }
        let escalates = on_timeout.is_some_and(|t| t.value == "escalate");
        if let Some(t) = on_timeout {
            if !ON_TIMEOUT.contains(&t.value.as_str()) {
                push(
                    t.pos,
                    format!("`on_timeout` is `{}`", t.value),
                    "write `on_timeout: approve`, `reject` or `escalate`",
                );
            } else if !has_deadline {
                push(
                    t.pos,
                    "`on_timeout` without a `timeout`".to_owned(),
                    "add `timeout: 30m` (the deadline on_timeout answers at)",
                );
            } else if escalates && self.escalate_to.is_empty() {
                push(
                    t.pos,
                    "`on_timeout: escalate` without `escalate_to`".to_owned(),
                    "add `escalate_to: [NAME, ...]`: who may answer after the deadline",
                );
            }
        }
        if !escalates {
            let stray = self.escalate_to.first().map(|e| (e.pos, "escalate_to"));
            let stray = stray.or(self
                .escalate_timeout
                .as_ref()
                .map(|e| (e.pos, "escalate_timeout")));
            if let Some((pos, key)) = stray {
                push(
                    if pos == Pos::default() { at } else { pos },
                    format!("`{key}` without `on_timeout: escalate`"),
                    "add `on_timeout: escalate` (with a `timeout:`), or remove it",
                );
            }
        }
        out
    }
}
