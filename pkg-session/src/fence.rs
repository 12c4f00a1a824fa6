//! A write fence: lets an embedder that owns a session only while it holds some outside
//! right (a lease held elsewhere, such as a worker's lease on a step) stop the session's
//! journal appends the moment that right is lost.
//!
//! Every enduring event of a session is committed through its hub (rule 2), so a fence the
//! hub asks before each append refuses every write of a session that lost its right: the
//! event is not journaled, so nothing after it (a tool call's effect, a turn's end) happens.
//!
//! The fence also sees each event once it is journaled ([`WriteFence::committed`]), before
//! anyone is told of it: an embedder that copies a session's events elsewhere (a worker
//! mirroring them so that another machine can restore the session) has each one there before
//! the session acts on it, so an effectful call's intent is copied before the call runs.

use std::fmt::Debug;

/// Why a fence refuses the session's writes: the right it guards is lost (as the
/// embedder says it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Whether the session may still write. Set with [`SessionBuilder::fence`].
///
/// [`SessionBuilder::fence`]: crate::SessionBuilder::fence
#[async_trait::async_trait]
pub trait WriteFence: Send + Sync + Debug + 'static {
    /// `Ok` when the next append may go ahead; waits while that is in doubt (the right is
    /// being confirmed); `Err` with the reason once it is known lost. The append then
    /// fails with [`AppendError::Fenced`](crate::journal::AppendError::Fenced).
    async fn admit(&self) -> Result<(), Refused>;

    /// Called with each event after its durable append and before it is published (so
    /// before the session acts on it). `Err` with the reason stops the session's writes as
    /// a refused [`admit`](Self::admit) does: the append reports
    /// [`AppendError::Fenced`](crate::journal::AppendError::Fenced). Does nothing by default.
    async fn committed(&self, event: &treadle_event::Event) -> Result<(), Refused> {
        let _ = event;
        Ok(())
    }
}
