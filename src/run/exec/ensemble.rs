//! Running an `ensemble:`: its members at once, each an ordinary agent step (keyed,
//! cached, recorded and logged as itself), then the decision among their votes, which the
//! block routes on.
//!
//! Nothing about the decision is silent: a member that failed fails the block unless
//! `member_errors: exclude` was asked for, a tie or a disagreement under `unanimous` fails
//! it with the tally, and the tally and the decision are shown and kept in the block's
//! record.

use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use super::{Ctx, Done, worst};
use crate::pipeline::ensemble::{self, Ensemble, Rule, Vote};
use crate::pipeline::outline::Entry;
use crate::run::cell::Given;
use crate::run::failure::FailureKind;
use crate::run::transcript::Event;

/// Runs the ensemble at `entry`: members, decision, route.
pub(crate) async fn ensemble<'a>(
    ctx: &'a Ctx<'a>,
    entry: &Entry,
    e: &'a Ensemble<crate::pipeline::Step>,
    cancel: &CancellationToken,
) -> Done {
    let mark = super::record::log_mark(ctx);
    let results = join_all(e.agents.iter().map(|m| ctx.exec(m, cancel.clone()))).await;
    super::record::order_log(ctx, mark, &entry.path, super::record::Members::Children);
    if ctx.root.is_cancelled() {
        return Done::aborted();
    }
    let mut votes = Vec::new();
    let mut failed = Vec::new();
    for (member, done) in e.agents.iter().zip(&results) {
        let name = member.display_name();
        let vote = ctx.outline.entry(member).and_then(|m| vote_of(ctx, m.seq));
        match (done.is_ok(), vote) {
            (true, Some((verdict, note))) => votes.push(Vote {
                member: name,
                verdict,
                note,
            }),
            (true, None) => {
                let no_vote = Done::fail(FailureKind::NoVerdict, "it gave no verdict");
                failed.push((name, no_vote));
            }
            (false, _) => failed.push((name, done.clone())),
        }
    }
    if !failed.is_empty() && !e.excludes_errors() {
        let names: Vec<&str> = failed.iter().map(|(n, _)| n.as_str()).collect();
        let d = worst(&failed.iter().map(|(_, d)| d.clone()).collect::<Vec<_>>());
        return d.reworded(|why| format!(
            "ensemble: member {} did not vote ({why}); a failed member is not a vote (`member_errors: exclude` decides among the rest)",
            names.join(", "),
        ));
    }
    let excluded: Vec<String> = failed.into_iter().map(|(n, _)| n).collect();
    if !excluded.is_empty() {
        ctx.emit(Event::Notice {
            run: ctx.run,
            text: format!(
                "ensemble: {} excluded (failed); deciding among {} vote(s)",
                excluded.join(", "),
                votes.len()
            ),
        });
    }
    let choices = e.choices();
    let decided = match (e.rule(), &e.judge) {
        (Rule::Judge(agent), Some(judge)) if !votes.is_empty() => {
            judge_votes(ctx, agent, judge, &votes, &excluded, &choices, cancel).await
        }
        (rule, _) => ensemble::decide(rule, &votes, &choices)
            .map_err(|why| Done::failed(format!("ensemble ({}): {why}", rule_name(rule)))),
    };
    let tally = ensemble::tally(&votes);
    let decision = match decided {
        Ok(d) => d,
        Err(done) => return done,
    };
    ctx.emit(Event::Notice {
        run: ctx.run,
        text: format!(
            "ensemble decided `{decision}` ({}) from {tally}",
            rule_name(e.rule())
        ),
    });
    let (verdict, summary) = (decision.clone(), tally);
    super::record::update(ctx, entry.seq, move |r| {
        r.produced.verdict = Some(verdict);
        r.produced.stdout_tail = summary;
    })
    .await;
    let route = e
        .verdicts
        .iter()
        .flat_map(|v| v.value.pairs())
        .find(|(name, _)| *name == decision)
        .and_then(|(_, target)| target)
        .map(|t| t.value.clone())
        .filter(|t| t != "next");
    Done {
        route,
        ..Done::ok()
    }
}

/// The verdict a step recorded and what it said with it.
fn vote_of<'a>(ctx: &Ctx<'a>, seq: u32) -> Option<(String, String)> {
    ctx.state.with(|s| {
        let r = s.records.get(seq as usize)?;
        Some((r.produced.verdict.clone()?, r.produced.stdout_tail.clone()))
    })
}

/// Hands the votes to the judge's step and runs it; its verdict is the decision.
async fn judge_votes<'a>(
    ctx: &'a Ctx<'a>,
    agent: &str,
    judge: &'a crate::pipeline::At<crate::pipeline::Step>,
    votes: &[Vote],
    excluded: &[String],
    choices: &[String],
    cancel: &CancellationToken,
) -> Result<String, Done> {
    let Some(entry) = ctx.outline.entry(judge) else {
        return Err(Done::fail(
            FailureKind::Infrastructure,
            "the ensemble's judge is missing from the outline",
        ));
    };
    let votes = ensemble::judge_prompt(votes, excluded, choices);
    let done = ctx
        .exec_given(judge, cancel.clone(), Given::handed(&votes))
        .await;
    if !done.is_ok() {
        return Err(
            done.reworded(|why| format!("ensemble: the judge `{agent}` did not decide: {why}"))
        );
    }
    vote_of(ctx, entry.seq)
        .map(|(verdict, _)| verdict)
        .ok_or_else(|| {
            let why = format!("ensemble: the judge `{agent}` gave no verdict");
            Done::fail(FailureKind::NoVerdict, why)
        })
}

/// The rule's name as `decide:` spells it.
fn rule_name(rule: Rule<'_>) -> String {
    match rule {
        Rule::Majority => "majority".to_owned(),
        Rule::Unanimous => "unanimous".to_owned(),
        Rule::Any => "any".to_owned(),
        Rule::Judge(agent) => format!("judged by {agent}"),
    }
}
