//! Blocking work (redb, git, the file system) run off the async threads, in one way: the
//! work's own error type, and a task that ended without returning made into that type.

/// The blocking task ended without returning: it panicked, or the runtime shut down.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the blocking task stopped: {0}")]
pub struct WorkerStopped(pub String);

/// Runs `work` on Tokio's blocking pool and returns what it returned; a task that ended
/// without returning is `E` made from [`WorkerStopped`].
pub async fn blocking<T, E>(work: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, E>
where
    T: Send + 'static,
    E: From<WorkerStopped> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(WorkerStopped(e.to_string()).into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Failed(String);

    impl From<WorkerStopped> for Failed {
        fn from(stopped: WorkerStopped) -> Self {
            Failed(stopped.to_string())
        }
    }

    #[tokio::test]
    async fn the_result_comes_back_and_a_panic_becomes_the_error_type() {
        assert_eq!(blocking(|| Ok::<_, Failed>(2 + 3)).await, Ok(5));
        let refused = blocking(|| Err::<u8, _>(Failed("no".into()))).await;
        assert_eq!(refused, Err(Failed("no".into())));
        let panicked = blocking::<u8, Failed>(|| panic!("the work broke")).await;
        let Err(Failed(message)) = panicked else {
            panic!("a panic must be an error: {panicked:?}")
        };
        assert!(
            message.starts_with("the blocking task stopped"),
            "{message}"
        );
    }
}
