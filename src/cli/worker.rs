//! `treadle worker`: run queued steps until SIGTERM (or Ctrl-C), then drain: the first
//! signal stops taking steps and lets the running ones finish (up to `--drain-timeout`)
//! and exits 0; a second hands them back at once; a third exits at once.

use std::path::PathBuf;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::EXIT_CONFIG;
use super::nats_args::NatsArgs;
use crate::console::say;

pub(super) async fn worker(nats: NatsArgs, slots: usize, dir: PathBuf, drain: Duration) -> u8 {
    let config = match nats.config() {
        Ok(Some(c)) => c,
        Ok(None) => {
            crate::console::tell!(
                "treadle worker: --nats is required\nhint: give the NATS server the steps are queued on, e.g. --nats nats://127.0.0.1:4222"
            );
            return EXIT_CONFIG;
        }
        Err(e) => {
            crate::console::tell!("treadle worker: {e}");
            return EXIT_CONFIG;
        }
    };
    let (stop, abandon) = (CancellationToken::new(), CancellationToken::new());
    let _watch = super::signals::watch_stages(vec![stop.clone(), abandon.clone()]);
    say!(
        "treadle worker: taking steps from {} ({slots} at a time)",
        config.shown()
    );
    let options = crate::dist::WorkerOptions {
        nats: config,
        slots,
        dir,
        stop,
        abandon,
        drain_timeout: drain,
    };
    match crate::dist::work(options).await {
        // Drained: every step it took is stored or handed back.
        Ok(()) => 0,
        Err(e) => {
            crate::console::tell!("treadle worker: {e}");
            EXIT_CONFIG
        }
    }
}
