//! `treadle serve`: serve until Ctrl-C or SIGTERM, saying where it listens.

use tokio_util::sync::CancellationToken;

use super::EXIT_CONFIG;
use crate::console::say;
use crate::server::ServeOptions;

pub(super) async fn serve(options: ServeOptions) -> u8 {
    let stop = CancellationToken::new();
    let watch = super::signals::watch(stop.clone());
    let served = crate::server::serve(options, stop, |ready| {
        say!(
            "treadle serve: listening on http://{} (state {})\n  open {}",
            ready.addr,
            ready.state.display(),
            ready.page
        );
    })
    .await;
    match served {
        Ok(()) => watch.exit_code(0),
        Err(e) => {
            crate::console::tell!("treadle serve: {e}");
            EXIT_CONFIG
        }
    }
}
