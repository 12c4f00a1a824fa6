//! `required: true` on a custom tool: the step cannot finish until a call of that tool
//! succeeded (exit code 0). When the model stops short, it is told, by name, which tools
//! it still owes, up to [`REMINDERS`] times; still short after that, the step fails naming
//! them. Each reminder's first model call is forced to the tool through `tool_choice`
//! (see `turns.rs`), like the verdict's; the step's turn limit stays the backstop.

use std::sync::Arc;

use super::custom_tool::Tally;

/// How many times a model that stops short is told which required tools it owes.
pub(crate) const REMINDERS: u32 = 3;

/// The required tools of a step, with their calls counted.
#[derive(Clone, Default)]
pub(crate) struct Required(Vec<(String, Arc<Tally>)>);

impl Required {
    /// Adds a required tool.
    pub(crate) fn push(&mut self, name: String, tally: Arc<Tally>) {
        self.0.push((name, tally));
    }

    /// The required tools no call of which has succeeded yet.
    pub(crate) fn missing(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|(_, tally)| tally.successes() == 0)
            .map(|(name, _)| name.clone())
            .collect()
    }
}

/// What the model is told when it stops before the `missing` tools succeeded.
pub(crate) fn reminder(missing: &[String]) -> String {
    format!(
        "You are trying to finish, but this step cannot end until a call of {} has succeeded (exit code 0). Call {} now with the arguments it needs, then finish.",
        list(missing),
        if missing.len() == 1 { "it" } else { "each" }
    )
}

/// `a`, `a` and `b`, `a`, `b` and `c`, each in backticks.
pub(crate) fn list(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reminders_name_every_missing_tool() {
        let tools = vec!["post_review".to_owned(), "tag".to_owned()];
        assert!(reminder(&tools[..1]).contains("a call of `post_review` has succeeded"));
        assert!(reminder(&tools).contains("`post_review` and `tag`"));
        let mut required = Required::default();
        required.push("post_review".into(), Arc::default());
        assert_eq!(required.missing(), ["post_review"]);
    }
}
