//! One turn of a step's session, interrupted when the step is cancelled (and the interrupt
//! repeated until the turn ends).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use treadle_session::inference::ToolChoice;
use treadle_session::{RunError, Session, TurnReport};

/// How often an interrupt is repeated while a cancelled turn has not ended: an input that
/// was still queued when the first interrupt came starts a turn the first one missed.
const INTERRUPT_RETRY: Duration = Duration::from_millis(100);

/// Runs one turn, interrupting it when `cancel` fires.
pub(super) async fn run_turn(
    session: &Session,
    input: &str,
    cancel: &CancellationToken,
) -> Result<TurnReport, RunError> {
    interruptible(session, session.turn(input).run(), cancel).await
}

/// Runs one turn whose first model call is made under `choice` (`tool_choice`).
pub(super) async fn run_forcing(
    session: &Session,
    input: &str,
    cancel: &CancellationToken,
    choice: ToolChoice,
) -> Result<TurnReport, RunError> {
    interruptible(session, session.turn(input).choosing(choice).run(), cancel).await
}

/// Waits for the turn `run`, interrupting it when `cancel` fires.
pub(super) async fn interruptible(
    session: &Session,
    run: impl std::future::Future<Output = Result<TurnReport, RunError>>,
    cancel: &CancellationToken,
) -> Result<TurnReport, RunError> {
    tokio::pin!(run);
    tokio::select! {
        report = &mut run => return report,
        () = cancel.cancelled() => {}
    }
    loop {
        // Interrupting a session that is already shut down only fails; the turn's report
        // (or its error) still comes from `run`.
        let _ = session.interrupt().await;
        tokio::select! {
            report = &mut run => return report,
            () = tokio::time::sleep(INTERRUPT_RETRY) => {}
        }
    }
}
