//! Running an approval step: record it, publish it in the control directory, wait for an
//! answer, the deadline or Ctrl-C, and record how it ended.

use std::io::IsTerminal;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::pipeline::duration::format_duration;
use crate::pipeline::outline::Entry;
use crate::pipeline::{At, Step};
use crate::run::approval::mailbox::{Answer, Mailbox, Pending};
use crate::run::approval::step::{WaitEnd, status_of, wait_for};
use crate::run::approval::{ApprovalRecord, ApprovalStatus};
use crate::run::exec::{Ctx, Done};
use crate::run::transcript::Event;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Runs an `approval:` step; its `timeout:` is the deadline (the walker does not apply
/// it, so that `on_timeout` can decide).
pub(crate) async fn approval<'a>(
    ctx: &'a Ctx<'a>,
    step: &'a Step,
    (message, on_timeout): (&'a Option<String>, Option<&'a At<String>>),
    entry: &'a Entry,
    cancel: CancellationToken,
) -> Done {
    let deadline = step.timeout.as_ref().map(|t| t.value.0);
    let on_timeout = on_timeout
        .and_then(|t| Answer::parse(&t.value))
        .unwrap_or(Answer::Reject);
    let asked_ms = now_ms();
    let mut record = ApprovalRecord {
        run: ctx.run,
        seq: entry.seq,
        name: entry.name.clone(),
        message: message.clone(),
        status: ApprovalStatus::Pending,
        asked_ms,
        deadline_ms: deadline.map(|d| asked_ms.saturating_add(millis(d))),
        answered_ms: None,
        by: None,
        comment: None,
        on_timeout: deadline.map(|_| on_timeout),
        question: None,
        value: None,
    };
    // Fail closed: without a deadline, a run nobody watches would wait forever.
    if deadline.is_none() && !ctx.answerable && !std::io::stdin().is_terminal() {
        record.status = ApprovalStatus::Rejected;
        record.answered_ms = Some(asked_ms);
        record.by = Some("headless".to_owned());
        record_approval(ctx, &record).await;
        return Done::failed(format!(
            "approval `{}` was rejected: this run is headless (stdin is not a terminal) and \
             the approval has no `timeout:`; give it one to wait for `treadle approve`",
            entry.name
        ));
    }
    record_approval(ctx, &record).await;
    let mailbox = Mailbox::of_state(ctx.store.path());
    let pending = Pending {
        run: ctx.run,
        seq: entry.seq,
        name: entry.name.clone(),
        message: message.clone(),
        job: ctx.job.name.value.clone(),
        asked_ms,
        deadline_ms: record.deadline_ms,
        on_timeout,
        pid: std::process::id(),
        question: None,
    };
    if let Err(e) = mailbox.park(&pending) {
        return Done::errored(format!("cannot park the run for approval: {e}"));
    }
    let (run, seq) = (ctx.run, entry.seq);
    announce(ctx, step, entry, &pending);
    let outcome = wait_for(&mailbox, run, seq, deadline, on_timeout, &cancel).await;
    let cleared = mailbox.clear(run, seq);
    let (status, by) = match &outcome {
        Ok(WaitEnd::Answered(r)) => (status_of(r.answer), r.by.clone()),
        Ok(WaitEnd::TimedOut(a)) => (status_of(*a), "timeout".to_owned()),
        Ok(WaitEnd::Aborted) | Err(_) => (ApprovalStatus::Aborted, "treadle".to_owned()),
    };
    record.status = status;
    record.answered_ms = Some(now_ms());
    record.by = Some(by.clone());
    if let Ok(WaitEnd::Answered(r)) = &outcome {
        record.comment = r.comment.clone();
    }
    record_approval(ctx, &record).await;
    let outcome = match (outcome, cleared) {
        (Err(e), _) | (Ok(_), Err(e)) => {
            return Done::errored(format!("approval `{}`: {e}", entry.name));
        }
        (Ok(o), Ok(())) => o,
    };
    ctx.emit(Event::ApprovalAnswered {
        run,
        seq,
        status,
        by: by.clone(),
    });
    match (outcome, status) {
        (WaitEnd::Aborted, _) => ctx.cancelled(),
        (_, ApprovalStatus::Approved) => Done::ok(),
        (WaitEnd::TimedOut(_), _) => Done::failed(format!(
            "approval `{}` timed out and was rejected (on_timeout)",
            entry.name
        )),
        _ => Done::failed(format!("approval `{}` was rejected by {by}", entry.name)),
    }
}

/// Shows that the run waits, and how to answer.
fn announce<'a>(ctx: &Ctx<'a>, step: &Step, entry: &Entry, pending: &Pending) {
    let (run, seq) = (ctx.run, entry.seq);
    let answer = format!("{run} {seq}{}", answer_args(ctx));
    let deadline = step.timeout.as_ref().map(|t| t.value.0);
    let wait = deadline.map_or_else(String::new, |d| {
        let then = match pending.on_timeout {
            Answer::Approve => "approve",
            Answer::Reject => "reject",
        };
        format!(" (on_timeout after {}: {then})", format_duration(d))
    });
    ctx.emit(Event::ApprovalWaiting {
        run,
        seq,
        name: entry.name.clone(),
        message: pending.message.clone(),
        deadline_ms: pending.deadline_ms,
        summary: format!(
            "waiting for approval: `treadle approve {answer}` or `treadle reject {answer}`{wait}"
        ),
    });
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
