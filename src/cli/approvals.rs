//! `treadle approvals`, `treadle approve` and `treadle reject`: list and answer the
//! approvals that running pipelines wait on, through the control directory beside the
//! state file (see `crate::run::approval`); the state file itself stays with the run.

use crate::console::say;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::EXIT_CONFIG;
use crate::clock::now_ms;
use crate::pipeline::duration::format_duration;
use crate::run::approval::mailbox::{Answer, Mailbox, Reply};

fn since(ms: u64, now: u64) -> String {
    format_duration(Duration::from_millis(now.saturating_sub(ms)))
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
    if pending.is_empty() {
        say!("no approvals waiting");
        return 0;
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
    for p in pending {
        let deadline = match p.deadline_ms {
            Some(d) if d > now => format!(
                "in {} → {}",
                format_duration(Duration::from_millis(d - now)),
                match p.on_timeout {
                    Answer::Approve => "approve",
                    Answer::Reject => "reject",
                }
            ),
            Some(_) => "passed".to_owned(),
            None => "none".to_owned(),
        };
        let mut message = p.message.clone().unwrap_or_default();
        if !p.alive() {
            message = format!("(its process {} is gone) {message}", p.pid);
        }
        say!(
            "{:>5} {:>5}  {:<20} {:<12} {:>8}  {:<22} {}",
            p.run,
            p.seq,
            p.name,
            p.job,
            since(p.asked_ms, now),
            deadline,
            message.lines().next().unwrap_or_default()
        );
    }
    0
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
    };
    match mailbox.answer(run, step, &reply) {
        Ok(p) => {
            let verb = match answer {
                Answer::Approve => "approved",
                Answer::Reject => "rejected",
            };
            say!("{verb} run {} step {} ({})", p.run, p.seq, p.name);
            0
        }
        Err(e) => {
            crate::console::tell!("{e}\nhint: `treadle approvals` lists the approvals waiting now");
            EXIT_CONFIG
        }
    }
}
