//! `treadle jobs [FILE]`: each job's standing under `treadle watch` (paused, failures in a
//! row, builds queued); `treadle jobs resume NAME [FILE]`: un-pause a job that
//! `max_consecutive_failures:` paused. While a watcher holds the state file, the list is
//! the one it keeps beside it and a resume is handed to it (carried out at its next poll).

use std::path::{Path, PathBuf};

use super::EXIT_CONFIG;
use crate::console::{say, tell};
use crate::run::{self, StateError};
use crate::watch::control::{self, JobLine};

fn names(file: &Path) -> Result<(String, Vec<String>), u8> {
    let loaded = super::load_or_exit(file, None, false)?;
    let jobs = loaded
        .pipeline
        .jobs
        .iter()
        .map(|j| j.name.value.clone())
        .collect();
    Ok((
        crate::server::views::pipeline_name(&file.display().to_string()),
        jobs,
    ))
}

fn print(lines: &[JobLine]) {
    say!(
        "{:<24} {:<8} {:>8} {:>6}",
        "JOB",
        "STATE",
        "FAILURES",
        "QUEUED"
    );
    for l in lines {
        let state = if l.paused { "paused" } else { "active" };
        say!(
            "{:<24} {:<8} {:>8} {:>6}",
            l.job,
            state,
            l.failures,
            l.queued
        );
    }
}

/// `treadle jobs`.
pub(super) fn list(file: &Path, state: Option<PathBuf>) -> u8 {
    let (pipeline, jobs) = match names(file) {
        Ok(n) => n,
        Err(code) => return code,
    };
    let path = run::state_path(file, state);
    match run::Store::open(&path) {
        Ok(store) => match control::job_lines(&store.database(), &[(pipeline, jobs)]) {
            Ok(lines) => {
                print(&lines);
                0
            }
            Err(e) => {
                tell!("{}: {e}", path.display());
                EXIT_CONFIG
            }
        },
        Err(StateError::Held(held)) => {
            let dir = crate::pipeline::dir_of(&path);
            match control::read_jobs(&dir) {
                Ok(lines) => {
                    let mine: Vec<JobLine> = lines
                        .into_iter()
                        .filter(|l| l.pipeline == pipeline)
                        .collect();
                    tell!("treadle: {held}; as the watcher last wrote it:");
                    print(&mine);
                    0
                }
                Err(e) => {
                    tell!("treadle: {held}\n{e}");
                    EXIT_CONFIG
                }
            }
        }
        Err(e) => {
            tell!("{}: {e}", path.display());
            EXIT_CONFIG
        }
    }
}

/// `treadle jobs resume NAME`.
pub(super) fn resume(name: &str, file: &Path, state: Option<PathBuf>) -> u8 {
    let (pipeline, jobs) = match names(file) {
        Ok(n) => n,
        Err(code) => return code,
    };
    if !jobs.iter().any(|j| j == name) {
        tell!(
            "{}: there is no job `{name}`\nhint: jobs in this file: {}",
            file.display(),
            jobs.join(", ")
        );
        return EXIT_CONFIG;
    }
    let path = run::state_path(file, state);
    match run::Store::open(&path) {
        Ok(store) => match crate::watch::store::resume_job(&store.database(), &pipeline, name) {
            Ok(true) => {
                say!("resumed `{name}`: the watcher builds it again");
                0
            }
            Ok(false) => {
                say!("`{name}` was not paused");
                0
            }
            Err(e) => {
                tell!("{}: {e}", path.display());
                EXIT_CONFIG
            }
        },
        Err(StateError::Held(held)) => {
            let dir = crate::pipeline::dir_of(&path);
            match control::request_resume(&dir, &pipeline, name) {
                Ok(_) => {
                    say!("asked the running watcher to resume `{name}` at its next poll ({held})");
                    0
                }
                Err(e) => {
                    tell!("treadle: {e}");
                    EXIT_CONFIG
                }
            }
        }
        Err(e) => {
            tell!("{}: {e}", path.display());
            EXIT_CONFIG
        }
    }
}
