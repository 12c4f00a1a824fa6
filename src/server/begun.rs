//! A run started in the server answers its request once it has its id: the run's task
//! tells [`Begun`] the id (or why it could not begin) once, and the request waits on
//! [`BegunId`]. YAML runs (`start.rs`) and Rust workflows (`code.rs`) begin this one way.

use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::error::ApiError;

/// What the request is told: the run's id, or why it did not begin.
type Told = Result<u64, ApiError>;

/// The side a starting run tells; cloned into its `on_begin` and its task, told once
/// (the first to tell wins: a run that began and then failed stays begun).
#[derive(Clone)]
pub(super) struct Begun(Arc<Mutex<Option<oneshot::Sender<Told>>>>);

/// The side the request waits on.
pub(super) struct BegunId(oneshot::Receiver<Told>);

/// A fresh pair.
pub(super) fn channel() -> (Begun, BegunId) {
    let (tx, rx) = oneshot::channel();
    (Begun(Arc::new(Mutex::new(Some(tx)))), BegunId(rx))
}

impl Begun {
    /// Tells the waiting request, if nobody told it yet.
    pub(super) fn answer(&self, result: Told) {
        if let Some(tx) = self.0.lock().ok().and_then(|mut t| t.take()) {
            let _ = tx.send(result);
        }
    }
}

impl BegunId {
    /// The run's id once it began, or why it did not; `began` is what a run that ended
    /// before telling failed to do ("began", "went on").
    pub(super) async fn id(self, began: &str) -> Result<u64, ApiError> {
        self.0
            .await
            .map_err(|_| ApiError::Internal(format!("the run ended before it {began}")))?
    }
}
