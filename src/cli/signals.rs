//! Stopping a run on SIGINT (Ctrl-C), SIGTERM and SIGHUP alike — what a terminal, `timeout`,
//! a CI cancel button and a container stop send.
//!
//! The first signal cancels the run: the executor kills each running task's process group,
//! records the run as `aborted` (resumable with `--resume`) and returns. The exit code is
//! then 128 + the signal's number (130, 143, 129), as a shell reports a process the signal
//! killed, so callers see which signal stopped it. A second signal exits at once with that
//! code: the run stays `running` in the state file until `--resume` closes it as aborted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use tokio::signal::unix::{SignalKind, signal};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::EXIT_INTERRUPTED;

/// The signals that stop a run, with their numbers.
const STOPPING: [(SignalKind, u8, &str); 3] = [
    (SignalKind::interrupt(), 2, "Ctrl-C"),
    (SignalKind::terminate(), 15, "SIGTERM"),
    (SignalKind::hangup(), 1, "SIGHUP"),
];

/// Watches for the stopping signals while a command runs.
pub(super) struct Watch {
    task: Option<JoinHandle<()>>,
    /// The number of the first signal received (0: none).
    received: Arc<AtomicU8>,
}

/// Starts watching: the first stopping signal cancels `cancel`.
pub(super) fn watch(cancel: CancellationToken) -> Watch {
    watch_stages(vec![cancel])
}

/// Starts watching: the first stopping signal cancels `stages[0]`, the next `stages[1]`,
/// and so on; one more exits at once (`treadle watch`: stop polling and wait, then stop
/// every build, then quit).
pub(super) fn watch_stages(stages: Vec<CancellationToken>) -> Watch {
    let received = Arc::new(AtomicU8::new(0));
    let mut streams = Vec::new();
    for (kind, number, name) in STOPPING {
        match signal(kind) {
            Ok(s) => streams.push((s, number, name)),
            // Without a handler the signal keeps its default action (the process ends).
            Err(e) => crate::console::tell!("treadle: cannot watch for {name}: {e}"),
        }
    }
    let seen = received.clone();
    let task = tokio::spawn(async move {
        let mut count = 0;
        loop {
            let waits = streams.iter_mut().map(|(s, number, name)| {
                Box::pin(async move {
                    s.recv().await;
                    (*number, *name)
                })
            });
            let ((number, name), _, _) = futures::future::select_all(waits).await;
            let Some(stage) = stages.get(count) else {
                std::process::exit(i32::from(exit_code_of(number)));
            };
            if seen.load(Ordering::SeqCst) == 0 {
                seen.store(number, Ordering::SeqCst);
            }
            let what = match (count, stages.len()) {
                (0, 1) => "stopping the running steps (again to quit now)",
                (0, _) => "no new builds; waiting for running ones (again to stop them)",
                _ => "stopping every running build (again to quit now)",
            };
            crate::console::tell!("interrupted by {name}: {what}");
            stage.cancel();
            count += 1;
        }
    });
    Watch {
        task: Some(task),
        received,
    }
}

fn exit_code_of(signal: u8) -> u8 {
    128 + signal
}

impl Watch {
    /// The exit code for a command that ended with `code`: an interrupted run reports the
    /// signal that stopped it.
    pub(super) fn exit_code(&self, code: u8) -> u8 {
        match self.received.load(Ordering::SeqCst) {
            0 => code,
            n if code == EXIT_INTERRUPTED => exit_code_of(n),
            _ => code,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}
