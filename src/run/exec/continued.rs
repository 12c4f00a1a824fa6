//! What a resumed run continues of the run it resumes (`--resume`, a restarted server or
//! watcher): a step that run left unfinished.
//!
//! * An agent step goes on in its session and its step directory: the session is restored
//!   through the library's own restore (the committed history kept, no committed model call
//!   made again, a turn in flight closed and continued, a tool call caught between intent
//!   and result put to the step's `on_unfinished_effect:`), and the directory the committed
//!   calls wrote into becomes this run's directory of the step. Only for the same key: an
//!   edited step starts afresh, as a record is reused only for the same key.
//! * A task runs again from its start, and the transcript says it was interrupted.
//!
//! "Unfinished" is read from the earlier run's record of the step: still pending or
//! running (its process died), aborted (a clean stop), or stopped by its group (failed,
//! of kind `interrupted`). A step that failed on its own runs again from scratch.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use treadle_session::event::SessionId;

use super::Ctx;
use crate::agent::controls::SessionNoted;
use crate::pipeline::outline::Entry;
use crate::run::failure::FailureKind;
use crate::run::state::{StepRecord, StepStatus};
use crate::run::step_sessions::{self, StepSession};
use crate::run::transcript::Event;

/// An agent step's session and directory, left unfinished by the run being resumed.
pub(crate) struct Unfinished {
    /// The session to restore.
    pub session: SessionId,
    /// The directory its committed calls wrote into.
    pub dir: PathBuf,
    /// The run it was left by.
    pub of: u64,
    /// The step's events this run's transcript shows already, as `(what, data)`: those a
    /// run going on under its own id had synced before its process stopped (none for a
    /// new run, whose transcript then shows all the step committed).
    pub shown: Arc<Vec<(String, serde_json::Value)>>,
}

/// The agent events of step `seq` that run `run`'s journal holds since the step last
/// finished: what its transcript shows of the step's visit in progress, from every process
/// that ran it (each says `step_started` again).
fn shown_of_step(
    db: &redb::Database,
    run: u64,
    seq: u32,
) -> Result<Vec<(String, serde_json::Value)>, crate::run::state::StateError> {
    let events: Vec<serde_json::Value> = crate::run::event_log::read_after(db, run, 0)?
        .iter()
        .filter_map(|e| serde_json::from_str(&e.json).ok())
        .filter(|e: &serde_json::Value| e["seq"] == seq)
        .collect();
    let since = events
        .iter()
        .rposition(|e| e["event"] == "step_finished")
        .map_or(0, |at| at + 1);
    Ok(events[since..]
        .iter()
        .filter(|e| e["event"] == "agent")
        .map(|e| {
            (
                e["what"].as_str().unwrap_or_default().to_owned(),
                e["data"].clone(),
            )
        })
        .collect())
}

/// Whether a step's record in an earlier run says that run stopped while the step ran.
fn left_unfinished(record: &StepRecord) -> bool {
    match record.status {
        StepStatus::Pending | StepStatus::Queued | StepStatus::Running | StepStatus::Aborted => {
            true
        }
        StepStatus::Failed | StepStatus::Errored => {
            record.failure == Some(FailureKind::Interrupted)
        }
        StepStatus::Succeeded | StepStatus::Skipped => false,
    }
}

/// A time in the state file (ms since the epoch), as the transcript shows it.
fn shown_time(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// The earlier run this one resumes, when step `entry` is one it left unfinished, with
/// that run's record of the step.
async fn left_by(ctx: &Ctx<'_>, entry: &Entry) -> Option<(u64, StepRecord)> {
    // A worker taking a step over restores the session its lease names instead.
    if ctx.resume.is_some() {
        return None;
    }
    if !ctx.mode.resuming() {
        return None;
    }
    let of = ctx.mode.recorded_from(entry.seq)?;
    let seq = entry.seq;
    let record = match &ctx.left {
        // This run's own records change as this process runs its steps.
        Some(left) if of == ctx.run => left.iter().find(|r| r.seq == seq)?.clone(),
        _ => {
            let store = ctx.store.clone();
            let steps = tokio::task::spawn_blocking(move || store.steps(of))
                .await
                .ok()?
                .ok()?;
            steps.into_iter().find(|r| r.seq == seq)?
        }
    };
    left_unfinished(&record).then_some((of, record))
}

/// Says so when the run being resumed stopped while the task at `entry` ran: it runs
/// again from its start.
pub(crate) async fn say_restarted(ctx: &Ctx<'_>, entry: &Entry) {
    let Some((of, record)) = left_by(ctx, entry).await else {
        return;
    };
    // A step that never started was not interrupted (a record written without a sync
    // may have lost its start, then the run's last word on it is its end).
    let Some(started) = record.started_ms else {
        return;
    };
    ctx.emit(Event::Notice {
        run: ctx.run,
        text: format!(
            "`{}` interrupted (run {of} stopped while it ran; it had started at {}), started again",
            entry.name,
            shown_time(started)
        ),
    });
}

/// The session and directory the run being resumed left the agent step at `entry` in,
/// when it left it unfinished with the key it has now and both are still there.
pub(crate) async fn unfinished_agent(ctx: &Ctx<'_>, entry: &Entry) -> Option<Unfinished> {
    let (of, _) = left_by(ctx, entry).await?;
    let (db, path, run) = (ctx.store.database(), entry.path.clone(), ctx.run);
    // Once this run has a session of its own for the step (a route back to it), the
    // earlier run's is spent.
    let row = tokio::task::spawn_blocking(move || match step_sessions::of(&db, run, &path) {
        Ok(Some(_)) if run != of => Ok(None),
        _ => step_sessions::of(&db, of, &path),
    })
    .await
    .ok()?;
    let row = match row {
        Ok(row) => row?,
        Err(e) => {
            crate::console::tell!("treadle: cannot read step `{}`'s session: {e}", entry.name);
            return None;
        }
    };
    let key = key_of(ctx, entry);
    if row.key != key {
        ctx.emit(Event::Notice {
            run: ctx.run,
            text: format!(
                "`{}` changed since run {of} stopped in it: it starts a new conversation",
                entry.name
            ),
        });
        return None;
    }
    // Out of the way of the fresh directory the step is prepared in (the same path
    // when the run goes on under its own id). A stash already there is the step's
    // directory: a going-on stopped between setting it aside and taking it.
    let stash = row.dir.with_extension("interrupted");
    let (dir, set_aside) = (row.dir.clone(), stash.clone());
    let placed = tokio::task::spawn_blocking(move || {
        if set_aside.is_dir() {
            Ok(true)
        } else if dir.is_dir() {
            std::fs::rename(&dir, &set_aside).map(|()| true)
        } else {
            Ok(false)
        }
    })
    .await
    .map_err(std::io::Error::other)
    .and_then(|r| r);
    match placed {
        Ok(true) => {}
        Ok(false) => {
            ctx.emit(Event::Notice {
                run: ctx.run,
                text: format!(
                    "`{}`: the directory run {of} left it in is gone ({}): it starts a new conversation",
                    entry.name,
                    row.dir.display()
                ),
            });
            return None;
        }
        Err(e) => {
            crate::console::tell!(
                "treadle: cannot set aside step `{}`'s directory {}: {e}; it starts a new conversation",
                entry.name,
                row.dir.display()
            );
            return None;
        }
    }
    let shown = if of == ctx.run {
        shown_now(ctx, entry).await
    } else {
        Vec::new()
    };
    Some(Unfinished {
        session: row.session,
        dir: stash,
        of,
        shown: Arc::new(shown),
    })
}

/// What this run's transcript already shows of step `entry`'s visit in progress (see
/// [`shown_of_step`]); none when it cannot be read.
async fn shown_now(ctx: &Ctx<'_>, entry: &Entry) -> Vec<(String, serde_json::Value)> {
    let (db, run, seq) = (ctx.store.database(), ctx.run, entry.seq);
    match tokio::task::spawn_blocking(move || shown_of_step(&db, run, seq)).await {
        Ok(Ok(shown)) => shown,
        Ok(Err(e)) => {
            crate::console::tell!("treadle: cannot read run {run}'s events: {e}");
            Vec::new()
        }
        Err(e) => {
            crate::console::tell!("treadle: cannot read run {run}'s events: {e}");
            Vec::new()
        }
    }
}

/// The key step `entry` has in this run (hex), once the cache worked it out.
fn key_of(ctx: &Ctx<'_>, entry: &Entry) -> Option<String> {
    let cache = ctx.cache.as_ref()?;
    cache.key_at(&entry.path).map(|k| k.hex())
}

/// Why an interrupted step's directory could not be taken over.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TakeDirError {
    #[error("cannot move the step directory {} to {}: {source}", from.display(), to.display())]
    Move {
        from: std::path::PathBuf,
        to: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Stopped(#[from] crate::blocking::WorkerStopped),
}

/// Makes `left.dir` this run's directory `dir` of the step (a rename in the state
/// directory), in place of the fresh one prepared for it.
pub(crate) async fn take_dir(left: &Unfinished, dir: &Path) -> Result<(), TakeDirError> {
    let (from, to) = (left.dir.clone(), dir.to_path_buf());
    crate::blocking::blocking(move || {
        std::fs::remove_dir_all(&to)
            .and_then(|()| std::fs::rename(&from, &to))
            .map_err(|source| TakeDirError::Move { from, to, source })
    })
    .await
}

/// Keeps the id of the session of the agent step at `entry`, working in `dir`, in the
/// state file (see [`step_sessions`]).
pub(crate) fn session_noter(ctx: &Ctx<'_>, entry: &Entry, dir: &Path) -> SessionNoted {
    let (store, run, path) = (ctx.store.clone(), ctx.run, entry.path.clone());
    let (key, dir) = (key_of(ctx, entry), dir.to_path_buf());
    Arc::new(move |session| {
        let row = StepSession {
            session,
            key: key.clone(),
            dir: dir.clone(),
        };
        if let Err(e) = step_sessions::note(&store.database(), run, &path, &row) {
            // The step goes on; a resume after a crash then starts it afresh.
            crate::console::tell!("treadle: cannot keep the session of step {path}: {e}");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::{FailureKind, StepRecord, StepStatus, left_unfinished};
    use crate::run::failure::StepFailure;

    fn ended(status: StepStatus, failure: StepFailure) -> StepRecord {
        let mut r = StepRecord::pending(0, "0".into(), "s".into(), "agent".into());
        r.status = status;
        r.set_failure(Some(failure));
        r
    }

    #[test]
    fn unfinished_is_decided_by_status_and_kind_not_by_the_text() {
        let stopped = StepFailure::new(FailureKind::Interrupted, "stopped");
        assert!(left_unfinished(&ended(
            StepStatus::Aborted,
            stopped.clone()
        )));
        assert!(left_unfinished(&ended(StepStatus::Failed, stopped)));
        // A step that failed on its own runs again from scratch, whatever its text says.
        let own = StepFailure::new(FailureKind::ExitStatus, "interrupted");
        assert!(!left_unfinished(&ended(StepStatus::Failed, own)));
        let running = StepRecord {
            status: StepStatus::Running,
            ..StepRecord::pending(0, "0".into(), "s".into(), "agent".into())
        };
        assert!(left_unfinished(&running));
    }
}
