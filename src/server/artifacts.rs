//! A run's artifacts over the API: browsing and downloading the files its steps produced
//! (`GET /api/v1/runs/{id}/artifacts[/PATH]`), confined to the run's artifact directory,
//! and what each step added, changed and removed (`GET .../steps/{seq}/changes`), read
//! from the versions the run kept (`collected.jsonl`, see `crate::run::artifacts`).

use std::collections::BTreeMap;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::api::run_id;
use super::error::ApiError;
use super::shared::App;

/// The largest text file whose diff is shown (bytes, either side).
const DIFF_BYTES: u64 = 256 * 1024;

/// The run's artifact directory (it may be gone: only the last runs' are kept).
fn root(app: &App, run: u64) -> PathBuf {
    let state_dir = app.store.path().parent().unwrap_or(FsPath::new("."));
    state_dir
        .join("runs")
        .join(run.to_string())
        .join("artifacts")
}

/// `rel` under `root`, refused when any part of it is not a plain name (400) or when it
/// resolves, through a symlink, outside `root` (404, as for a path that is not there).
fn confined(root: &FsPath, rel: &str) -> Result<PathBuf, ApiError> {
    let mut path = root.to_path_buf();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        if part == "." || part == ".." || part.contains(['\\', '\0']) {
            return Err(ApiError::BadRequest(format!(
                "`{rel}`: an artifact path is names separated by `/`, without `.` or `..`"
            )));
        }
        path.push(part);
    }
    let missing = || ApiError::NotFound(format!("the run has no artifact file `{rel}`"));
    let real = path.canonicalize().map_err(|_| missing())?;
    let top = root.canonicalize().map_err(|_| missing())?;
    if !real.starts_with(&top) {
        return Err(missing());
    }
    Ok(real)
}

/// One entry of a directory listing.
#[derive(Debug, Serialize)]
pub struct Entry {
    /// Its name.
    pub name: String,
    /// A directory.
    pub dir: bool,
    /// Its size in bytes (files).
    pub size: u64,
}

/// `?download=1` asks for the file as an attachment.
#[derive(Debug, Deserialize)]
pub(super) struct Download {
    #[serde(default)]
    download: Option<String>,
}

/// `GET /api/v1/runs/{id}/artifacts`: the run's artifact versions (`NAME.N`, one per step
/// that made or changed `NAME`).
pub(super) async fn top(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let run = run_id(&id)?;
    serve(app, run, String::new(), None).await
}

/// `GET /api/v1/runs/{id}/artifacts/{*path}`: a directory's listing (JSON) or a file's
/// bytes, as text when it is UTF-8 and as an attachment with `?download=1`.
pub(super) async fn browse(
    State(app): State<Arc<App>>,
    Path((id, rel)): Path<(String, String)>,
    Query(q): Query<Download>,
) -> Result<Response, ApiError> {
    let run = run_id(&id)?;
    serve(app, run, rel, q.download).await
}

async fn serve(
    app: Arc<App>,
    run: u64,
    rel: String,
    download: Option<String>,
) -> Result<Response, ApiError> {
    blocking(&app, move |app| {
        app.store.run(run)?;
        let path = confined(&root(app, run), &rel)?;
        if path.is_dir() {
            return Ok(Json(listing(&path)?).into_response());
        }
        let bytes = std::fs::read(&path).map_err(|e| ApiError::Internal(e.to_string()))?;
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        Ok(file_response(
            bytes,
            &name,
            download.is_some_and(|d| d != "0"),
        ))
    })
    .await
}

fn listing(dir: &FsPath) -> Result<Vec<Entry>, ApiError> {
    let read = std::fs::read_dir(dir).map_err(|e| ApiError::Internal(e.to_string()))?;
    let mut out: Vec<Entry> = read
        .flatten()
        .map(|e| {
            let meta = std::fs::symlink_metadata(e.path()).ok();
            Entry {
                name: e.file_name().to_string_lossy().into_owned(),
                dir: meta.as_ref().is_some_and(std::fs::Metadata::is_dir),
                size: meta.map_or(0, |m| m.len()),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// A file's answer: never interpreted by the browser (no HTML: a sandbox and no sniffing),
/// shown as text when it is text.
fn file_response(bytes: Vec<u8>, name: &str, attachment: bool) -> Response {
    let kind = if is_text(&bytes) {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    };
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let disposition = if attachment {
        format!("attachment; filename=\"{safe}\"")
    } else {
        "inline".to_owned()
    };
    (
        [
            (header::CONTENT_TYPE, kind.to_owned()),
            (header::CONTENT_DISPOSITION, disposition),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            (header::CONTENT_SECURITY_POLICY, "sandbox".to_owned()),
        ],
        bytes,
    )
        .into_response()
}

fn is_text(bytes: &[u8]) -> bool {
    !bytes.contains(&0) && std::str::from_utf8(bytes).is_ok()
}

async fn blocking<T: Send + 'static>(
    app: &Arc<App>,
    read: impl FnOnce(&App) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let app = app.clone();
    crate::blocking::blocking(move || read(&app)).await
}

/// What a step did to one of its outputs.
#[derive(Debug, Serialize)]
pub struct OutputChange {
    /// The output's name.
    pub artifact: String,
    /// The version it made, under the run's artifacts (`NAME.N`).
    pub dir: String,
    /// The version it replaced (`None`: the step made the artifact).
    pub before: Option<String>,
    /// Every file that differs, by path.
    pub files: Vec<FileChange>,
}

/// One file a step added, changed or removed.
#[derive(Debug, Serialize)]
pub struct FileChange {
    /// Its path inside the artifact.
    pub path: String,
    /// `added`, `changed` or `removed`.
    pub change: &'static str,
    /// Its size now (before, when removed).
    pub size: u64,
    /// Text on both sides.
    pub text: bool,
    /// The unified diff (text files not too large).
    pub diff: Option<String>,
}

/// `GET /api/v1/runs/{id}/steps/{seq}/changes`: for each output the step collected, the
/// files it added, changed or removed against the version it replaced.
pub(super) async fn changes(
    State(app): State<Arc<App>>,
    Path((id, seq)): Path<(String, String)>,
) -> Result<Json<Vec<OutputChange>>, ApiError> {
    let run = run_id(&id)?;
    let seq: u32 = seq
        .parse()
        .map_err(|_| ApiError::BadRequest(format!("`{seq}` is not a step number")))?;
    blocking(&app, move |app| {
        app.store.run(run)?;
        let root = root(app, run);
        let notes =
            std::fs::read_to_string(root.with_file_name("collected.jsonl")).unwrap_or_default();
        // The last collection of each output by this step (its last attempt's).
        let mut last: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();
        for note in notes
            .lines()
            .filter_map(|l| serde_json::from_str::<Note>(l).ok())
        {
            if note.seq == Some(seq) {
                last.insert(note.output, (note.dir, note.before));
            }
        }
        Ok(last
            .into_iter()
            .map(|(artifact, (dir, before))| {
                let files = compare(
                    before.as_ref().map(|b| root.join(b)).as_deref(),
                    &root.join(&dir),
                );
                OutputChange {
                    artifact,
                    dir,
                    before,
                    files,
                }
            })
            .collect())
    })
    .await
    .map(Json)
}

/// A line of `collected.jsonl`.
#[derive(Debug, Deserialize)]
struct Note {
    /// The step that collected it (`None` for a directory not named for a step).
    seq: Option<u32>,
    output: String,
    dir: String,
    before: Option<String>,
}

/// Every regular file under `dir`, by path relative to it.
fn files(dir: &FsPath) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(kind) = e.file_type() else { continue };
            if kind.is_dir() {
                stack.push(e.path());
            } else if kind.is_file()
                && let Ok(rel) = e.path().strip_prefix(dir)
            {
                out.insert(rel.to_string_lossy().into_owned(), e.path());
            }
        }
    }
    out
}

fn compare(before: Option<&FsPath>, after: &FsPath) -> Vec<FileChange> {
    let old = before.map(files).unwrap_or_default();
    let new = files(after);
    let mut out = Vec::new();
    for (path, now) in &new {
        let was = old.get(path);
        let (a, b) = (was.map(|p| read_small(p)), read_small(now));
        let change = match (&a, &b) {
            (None, _) => "added",
            (Some(x), y) if x.bytes == y.bytes => continue,
            _ => "changed",
        };
        let before_text = a.as_ref().map_or(Some(""), |x| x.text.as_deref());
        let diff = before_text
            .zip(b.text.as_deref())
            .and_then(|(x, y)| super::diff::unified(x, y));
        out.push(FileChange {
            path: path.clone(),
            change,
            size: b.size,
            text: diff.is_some(),
            diff,
        });
    }
    for (path, was) in old.iter().filter(|(p, _)| !new.contains_key(*p)) {
        out.push(FileChange {
            path: path.clone(),
            change: "removed",
            size: std::fs::metadata(was).map_or(0, |m| m.len()),
            text: false,
            diff: None,
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// A file's size, its bytes (to compare; a large file by size and head only) and its
/// text when it is small UTF-8.
struct Read {
    size: u64,
    bytes: Vec<u8>,
    text: Option<String>,
}

fn read_small(path: &FsPath) -> Read {
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    if size > DIFF_BYTES {
        // Compared by content all the same, without a diff.
        let bytes = std::fs::read(path).unwrap_or_default();
        return Read {
            size,
            bytes,
            text: None,
        };
    }
    let bytes = std::fs::read(path).unwrap_or_default();
    let text = is_text(&bytes).then(|| String::from_utf8_lossy(&bytes).into_owned());
    Read { size, bytes, text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_artifacts() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("artifacts");
        std::fs::create_dir_all(root.join("out.1")).unwrap();
        std::fs::write(root.join("out.1/a.txt"), "a").unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("out.1/link")).unwrap();
        assert!(confined(&root, "out.1/a.txt").is_ok());
        assert!(matches!(
            confined(&root, "../secret"),
            Err(ApiError::BadRequest(_))
        ));
        assert!(matches!(
            confined(&root, "out.1/link"),
            Err(ApiError::NotFound(_))
        ));
        assert!(matches!(
            confined(&root, "out.1/none"),
            Err(ApiError::NotFound(_))
        ));
    }
}
