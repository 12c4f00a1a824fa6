//! The `verdict` tool: how an agent step with `verdicts:` makes its enumerated choice.
//!
//! The tool's argument schema lists the allowed verdicts as an enum, so a model that honours
//! schemas can only pick one of them; a model that does not is told which ones exist and can
//! call again. The last valid call wins, so a model may change its mind within the turn.
//!
//! The arguments are steps' `choice` and `note`. The older `verdict` and `reason` are
//! accepted too, so replies recorded against either spelling replay; that is why the schema
//! requires no key (a required `choice` would refuse `{"verdict": ..}` before the call runs)
//! and the call itself refuses a call without a choice, naming the allowed ones.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};
use treadle_session::{Tool, ToolError};

/// The name the verdict tool is offered under.
pub const VERDICT_TOOL: &str = "verdict";
/// The argument holding the decision (steps' name; `verdict` is accepted too).
const CHOICE: &str = "choice";
/// The argument holding the reason (steps' name; `reason` is accepted too).
const NOTE: &str = "note";

/// The first of `keys` that `arguments` holds as a string.
fn text<'a>(arguments: &'a Value, keys: [&str; 2]) -> Option<&'a str> {
    keys.iter()
        .find_map(|key| arguments.get(key).and_then(Value::as_str))
}

/// A verdict the agent gave.
#[derive(Debug, Clone, PartialEq)]
pub struct Chosen {
    /// One of the allowed verdicts.
    pub verdict: String,
    /// The reason the agent gave (empty when it gave none).
    pub reason: String,
    /// How sure the agent said it was, 0 to 1, when the step asks (`min_confidence:`).
    pub confidence: Option<f64>,
}

/// Where the verdict tool puts the agent's choice, shared with the step that reads it.
#[derive(Debug, Clone, Default)]
pub(crate) struct VerdictSlot(Arc<Mutex<Option<Chosen>>>);

impl VerdictSlot {
    pub(crate) fn get(&self) -> Option<Chosen> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, chosen: Chosen) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(chosen);
    }

    /// `verdict_from_text:`: when no verdict was recorded and `text` (the final answer) is
    /// one of `allowed`, records it; the verdict, when it did.
    pub(crate) fn take_text(&self, text: &str, allowed: &[String]) -> Option<String> {
        if self.get().is_some() {
            return None;
        }
        let chosen = from_text(text, allowed)?;
        let verdict = chosen.verdict.clone();
        self.set(chosen);
        Some(verdict)
    }
}

/// `verdict_from_text: true`: a model that answered with a verdict word instead of calling
/// the tool is taken at its word (before it is reminded, so no call is spent on it), and
/// the transcript says so. Off, or with a verdict recorded, nothing happens.
pub(crate) fn text_verdict(
    step: &super::AgentStep,
    text: &str,
    slot: &VerdictSlot,
    observer: &dyn super::AgentObserver,
) {
    if !step.verdict_from_text {
        return;
    }
    if let Some(v) = slot.take_text(text, &step.verdicts) {
        observer.on_event(super::AgentEvent::Notice(format!(
            "verdict `{v}` taken from the answer's text (verdict_from_text: true)"
        )));
    }
}

/// The verdict a final answer is, when its whole text is one of `allowed`: surrounding
/// space, one pair of quotes, backticks or asterisks and a final full stop aside, and
/// without regard to case (`Approve.` is `approve`). Anything more is not a verdict: a
/// sentence that mentions one is a model that did not decide.
pub(crate) fn from_text(text: &str, allowed: &[String]) -> Option<Chosen> {
    let mut word = text.trim();
    word = word.strip_suffix('.').unwrap_or(word).trim();
    for wrap in ["**", "`", "\"", "'"] {
        if let Some(inner) = word.strip_prefix(wrap).and_then(|w| w.strip_suffix(wrap)) {
            word = inner.trim();
            break;
        }
    }
    word = word.strip_suffix('.').unwrap_or(word).trim();
    let verdict = allowed.iter().find(|a| a.eq_ignore_ascii_case(word))?;
    Some(Chosen {
        verdict: verdict.clone(),
        reason: "given as the answer's text (verdict_from_text)".to_owned(),
        confidence: None,
    })
}

/// The tool itself.
pub(crate) struct VerdictTool {
    allowed: Vec<String>,
    description: String,
    slot: VerdictSlot,
    /// Whether a confidence must come with the verdict.
    confidence: bool,
    /// What the step owes: no decision is taken while a file of it is missing.
    owed: super::required::Required,
}

impl VerdictTool {
    pub(crate) fn new(allowed: Vec<String>, slot: VerdictSlot) -> Self {
        let description = format!(
            "Record your decision. You must call this exactly once before you finish, with choice set to one of: {} and a short note on why.",
            allowed.join(", ")
        );
        Self {
            allowed,
            description,
            slot,
            confidence: false,
            owed: super::required::Required::default(),
        }
    }

    /// Refuses a decision while a file of `owed` (the step's `assert: files:`) is missing:
    /// the verdict reports on the work, and the files are the work.
    pub(crate) fn owing(mut self, owed: super::required::Required) -> Self {
        self.owed = owed;
        self
    }

    fn base_parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                CHOICE: {
                    "type": "string",
                    "enum": self.allowed,
                    "description": "Your decision."
                },
                NOTE: {
                    "type": "string",
                    "description": "One or two sentences on why."
                }
            }
        })
    }

    /// Requires a `confidence` (0 to 1) with the verdict.
    pub(crate) fn with_confidence(mut self) -> Self {
        self.confidence = true;
        self.description
            .push_str(" Give your confidence in it as a number from 0 (a guess) to 1 (certain).");
        self
    }
}

/// The text that asks an agent for its verdict when a turn ended without one.
pub(crate) fn reminder(allowed: &[String]) -> String {
    format!(
        "You must call the {VERDICT_TOOL} tool with one of: {}.",
        allowed.join(", ")
    )
}

#[async_trait::async_trait]
impl Tool for VerdictTool {
    fn name(&self) -> &str {
        VERDICT_TOOL
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn touches(&self, _arguments: &Value) -> treadle_session::Footprint {
        // It records the decision in the step's own slot, which no other tool reads.
        treadle_session::Footprint::nothing()
    }

    fn effect(&self) -> treadle_session::Effect {
        // It records the decision in the step's slot: the same call again records the same.
        treadle_session::Effect::Idempotent
    }

    fn parameters(&self) -> Value {
        let mut schema = self.base_parameters();
        if self.confidence {
            schema["properties"]["confidence"] = json!({
                "type": "number",
                "minimum": 0,
                "maximum": 1,
                "description": "How sure you are of the decision, from 0 to 1."
            });
            schema["required"] = json!(["confidence"]);
        }
        schema
    }

    /// A recorded verdict is the step's decision: the model may say one more thing, then
    /// the turn ends, rather than going on calling tools it no longer needs.
    fn ends_turn(&self) -> bool {
        true
    }

    async fn call(&self, arguments: Value) -> Result<String, ToolError> {
        let missing = self.owed.missing_files();
        if !missing.is_empty() {
            return Err(ToolError::new(format!(
                "no decision can be recorded yet. {} Then call {VERDICT_TOOL} again.",
                super::required::files_reminder(&missing)
            )));
        }
        let allowed = self.allowed.join(", ");
        let verdict = text(&arguments, [CHOICE, VERDICT_TOOL]).ok_or_else(|| {
            ToolError::new(format!("give \"choice\" as a string, one of: {allowed}"))
        })?;
        if !self.allowed.iter().any(|a| a == verdict) {
            return Err(ToolError::new(format!(
                "{verdict:?} is not an allowed verdict; use one of: {allowed}"
            )));
        }
        // A missing reason is accepted: the choice is what routes the plan, and refusing it
        // over a missing explanation would only cost another model call.
        let reason = text(&arguments, [NOTE, "reason"]).unwrap_or_default();
        let confidence = arguments.get("confidence").and_then(Value::as_f64);
        // Asked for and missing (or out of range): refused, so the model gives it; a step
        // that asks for a confidence cannot decide without one.
        if self.confidence && !confidence.is_some_and(|c| (0.0..=1.0).contains(&c)) {
            return Err(ToolError::new(
                "give \"confidence\" as a number from 0 to 1 with the verdict",
            ));
        }
        self.slot.set(Chosen {
            verdict: verdict.to_owned(),
            reason: reason.to_owned(),
            confidence: confidence.filter(|_| self.confidence),
        });
        Ok(format!("verdict recorded: {verdict}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_answer_is_a_verdict_only_when_it_is_exactly_one() {
        let allowed = vec!["fixed".to_owned(), "stuck".to_owned()];
        for yes in ["fixed", " Fixed.\n", "`fixed`", "**FIXED**", "\"fixed\""] {
            assert_eq!(
                from_text(yes, &allowed).map(|c| c.verdict).as_deref(),
                Some("fixed"),
                "{yes}"
            );
        }
        for no in ["I fixed it", "fixed, I think", "fixd", "", "fixed stuck"] {
            assert!(from_text(no, &allowed).is_none(), "{no}");
        }
        // A verdict the tool recorded wins over the text.
        let slot = VerdictSlot::default();
        assert_eq!(slot.take_text("stuck", &allowed).as_deref(), Some("stuck"));
        assert!(slot.take_text("fixed", &allowed).is_none());
    }

    fn tool() -> (VerdictTool, VerdictSlot) {
        let slot = VerdictSlot::default();
        let tool = VerdictTool::new(vec!["approve".into(), "reject".into()], slot.clone());
        (tool, slot)
    }

    #[test]
    fn schema_enumerates_the_verdicts() {
        let (tool, _) = tool();
        let schema = tool.parameters();
        assert_eq!(
            schema["properties"]["choice"]["enum"],
            json!(["approve", "reject"])
        );
        assert_eq!(schema["properties"]["note"]["type"], "string");
        assert!(tool.description().contains("approve, reject"));
    }

    #[tokio::test]
    async fn records_a_valid_verdict_and_refuses_others() {
        let (tool, slot) = tool();
        let err = tool
            .call(json!({"verdict": "maybe", "reason": "x"}))
            .await
            .unwrap_err();
        assert_eq!(
            err.0,
            "\"maybe\" is not an allowed verdict; use one of: approve, reject"
        );
        assert!(tool.call(json!({"reason": "x"})).await.is_err());
        assert_eq!(slot.get(), None);

        tool.call(json!({"verdict": "reject", "reason": "risky"}))
            .await
            .unwrap();
        tool.call(json!({"verdict": "approve"})).await.unwrap();
        assert_eq!(
            slot.get(),
            Some(Chosen {
                verdict: "approve".into(),
                reason: String::new(),
                confidence: None,
            })
        );
    }

    #[tokio::test]
    async fn steps_argument_names_and_the_old_ones_both_record() {
        let (tool, slot) = tool();
        tool.call(json!({"choice": "reject", "note": "risky"}))
            .await
            .unwrap();
        assert_eq!(
            slot.get().map(|c| (c.verdict, c.reason)),
            Some(("reject".into(), "risky".into()))
        );
        tool.call(json!({"verdict": "approve", "reason": "fine"}))
            .await
            .unwrap();
        assert_eq!(
            slot.get().map(|c| (c.verdict, c.reason)),
            Some(("approve".into(), "fine".into()))
        );
        let err = tool.call(json!({"note": "no choice"})).await.unwrap_err();
        assert_eq!(
            err.0,
            "give \"choice\" as a string, one of: approve, reject"
        );
    }

    #[tokio::test]
    async fn a_required_confidence_is_refused_when_missing() {
        let slot = VerdictSlot::default();
        let tool = VerdictTool::new(vec!["approve".into()], slot.clone()).with_confidence();
        assert_eq!(
            tool.parameters()["properties"]["confidence"]["type"],
            "number"
        );
        assert!(tool.call(json!({"verdict": "approve"})).await.is_err());
        assert!(
            tool.call(json!({"verdict": "approve", "confidence": 2}))
                .await
                .is_err()
        );
        tool.call(json!({"verdict": "approve", "reason": "r", "confidence": 0.4}))
            .await
            .unwrap();
        assert_eq!(slot.get().and_then(|c| c.confidence), Some(0.4));
    }

    #[test]
    fn reminder_names_the_choices() {
        assert_eq!(
            reminder(&["approve".into(), "reject".into()]),
            "You must call the verdict tool with one of: approve, reject."
        );
    }
}
