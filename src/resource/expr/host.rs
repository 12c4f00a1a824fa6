//! Why a stage's own function (`env`, `file`, `fail`, `http`, and the refused `now`,
//! `date`, `duration`) failed: the error [`super::eval::Host`] returns.

use super::http::HttpError;

/// Why a stage's own function failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// `fail(message)`: the message is the whole error.
    #[error("{0}")]
    Fail(String),
    /// `fail()` without one message.
    #[error("fail() takes one message")]
    FailUsage,
    /// `http()` failed.
    #[error("{0}")]
    Http(#[from] HttpError),
    /// `now()`, `date()` or `duration()` in `check` or `in`.
    #[error(
        "{name}() is not available in `{stage}`: its result must be the same for the same input (a check's versions are compared across polls, an `in`'s files are cached)"
    )]
    NotRepeatable {
        /// The function.
        name: String,
        /// The stage.
        stage: &'static str,
    },
    /// `now()`, `date()` or `duration()` in `out`.
    #[error("{0}() is not available in this treadle's expressions")]
    Unavailable(String),
    /// `env()` or `file()` without a name.
    #[error("{0}() takes a name and, optionally, a default")]
    NameAndDefault(&'static str),
    /// `env(name)` of a name the type's `env:` does not list.
    #[error(
        "env({0:?}): not in this resource type's env: (list it under the type's or the resource's `env:`)"
    )]
    EnvNotListed(String),
    /// `env(name)` of a variable not set, without a default.
    #[error("env({0:?}): the variable is not set (give a default to allow that: env({0:?}, \"\"))")]
    EnvUnset(String),
    /// `file()` outside `out`.
    #[error("file() is only available in `out` (this is `{0}`)")]
    FileOutsideOut(&'static str),
    /// `file(path)` of a path that leaves the put's inputs.
    #[error("file({0:?}): the path must be relative and stay inside the put's inputs")]
    FileOutside(String),
    /// `file(path)` that cannot be read, without a default.
    #[error("file({path:?}): {source}")]
    FileRead {
        /// As given.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}
