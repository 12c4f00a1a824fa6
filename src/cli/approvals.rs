//! `treadle approvals`, `treadle approve` and `treadle reject` without a server: list and
//! answer the approvals that running pipelines wait on, through the control directory beside
//! the state file (see `crate::run::approval`); the state file itself stays with the run.
//! The table printer is shared with the listing through a server (`super::remote`).

use crate::console::say;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::EXIT_CONFIG;
use crate::clock::now_ms;
use crate::pipeline::duration::format_duration;
use crate::run::approval::mailbox::{Answer, Mailbox, Reply};
use crate::run::approval::{Policy, Vote};

fn since(ms: u64, now: u64) -> String {
    format_duration(Duration::from_millis(now.saturating_sub(ms)))
}

/// One line of `treadle approvals`, from the control directory or from a server.
pub(super) struct Waiting {
    pub(super) run: u64,
    pub(super) seq: u32,
    pub(super) name: String,
    pub(super) job: String,
    pub(super) asked_ms: u64,
    pub(super) deadline_ms: Option<u64>,
    pub(super) on_timeout: Option<Answer>,
    pub(super) message: String,
    /// Who may answer and how many must approve (`None`: anyone, once).
    pub(super) policy: Option<Policy>,
    /// The answers taken so far.
    pub(super) answers: Vec<Vote>,
}

/// What the policy asks and who has answered, after the message: `[2 of alice, bob;
/// approved: alice]`, `[escalated: ops]`; empty without a policy.
pub(super) fn policy_note(policy: Option<&Policy>, answers: &[Vote]) -> String {
    let Some(policy) = policy else {
        return String::new();
    };
    let mut parts = Vec::new();
    let names = policy.answerers().join(", ");
    if policy.escalated {
        parts.push(format!("escalated: {names}"));
    } else if names.is_empty() {
        parts.push(format!("needs {} approvals", policy.approvers));
    } else {
        parts.push(format!("{} of {names}", policy.approvers));
    }
    let said: Vec<String> = answers
        .iter()
        .map(|v| match v.answer {
            Answer::Approve => format!("{} approved", v.by),
            Answer::Reject => format!("{} rejected", v.by),
        })
        .collect();
    if !said.is_empty() {
        parts.push(said.join(", "));
    }
    if !policy.escalated && !policy.escalate_to.is_empty() {
        parts.push(format!(
            "escalates to {} at the deadline",
            policy.escalate_to.join(", ")
        ));
    }
    format!(" [{}]", parts.join("; "))
}

pub(super) fn list(file: &Path, state: Option<PathBuf>) -> u8 {
    let mailbox = Mailbox::of_state(&crate::run::state_path(file, state));
    let pending = match mailbox.pending() {
        Ok(p) => p,
        Err(e) => {
            crate::console::tell!("{e}");
            return EXIT_CONFIG;
        }
    };
    let rows = pending.into_iter().map(|p| {
        let answers = mailbox.votes(p.run, p.seq).unwrap_or_default();
        let mut message = p.message.clone().unwrap_or_default();
        if !p.alive() {
            message = format!("(its process {} is gone) {message}", p.pid);
        }
        Waiting {
            run: p.run,
            seq: p.seq,
            name: p.name,
            job: p.job,
            asked_ms: p.asked_ms,
            deadline_ms: p.deadline_ms,
            on_timeout: Some(p.on_timeout),
            message,
            policy: p.policy,
            answers,
        }
    });
    print(rows.collect());
    0
}

/// Prints the waiting approvals as a table (one rule for both ways of listing them).
pub(super) fn print(rows: Vec<Waiting>) {
    if rows.is_empty() {
        say!("no approvals waiting");
        return;
    }
    let now = now_ms();
    say!(
        "{:>5} {:>5}  {:<20} {:<12} {:>8}  {:<22} message",
        "run",
        "step",
        "name",
        "job",
        "waiting",
        "deadline"
    );
    for p in rows {
        let escalates = p
            .policy
            .as_ref()
            .is_some_and(|x| !x.escalated && !x.escalate_to.is_empty());
        let on_timeout = if escalates { None } else { p.on_timeout };
        let deadline = match (p.deadline_ms, on_timeout) {
            (Some(d), Some(answer)) if d > now => format!(
                "in {} → {}",
                format_duration(Duration::from_millis(d - now)),
                match answer {
                    Answer::Approve => "approve",
                    Answer::Reject => "reject",
                }
            ),
            (Some(d), None) if d > now => {
                let then = if escalates { " → escalate" } else { "" };
                format!(
                    "in {}{then}",
                    format_duration(Duration::from_millis(d - now))
                )
            }
            (Some(_), _) => "passed".to_owned(),
            (None, _) => "none".to_owned(),
        };
        say!(
            "{:>5} {:>5}  {:<20} {:<12} {:>8}  {:<22} {}",
            p.run,
            p.seq,
            p.name,
            p.job,
            since(p.asked_ms, now),
            deadline,
            format!(
                "{}{}",
                p.message.lines().next().unwrap_or_default(),
                policy_note(p.policy.as_ref(), &p.answers)
            )
        );
    }
}

pub(super) fn answer(
    run: u64,
    step: &str,
    file: &Path,
    state: Option<PathBuf>,
    answer: Answer,
) -> u8 {
    let mailbox = Mailbox::of_state(&crate::run::state_path(file, state));
    let reply = Reply {
        answer,
        by: std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "someone".to_owned()),
        at_ms: now_ms(),
        comment: None,
        value: None,
    };
    match mailbox.answer(run, step, &reply) {
        Ok(p) => {
            let verb = match answer {
                Answer::Approve => "approved",
                Answer::Reject => "rejected",
            };
            let vote = match &p.policy {
                Some(policy) if policy.approvers > 1 && !policy.escalated => format!(
                    "; one of the {} approvals it needs (`treadle approvals` shows the others)",
                    policy.approvers
                ),
                _ => String::new(),
            };
            say!("{verb} run {} step {} ({}){vote}", p.run, p.seq, p.name);
            0
        }
        Err(e) => {
            crate::console::tell!("{e}\nhint: `treadle approvals` lists the approvals waiting now");
            EXIT_CONFIG
        }
    }
}
