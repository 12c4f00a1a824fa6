//! What a tool call does to the world ([`Effect`]), and what a restore does with an
//! effectful call that a crash caught between its intent and its result ([`EffectPolicy`]).
//!
//! # Rule 11, exactly-once-effects
//!
//! Before an effectful call runs, the batch journals `EffectIntent` (with the step's staged
//! assistant message); after it, `EffectResult` (the batch's last result in the step's own
//! commit, see `batch_scope::Deferred`). Pure and idempotent calls journal nothing.
//! A restore that finds an in-flight turn with an intent of its uncommitted step resumes that
//! step's batch without asking the model again (see `resume.rs`):
//!
//! * a call with a journaled result is not run: the model reads that result;
//! * a call with an intent and no result is not run either: restore opens an `effect` gate
//!   over it (or answers one with the session's [`EffectPolicy`]). `Approve` runs it again,
//!   `Answer { value }` skips it with `value` as its result, `Deny` (and the deadline) fail
//!   the turn. A headless session cannot ask, so its `Ask` policy fails the turn;
//! * the other calls of the step (pure, idempotent, or not started) run again as usual.
//!
//! A second intent for the same call (after "run again") supersedes the first, so a crash
//! during the re-run asks again: one answer covers one run.

use serde::{Deserialize, Serialize};
use treadle_event::GateAnswer;
use treadle_hook::APPROVAL_REQUIRED;

/// What running a tool call does to the world. It decides what a restore may repeat.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Reads only: running it again changes nothing.
    Pure,
    /// Writes, but running it again with the same arguments leaves the same state (writing
    /// a whole file, setting a key).
    Idempotent,
    /// Running it again could repeat a side effect (a payment, an email, a shell command).
    /// Journaled before and after, never repeated by a restore without an answer.
    #[default]
    Effectful,
}

impl Effect {
    /// `pure`, `idempotent` or `effectful`, as pipelines write it.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "pure" => Some(Self::Pure),
            "idempotent" => Some(Self::Idempotent),
            "effectful" => Some(Self::Effectful),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pure => "pure",
            Self::Idempotent => "idempotent",
            Self::Effectful => "effectful",
        }
    }
}

/// What a restore does with an effectful call that has an intent and no result, set with
/// [`SessionBuilder::unfinished_effects`](crate::SessionBuilder::unfinished_effects).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum EffectPolicy {
    /// Open a gate and wait for an answer (fails the turn in a headless session).
    #[default]
    Ask,
    /// Run the call again.
    RunAgain,
    /// Do not run it; the model reads that it may or may not have happened.
    Skip,
    /// Fail the turn.
    Fail,
}

impl EffectPolicy {
    /// The result a call gets when the `Skip` policy (not a person) skipped it.
    pub const SKIPPED: &str = "skipped: the process stopped while this call was running, so \
                               it may or may not have taken effect; check before repeating it";

    /// `ask`, `run_again`, `skip` or `fail`, as pipelines write it.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ask" => Some(Self::Ask),
            "run_again" => Some(Self::RunAgain),
            "skip" => Some(Self::Skip),
            "fail" => Some(Self::Fail),
            _ => None,
        }
    }

    /// The answer restore gives an effect gate at once, or `None` to wait for a person.
    pub(crate) fn answer(self, headless: bool) -> Option<GateAnswer> {
        match self {
            Self::Ask if headless => Some(GateAnswer::deny(format!(
                "{APPROVAL_REQUIRED}: a call was running at a crash and nobody can say whether \
                 to run it again in a headless session"
            ))),
            Self::Ask => None,
            Self::RunAgain => Some(GateAnswer::Approve),
            Self::Skip => Some(GateAnswer::Answer {
                value: serde_json::Value::String(Self::SKIPPED.to_owned()),
            }),
            Self::Fail => Some(GateAnswer::deny(
                "a call was running at a crash and the session's policy is to fail the turn",
            )),
        }
    }
}
