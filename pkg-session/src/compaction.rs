//! How a loop keeps its history bounded: the compaction budget and the inline cap on one
//! tool result, as the builder sets them and every turn reads them. Its own module, below
//! both `context` (which holds it) and `compact` (which applies it).

/// The context window assumed when none is given.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// The share of the window the history may fill before it is compacted: the estimate
/// covers the history only, not the system prompt or the tool schemas sent with it.
pub const BUDGET_PERCENT: u64 = 80;

/// How a loop keeps its history bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compaction {
    /// Estimated tokens past which the history is compacted; `0` never compacts.
    pub budget: u64,
    /// The most bytes of one tool result put into the history; `None` puts it whole.
    pub max_inline_bytes: Option<usize>,
}

impl Default for Compaction {
    fn default() -> Self {
        Self {
            budget: budget_for(DEFAULT_CONTEXT_WINDOW),
            max_inline_bytes: None,
        }
    }
}

/// The compaction budget for a model with a context window of `window` tokens.
pub(crate) fn budget_for(window: u64) -> u64 {
    window.saturating_mul(BUDGET_PERCENT) / 100
}
