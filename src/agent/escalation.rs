//! Decisions with confidence: when a verdict's confidence is below the step's
//! `min_confidence:`, and what the escalation records and asks.
//!
//! The runner ([`super::step`]) does the escalating (it owns the sessions); this module holds
//! the rules: which outcomes escalate, the question a person reads, how an answer or a
//! stronger model's decision changes the outcome.

use super::controls::{Answered, ConfidenceFloor};
use super::cost::Cost;
use super::record::{AgentOutcome, AgentStatus, EscalationRecord};

/// A verdict that needs escalating: it was given, the step succeeded, and its confidence
/// (missing counts as 0) is below the floor.
pub(crate) fn below(floor: &ConfidenceFloor, outcome: &AgentOutcome) -> Option<EscalationRecord> {
    let verdict = outcome.verdict.clone()?;
    if !outcome.status.is_success() {
        return None;
    }
    let confidence = outcome.confidence.unwrap_or(0.0);
    (confidence < floor.min).then(|| EscalationRecord {
        verdict,
        confidence,
        min_confidence: floor.min,
        note: outcome.verdict_reason.clone().unwrap_or_default(),
        to: String::new(),
        result: String::new(),
    })
}

/// What a person reads: the step, the verdict, its confidence and the model's note.
pub(crate) fn question(step: &str, low: &EscalationRecord) -> String {
    let note = if low.note.trim().is_empty() {
        "(none given)"
    } else {
        low.note.trim()
    };
    format!(
        "Agent step `{step}` chose `{}` with confidence {:.2}, below min_confidence {:.2}. \
         The model's note: {note} Approve to accept the verdict, reject to fail the step.",
        low.verdict, low.confidence, low.min_confidence
    )
}

/// Applies a person's answer: approved keeps the verdict, rejected fails the step.
pub(crate) fn answered(
    mut outcome: AgentOutcome,
    mut low: EscalationRecord,
    answer: &Answered,
) -> AgentOutcome {
    low.to = "human".to_owned();
    let comment = answer
        .comment
        .as_deref()
        .map_or_else(String::new, |c| format!(" ({c})"));
    if answer.approved {
        low.result = format!("approved by {}{comment}", answer.by);
    } else {
        low.result = format!("rejected by {}{comment}", answer.by);
        outcome.status = AgentStatus::EscalationRejected {
            verdict: low.verdict.clone(),
            by: answer.by.clone(),
        };
    }
    outcome.escalations.push(low);
    outcome
}

/// The outcome after a stronger agent decided again: its verdict, text and status, the
/// usage, cost and tool calls of both.
pub(crate) fn decided_again(
    first: AgentOutcome,
    mut low: EscalationRecord,
    agent: &str,
    mut again: AgentOutcome,
) -> AgentOutcome {
    low.to = format!("agent:{agent}");
    low.result = match (&again.verdict, again.confidence) {
        (Some(v), Some(c)) => format!("agent `{agent}` chose `{v}` with confidence {c:.2}"),
        (Some(v), None) => format!("agent `{agent}` chose `{v}`"),
        (None, _) => format!(
            "agent `{agent}` gave no verdict: {}",
            again.status.error().unwrap_or_default()
        ),
    };
    let mut calls = first.tool_calls;
    calls.append(&mut again.tool_calls);
    again.tool_calls = calls;
    again.usage += first.usage;
    again.steps += first.steps;
    again.cost = match (first.cost, again.cost) {
        (Cost::Priced { usd: a }, Cost::Priced { usd: b }) => Cost::Priced { usd: a + b },
        _ => Cost::Unpriced,
    };
    let mut escalations = first.escalations;
    escalations.push(low);
    escalations.append(&mut again.escalations);
    again.escalations = escalations;
    again
}

#[cfg(test)]
mod tests {
    use super::super::controls::Escalation;
    use super::*;

    fn outcome(confidence: Option<f64>) -> AgentOutcome {
        AgentOutcome {
            text: String::new(),
            verdict: Some("approve".into()),
            verdict_reason: Some("looks fine".into()),
            tool_calls: Vec::new(),
            usage: Default::default(),
            model: "m".into(),
            cost: Cost::Unpriced,
            steps: 1,
            status: AgentStatus::Succeeded,
            confidence,
            escalations: Vec::new(),
            typed_output: None,
            fallback_model: None,
        }
    }

    #[test]
    fn only_a_low_confidence_escalates() {
        let floor = ConfidenceFloor {
            min: 0.8,
            escalate_to: Escalation::Human,
        };
        assert!(below(&floor, &outcome(Some(0.9))).is_none());
        assert!(below(&floor, &outcome(Some(0.8))).is_none());
        let low = below(&floor, &outcome(Some(0.3))).unwrap();
        assert_eq!(
            question("review", &low),
            "Agent step `review` chose `approve` with confidence 0.30, below min_confidence \
             0.80. The model's note: looks fine Approve to accept the verdict, reject to fail \
             the step."
        );
        // No confidence given counts as none at all.
        assert!(below(&floor, &outcome(None)).is_some());
    }

    #[test]
    fn a_rejection_fails_the_step() {
        let floor = ConfidenceFloor {
            min: 0.8,
            escalate_to: Escalation::Human,
        };
        let low = below(&floor, &outcome(Some(0.3))).unwrap();
        let done = answered(outcome(Some(0.3)), low, &Answered::refused("ana"));
        assert_eq!(
            done.status,
            AgentStatus::EscalationRejected {
                verdict: "approve".into(),
                by: "ana".into()
            }
        );
        assert_eq!(done.escalations[0].result, "rejected by ana");
    }
}
