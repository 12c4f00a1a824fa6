//! `max_calls:`, one rule for every tool that takes it (a custom tool, one tool of an MCP
//! server): a call past the budget is refused before anything runs, with an error the
//! model reads, and the budget is per conversation (the step's session; a sub-agent's
//! calls have their own).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use treadle_session::{Effect, Footprint, HumanQuestion, Tool, ToolError};

/// Counts a call of `name` on `calls`; an error when it is past `max`.
pub(crate) fn spend(calls: &AtomicU32, max: Option<u32>, name: &str) -> Result<(), ToolError> {
    let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
    match max {
        Some(max) if n > max => Err(ToolError::new(format!(
            "call budget exhausted ({max} call(s) per conversation); go on without `{name}`"
        ))),
        _ => Ok(()),
    }
}

/// An MCP server's tool under a `max_calls:` budget: a call past it never reaches the
/// server.
struct Limited {
    inner: Arc<dyn Tool>,
    max: u32,
    calls: AtomicU32,
}

/// `tools` with each one `limits` names (`SERVER__TOOL`, its budget) under its budget.
pub(crate) fn limit(tools: Vec<Arc<dyn Tool>>, limits: &[(String, u32)]) -> Vec<Arc<dyn Tool>> {
    tools
        .into_iter()
        .map(
            |inner| match limits.iter().find(|(n, _)| n == inner.name()) {
                Some(&(_, max)) => Arc::new(Limited {
                    inner,
                    max,
                    calls: AtomicU32::new(0),
                }) as Arc<dyn Tool>,
                None => inner,
            },
        )
        .collect()
}

#[async_trait::async_trait]
impl Tool for Limited {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn parameters(&self) -> serde_json::Value {
        self.inner.parameters()
    }
    async fn call(&self, arguments: serde_json::Value) -> Result<String, ToolError> {
        spend(&self.calls, Some(self.max), self.inner.name())?;
        self.inner.call(arguments).await
    }
    fn touches(&self, arguments: &serde_json::Value) -> Footprint {
        self.inner.touches(arguments)
    }
    fn ends_turn(&self) -> bool {
        self.inner.ends_turn()
    }
    fn effect(&self) -> Effect {
        self.inner.effect()
    }
    fn human_question(
        &self,
        arguments: &serde_json::Value,
    ) -> Option<(HumanQuestion, Option<std::time::Duration>)> {
        self.inner.human_question(arguments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_past_the_budget_is_refused_and_the_rest_pass() {
        let calls = AtomicU32::new(0);
        assert!(spend(&calls, Some(1), "t").is_ok());
        let refused = spend(&calls, Some(1), "t").map_err(|e| e.to_string());
        assert!(
            matches!(&refused, Err(e) if e.contains("call budget exhausted (1 call(s)")),
            "{refused:?}"
        );
        assert!((0..5).all(|_| spend(&calls, None, "t").is_ok()));
    }
}
