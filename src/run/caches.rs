//! A task's `caches:` made ready before its command starts (`crate::pipeline::caches`):
//! a step cache is a directory of the state directory, `caches/JOB/STEP/PATH`, linked into
//! the step directory at `PATH`; a home cache is the directory under `$HOME`. Both are
//! returned for the command's confinement to make writable.
//!
//! A link rather than a copy: nothing is moved back after the step, so a step killed with
//! treadle loses nothing, and a cache of gigabytes costs nothing to hand over. Two runs of
//! the same step at once share the directory, as two builds sharing a `target/` would.

use std::path::{Path, PathBuf};

use crate::pipeline::at::At;
use crate::pipeline::caches::Cache;

/// Makes each cache of a step named `step` of job `job` ready for its command in `dir`;
/// returns the directories the command may write. `home` is the command's `$HOME`.
pub(crate) fn prepare(
    state_dir: &Path,
    (job, step): (&str, &str),
    dir: &Path,
    home: Option<&Path>,
    caches: &[At<Cache>],
) -> Result<Vec<PathBuf>, String> {
    let mut writable = Vec::new();
    for cache in caches {
        match &cache.value {
            Cache::Home(path) => {
                let home = home.ok_or_else(|| {
                    format!("cache `~/{}`: the command has no HOME", path.display())
                })?;
                writable.push(home.join(path));
            }
            Cache::Step(path) => {
                let kept = state_dir
                    .join("caches")
                    .join(name(job))
                    .join(name(step))
                    .join(path);
                let failed = |e: std::io::Error| format!("cache `{}`: {e}", path.display());
                std::fs::create_dir_all(&kept).map_err(failed)?;
                let kept = std::fs::canonicalize(&kept).map_err(failed)?;
                let link = dir.join(path);
                if let Some(parent) = link.parent() {
                    std::fs::create_dir_all(parent).map_err(failed)?;
                }
                // A retried attempt's directory may hold the link already.
                if std::fs::read_link(&link).is_ok_and(|to| to == kept) {
                    writable.push(kept);
                    continue;
                }
                std::os::unix::fs::symlink(&kept, &link).map_err(failed)?;
                writable.push(kept);
            }
        }
    }
    Ok(writable)
}

/// A job's or step's name as one path component.
fn name(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}
