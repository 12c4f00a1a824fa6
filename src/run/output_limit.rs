//! The step output limit: the total bytes one task step may print (`limits: {
//! step_output }`). Past it, nothing more of the step's output is shown, its command is
//! stopped (through a cancellation token of its own, which kills its process group) and
//! the step fails with an error that names the limit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio_util::sync::CancellationToken;

use super::done::Done;
use crate::run::failure::FailureKind;

/// One step's output budget.
pub(crate) struct OutputLimit {
    limit: u64,
    used: AtomicU64,
    over: AtomicBool,
    /// Cancelled by the run's token, or by this limit.
    pub(crate) token: CancellationToken,
}

impl OutputLimit {
    /// A budget of `limit` bytes for a step that `parent` cancels.
    pub(crate) fn new(limit: u64, parent: &CancellationToken) -> Self {
        Self {
            limit,
            used: AtomicU64::new(0),
            over: AtomicBool::new(false),
            token: parent.child_token(),
        }
    }

    /// Counts `bytes` more of output; whether they may still be shown.
    pub(crate) fn take(&self, bytes: usize) -> bool {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let used = self
            .used
            .fetch_add(bytes, Ordering::Relaxed)
            .saturating_add(bytes);
        if used <= self.limit {
            return true;
        }
        if !self.over.swap(true, Ordering::Relaxed) {
            self.token.cancel();
        }
        false
    }

    /// The step's failure, when it went over the limit.
    pub(crate) fn reached(&self) -> Option<Done> {
        self.over.load(Ordering::Relaxed).then(|| {
            Done::fail(FailureKind::Limit, format!(
                "step output limit reached ({} bytes; `limits: {{ step_output }}` in the pipeline raises it): the command was stopped",
                self.limit
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::OutputLimit;
    use tokio_util::sync::CancellationToken;

    #[test]
    fn output_past_the_limit_is_dropped_and_stops_the_step() {
        let run = CancellationToken::new();
        let limit = OutputLimit::new(10, &run);
        assert!(limit.take(6) && limit.take(4));
        assert!(limit.reached().is_none() && !limit.token.is_cancelled());
        assert!(!limit.take(1));
        assert!(limit.token.is_cancelled() && !run.is_cancelled());
        assert!(limit.reached().is_some());
    }
}
