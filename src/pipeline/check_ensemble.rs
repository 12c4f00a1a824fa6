//! The checks of an `ensemble:` block: its vocabulary, its rule (`decide:`,
//! `member_errors:`) and its members. The block itself is in [`super::ensemble`].

use super::at::Pos;
use super::diagnostic::{Finding, Problem, did_you_mean};
use super::ensemble::{Ensemble, MEMBER_ERRORS, RULES, Rule};
use super::step::Step;
use super::step::StepKind;

/// The checks of an ensemble written at `pos`: its vocabulary, its rule, its members.
/// `agents` are the names under `agents:`.
pub fn check(e: &Ensemble<Step>, pos: Pos, agents: &[&str]) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut push = |pos: Pos, problem, message: String, hint: String| {
        out.push((pos, problem, message, hint));
    };
    let choices = e.choices();
    if choices.is_empty() {
        push(
            pos,
            Problem::MissingKey,
            "`ensemble` has no verdicts to vote in".to_owned(),
            "list them under `verdicts:`, e.g. `- approve: publish` and `- reject: revise`"
                .to_owned(),
        );
    }
    if e.agents.is_empty() {
        push(
            pos,
            Problem::MissingKey,
            "`ensemble` has no members".to_owned(),
            "list agent steps under `agents:`, e.g. `- {agent: reviewer-a, prompt: ...}`"
                .to_owned(),
        );
    }
    if let Some(m) = e
        .member_errors
        .as_ref()
        .filter(|m| !MEMBER_ERRORS.contains(&m.value.as_str()))
    {
        push(
            m.pos,
            Problem::InvalidValue,
            format!("`member_errors` is `{}`", m.value),
            "write `fail` (one failed member fails the block) or `exclude` (decide among the rest)"
                .to_owned(),
        );
    }
    let members: Vec<&str> = e
        .agents
        .iter()
        .filter_map(|m| match &m.kind {
            StepKind::Agent(call) => Some(call.agent.value.as_str()),
            _ => None,
        })
        .collect();
    if let (Rule::Judge(judge), Some(decide)) = (e.rule(), &e.decide) {
        if !agents.contains(&judge) {
            let near = did_you_mean(judge, RULES.iter().copied().chain(agents.iter().copied()));
            push(
                decide.pos,
                Problem::InvalidValue,
                format!("`decide` is `{judge}`, which is neither a rule nor an agent"),
                match near {
                    Some(n) => format!("did you mean `{n}`? write majority, unanimous, any, or the name of an agent that judges"),
                    None => "write majority, unanimous, any, or the name of an agent under `agents:` that judges".to_owned(),
                },
            );
        } else if members.contains(&judge) {
            push(
                decide.pos,
                Problem::InvalidValue,
                format!("agent `{judge}` both votes in the ensemble and judges it"),
                "a judge must not mark its own homework: name an agent that is not a member"
                    .to_owned(),
            );
        }
    }
    for m in &e.agents {
        let StepKind::Agent(call) = &m.kind else {
            push(
                m.pos,
                Problem::BadStep,
                "a member of an `ensemble` is not an agent step".to_owned(),
                "write each member as `{agent: NAME, prompt: ...}`".to_owned(),
            );
            continue;
        };
        if m.verdict_choices() != choices || !m.routes().is_empty() {
            let at = call
                .verdicts
                .as_ref()
                .and_then(|v| v.first())
                .map_or(m.pos, |v| v.pos);
            push(
                at,
                Problem::BadStep,
                format!("member `{}` of an `ensemble` has verdicts of its own", m.display_name()),
                "`verdicts:` belongs to the ensemble: every member votes in the block's vocabulary; remove it here"
                    .to_owned(),
            );
        }
    }
    out
}
