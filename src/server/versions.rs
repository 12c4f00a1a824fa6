//! The resource version a `get:` step used, for the run page: read from the line the step
//! said (`fetched URI BRANCH at COMMIT` for git, `fetched NAME at VERSION` otherwise), and
//! for a git commit its message, author and date from the mirror the run fetched it into.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use serde::Serialize;

use super::api::{blocking, run_id};
use super::error::ApiError;
use super::shared::App;
use crate::run::event_log::read_after;

/// What a get step fetched.
#[derive(Debug, Serialize, PartialEq)]
pub struct FetchedVersion {
    /// The repository (git) or resource name.
    pub source: String,
    /// The branch (git).
    pub branch: Option<String>,
    /// The version: a commit, or the version as JSON.
    pub version: String,
    /// A git commit's message (its first line).
    pub message: Option<String>,
    /// A git commit's author.
    pub author: Option<String>,
    /// A git commit's date (ms since the Unix epoch).
    pub committed_ms: Option<u64>,
}

/// Reads a get step's `fetched ...` line.
fn parse(line: &str) -> Option<FetchedVersion> {
    let rest = line.strip_prefix("fetched ")?;
    let (head, version) = rest.split_once(" at ")?;
    let (source, branch) = match head.split_once(' ') {
        Some((uri, branch)) => (uri.to_owned(), Some(branch.to_owned())),
        None => (head.to_owned(), None),
    };
    Some(FetchedVersion {
        source,
        branch,
        version: version.to_owned(),
        message: None,
        author: None,
        committed_ms: None,
    })
}

/// A commit's subject, author and time from the first mirror of `dirs` that has it.
fn commit_facts(dirs: &[PathBuf], uri: &str, commit: &str) -> Option<(String, String, u64)> {
    if commit.len() < 7 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    dirs.iter().find_map(|git_dir| {
        let mirror = crate::resource::git::mirror_of(git_dir, uri);
        let out = std::process::Command::new("git")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env_remove("GIT_DIR")
            .arg("--git-dir")
            .arg(&mirror)
            .args(["log", "-1", "--format=%s%x00%an%x00%ct", commit, "--"])
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut parts = text.trim_end().splitn(3, '\0');
        let subject = parts.next()?.to_owned();
        let author = parts.next()?.to_owned();
        let secs: u64 = parts.next()?.parse().ok()?;
        Some((subject, author, secs * 1000))
    })
}

/// `GET /api/v1/runs/{id}/steps/{seq}/version`: the version the get step used; 404 when
/// the step fetched nothing (not a get, or it failed before).
pub(super) async fn version(
    State(app): State<Arc<App>>,
    Path((id, seq)): Path<(String, String)>,
) -> Result<Json<FetchedVersion>, ApiError> {
    let run = run_id(&id)?;
    let seq: u32 = seq
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("`{seq}` is not a step number")))?;
    let state_dir = app
        .store
        .path()
        .parent()
        .unwrap_or(FsPath::new("."))
        .to_path_buf();
    blocking(&app, move |store| {
        store.run(run)?;
        let events = read_after(&store.database(), run, 0)?;
        let fetched = events
            .iter()
            .filter(|e| e.kind == "output")
            .filter_map(|e| serde_json::from_str::<serde_json::Value>(&e.json).ok())
            .filter(|v| v.get("seq").and_then(serde_json::Value::as_u64) == Some(seq.into()))
            .filter_map(|v| v.get("line").and_then(|l| l.as_str()).and_then(parse))
            .next_back();
        let Some(mut found) = fetched else {
            return Err(ApiError::NotFound(format!(
                "step {seq} of run {run} fetched no resource version"
            )));
        };
        if found.branch.is_some() {
            // The run's mirrors: the cache's, or the run's own without a cache.
            let dirs = [
                state_dir.join("git"),
                state_dir.join("runs").join(run.to_string()).join("git"),
            ];
            if let Some((m, a, t)) = commit_facts(&dirs, &found.source, &found.version) {
                (found.message, found.author, found.committed_ms) = (Some(m), Some(a), Some(t));
            }
        }
        Ok(found)
    })
    .await
    .map(Json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_and_other_fetch_lines_read_back() {
        let git = parse("fetched /tmp/repo main at 0123abcd").unwrap();
        assert_eq!(
            (
                git.source.as_str(),
                git.branch.as_deref(),
                git.version.as_str()
            ),
            ("/tmp/repo", Some("main"), "0123abcd")
        );
        let other = parse(r#"fetched releases at {"ref":"v1.4.1"}"#).unwrap();
        assert_eq!(other.branch, None);
        assert_eq!(other.version, r#"{"ref":"v1.4.1"}"#);
        assert!(parse("something else").is_none());
    }
}
