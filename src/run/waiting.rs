//! What a running run waits on: a person's approval or answer, read from its pending
//! approval records, with the deadline and what the deadline decides. `treadle runs`, the
//! API's run (`waiting`) and the page show it, so a run parked on a person does not read
//! as merely "running".

use serde::{Deserialize, Serialize};

use super::approval_record::{Answer, ApprovalRecord, ApprovalStatus};

/// What a run waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// `approval` (a yes or no) or `answer` (a value: an `input:` step, `ask_human`).
    pub kind: String,
    /// The step that asks.
    pub step: String,
    /// Its number in the run (as `treadle approve RUN N` takes it).
    pub seq: u32,
    /// When the wait ends by itself (ms since the Unix epoch), if it has a `timeout:`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// What the deadline decides: `approve` or `reject` (an answer's deadline takes its
    /// default, and says nothing here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<String>,
}

impl Waiting {
    /// What run `run` waits on now: its first pending record, if any.
    pub fn of_run(approvals: &[ApprovalRecord], run: u64) -> Option<Self> {
        let r = approvals
            .iter()
            .filter(|a| a.run == run && a.status == ApprovalStatus::Pending)
            .min_by_key(|a| a.seq)?;
        let kind = match r.question {
            Some(_) => "answer",
            None => "approval",
        };
        Some(Self {
            kind: kind.to_owned(),
            step: r.name.clone(),
            seq: r.seq,
            deadline_ms: r.deadline_ms,
            on_timeout: r.on_timeout.map(|a| {
                match a {
                    Answer::Approve => "approve",
                    Answer::Reject => "reject",
                }
                .to_owned()
            }),
        })
    }

    /// The status a list shows: `waiting for approval` or `waiting for an answer`.
    pub fn status(&self) -> &'static str {
        match self.kind.as_str() {
            "answer" => "waiting for an answer",
            _ => "waiting for approval",
        }
    }

    /// The rest, as of `now_ms`: `` `gate` (step 3): 14m05s left, then reject ``.
    pub fn detail(&self, now_ms: u64) -> String {
        let deadline = match self.deadline_ms {
            Some(at) => {
                let left = std::time::Duration::from_millis(at.saturating_sub(now_ms));
                let then = self
                    .on_timeout
                    .as_ref()
                    .map_or(String::new(), |t| format!(", then {t}"));
                format!(
                    ": {} left{then}",
                    crate::pipeline::duration::format_duration(left)
                )
            }
            None => ": no deadline".to_owned(),
        };
        format!("`{}` (step {}){deadline}", self.step, self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_approval_is_what_its_run_waits_on() {
        let mut gate = ApprovalRecord::asked(4, 2, "gate", 1_000);
        gate.deadline_ms = Some(1_000 + 15 * 60 * 1000);
        gate.on_timeout = Some(Answer::Reject);
        let mut done = ApprovalRecord::asked(3, 1, "old", 0);
        done.status = ApprovalStatus::Approved;
        let all = [done, gate];
        assert!(Waiting::of_run(&all, 3).is_none());
        let w = Waiting::of_run(&all, 4).expect("waits");
        assert_eq!(w.status(), "waiting for approval");
        assert_eq!(w.detail(1_000), "`gate` (step 2): 15m00s left, then reject");
    }
}
