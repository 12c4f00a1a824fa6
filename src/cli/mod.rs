//! The `treadle` command line: argument grammar (clap derive) and dispatch to the
//! commands, each of which returns the process exit code.
//!
//! Exit codes: 0 success, 1 a step failed, 2 the pipeline cannot run (configuration or
//! infrastructure), 130 interrupted.

mod inspect;
mod run;
mod wiring;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use wiring::{default_agent_runner, default_checker};

/// Exit code: a step failed.
pub const EXIT_FAILED: u8 = 1;
/// Exit code: configuration or infrastructure error.
pub const EXIT_CONFIG: u8 = 2;
/// Exit code: interrupted.
pub const EXIT_INTERRUPTED: u8 = 130;

/// treadle runs YAML pipelines in which an agent is one step among shell tasks.
#[derive(Debug, Parser)]
#[command(name = "treadle", version, about, propagate_version = true)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

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
    },
    /// Check the file and that this machine can run it.
    Validate {
        /// The pipeline file.
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
    },
    /// Show which steps a run would execute.
    Plan {
        /// The pipeline file.
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
        /// Only this job.
        #[arg(long)]
        job: Option<String>,
    },
    /// Print the JSON Schema of the pipeline format.
    Schema,
    /// List past runs, or the steps of one.
    Runs {
        /// The pipeline file (its state file is read).
        #[arg(default_value = crate::pipeline::DEFAULT_FILE)]
        file: PathBuf,
        /// Show the steps of this run.
        #[arg(long)]
        steps: Option<u64>,
        /// The state file (default: .treadle/state.redb beside the pipeline).
        #[arg(long)]
        state: Option<PathBuf>,
    },
}

/// Runs a parsed command line and returns the exit code.
pub async fn dispatch(cli: Cli) -> u8 {
    match cli.command {
        Command::Run {
            file,
            job,
            json,
            state,
        } => run::run(&file, job, json, state).await,
        Command::Validate { file } => inspect::validate(&file),
        Command::Plan { file, job } => inspect::plan(&file, job.as_deref()),
        Command::Schema => inspect::schema(),
        Command::Runs { file, steps, state } => inspect::runs(&file, steps, state),
    }
}
