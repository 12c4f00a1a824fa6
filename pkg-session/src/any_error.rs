//! The umbrella error of the session API: each operation's typed error, boxed, under one
//! type for programs that only report errors. It lives apart from `error` because it names
//! the errors of `restore`, `session` and `typed`, which themselves use `error`'s enums.

use crate::error::{GateError, RunError, SessionClosed, StartError, SubmitError};
use crate::hub::SubscriptionLost;
use crate::journal::JournalOpenError;

/// Any error of the session API: what `?` turns each operation's own error into, for a
/// program that only reports errors. Each variant holds the operation's typed error (boxed,
/// so that a `Result<_, Error>` stays two words), so a caller that wants to act on one
/// matches it: `Err(Error::Turn(e)) if matches!(*e, TurnError::Interrupted { .. })`.
///
/// ```no_run
/// use treadle_session::SessionBuilder;
///
/// # async fn demo() -> Result<(), treadle_session::Error> {
/// let session = SessionBuilder::from_env().start().await?; // a StartError
/// let answer = session.turn("Say hello.").answer().await?; // a RunError or a TurnError
/// println!("{answer}");
/// # Ok(()) }
/// ```
///
/// Its `Debug` is its message and the chain of causes, each on a line of its own, since
/// that is what `main` prints for the `Err` it returns; `{:#?}` shows the variant and the
/// typed error it holds.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Start(Box<StartError>),
    #[error(transparent)]
    Restore(Box<crate::restore::RestoreError>),
    #[error(transparent)]
    Submit(Box<SubmitError>),
    #[error(transparent)]
    Run(Box<RunError>),
    /// The turn ended without an answer: it failed or was interrupted.
    #[error(transparent)]
    Turn(Box<crate::session::TurnError>),
    #[error(transparent)]
    Ask(Box<crate::typed::AskError>),
    #[error(transparent)]
    Gate(Box<GateError>),
    #[error(transparent)]
    Closed(Box<SessionClosed>),
    #[error(transparent)]
    Lost(Box<SubscriptionLost>),
    #[error(transparent)]
    JournalOpen(Box<JournalOpenError>),
    #[error(transparent)]
    Read(Box<crate::journal::ReadError>),
    #[error(transparent)]
    Import(Box<crate::journal::ImportError>),
    #[error(transparent)]
    Fork(Box<crate::fork::ForkError>),
    /// An id given as text (a session id from the command line) is not one.
    #[error(transparent)]
    Id(Box<treadle_event::IdParseError>),
}

/// `From` each operation's error into its boxed [`Error`] variant, so `?` converts, and
/// the variant and its typed error for `{:#?}`.
macro_rules! into_error {
    ($($variant:ident($error:ty)),* $(,)?) => {
        $(
            impl From<$error> for Error {
                fn from(error: $error) -> Self {
                    Error::$variant(Box::new(error))
                }
            }
        )*

        impl Error {
            /// The variant's name and the typed error it holds, for `{:#?}`.
            fn debug_variant(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                match self {
                    $(Error::$variant(e) => f.debug_tuple(stringify!($variant)).field(e).finish(),)*
                }
            }
        }
    };
}

impl std::fmt::Debug for Error {
    /// The message, then each cause (`Caused by:`), as `main` should print a failure; with
    /// `{:#?}`, the variant and its typed error.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            return self.debug_variant(f);
        }
        write!(f, "{self}")?;
        let mut source = std::error::Error::source(self);
        if source.is_some() {
            write!(f, "\n\nCaused by:")?;
        }
        while let Some(cause) = source {
            write!(f, "\n    {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

into_error!(
    Start(StartError),
    Restore(crate::restore::RestoreError),
    Submit(SubmitError),
    Run(RunError),
    Turn(crate::session::TurnError),
    Ask(crate::typed::AskError),
    Gate(GateError),
    Closed(SessionClosed),
    Lost(SubscriptionLost),
    JournalOpen(JournalOpenError),
    Read(crate::journal::ReadError),
    Import(crate::journal::ImportError),
    Fork(crate::fork::ForkError),
    Id(treadle_event::IdParseError),
);
