//! The watcher inside `treadle serve`: the served files' trigger resources are polled and
//! their jobs built in the server's process, each build a live run of the server (listed,
//! followed and cancelled like any other, with trigger `watch`), and
//! `POST /hooks/check/{resource}` on the server's listener.
//!
//! A server shutdown stops every build at once (the server aborts its runs; there is no
//! waiting for builds that are not `interruptible:` here); their queue rows stay, so the
//! next start resumes them.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::folder::ServedFile;
use super::shared::{App, LiveRun};
use super::triggers;
use crate::console::tell;
use crate::pipeline::CheckScope;
use crate::run::Style;
use crate::run::event_log::EventLog;
use crate::watch::{BuildObserver, Stops, WatchConfig, Watched, Watcher};

/// Lists the watcher's builds as the server's live runs.
struct ServeObserver {
    app: Weak<App>,
}

impl BuildObserver for ServeObserver {
    fn begun(&self, run: u64, journal: Arc<EventLog>, cancel: CancellationToken) {
        let Some(app) = self.app.upgrade() else {
            return;
        };
        if let Ok(mut live) = app.live.lock() {
            live.insert(run, LiveRun { journal, cancel });
        }
        if let Err(e) = triggers::set(&app.store.database(), run, "watch") {
            tell!("treadle serve: cannot record who started run {run}: {e}");
        }
    }

    fn ended(&self, run: u64) {
        if let Some(app) = self.app.upgrade()
            && let Ok(mut live) = app.live.lock()
        {
            live.remove(&run);
        }
    }
}

/// The watcher of the served files that have a `trigger: true` get (`None`: none has),
/// started: it polls every `interval` until the server shuts down.
pub fn start(app: &Arc<App>, files: &[ServedFile], interval: Duration) -> Option<Arc<Watcher>> {
    let scope = CheckScope {
        job: None,
        env: &crate::pipeline::model::process_env,
        machine: false,
    };
    let mut watched = Vec::new();
    for f in files {
        match crate::pipeline::load(&f.file, &scope) {
            Ok(loaded) => watched.push(Watched::of(f.name.clone(), loaded)),
            // A file that does not load is reported when a run of it is asked for.
            Err(_) => continue,
        }
    }
    watched.retain(|w| !w.jobs.is_empty());
    if watched.is_empty() {
        return None;
    }
    let config = WatchConfig {
        max_concurrent: 1,
        style: Style::Quiet,
        agents: app.agents.clone(),
        observer: Arc::new(ServeObserver {
            app: Arc::downgrade(app),
        }),
    };
    let watcher = match Watcher::new(watched, app.store.clone(), config) {
        Ok(w) => w,
        Err(e) => {
            tell!("treadle serve: cannot start watching: {e}");
            return None;
        }
    };
    let stops = Stops {
        stop: app.shutdown.clone(),
        force: app.shutdown.clone(),
    };
    tokio::spawn(watcher.clone().run(interval, stops));
    Some(watcher)
}
