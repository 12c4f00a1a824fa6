//! `caches:` on a task: directories kept from one run of the step to the next (Concourse's
//! key), and toolchain caches under `$HOME` a confined step may write.
//!
//! `caches: [{path: target}]`: `target`, relative to the step's directory, is the same
//! directory in every run of this job's step (kept in the state directory,
//! `.treadle/caches/JOB/STEP/target`). `caches: [{path: ~/.cargo/registry}]`: that directory
//! of the user's home is writable by the step (it is read-only otherwise, see
//! `crate::confine::toolchains`); a credential place cannot be named.

use std::path::{Component, Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a cache lives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(try_from = "RawCache", into = "RawCache")]
pub enum Cache {
    /// A directory of the step's, relative to its working directory, kept across runs.
    Step(PathBuf),
    /// A directory under `$HOME` (written `~/...`), made writable.
    Home(PathBuf),
}

/// `{ path: ... }` as written.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    /// The directory: relative to the step's directory, or `~/...` in the user's home.
    pub path: String,
}

impl TryFrom<RawCache> for Cache {
    type Error = String;
    fn try_from(raw: RawCache) -> Result<Self, String> {
        let text = raw.path.trim();
        let (home, rest) = match text.strip_prefix("~/") {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let path = Path::new(rest);
        let plain = !rest.is_empty()
            && path
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !plain {
            return Err(format!(
                "cache path `{text}` must be a directory relative to the step's directory \
                 (e.g. `target`) or under the home directory (e.g. `~/.cargo/registry`), \
                 without `..`"
            ));
        }
        let path = path.to_path_buf();
        Ok(if home {
            Self::Home(path)
        } else {
            Self::Step(path)
        })
    }
}

impl From<Cache> for RawCache {
    fn from(cache: Cache) -> Self {
        let path = match cache {
            Cache::Step(p) => p.display().to_string(),
            Cache::Home(p) => format!("~/{}", p.display()),
        };
        Self { path }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_and_home_caches_are_read_and_escapes_refused() {
        let read = |y: &str| serde_saphyr::from_str::<Cache>(y);
        assert_eq!(
            read("{path: target}").unwrap(),
            Cache::Step("target".into())
        );
        assert_eq!(
            read("{path: ~/.cargo/registry}").unwrap(),
            Cache::Home(".cargo/registry".into())
        );
        for bad in [
            "{path: ../x}",
            "{path: /abs}",
            "{path: '~/'}",
            "{path: a/../../b}",
        ] {
            let err = read(bad).unwrap_err().to_string();
            assert!(err.contains("must be a directory relative"), "{bad}: {err}");
        }
    }
}
