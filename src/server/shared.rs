//! What every handler of the server shares ([`App`]): the state file, the served files,
//! the runs going on in this process, and who may ask what. Apart from the router and the
//! server's life (`super::app`), so that handlers and the router do not import each other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::folder::ServedFile;
use crate::run::event_log::EventLog;
use crate::run::{AgentRunner, Store};

/// A run going on in this process.
#[derive(Debug, Clone)]
pub struct LiveRun {
    /// Its journal, which followers subscribe to.
    pub journal: Arc<EventLog>,
    /// Cancels it.
    pub cancel: CancellationToken,
}

/// What every handler shares.
pub struct App {
    /// The state file, owned by this process while it serves.
    pub store: Arc<Store>,
    /// The served pipeline files, listed again at each look (see `super::folder`).
    pub files: super::folder::Folder,
    /// Runs going on now, by id.
    pub live: Mutex<HashMap<u64, LiveRun>>,
    /// The token every request must carry: `--token-env`'s, or one made at start
    /// (`super::token`); `None` only when users' tokens (`--user-token`) protect it.
    pub token: Option<String>,
    /// The name of the page's cookie that carries the token (`super::token::cookie_name`).
    pub cookie: String,
    /// Named tokens and the approver header: who answers an approval.
    pub identity: super::identity::Identity,
    /// Runs agent steps.
    pub agents: Arc<dyn AgentRunner>,
    /// Cancelled when the server shuts down: its runs are aborted.
    pub shutdown: CancellationToken,
    /// Runs task and agent steps on workers over NATS (`--nats`); `None`: here.
    pub dispatcher: Option<Arc<crate::dist::Dispatcher>>,
    /// Workflows written in Rust it serves besides the files (`super::code`).
    pub workflows: super::workflows::CodeWorkflows,
}

impl App {
    /// The live run `id`, if it runs here now.
    pub fn live_run(&self, id: u64) -> Option<LiveRun> {
        self.live.lock().ok()?.get(&id).cloned()
    }

    /// The file served under `name` now.
    pub fn file(&self, name: &str) -> Option<ServedFile> {
        self.files.file(name)
    }
}
