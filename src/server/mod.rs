//! `treadle serve`: one long-lived process that owns the state file, runs pipelines in it,
//! and serves the HTTP API (`/api/v1/...`), each run's resumable event stream and the web
//! page. See docs/server.md.
//!
//! # Layout
//!
//! * `app.rs`: the serve options, the router, start-up and shutdown;
//! * `shared.rs`: what every handler shares, [`shared::App`] (the store, the served files,
//!   the live runs);
//! * `folder.rs`: the served files, listed again at each look (new and removed files), and
//!   why the paths given serve none;
//! * `discovery.rs`: `.treadle/server.json`, where the other commands find the server;
//! * `listen.rs`: accepting connections, with header-read and write-stall time limits;
//! * `hosts.rs`: the names the server answers to (`--allowed-host`), checked before routing;
//! * `routes.rs`: the table of every route and who may call it, which the router is built from;
//! * `guard.rs`: the token and the cross-site check in front of every route;
//! * `token.rs`: the token a server makes when none is configured, its file for the local
//!   commands, and the page's cookie;
//! * `api.rs`: health, pipelines, plans, runs (list, show, cancel);
//! * `start.rs`: starting a run in the server; `begun.rs`: a started run's id handed to
//!   the request that started it (YAML runs and Rust workflows alike);
//! * `workflows.rs`: what the server needs of a workflow written in Rust, served beside the
//!   files, and the set it serves;
//! * `code.rs`: starting a run of one with its typed input, and resuming one a stopped
//!   server left running;
//! * `fork.rs`: forking a finished run in the server, and the turns of a step a fork can start from;
//! * `shadows.rs`: shadow runs in the server, their reports kept for the comparison page;
//! * `api_vars.rs`: the vars of a run started over the API, filled in as data;
//! * `approvals.rs`: listing and answering approvals;
//! * `receipt.rs`: what a step's cache key is made of;
//! * `artifacts.rs`: a run's artifact files (browsed, downloaded, confined to the run's
//!   directory) and the files each step added, changed or removed;
//! * `diff.rs`: the unified diff of a changed text file;
//! * `untrusted.rs`: reading the files steps made as untrusted (regular files only,
//!   streamed in chunks, a bounded number of readers);
//! * `versions.rs`: the resource version (and git commit message) a get step used;
//! * `identity.rs`: who answers an approval: a named token or the operator's header;
//! * `metrics.rs`: `/metrics` in the Prometheus text format;
//! * `sse.rs`: a run's events as server-sent events, resumable by `Last-Event-ID`;
//! * `triggers.rs`: who started each run;
//! * `watching.rs`: the watcher of the served files (`trigger: true` gets) and its webhook;
//! * `views.rs`: the JSON shapes of runs, steps and pipelines;
//! * `error.rs`: the API's error answers;
//! * `client.rs`: the other commands' side: find the server and talk to it.

pub mod api;
pub mod api_vars;
pub mod app;
pub mod approvals;
mod artifacts;
mod begun;
pub mod client;
mod code;
mod diff;
pub mod discovery;
pub mod error;
pub mod folder;
pub mod fork;
mod guard;
pub mod hosts;
pub mod identity;
pub mod listen;
pub mod metrics;
mod receipt;
pub mod routes;
pub mod shadows;
pub mod shared;
pub mod sse;
mod start;
pub mod token;
mod triggers;
mod untrusted;
mod versions;
pub mod views;
mod watching;
pub mod workflows;

pub use app::{Ready, ServeError, ServeOptions, serve, serve_with};
