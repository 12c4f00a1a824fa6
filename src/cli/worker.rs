//! `treadle worker`: run queued steps until Ctrl-C or SIGTERM.

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use super::EXIT_CONFIG;
use crate::console::say;

pub(super) async fn worker(url: String, slots: usize, dir: PathBuf) -> u8 {
    let stop = CancellationToken::new();
    let watch = super::signals::watch(stop.clone());
    say!("treadle worker: taking steps from {url} ({slots} at a time)");
    let options = crate::dist::WorkerOptions {
        url,
        slots,
        dir,
        stop,
    };
    match crate::dist::work(options).await {
        Ok(()) => watch.exit_code(0),
        Err(e) => {
            crate::console::tell!("treadle worker: {e}");
            EXIT_CONFIG
        }
    }
}
