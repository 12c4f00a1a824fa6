//! The server process: how it is told what to serve, its router, and its life from
//! binding the address to removing the discovery file (its shared state is `super::shared`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::Router;
use tokio_util::sync::CancellationToken;

use super::discovery::{self, Discovery};
use super::folder::{ServedFile, served_files};
use super::shared::App;

/// How to serve.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Pipeline files, or directories whose `*.yml` / `*.yaml` files are served.
    pub paths: Vec<PathBuf>,
    /// Where to listen.
    pub addr: SocketAddr,
    /// The environment variable holding the token (required off loopback).
    pub token_env: Option<String>,
    /// The state file (default: `.treadle/state.redb` beside the files).
    pub state: Option<PathBuf>,
    /// How often the files' trigger resources are checked.
    pub interval: std::time::Duration,
    /// The NATS server whose workers run the steps (`--nats`); `None`: they run here.
    pub nats: Option<crate::dist::connect::NatsConfig>,
    /// How long a step on the NATS queue may wait for a worker before the wait is logged
    /// (`--unclaimed-warning`).
    pub unclaimed_warning: std::time::Duration,
    /// Names besides `localhost` and IP literals the server answers to (`--allowed-host`).
    pub allowed_hosts: Vec<super::hosts::HostName>,
    /// Leave the runs a stopped process left running as they are (`--no-adopt`): they
    /// show as interrupted and resumable instead of going on here.
    pub no_adopt: bool,
    /// How long a client may take to send a request's head, or to read what is sent.
    pub limits: super::listen::Limits,
    /// Named tokens and the approver header (`--user-token`, `--approver-header`).
    pub identity: super::identity::IdentityOptions,
}

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The paths give no usable set of pipeline files.
    #[error(transparent)]
    Folder(#[from] super::folder::FolderError),
    /// The files are in different directories, so they have different state files.
    #[error(
        "{a} and {b} keep their runs in different state files\nhint: serve files of one directory, or give `--state`"
    )]
    SplitState {
        /// One file.
        a: String,
        /// The other.
        b: String,
    },
    /// Listening off loopback without a token.
    #[error(
        "{0} is not a loopback address: anyone who can reach it could run commands\nhint: give `--token-env NAME`, the environment variable holding a token every request must carry"
    )]
    NoToken(SocketAddr),
    /// A named token or the approver header is not usable.
    #[error(transparent)]
    Identity(#[from] super::identity::IdentityError),
    /// The token variable is unset or empty.
    #[error("--token-env {0}: the variable is not set (or empty)")]
    TokenUnset(String),
    /// The state file cannot be opened.
    #[error(transparent)]
    State(#[from] crate::run::StateError),
    /// The address cannot be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The discovery file cannot be written.
    #[error(transparent)]
    Discovery(#[from] discovery::DiscoveryError),
    /// The token file cannot be written.
    #[error(transparent)]
    TokenFile(#[from] super::token::TokenFileError),
    /// NATS cannot be used (`--nats`).
    #[error(transparent)]
    Nats(#[from] crate::dist::DistError),
    /// Only workflows written in Rust are served, and no state file is given.
    #[error("no pipeline file says where the state file is\nhint: give the state file")]
    NoState,
    /// A workflow's name cannot be served (`super::workflows`).
    #[error(
        "workflow `{0}` cannot be served under its name: a name is unique among the served workflows and files, and has no `.` or `/`"
    )]
    WorkflowName(String),
}

/// The one state file of the served files.
pub fn state_of(files: &[ServedFile], given: Option<PathBuf>) -> Result<PathBuf, ServeError> {
    if let Some(state) = given {
        return Ok(state);
    }
    let first = files.first().ok_or(ServeError::NoState)?;
    let state = crate::run::state_path(&first.file, None);
    for f in &files[1..] {
        if crate::run::state_path(&f.file, None) != state {
            return Err(ServeError::SplitState {
                a: first.file.display().to_string(),
                b: f.file.display().to_string(),
            });
        }
    }
    Ok(state)
}

/// The configured token: required off loopback, read from the named variable (`None`: the
/// server makes its own).
pub fn token_of(addr: SocketAddr, token_env: Option<&str>) -> Result<Option<String>, ServeError> {
    match token_env {
        Some(var) => match std::env::var(var) {
            Ok(t) if !t.is_empty() => Ok(Some(t)),
            _ => Err(ServeError::TokenUnset(var.to_owned())),
        },
        None if addr.ip().is_loopback() => Ok(None),
        None => Err(ServeError::NoToken(addr)),
    }
}

/// The whole router: the route table (`routes.rs`: the API, the event streams, `/metrics`
/// and the page), behind the guard.
pub fn router(app: Arc<App>) -> Router {
    super::routes::router()
        .with_state(app.clone())
        .layer(axum::middleware::from_fn_with_state(
            app,
            super::guard::check,
        ))
}

/// What a server that started says: where it listens, its state file, and the page's
/// address (with `?token=` when the server made its token: opening it logs the browser in).
#[derive(Debug)]
pub struct Ready<'a> {
    /// The bound address.
    pub addr: SocketAddr,
    /// The state file.
    pub state: &'a Path,
    /// The page's address to print.
    pub page: String,
}

/// Serves until `stop` is cancelled (Ctrl-C or SIGTERM in `treadle serve`); `ready` is told
/// where it listens once it does.
pub async fn serve(
    options: ServeOptions,
    stop: CancellationToken,
    ready: impl FnOnce(&Ready<'_>),
) -> Result<(), ServeError> {
    serve_with(options, Default::default(), stop, ready).await
}

/// [`serve`] with workflows written in Rust besides the files (`options.paths` may then be
/// empty, with `options.state` given): `crate::workflow::Server`.
pub async fn serve_with(
    options: ServeOptions,
    workflows: super::workflows::CodeWorkflows,
    stop: CancellationToken,
    ready: impl FnOnce(&Ready<'_>),
) -> Result<(), ServeError> {
    let files = match options.paths.is_empty() && !workflows.all().is_empty() {
        true => Vec::new(),
        false => served_files(&options.paths)?,
    };
    check_names(&workflows, &files)?;
    let state = state_of(&files, options.state.clone())?;
    let identity = super::identity::Identity::from_options(&options.identity)?;
    let configured = match token_of(options.addr, options.token_env.as_deref()) {
        // Users' tokens protect a server off loopback as the server's own does.
        Err(ServeError::NoToken(_)) if identity.has_tokens() => None,
        other => other?,
    };
    // A server always has a token: without one configured (or users' own), it makes one,
    // which is in no environment and only in a file of the user's (see `super::token`).
    let made = configured.is_none() && !identity.has_tokens();
    let token = match made {
        true => Some(super::token::fresh()),
        false => configured,
    };
    let store = crate::run::open_store(state.clone()).await?;
    let dispatcher = match &options.nats {
        Some(nats) => {
            Some(crate::dist::Dispatcher::connect(nats, &state, options.unclaimed_warning).await?)
        }
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|source| ServeError::Bind {
            addr: options.addr,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: options.addr,
        source,
    })?;
    // No step this server runs may reach its API, whatever its `network:` grant.
    crate::confine::network::forbid_port(addr.port());
    let app = Arc::new(App {
        store,
        files: super::folder::Folder::new(options.paths.clone(), files),
        live: Mutex::default(),
        token,
        cookie: super::token::cookie_name(addr.port()),
        identity,
        agents: crate::run::agents::default_agent_runner(),
        shutdown: stop.child_token(),
        dispatcher,
        workflows,
    });
    if let Some(d) = &app.dispatcher {
        // Questions its steps left waiting on workers when it last stopped.
        let (bus, server) = (d.bus().clone(), d.server().to_owned());
        let adopting =
            crate::dist::asks::adopt(bus, server, app.store.clone(), app.shutdown.clone());
        tokio::spawn(adopting);
    }
    let page = announce(&app, &state, addr, made)?;
    ready(&Ready {
        addr,
        state: &state,
        page,
    });
    super::shadows::abandon_left(&app).await;
    if !options.no_adopt {
        // This process holds the state file's lock: a run still marked running was left by
        // a process that is gone.
        super::start::adopt_all(&app).await;
    }
    let ending = app.shutdown.clone();
    let mut routes = router(app.clone());
    if let Some(watcher) = super::watching::start(&app, &app.files.files(), options.interval) {
        // After the guard: a webhook carries its resource's own token, not the server's.
        routes = routes.merge(crate::watch::webhooks::router(watcher));
    }
    // Before routing: a request to a name that is not this server's reaches no route.
    let allowed = Arc::new(super::hosts::AllowedHosts::new(
        options.allowed_hosts.clone(),
    ));
    let hosts = axum::middleware::from_fn_with_state(allowed, super::hosts::check);
    // A router with nothing but a fallback: every request passes the layer, matched or not.
    let guarded = Router::new().fallback_service(routes).layer(hosts);
    let stopping = stop.clone();
    tokio::spawn(async move {
        stopping.cancelled().await;
        // Aborts the runs and ends the event streams, which graceful shutdown waits for.
        ending.cancel();
    });
    super::listen::serve(listener, guarded, options.limits, stop).await;
    app.shutdown.cancel();
    wait_for_runs(&app).await;
    discovery::remove(&state);
    if made {
        super::token::remove(&state);
    }
    Ok(())
}

/// Tells the local commands where the server is: the token file (when the server made its
/// token) and the discovery file. Returns the page's address to print, with the made
/// token.
fn announce(app: &App, state: &Path, addr: SocketAddr, made: bool) -> Result<String, ServeError> {
    let mut page = format!("http://{}/", super::client::reachable(addr));
    if let (true, Some(token)) = (made, &app.token) {
        super::token::write(state, token)?;
        page.push_str(&format!("?token={token}"));
    }
    let found = Discovery {
        addr,
        pid: std::process::id(),
        token_required: app.token.is_some() || app.identity.has_tokens(),
    };
    if let Err(e) = discovery::write(state, &found) {
        super::token::remove(state);
        return Err(e.into());
    }
    Ok(page)
}

/// Each workflow's name is its own: a name its runs' pipeline name is (no `.`, no `/`),
/// not another workflow's or a served file's.
fn check_names(
    workflows: &super::workflows::CodeWorkflows,
    files: &[ServedFile],
) -> Result<(), ServeError> {
    let mut seen: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
    for w in workflows.all() {
        let name = w.name();
        let plain = !name.is_empty() && super::views::pipeline_name(name) == name;
        if !plain || name.contains('/') || seen.contains(&name) {
            return Err(ServeError::WorkflowName(name.to_owned()));
        }
        seen.push(name);
    }
    Ok(())
}

/// Gives the aborted runs a moment to record how they ended.
async fn wait_for_runs(app: &App) {
    for _ in 0..100 {
        if app.live.lock().map_or(true, |l| l.is_empty()) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
