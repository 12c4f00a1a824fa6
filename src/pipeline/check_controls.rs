//! The checks of the control keys of agents, agent steps and jobs (`budget: { dollars }`,
//! `output_schema:`, `min_confidence:`, `escalate_to:`; the keys are in
//! [`super::controls`]), and of `keep_on_failure:` on a task or agent step.

use std::collections::HashMap;

use super::agent_call::AgentCall;
use super::agent_def::{Agent, Budget};
use super::at::Pos;
use super::diagnostic::{Finding, Problem};
use super::format::Job;
use super::model::DEFAULT_LOCAL_MODEL;
use super::settings::Prices;
use super::step::{Step, StepKind};
use super::walk::visit_job;

/// The names a model's price may be found under before it answers: as written, and as sent.
pub fn price_names(agent: &Agent) -> Vec<String> {
    match agent.source.model.as_ref() {
        Some(model) => {
            let mut names = vec![model.value.clone()];
            if let Some((_, rest)) = model.value.split_once('/') {
                names.push(rest.to_owned());
            }
            names
        }
        None => vec![
            format!("local/{}", DEFAULT_LOCAL_MODEL),
            DEFAULT_LOCAL_MODEL.to_owned(),
        ],
    }
}

/// Whether `prices:` has a price for the agent's model.
pub fn is_priced(agent: &Agent, prices: &Prices) -> bool {
    price_names(agent).iter().any(|n| prices.contains_key(n))
}

/// A dollar budget with no price to count against is refused at load: it could never
/// stop anything, and a limit that silently does nothing is worse than none.
fn dollars_findings(
    budget: Option<&Budget>,
    agent: &Agent,
    prices: &Prices,
    pos: Pos,
) -> Vec<Finding> {
    let Some(dollars) = budget.and_then(|b| b.dollars) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if !(dollars > 0.0 && dollars.is_finite()) {
        out.push((
            pos,
            Problem::InvalidValue,
            format!("`budget: {{ dollars: {dollars} }}` is not a positive amount"),
            "write the most US dollars the step may spend, e.g. `dollars: 0.50`".to_owned(),
        ));
    }
    // The claude CLI reports what it spent itself: no price needed. codex reports tokens,
    // priced like a hosted model's.
    let cli = agent
        .source
        .model
        .as_ref()
        .is_some_and(|m| m.value.starts_with("@claude/"));
    if !cli && !is_priced(agent, prices) {
        out.push((
            pos,
            Problem::InvalidValue,
            format!(
                "a dollar budget for agent `{}`, whose model `{}` has no price",
                agent.name.value,
                price_names(agent).join("` / `")
            ),
            format!(
                "add the model under `prices:` (`{}: {{ prompt: 0.15, completion: 0.60 }}`, \
                 US dollars per million tokens) or use `budget: {{ tokens: N }}`",
                price_names(agent).first().map_or("", String::as_str)
            ),
        ));
    }
    out
}

/// The checks of a job's dollar budget: every agent its steps use needs a price.
pub fn job_findings(job: &Job, agents: &HashMap<&str, &Agent>, prices: &Prices) -> Vec<Finding> {
    let mut out = Vec::new();
    if job.budget.as_ref().and_then(|b| b.dollars).is_none() {
        return out;
    }
    let mut seen = std::collections::BTreeSet::new();
    visit_job(job, &mut |step| {
        if let StepKind::Agent(call) = &step.kind
            && seen.insert(call.agent.value.clone())
            && let Some(agent) = agents.get(call.agent.value.as_str())
        {
            out.extend(dollars_findings(
                job.budget.as_ref(),
                agent,
                prices,
                call.agent.pos,
            ));
        }
    });
    out
}

/// The checks of an agent's own keys: its `permissions:` and its dollar budget.
pub fn agent_findings(agent: &Agent, prices: &Prices) -> Vec<Finding> {
    dollars_findings(agent.budget.as_ref(), agent, prices, agent.name.pos)
}

/// `keep_on_failure: true` keeps a failed step's outputs: on a step with none it would
/// read as set while keeping nothing, and an `across:` step's cells share one output.
pub fn keep_findings(step: &Step) -> Vec<Finding> {
    let Some(keep) = step.keep_on_failure.as_ref().filter(|k| k.value) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if step.outputs.is_empty() {
        out.push((
            keep.pos,
            Problem::BadStep,
            "`keep_on_failure:` on a step without `outputs:`".to_owned(),
            "declare the `outputs:` to keep when the step fails, or remove it".to_owned(),
        ));
    }
    if step.across.is_some() {
        out.push((
            keep.pos,
            Problem::BadStep,
            "`keep_on_failure:` on an `across:` step".to_owned(),
            "its cells write one output together; keep a step without `across:`".to_owned(),
        ));
    }
    out
}

/// The checks of an agent step's control keys, given its agent.
pub fn step_findings(
    step: &Step,
    call: &AgentCall,
    agent: &Agent,
    prices: &Prices,
) -> Vec<Finding> {
    let mut out = dollars_findings(call.budget.as_ref(), agent, prices, call.agent.pos);
    if let Some(typed) = &call.output_schema {
        if !step.outputs.iter().any(|o| o.value == typed.value.output) {
            out.push((
                typed.pos,
                Problem::BadStep,
                format!(
                    "`output_schema:` writes to `{}`, which is not one of the step's `outputs:`",
                    typed.value.output
                ),
                format!("add `outputs: [{}]` to the step", typed.value.output),
            ));
        }
        if let Err(e) = jsonschema::validator_for(&typed.value.schema) {
            out.push((
                typed.pos,
                Problem::InvalidValue,
                format!("`output_schema:` has an invalid JSON Schema: {e}"),
                "write a JSON Schema, e.g. `schema: { type: object, required: [title] }`"
                    .to_owned(),
            ));
        }
    }
    if let Some(min) = &call.min_confidence {
        if !(0.0..=1.0).contains(&min.value) {
            out.push((
                min.pos,
                Problem::InvalidValue,
                format!("`min_confidence: {}` is outside 0 to 1", min.value),
                "write a confidence between 0 and 1, e.g. `min_confidence: 0.8`".to_owned(),
            ));
        }
        if call.verdicts.is_none() {
            out.push((
                min.pos,
                Problem::BadStep,
                "`min_confidence:` on a step without `verdicts:`".to_owned(),
                "add `verdicts:` (the confidence is asked with each verdict) or remove it"
                    .to_owned(),
            ));
        }
    }
    if let Some(on) = &call.verdict_from_text
        && call.verdicts.is_none()
    {
        out.push((
            on.pos,
            Problem::BadStep,
            "`verdict_from_text:` on a step without `verdicts:`".to_owned(),
            "add `verdicts:` (a text answer is taken only when it is one of them) or remove it"
                .to_owned(),
        ));
    }
    // An `escalate_to:` naming no agent was reported when the step was typed.
    if let Some(to) = &call.escalate_to
        && call.min_confidence.is_none()
    {
        out.push((
            to.pos,
            Problem::BadStep,
            "`escalate_to:` without `min_confidence:`".to_owned(),
            "add `min_confidence: 0.8` (below it, the decision escalates)".to_owned(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(model: Option<&str>, dollars: Option<f64>) -> Agent {
        let yaml = format!(
            "name: a\nsource: {{ {} }}\n{}",
            model.map_or(String::new(), |m| format!("model: {m}")),
            dollars.map_or(String::new(), |d| format!("budget: {{ dollars: {d} }}\n"))
        );
        serde_saphyr::from_str(&yaml).unwrap()
    }

    #[test]
    fn a_dollar_budget_needs_a_price() {
        let mut prices = Prices::new();
        let a = agent(Some("openai/gpt-x"), Some(0.5));
        let found = agent_findings(&a, &prices);
        assert_eq!(found.len(), 1);
        assert!(found[0].2.contains("has no price"), "{found:?}");
        prices.insert(
            "gpt-x".into(),
            super::super::settings::ModelPrice::default(),
        );
        assert!(agent_findings(&a, &prices).is_empty());
        assert!(agent_findings(&agent(Some("openai/gpt-x"), None), &Prices::new()).is_empty());
    }
}
