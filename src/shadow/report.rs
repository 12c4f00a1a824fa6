//! What a shadow run found, per agent step, and how it is shown (plain text, or JSON for CI).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::{RecordedCall, VERDICT_TOOL};

/// One tool call, as compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// The tool.
    pub name: String,
    /// Its arguments.
    pub arguments: Value,
}

/// The first place the shadow step's tool calls part from the recorded ones.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// The call's index (from 0) among the step's tool calls, the verdict left out.
    pub index: usize,
    /// The recorded call there (`None`: the shadow step made more calls).
    pub original: Option<Call>,
    /// The shadow step's call there (`None`: it made fewer calls).
    pub shadow: Option<Call>,
}

/// Tokens and cost of one side.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Spend {
    /// Prompt plus completion tokens.
    pub tokens: u64,
    /// US dollars, when the model is priced.
    pub usd: Option<f64>,
}

/// One agent step of the recorded run, run again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepReport {
    /// The step's number in the run.
    pub seq: u32,
    /// Its name.
    pub name: String,
    /// The model the shadow step ran on.
    pub model: String,
    /// The first call that differs, if any.
    pub first_difference: Option<Difference>,
    /// The recorded verdict.
    pub original_verdict: Option<String>,
    /// The shadow step's verdict.
    pub shadow_verdict: Option<String>,
    /// Whether the verdict changed.
    pub verdict_changed: bool,
    /// The step's `assert:` checks that fail on the shadow step.
    pub failing_asserts: Vec<String>,
    /// Why the shadow step failed (budget, no verdict, ...), if it did.
    pub failure: Option<String>,
    /// Tool calls answered from the recording.
    pub replayed_calls: u32,
    /// Tool calls run for real in the scratch directory.
    pub live_calls: u32,
    /// What the recorded step spent.
    pub original: Spend,
    /// What the shadow step spent.
    pub shadow: Spend,
}

impl StepReport {
    /// Whether this step's outcome changed: a different verdict, a failing assert, or a
    /// failure.
    pub fn changed(&self) -> bool {
        self.verdict_changed || !self.failing_asserts.is_empty() || self.failure.is_some()
    }
}

/// The whole shadow run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShadowReport {
    /// The recorded run.
    pub run: u64,
    /// Its job.
    pub job: String,
    /// Each agent step, in run order.
    pub steps: Vec<StepReport>,
}

impl ShadowReport {
    /// Whether any step's outcome changed (the exit code is 1 then).
    pub fn changed(&self) -> bool {
        self.steps.iter().any(StepReport::changed)
    }

    /// The report for people.
    pub fn render(&self) -> String {
        let mut out = format!("shadow of run {} (job {})\n", self.run, self.job);
        for step in &self.steps {
            out.push_str(&render_step(step));
        }
        let changed = self.steps.iter().filter(|s| s.changed()).count();
        out.push_str(&format!(
            "{} agent step(s) re-run, {changed} with a changed outcome\n",
            self.steps.len()
        ));
        out
    }
}

fn render_step(step: &StepReport) -> String {
    let mut out = format!("step {} {} (model {})\n", step.seq, step.name, step.model);
    match &step.first_difference {
        None => out.push_str("  calls: same as recorded\n"),
        Some(d) => out.push_str(&format!(
            "  first different call: #{} recorded {} now {}\n",
            d.index + 1,
            show(d.original.as_ref()),
            show(d.shadow.as_ref())
        )),
    }
    out.push_str(&format!(
        "  calls answered from the recording: {}, run in scratch: {}\n",
        step.replayed_calls, step.live_calls
    ));
    if step.verdict_changed {
        out.push_str(&format!(
            "  verdict changed: {} -> {}\n",
            step.original_verdict.as_deref().unwrap_or("none"),
            step.shadow_verdict.as_deref().unwrap_or("none")
        ));
    } else if let Some(v) = &step.original_verdict {
        out.push_str(&format!("  verdict: {v} (unchanged)\n"));
    }
    for failure in &step.failing_asserts {
        out.push_str(&format!("  assert now fails: {failure}\n"));
    }
    if let Some(failure) = &step.failure {
        out.push_str(&format!("  failed: {failure}\n"));
    }
    out.push_str(&format!(
        "  tokens {} -> {}, cost {} -> {}\n",
        step.original.tokens,
        step.shadow.tokens,
        usd(step.original.usd),
        usd(step.shadow.usd)
    ));
    out
}

fn show(call: Option<&Call>) -> String {
    call.map_or_else(
        || "(none)".to_owned(),
        |c| format!("{} {}", c.name, c.arguments),
    )
}

fn usd(amount: Option<f64>) -> String {
    amount.map_or_else(|| "unpriced".to_owned(), |usd| format!("${usd:.4}"))
}

/// A step's tool calls as compared: names and arguments, the verdict call left out.
pub(crate) fn calls_of(calls: &[RecordedCall]) -> Vec<Call> {
    calls
        .iter()
        .filter(|c| c.name != VERDICT_TOOL)
        .map(|c| Call {
            name: c.name.clone(),
            arguments: c.arguments.clone(),
        })
        .collect()
}

/// The first index where the two call lists differ (name or arguments), the verdict calls
/// left out of both: a changed verdict is reported on its own.
pub(crate) fn first_difference(
    original: &[RecordedCall],
    shadow: &[RecordedCall],
) -> Option<Difference> {
    let (original, shadow) = (calls_of(original), calls_of(shadow));
    let longest = original.len().max(shadow.len());
    (0..longest)
        .find(|&i| original.get(i) != shadow.get(i))
        .map(|index| Difference {
            index,
            original: original.get(index).cloned(),
            shadow: shadow.get(index).cloned(),
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(name: &str, path: &str) -> RecordedCall {
        RecordedCall {
            name: name.into(),
            arguments: json!({ "path": path }),
            result: String::new(),
            is_error: false,
        }
    }

    #[test]
    fn the_first_difference_ignores_the_verdict() {
        let a = [
            call("read_file", "x"),
            call("verdict", "v"),
            call("write_file", "y"),
        ];
        let b = [call("read_file", "x"), call("write_file", "y")];
        assert_eq!(first_difference(&a, &b), None);
        let c = [call("read_file", "x"), call("write_file", "z")];
        let d = first_difference(&a, &c).unwrap();
        assert_eq!(d.index, 1);
        assert_eq!(d.shadow.unwrap().arguments, json!({"path": "z"}));
        let e = first_difference(&a, &b[..1]).unwrap();
        assert_eq!((e.index, e.shadow), (1, None));
    }
}
