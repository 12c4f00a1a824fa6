//! treadle: YAML pipelines in which an agent is one step among shell tasks, resources,
//! approvals and assertions.
//!
//! # Layout
//!
//! * [`pipeline`]: the pipeline file format, loading with located errors, validation, schema.
//! * [`run`]: the executor (plan walking, task and agent steps, the agent runner, the cache
//!   around each step, artifacts, state store, transcript).
//! * [`agent`]: the agent step on top of a `treadle_session::Session`: verdicts, budgets, cost.
//! * [`tools`]: built-in tools confined to a step's directory.
//! * [`assert`]: deterministic checks of a step's and a job's facts.
//! * [`model_tape`]: recording and replaying agent steps' model traffic (`--record`,
//!   `--replay-model`).
//! * [`shadow`]: `treadle run --shadow RUN`: a recorded run's agent steps again on another
//!   model or prompt, tool calls answered from the recording, what changed reported; the
//!   server runs the same shadow and keeps its report (`POST /api/v1/runs/{id}/shadow`).
//! * [`workflow`]: workflows written in Rust: async functions whose calls are typed steps
//!   run by the same executor as YAML's (same keys, records, transcript, resume); served
//!   by `treadle serve`'s server (`workflow::Server`) and planned (`workflow::plan`).
//! * [`cache`]: step keys, the content-addressed store, hit or miss, resume, `plan`.
//! * [`resource`]: `get` / `put` resources; git is built in.
//! * [`template`]: the one `{{ }}` engine (the Go-template subset of `steps`): resource
//!   scripts, custom tools' commands, `across:` cells' `{{ .vars.NAME }}`.
//! * [`blocking`]: blocking work (redb, git, files) off the async threads, one helper.
//! * [`stored_json`]: the format of a value in the state file's tables (a format byte, then
//!   JSON), written and read in one place.
//! * [`clock`]: wall-clock milliseconds, as the state file records them.
//! * [`environ`]: API keys taken out of treadle's environment at start-up; the allow-listed
//!   environment of every command it starts.
//! * [`confine`]: Landlock confinement of tasks, `run_shell`, hooks, MCP servers and CLI
//!   agents to their step directory; a confined command's PID namespace and `/proc`.
//! * [`keeper`]: the process between treadle and each command, which lets nothing the
//!   command starts outlive it or treadle, and the spawner that starts it without copying
//!   treadle; a run's leftovers found and stopped.
//! * [`server`]: `treadle serve`: the process that owns the state file, its HTTP API, each
//!   run's resumable event stream, and the client the other commands use to reach it.
//! * [`watch`]: `treadle watch`: the poller of trigger resources, the durable build queue
//!   and its workers, `passed:`, webhooks (also run inside `treadle serve`).
//! * [`dist`]: past one machine: steps on workers over NATS JetStream (`serve --nats`,
//!   `treadle worker`).
//! * [`web`]: the page of `treadle serve` (HTML, CSS and JavaScript in the binary).
//! * [`telemetry`]: tracing to stderr (`--log`, `--log-format`) and the run, job and step
//!   spans.
//! * [`needs`]: the programs a run needs on PATH (`sh`, `git`), checked before it starts.
//! * [`cli`]: the `treadle` command's grammar and commands (`main.rs` only calls it).
//! * `console`: writing to stdout and stderr without panicking when they are closed.

// Lines go through `console::say!` / `console::tell!`, which survive a closed stream.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod agent;
pub mod assert;
pub mod blocking;
pub mod cache;
pub mod cli;
pub mod clock;
pub mod confine;
mod console;
pub mod dist;
pub mod environ;
pub mod keeper;
pub mod model_tape;
pub mod needs;
pub mod pipeline;
pub mod resource;
pub mod run;
pub mod server;
pub mod shadow;
pub mod stored_json;
pub mod telemetry;
pub mod template;
pub mod tools;
pub mod watch;
pub mod web;
pub mod workflow;
