//! The `treadle` command line: argument grammar (clap derive) and dispatch to the
//! commands, each of which returns the process exit code.
//!
//! Exit codes: 0 success, 1 a step failed, 2 the pipeline cannot run (configuration or
//! infrastructure), 128 + the signal's number when a signal stopped the run: 130 Ctrl-C
//! (SIGINT), 143 SIGTERM, 129 SIGHUP.

mod approvals;
mod cost;
mod dispatch;
mod docs;
mod init;
mod inspect;
mod jobs;
mod keys;
pub mod nats_args;
mod plan;
mod preflight;
mod questions;
mod remote;
mod run;
mod serve;
mod shadow;
mod shell;
mod signals;
mod tape;
mod test;
mod watch;
mod worker;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

use crate::pipeline::{CheckScope, Loaded};
use crate::run::approval::mailbox::Answer;

pub use dispatch::dispatch;
pub use keys::key_vars;

/// Exit code: a step failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: configuration or infrastructure error.
pub const EXIT_CONFIG: u8 = 2;
/// Exit code: interrupted by Ctrl-C (SIGINT); SIGTERM and SIGHUP give 143 and 129.
pub const EXIT_INTERRUPTED: u8 = 130;

/// treadle runs YAML pipelines in which an agent is one step among shell tasks.
#[derive(Debug, Parser)]
#[command(name = "treadle", version, about, propagate_version = true)]
pub struct Cli {
    /// Log to stderr at LEVEL (error, warn, info, debug, trace) or by RUST_LOG-style
    /// directives; default: RUST_LOG, else warn.
    #[arg(long, global = true, value_name = "LEVEL")]
    pub log: Option<String>,
    /// How log lines on stderr look.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t,
        value_name = "FORMAT"
    )]
    pub log_format: crate::telemetry::LogFormat,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
    /// Sets a pipeline var: each `((NAME))` in the file becomes VALUE (repeatable; wins
    /// over `--vars-file`).
    #[arg(long = "var", value_name = "NAME=VALUE", global = true)]
    pub vars: Vec<String>,
    /// A YAML file of `NAME: VALUE` pipeline vars (repeatable).
    #[arg(long = "vars-file", value_name = "FILE", global = true)]
    pub vars_files: Vec<PathBuf>,
}

/// The pipeline vars of this invocation, read once from the command line.
static VARS: std::sync::OnceLock<crate::pipeline::vars::Vars> = std::sync::OnceLock::new();

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run one job of a pipeline.
    Run {
        /// The pipeline file.
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
        /// The job to run, when the file has several.
        #[arg(long)]
        job: Option<String>,
        /// Print the run's events as JSON lines.
        #[arg(long)]
        json: bool,
        /// The state file (default: .treadle/state.redb beside the pipeline).
        #[arg(long)]
        state: Option<PathBuf>,
        /// Save each agent step's model traffic under DIR/<job>/<step>/ (see `treadle docs record-replay`).
        #[arg(long, value_name = "DIR", conflicts_with = "replay_model")]
        record: Option<PathBuf>,
        /// Answer agent steps from a recording made with --record, with no model server.
        #[arg(long, value_name = "DIR")]
        replay_model: Option<PathBuf>,
        /// Continue a failed or interrupted run from its first unfinished step.
        #[arg(long, value_name = "RUN", conflicts_with = "replay")]
        resume: Option<u64>,
        /// Re-run one step of an earlier run (with --from), on that run's recorded inputs.
        #[arg(long, value_name = "RUN", requires = "from")]
        replay: Option<u64>,
        /// The step --replay re-runs (its name or outline path), and what follows it.
        #[arg(long, value_name = "STEP", requires = "replay")]
        from: Option<String>,
        /// Take nothing from the cache: every step runs. What succeeds is stored as usual,
        /// so the next ordinary run replays it rather than running it again.
        #[arg(long, conflicts_with_all = ["resume", "replay", "rerun"])]
        force: bool,
        /// Run STEP (its name or outline path) and every step that depends on it, even
        /// when cached; the steps before it are taken from the cache as usual.
        #[arg(long, value_name = "STEP", conflicts_with_all = ["resume", "replay"])]
        rerun: Option<String>,
        /// A new run from RUN: the steps before --at's replayed, that agent step going on
        /// from a fork of its session in RUN (`treadle docs durability`, "Forking a run").
        #[arg(
            long,
            value_name = "RUN",
            requires = "at",
            conflicts_with_all = ["resume", "replay", "force", "rerun"]
        )]
        fork: Option<u64>,
        /// With --fork: the agent step, and after which of its turns (from 1) to go on
        /// (`STEP/TURN`); without a turn, the step starts over.
        #[arg(long, value_name = "STEP[/TURN]", requires = "fork")]
        at: Option<String>,
        /// With --fork: the message the step goes on with (default: its own prompt).
        #[arg(
            long,
            value_name = "TEXT",
            requires = "fork",
            conflicts_with = "prompt_file"
        )]
        prompt: Option<String>,
        /// With --fork: the file whose text is the message the step goes on with.
        #[arg(long, value_name = "FILE", requires = "fork")]
        prompt_file: Option<PathBuf>,
        /// Run a recorded run's agent steps again in scratch directories and report what
        /// changes: tool calls answered from the recording where they match (see
        /// `treadle docs shadow-runs`). Exit 1 when a verdict changes or an assert fails.
        #[arg(
            long,
            value_name = "RUN",
            conflicts_with_all = ["resume", "replay", "record", "replay_model", "force", "rerun", "fork"]
        )]
        shadow: Option<u64>,
        /// With --shadow: the model every agent step runs on (`provider/model`).
        #[arg(
            long,
            value_name = "NAME",
            requires = "shadow",
            conflicts_with = "agent_file"
        )]
        model: Option<String>,
        /// With --shadow: a YAML list of agents replacing the pipeline's of the same name.
        #[arg(long, value_name = "FILE", requires = "shadow")]
        agent_file: Option<PathBuf>,
    },
    /// Check the file and that this machine can run it.
    Validate {
        /// The pipeline file.
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
        /// Also check that every model and MCP server the job uses answers now (a minimal
        /// model request each, and each server started and stopped).
        #[arg(long)]
        preflight: bool,
        /// With --preflight: only this job.
        #[arg(long, requires = "preflight")]
        job: Option<String>,
    },
    /// Show which steps a run would execute.
    Plan {
        /// The pipeline file.
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
        /// Only this job.
        #[arg(long)]
        job: Option<String>,
        /// Print each job's plan as one JSON object per line (`steps`: each step's
        /// `plan`, `cached`, `run`, `skipped`, `container` or `depends` with its cases).
        #[arg(long)]
        json: bool,
    },
    /// Print the JSON Schema of the pipeline format.
    Schema,
    /// List past runs, or the steps of one.
    Runs {
        /// The pipeline file (its state file is read).
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
        /// Show the steps of this run.
        #[arg(long, conflicts_with = "show")]
        steps: Option<u64>,
        /// Print this run's transcript as it was shown live: each step, its output, and
        /// each agent step's calls and results.
        #[arg(long, value_name = "RUN", conflicts_with = "cost")]
        show: Option<u64>,
        /// With --show: the run's events as JSON lines (the same data).
        #[arg(long, requires = "show")]
        json: bool,
        /// Show tokens and cost (per run, or per step with --steps).
        #[arg(long)]
        cost: bool,
        /// Every run of the state file, of whichever pipeline file beside this one, with a
        /// file column (without it, only FILE's runs are listed).
        #[arg(long, conflicts_with_all = ["steps", "show"])]
        all: bool,
        /// The state file (default: .treadle/state.redb beside the pipeline).
        #[arg(long)]
        state: Option<PathBuf>,
    },
    /// Run every job and check every assert; exit 1 if any job failed.
    Test {
        /// The pipeline file.
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
        /// Print the runs' events as JSON lines (the summary goes to stderr).
        #[arg(long)]
        json: bool,
        /// The state file (default: .treadle/state.redb beside the pipeline).
        #[arg(long)]
        state: Option<PathBuf>,
    },
    /// List the approvals that running pipelines wait on.
    Approvals {
        /// The pipeline file (its state directory is read).
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
        /// The state file the runs use (default: .treadle/state.redb beside the pipeline).
        #[arg(long)]
        state: Option<PathBuf>,
    },
    /// Approve a waiting approval step: the run goes on.
    Approve(AnswerArgs),
    /// Answer a waiting question (an `input:` step, an agent's `ask_human`) with a JSON
    /// value that fits its schema; without --json on a terminal, the question is asked.
    Answer {
        #[command(flatten)]
        at: AnswerArgs,
        /// The answer, as JSON (`--json 3`, `--json '"yes"'`, `--json '{"n": 1}'`).
        #[arg(long, value_name = "JSON")]
        json: Option<String>,
    },
    /// Serve pipelines over HTTP: the API, live run transcripts and the web page
    /// (see `treadle docs server`).
    Serve {
        /// Pipeline files, or directories whose *.yml / *.yaml files are served.
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        paths: Vec<PathBuf>,
        /// Where to listen (a non-loopback address needs --token-env).
        #[arg(long, default_value = "127.0.0.1:8088")]
        addr: std::net::SocketAddr,
        /// The environment variable holding the token every request must carry.
        #[arg(long, value_name = "NAME")]
        token_env: Option<String>,
        /// The state file (default: .treadle/state.redb beside the files).
        #[arg(long)]
        state: Option<PathBuf>,
        /// How often the trigger resources of the served files are checked.
        #[arg(long, default_value = "1m", value_parser = parse_interval)]
        interval: std::time::Duration,
        #[command(flatten)]
        nats: nats_args::NatsArgs,
        /// With --nats: how long a step may wait on the queue with no worker taking it
        /// before the server logs it, with the workers it heard from.
        #[arg(long, default_value = "60s", value_parser = parse_interval, value_name = "DURATION", requires = "nats")]
        unclaimed_warning: std::time::Duration,
        /// A name this server answers to besides localhost and IP addresses (repeatable):
        /// requests whose Host is any other name are refused (421), against DNS rebinding.
        #[arg(long = "allowed-host", value_name = "NAME")]
        allowed_hosts: Vec<crate::server::hosts::HostName>,
        /// Do not go on with the runs a stopped server left running: they stay
        /// interrupted, resumable with `treadle run --resume` (see `treadle docs durability`).
        #[arg(long)]
        no_adopt: bool,
        /// How long a client may take to send a request's line and headers before its
        /// connection is closed (slow-header clients).
        #[arg(long, default_value = "10s", value_parser = parse_interval)]
        header_timeout: std::time::Duration,
        /// How long a write may wait for a client that does not read (an event stream
        /// nobody reads) before its connection is closed.
        #[arg(long, default_value = "30s", value_parser = parse_interval)]
        write_timeout: std::time::Duration,
        /// A user and the environment variable holding their token (repeatable): their
        /// requests are let in, and an approval they answer is recorded as theirs.
        #[arg(long = "user-token", value_name = "NAME=ENV")]
        user_tokens: Vec<crate::server::identity::UserToken>,
        /// The header an authenticating proxy sets to the user's name: an approval
        /// answered is recorded as theirs (e.g. X-Forwarded-User).
        #[arg(long, value_name = "HEADER", value_parser = crate::server::identity::header_name)]
        approver_header: Option<axum::http::HeaderName>,
    },
    /// Run steps that `treadle serve --nats` queues (see `treadle docs scale-out`).
    Worker {
        #[command(flatten)]
        nats: nats_args::NatsArgs,
        /// Steps run at once.
        #[arg(long, default_value_t = 4)]
        slots: usize,
        /// How long running steps may take to finish after SIGTERM before they are handed
        /// back to other workers.
        #[arg(long, default_value = "10m", value_parser = parse_interval)]
        drain_timeout: std::time::Duration,
        /// Where the worker keeps its state file and step directories.
        #[arg(long, default_value = ".treadle-worker")]
        dir: PathBuf,
    },
    /// Reject a waiting approval step: the step fails.
    Reject(AnswerArgs),
    /// Check the resources of `trigger: true` gets and build the jobs they trigger, until
    /// a signal (see `treadle docs watch`).
    Watch {
        /// The pipeline file.
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
        /// How often every trigger resource is checked (e.g. 30s, 5m).
        #[arg(long, default_value = "1m", value_parser = parse_interval)]
        interval: std::time::Duration,
        /// At most this many builds at once, over all jobs.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        max_concurrent: u16,
        /// Serve `POST /hooks/check/RESOURCE` here (webhooks that ask for a check now).
        #[arg(long)]
        addr: Option<std::net::SocketAddr>,
        /// Print the builds' events as JSON lines.
        #[arg(long)]
        json: bool,
        /// The state file (default: .treadle/state.redb beside the pipeline).
        #[arg(long)]
        state: Option<PathBuf>,
    },
    /// List the jobs with their standing under `treadle watch` (paused, failures in a row).
    #[command(args_conflicts_with_subcommands = true)]
    Jobs {
        /// Resume a paused job.
        #[command(subcommand)]
        action: Option<JobsAction>,
        /// The pipeline file.
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
        /// The state file (default: .treadle/state.redb beside the pipeline).
        #[arg(long)]
        state: Option<PathBuf>,
    },
    /// Write a first pipeline (a task and an agent step) and its schema; never overwrites.
    Init {
        /// The pipeline file to create.
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
    },
    /// Print a page of the documentation, or the list of pages.
    Docs {
        /// The page, e.g. `pipelines` (see the list without one).
        page: Option<String>,
    },
    /// Print the shell completion script, e.g. `treadle completions bash > ~/.local/share/bash-completion/completions/treadle`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff): `treadle man > treadle.1 && man ./treadle.1`.
    Man,
}

/// What `treadle jobs` does besides listing.
#[derive(Debug, Subcommand)]
pub enum JobsAction {
    /// Un-pause a job that `max_consecutive_failures:` paused.
    Resume {
        /// The job.
        name: String,
        /// The pipeline file.
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
        /// The state file (default: .treadle/state.redb beside the pipeline).
        #[arg(long)]
        state: Option<PathBuf>,
    },
}

/// Why `--interval` is refused.
#[derive(Debug, thiserror::Error)]
enum IntervalError {
    /// It is not a duration.
    #[error("{0}")]
    NotADuration(String),
    /// It is below 10ms.
    #[error("the interval must be at least 10ms")]
    TooShort,
}

/// Reads `--interval`: a duration of at least 10ms.
fn parse_interval(text: &str) -> Result<std::time::Duration, IntervalError> {
    let d = crate::pipeline::duration::parse_duration(text)
        .map_err(|e| IntervalError::NotADuration(e.to_string()))?;
    if d < std::time::Duration::from_millis(10) {
        return Err(IntervalError::TooShort);
    }
    Ok(d)
}

/// Which approval to answer.
#[derive(Debug, clap::Args)]
pub struct AnswerArgs {
    /// The run id (see `treadle approvals`).
    pub run: u64,
    /// The step: its number in the run, or its name.
    pub step: String,
    /// The pipeline file.
    #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
    pub file: PathBuf,
    /// The state file the run uses (default: .treadle/state.redb beside the pipeline).
    #[arg(long)]
    pub state: Option<PathBuf>,
}

impl Cli {
    /// The logging the command line asked for.
    pub fn log_options(&self) -> crate::telemetry::LogOptions {
        crate::telemetry::LogOptions {
            filter: self.log.clone(),
            format: self.log_format,
        }
    }
}

/// Checks that the programs the pipeline runs (`sh`, `git`) are on PATH, or says which is
/// missing: `Err` is the exit code (2).
fn needs_or_exit(loaded: &Loaded) -> Result<(), u8> {
    let missing = crate::needs::missing(&loaded.pipeline);
    for m in &missing {
        crate::console::tell!("{m}");
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(EXIT_CONFIG)
    }
}

/// Loads and checks the pipeline, or prints why not: `Err` is the exit code (2).
/// `job`: only this job's agents need resolvable models; `machine`: also check that this
/// machine can run it (`validate`).
fn load_or_exit(file: &Path, job: Option<&str>, machine: bool) -> Result<Loaded, u8> {
    let scope = CheckScope {
        job,
        env: &crate::pipeline::model::process_env,
        machine,
    };
    let vars = VARS.get_or_init(Default::default);
    crate::pipeline::load_with_vars(file, &scope, vars).map_err(|e| {
        crate::console::tell!("{e}");
        EXIT_CONFIG
    })
}

/// `treadle approve` / `treadle reject`: through the server when one owns the state file,
/// else through the control directory.
async fn answer(a: AnswerArgs, answer: Answer) -> u8 {
    match remote::server_for(&a.file, a.state.clone()).await {
        Some(client) => remote::answer(client, a.run, &a.step, answer).await,
        None => approvals::answer(a.run, &a.step, &a.file, a.state, answer),
    }
}
