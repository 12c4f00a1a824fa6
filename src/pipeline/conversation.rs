//! The keys that bound an agent's conversation (`context_window:`, `compact_after_tokens:`,
//! `max_context_bytes:`): their checks, and the budget they give a step's session.

use super::agent_def::Agent;
use super::diagnostic::{Finding, Problem};

/// The context window of the local model server (`TREADLE_LOCAL_CTX`'s default).
pub const LOCAL_CONTEXT_WINDOW: u64 = 8192;

/// Located errors for impossible values.
pub(super) fn check(agent: &Agent) -> Vec<Finding> {
    let mut out = Vec::new();
    if let Some(window) = &agent.context_window
        && window.value < 256
    {
        out.push((
            window.pos,
            Problem::InvalidValue,
            format!(
                "`context_window` of agent `{}` is {} tokens, too small for any model",
                agent.name.value, window.value
            ),
            "write the model's context window in tokens, e.g. `context_window: 32000`; \
             `compact_after_tokens: 0` turns compaction off"
                .to_owned(),
        ));
    }
    out
}

/// The context window of an agent's model: its `context_window:`, else the local model
/// server's when it runs on it, else `None` (the session's default).
pub fn context_window(agent: &Agent, provider: &str) -> Option<u64> {
    match &agent.context_window {
        Some(window) => Some(window.value),
        None if provider == "local" => Some(LOCAL_CONTEXT_WINDOW),
        None => None,
    }
}
