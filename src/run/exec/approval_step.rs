//! Running an approval step: record it, publish it in the control directory, take answers
//! until its policy decides, its deadline passes (approve, reject, or escalate and wait
//! again) or Ctrl-C, and record how it ended.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::pipeline::approval_policy::ApprovalPolicy;
use crate::pipeline::duration::format_duration;
use crate::pipeline::outline::Entry;
use crate::pipeline::{At, Step};
use crate::run::approval::mailbox::{Answer, Mailbox, MailboxError, Pending};
use crate::run::approval::quorum::{OnTimeout, Turn, next_turn};
use crate::run::approval::{ApprovalRecord, ApprovalStatus, Policy, Vote};
use crate::run::exec::{Ctx, Done};
use crate::run::failure::FailureKind;
use crate::run::transcript::Event;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What the step's kind holds: its message, `on_timeout:` and policy.
pub(crate) struct Asked<'a> {
    pub(crate) message: &'a Option<String>,
    pub(crate) on_timeout: Option<&'a At<String>>,
    pub(crate) policy: &'a ApprovalPolicy,
}

/// How the wait ended.
enum End {
    /// The votes decided: approve or reject, by whom.
    Decided(Answer, String),
    /// The deadline answered (`on_timeout`), or the escalation's deadline rejected.
    TimedOut(Answer, bool),
    /// Ctrl-C, or the run was stopped.
    Aborted,
}

/// One approval being waited on: what it publishes and what it records as it goes.
struct Wait<'a> {
    ctx: &'a Ctx<'a>,
    entry: &'a Entry,
    mailbox: Mailbox,
    pending: Pending,
    record: ApprovalRecord,
    /// The policy the votes are counted under (anyone, one answer, when none is written).
    policy: Policy,
    on_timeout: OnTimeout,
    /// `escalate_timeout:`.
    escalate_after: Option<Duration>,
}

/// Runs an `approval:` step; its `timeout:` is the deadline (the walker does not apply
/// it, so that `on_timeout` can decide).
pub(crate) async fn approval<'a>(
    ctx: &'a Ctx<'a>,
    step: &'a Step,
    asked: Asked<'a>,
    entry: &'a Entry,
    cancel: CancellationToken,
) -> Done {
    let deadline = step.timeout.as_ref().map(|t| t.value.0);
    let on_timeout = OnTimeout::parse(asked.on_timeout.map(|t| t.value.as_str()));
    let mut record = first_record(ctx, entry, &asked, deadline, on_timeout);
    // Fail closed: without a deadline, a run nobody watches would wait forever.
    if deadline.is_none() && !ctx.answerable && !std::io::stdin().is_terminal() {
        record.status = ApprovalStatus::Rejected;
        record.answered_ms = Some(record.asked_ms);
        record.by = Some("headless".to_owned());
        record_approval(ctx, &record).await;
        return Done::fail(
            FailureKind::Declined,
            format!(
                "approval `{}` was rejected: this run is headless (stdin is not a terminal) and \
             the approval has no `timeout:`; give it one to wait for `treadle approve`",
                entry.name
            ),
        );
    }
    record_approval(ctx, &record).await;
    let pending = Pending {
        run: ctx.run,
        seq: entry.seq,
        name: entry.name.clone(),
        message: asked.message.clone(),
        job: ctx.job.name.value.clone(),
        asked_ms: record.asked_ms,
        deadline_ms: record.deadline_ms,
        on_timeout: record.on_timeout.unwrap_or(Answer::Reject),
        pid: std::process::id(),
        question: None,
        policy: record.policy.clone(),
    };
    let mailbox = Mailbox::of_state(ctx.store.path());
    if let Err(e) = mailbox.park(&pending) {
        return Done::fail(
            FailureKind::Infrastructure,
            format!("cannot park the run for approval: {e}"),
        );
    }
    let mut wait = Wait {
        ctx,
        entry,
        mailbox,
        pending,
        policy: record.policy.clone().unwrap_or_default(),
        record,
        on_timeout,
        escalate_after: asked.policy.escalate_timeout.as_ref().map(|t| t.value.0),
    };
    wait.announce(deadline, None);
    let end = wait.wait(deadline, &cancel).await;
    let cleared = wait.mailbox.clear(ctx.run, entry.seq);
    wait.settle(end, cleared).await
}

/// The record of an approval just asked.
fn first_record(
    ctx: &Ctx<'_>,
    entry: &Entry,
    asked: &Asked<'_>,
    deadline: Option<Duration>,
    on_timeout: OnTimeout,
) -> ApprovalRecord {
    let mut record = ApprovalRecord::asked(ctx.run, entry.seq, &entry.name, now_ms());
    record.message = asked.message.clone();
    record.deadline_ms = deadline.map(|d| record.asked_ms.saturating_add(millis(d)));
    record.on_timeout = match (deadline, on_timeout) {
        (Some(_), OnTimeout::Answer(a)) => Some(a),
        _ => None,
    };
    // No policy written: the single-answer mailbox, first answer wins, as before policies.
    let policy = runtime(asked.policy);
    record.policy = (policy != Policy::default() && policy != Policy::trivial()).then_some(policy);
    record
}

impl Wait<'_> {
    /// Takes answers until the policy decides, the deadline passes or `cancel` fires.
    async fn wait(&mut self, deadline: Option<Duration>, cancel: &CancellationToken) -> End {
        let key = (self.ctx.run, self.entry.seq);
        let mut until = deadline.map(|d| Instant::now() + d);
        let mut seen = 0;
        loop {
            let turn = match next_turn(&self.mailbox, key, seen, until, cancel).await {
                Ok(t) => t,
                Err(e) => return self.broken(e),
            };
            match turn {
                Turn::Aborted => return End::Aborted,
                Turn::Votes(votes) => {
                    seen = votes.len();
                    let decided = self.policy.tally(&votes).map(|(a, _)| a);
                    self.record.answers = votes;
                    if let Some(answer) = decided {
                        return End::Decided(answer, self.deciders(answer));
                    }
                    record_approval(self.ctx, &self.record).await;
                }
                Turn::Deadline => match (self.on_timeout, self.policy.escalated) {
                    (OnTimeout::Escalate, false) => {
                        until = self.escalate_after.map(|d| Instant::now() + d);
                        if let Err(e) = self.escalate().await {
                            return self.broken(e);
                        }
                    }
                    (OnTimeout::Escalate, true) => return End::TimedOut(Answer::Reject, true),
                    (OnTimeout::Answer(a), _) => return End::TimedOut(a, false),
                },
            }
        }
    }

    /// A control directory that cannot be read ends the wait as aborted (and says why).
    fn broken(&mut self, e: MailboxError) -> End {
        self.record.comment = Some(e.to_string());
        End::Aborted
    }

    /// Who decided: the one who rejected, or everyone whose approval counted.
    fn deciders(&self, answer: Answer) -> String {
        let mut names: Vec<&str> = Vec::new();
        for v in &self.record.answers {
            if v.answer == answer && self.policy.may_answer(&v.by) && !names.contains(&&*v.by) {
                names.push(&v.by);
            }
        }
        match answer {
            Answer::Reject => names.first().copied().unwrap_or("someone").to_owned(),
            Answer::Approve => names.join(", "),
        }
    }

    /// The deadline passed with `on_timeout: escalate`: from now on `escalate_to` answers.
    async fn escalate(&mut self) -> Result<(), MailboxError> {
        let now = now_ms();
        self.policy.escalated = true;
        let deadline_ms = self.escalate_after.map(|d| now.saturating_add(millis(d)));
        self.record.policy = Some(self.policy.clone());
        self.record.escalated_ms = Some(now);
        self.record.deadline_ms = deadline_ms;
        self.pending.policy = Some(self.policy.clone());
        self.pending.deadline_ms = deadline_ms;
        self.mailbox.update(&self.pending)?;
        record_approval(self.ctx, &self.record).await;
        let to = self.policy.escalate_to.join(", ");
        self.announce(self.escalate_after, Some(&to));
        Ok(())
    }

    /// Records how the wait ended and what the step does about it.
    async fn settle(mut self, end: End, cleared: Result<(), MailboxError>) -> Done {
        let (ctx, name) = (self.ctx, &self.entry.name);
        let (status, by) = match &end {
            End::Decided(a, by) => (status_of(*a), by.clone()),
            End::TimedOut(a, _) => (status_of(*a), "timeout".to_owned()),
            End::Aborted => (ApprovalStatus::Aborted, "treadle".to_owned()),
        };
        self.record.status = status;
        self.record.answered_ms = Some(now_ms());
        self.record.by = Some(by.clone());
        let last = last_word(&self.record.answers, &end);
        if self.record.comment.is_none() {
            self.record.comment = last.and_then(|v| v.comment.clone());
        }
        record_approval(ctx, &self.record).await;
        if let Err(e) = cleared {
            return Done::fail(
                FailureKind::Infrastructure,
                format!("approval `{name}`: {e}"),
            );
        }
        if let (End::Aborted, Some(why)) = (&end, &self.record.comment) {
            return Done::errored(format!("approval `{name}`: {why}"));
        }
        let (run, seq) = (ctx.run, self.entry.seq);
        ctx.emit(Event::ApprovalAnswered {
            run,
            seq,
            status,
            by: by.clone(),
        });
        match (end, status) {
            (End::Aborted, _) => ctx.cancelled(),
            (_, ApprovalStatus::Approved) => Done::ok(),
            (End::TimedOut(_, true), _) => Done::fail(
                FailureKind::Timeout,
                format!(
                    "approval `{name}` was escalated to {} and got no answer before its \
                 `escalate_timeout`: rejected",
                    self.policy.escalate_to.join(", ")
                ),
            ),
            (End::TimedOut(..), _) => Done::fail(
                FailureKind::Timeout,
                format!("approval `{name}` timed out and was rejected (on_timeout)"),
            ),
            _ => Done::fail(
                FailureKind::Declined,
                format!("approval `{name}` was rejected by {by}"),
            ),
        }
    }

    /// Shows that the run waits, and how to answer; `escalated` names who answers now.
    fn announce(&self, deadline: Option<Duration>, escalated: Option<&str>) {
        let (run, seq) = (self.ctx.run, self.entry.seq);
        let answer = format!("{run} {seq}{}", answer_args(self.ctx));
        let then = match escalated {
            Some(_) => "reject",
            None => self.on_timeout.as_str(),
        };
        let wait = deadline.map_or_else(String::new, |d| {
            format!(" (on_timeout after {}: {then})", format_duration(d))
        });
        let who = match (escalated, self.policy.answerers()) {
            (Some(to), _) => format!("; escalated at its deadline: now only {to} may answer"),
            (None, []) => String::new(),
            (None, names) => format!("; only {} may answer", names.join(", ")),
        };
        let quorum = match self.policy.approvers {
            n if n > 1 && escalated.is_none() => format!("; {n} approvals needed"),
            _ => String::new(),
        };
        self.ctx.emit(Event::ApprovalWaiting {
            run,
            seq,
            name: self.entry.name.clone(),
            message: self.pending.message.clone(),
            deadline_ms: self.pending.deadline_ms,
            summary: format!(
                "waiting for approval: `treadle approve {answer}` or `treadle reject \
                 {answer}`{wait}{who}{quorum}"
            ),
        });
    }
}

/// What the run keeps of the step's policy.
fn runtime(policy: &ApprovalPolicy) -> Policy {
    use crate::pipeline::at::values;
    Policy {
        assignees: values(&policy.assignees),
        approvers: policy.quorum(),
        escalate_to: values(&policy.escalate_to),
        escalated: false,
    }
}

/// The answer that ended the wait, whose comment the record keeps.
fn last_word<'v>(votes: &'v [Vote], end: &End) -> Option<&'v Vote> {
    match end {
        End::Decided(a, _) => votes.iter().rev().find(|v| v.answer == *a),
        _ => None,
    }
}

/// The status an answer gives an approval's record.
fn status_of(answer: Answer) -> ApprovalStatus {
    crate::run::approval::step::status_of(answer)
}

/// The arguments after `RUN N` that `treadle approve` needs to find this run's state.
pub(crate) fn answer_args<'a>(ctx: &Ctx<'a>) -> String {
    let file = ctx.loaded.file.display().to_string();
    let default = crate::run::state_path(&ctx.loaded.file, None);
    if ctx.store.path() == default {
        if file == crate::pipeline::DEFAULT_FILE {
            String::new()
        } else {
            format!(" {file}")
        }
    } else {
        format!(" --state {}", ctx.store.path().display())
    }
}

async fn record_approval<'a>(ctx: &Ctx<'a>, record: &ApprovalRecord) {
    let record = record.clone();
    super::record::write_state(ctx, move |store| store.put_approval(&record)).await;
}
