//! `treadle validate --preflight`: the load checks, then every model and MCP server the
//! job (or each job) reaches, probed live (see [`crate::agent::preflight`]).

use std::path::Path;

use crate::agent::preflight;
use crate::console::{say, tell};

use super::EXIT_CONFIG;

/// Validates `file`, then probes what its jobs (or job `job`) use. Exit code 0 when every
/// probe answered, 2 when the file does not load or a probe failed.
pub(super) async fn validate(file: &Path, job: Option<&str>) -> u8 {
    let loaded = match super::load_or_exit(file, job, true) {
        Ok(loaded) => loaded,
        Err(code) => return code,
    };
    let jobs: Vec<_> = match job {
        Some(_) => match loaded.job(job) {
            Ok(job) => vec![job.clone()],
            Err(e) => {
                tell!("{e}");
                return EXIT_CONFIG;
            }
        },
        None => loaded.pipeline.jobs.clone(),
    };
    let mut failed = 0;
    for job in &jobs {
        let probes = preflight::preflight(&loaded, job).await;
        if probes.is_empty() {
            say!("job {}: no models or MCP servers to check", job.name.value);
        }
        for probe in probes {
            match &probe.result {
                Ok(took) => say!(
                    "job {}: {}: ok ({:.1}s)",
                    job.name.value,
                    probe.what,
                    took.as_secs_f64()
                ),
                Err(why) => {
                    failed += 1;
                    tell!("job {}: {}: failed: {why}", job.name.value, probe.what);
                }
            }
        }
    }
    if failed > 0 {
        tell!(
            "{}: preflight failed ({failed} check(s)); a run would fail at its first agent step that uses them",
            file.display()
        );
        return EXIT_CONFIG;
    }
    say!("{}: ok, and everything it uses answers", file.display());
    0
}
