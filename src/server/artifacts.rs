//! A run's artifacts over the API: browsing and downloading the files its steps produced
//! (`GET /api/v1/runs/{id}/artifacts[/PATH]`), confined to the run's artifact directory,
//! and what each step added, changed and removed (`GET .../steps/{seq}/changes`), read
//! from the versions the run kept (`collected.jsonl`, see `crate::run::artifacts`).

use std::collections::BTreeMap;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use super::api::run_id;
use super::error::ApiError;
use super::shared::App;
use super::untrusted;

/// The largest text file whose diff is shown (bytes, either side).
const DIFF_BYTES: u64 = 256 * 1024;

/// The most diff text one `/changes` answer holds; the files past it are listed without
/// their diff.
const DIFF_TOTAL: usize = 4 << 20;

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
        // A step made this file: opened as untrusted, streamed, never read whole.
        let permit = untrusted::reader()?;
        let mut opened = untrusted::open_regular(&path, &rel)?;
        let head = untrusted::sniff(&mut opened)
            .map_err(|e| ApiError::Internal(format!("cannot read `{rel}`: {e}")))?;
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let kind = match untrusted::looks_like_text(&head) {
            true => "text/plain; charset=utf-8",
            false => "application/octet-stream",
        };
        let size = opened.size;
        Ok(file_response(
            untrusted::stream(opened, permit),
            size,
            kind,
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
fn file_response(body: Body, size: u64, kind: &str, name: &str, attachment: bool) -> Response {
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
            (header::CONTENT_LENGTH, size.to_string()),
            (header::CONTENT_DISPOSITION, disposition),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
            (header::CONTENT_SECURITY_POLICY, "sandbox".to_owned()),
        ],
        body,
    )
        .into_response()
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
        // It reads the steps' files: one of the readers.
        let _permit = untrusted::reader()?;
        let root = root(app, run);
        let mut budget = DIFF_TOTAL;
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
                    &mut budget,
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

/// The files that differ between `before` and `after`; diffs are given while `budget`
/// (bytes of diff text) lasts.
fn compare(before: Option<&FsPath>, after: &FsPath, budget: &mut usize) -> Vec<FileChange> {
    let old = before.map(files).unwrap_or_default();
    let new = files(after);
    let mut out = Vec::new();
    for (path, now) in &new {
        let was = old.get(path);
        let (a, b) = (was.map(|p| look(p)), look(now));
        let change = match (&a, &b) {
            (None, _) => "added",
            (Some(x), y) if x.same_as(y) => continue,
            _ => "changed",
        };
        let before_text = a.as_ref().map_or(Some(""), |x| x.text.as_deref());
        let diff = before_text
            .zip(b.text.as_deref())
            .and_then(|(x, y)| super::diff::unified(x, y));
        let text = diff.is_some();
        let diff = diff.filter(|d| {
            let fits = d.len() <= *budget;
            *budget = budget.saturating_sub(d.len());
            fits
        });
        out.push(FileChange {
            path: path.clone(),
            change,
            size: b.size,
            text,
            diff,
        });
    }
    for (path, was) in old.iter().filter(|(p, _)| !new.contains_key(*p)) {
        out.push(FileChange {
            path: path.clone(),
            change: "removed",
            size: std::fs::symlink_metadata(was).map_or(0, |m| m.len()),
            text: false,
            diff: None,
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// What is compared of a file: its size, the hash of its bytes (`None`: not a regular
/// file, or unreadable), and its text when it is small UTF-8.
struct Look {
    size: u64,
    hash: Option<blake3::Hash>,
    text: Option<String>,
}

impl Look {
    fn same_as(&self, other: &Look) -> bool {
        self.size == other.size && self.hash.is_some() && self.hash == other.hash
    }
}

/// A file of a step's, as untrusted: a small one read whole, a large one hashed in chunks
/// (never held whole), anything but a regular file not read at all.
fn look(path: &FsPath) -> Look {
    if let Some(bytes) = untrusted::read_at_most(path, DIFF_BYTES) {
        let text = untrusted::looks_like_text(&bytes)
            .then(|| std::str::from_utf8(&bytes).ok().map(str::to_owned))
            .flatten();
        return Look {
            size: bytes.len() as u64,
            hash: Some(blake3::hash(&bytes)),
            text,
        };
    }
    match untrusted::digest(path) {
        Some((size, hash)) => Look {
            size,
            hash: Some(hash),
            text: None,
        },
        None => Look {
            size: std::fs::symlink_metadata(path).map_or(0, |m| m.len()),
            hash: None,
            text: None,
        },
    }
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
