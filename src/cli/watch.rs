//! `treadle watch FILE`: poll the file's trigger resources and build what they trigger,
//! until a signal. The first SIGINT, SIGTERM or SIGHUP stops polling and claiming, stops
//! `interruptible:` builds at once and waits (at most ten minutes) for the others; a second
//! stops them all (their process groups are killed); a third quits at once. A stopped
//! build stays queued and the next start resumes it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{EXIT_CONFIG, EXIT_INTERRUPTED, signals};
use crate::console::tell;
use crate::run::{self, Style};
use crate::watch::{NoObserver, Stops, WatchConfig, Watched, Watcher};

/// How long a shutdown waits for builds that are not `interruptible:`.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(600);

/// What `treadle watch` was asked.
pub(super) struct WatchArgs {
    pub file: PathBuf,
    pub interval: Duration,
    pub max_concurrent: usize,
    pub addr: Option<SocketAddr>,
    pub json: bool,
    pub state: Option<PathBuf>,
}

/// The watched pipeline, or the exit code.
fn watched(file: &Path) -> Result<Watched, u8> {
    let loaded = super::load_or_exit(file, None, false)?;
    super::needs_or_exit(&loaded)?;
    let name = crate::server::views::pipeline_name(&file.display().to_string());
    let w = Watched::of(name, loaded);
    if w.jobs.is_empty() {
        tell!(
            "{}: nothing to watch: no `get` has `trigger: true`\nhint: add `trigger: true` to the get of a resource whose new versions should build the job",
            file.display()
        );
        return Err(EXIT_CONFIG);
    }
    Ok(w)
}

pub(super) async fn watch(args: WatchArgs) -> u8 {
    let w = match watched(&args.file) {
        Ok(w) => w,
        Err(code) => return code,
    };
    let resources = w.trigger_resources();
    let state_path = run::state_path(&args.file, args.state.clone());
    let store = match run::open_store(state_path.clone()).await {
        Ok(s) => s,
        Err(e) => {
            tell!("{}: {e}", args.file.display());
            return EXIT_CONFIG;
        }
    };
    let config = WatchConfig {
        max_concurrent: args.max_concurrent,
        style: Style::detect(args.json),
        agents: run::agents::default_agent_runner(),
        observer: Arc::new(NoObserver),
    };
    let watcher = match Watcher::new(vec![w], store, config) {
        Ok(w) => w,
        Err(e) => {
            tell!("{}: {e}", args.file.display());
            return EXIT_CONFIG;
        }
    };
    let (stop, force) = (CancellationToken::new(), CancellationToken::new());
    let signals = signals::watch_stages(vec![stop.clone(), force.clone()]);
    if let Some(addr) = args.addr
        && let Err(code) = listen(addr, watcher.clone(), stop.clone()).await
    {
        return code;
    }
    tell!(
        "treadle watch: checking {} every {} (state {})",
        resources.join(", "),
        humantime::format_duration(args.interval),
        state_path.display()
    );
    let deadline = {
        let (stop, force) = (stop.clone(), force.clone());
        tokio::spawn(async move {
            stop.cancelled().await;
            tokio::time::sleep(SHUTDOWN_WAIT).await;
            force.cancel();
        })
    };
    watcher.run(args.interval, Stops { stop, force }).await;
    deadline.abort();
    signals.exit_code(EXIT_INTERRUPTED)
}

/// Serves the webhook on `addr` until `stop`.
async fn listen(
    addr: SocketAddr,
    watcher: Arc<Watcher>,
    stop: CancellationToken,
) -> Result<(), u8> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        tell!("treadle watch: cannot listen on {addr}: {e}");
        EXIT_CONFIG
    })?;
    let bound = listener.local_addr().unwrap_or(addr);
    // Nor may a step reach the webhook that triggers builds.
    crate::confine::network::forbid_port(bound.port());
    tell!("treadle watch: webhooks on http://{bound}/hooks/check/RESOURCE");
    let app = crate::watch::webhooks::router(watcher);
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        if let Err(e) = served {
            tell!("treadle watch: the webhook listener stopped: {e}");
        }
    });
    Ok(())
}
