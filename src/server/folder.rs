//! The served files, followed: a served directory is listed again whenever the server
//! looks at what it serves (the pipelines list, a run or plan asked for by name), so a
//! pipeline file added to it is served, and one removed is not, without a restart. A
//! file's content is read for each run and plan, so an edit is seen by the next one.
//!
//! Listing on each look, rather than watching the directory (inotify), keeps it exact
//! with no background task: a listing costs one `read_dir` per served directory, which is
//! nothing beside loading the pipeline the request then loads.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::views::pipeline_name;

/// What `treadle serve` was given, and what it served when it last looked.
#[derive(Debug)]
pub struct Folder {
    paths: Vec<PathBuf>,
    last: Mutex<Listing>,
}

#[derive(Debug, Default)]
struct Listing {
    files: Vec<ServedFile>,
    /// The last listing's error, said once (until the listing changes).
    said: Option<String>,
}

impl Folder {
    /// The files of `paths`, as first listed (`files`).
    pub fn new(paths: Vec<PathBuf>, files: Vec<ServedFile>) -> Self {
        Self {
            paths,
            last: Mutex::new(Listing { files, said: None }),
        }
    }

    /// The files served now. When the paths cannot be listed as served files now (two
    /// files of the same name, an unreadable directory), the last listing stands, and
    /// why is said on stderr once.
    pub fn files(&self) -> Vec<ServedFile> {
        if self.paths.is_empty() {
            // A server of workflows written in Rust only (`super::code`).
            return Vec::new();
        }
        let now = served_files(&self.paths);
        let Ok(mut last) = self.last.lock() else {
            return now.unwrap_or_default();
        };
        match now {
            Ok(files) => {
                last.files = files;
                last.said = None;
            }
            Err(e) => {
                let why = e.to_string();
                if last.said.as_deref() != Some(why.as_str()) {
                    crate::console::tell!(
                        "treadle serve: still serving the files listed before: {why}"
                    );
                    last.said = Some(why);
                }
            }
        }
        last.files.clone()
    }

    /// The file served under `name` now.
    pub fn file(&self, name: &str) -> Option<ServedFile> {
        self.files().into_iter().find(|f| f.name == name)
    }
}

/// A pipeline file the server serves.
#[derive(Debug, Clone)]
pub struct ServedFile {
    /// Its name in the API: the file's stem.
    pub name: String,
    /// The file, as given.
    pub file: PathBuf,
}

/// Why the paths given to `treadle serve` give no usable set of pipeline files.
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    /// A path cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Nothing to serve.
    #[error(
        "no pipeline files to serve in {0}\nhint: give `treadle serve` a pipeline file or a directory holding *.yml files"
    )]
    Nothing(String),
    /// Two files would have the same name.
    #[error(
        "{a} and {b} would both be served as `{name}`\nhint: serve them from separate `treadle serve` processes"
    )]
    SameName {
        /// The name.
        name: String,
        /// One file.
        a: String,
        /// The other.
        b: String,
    },
}

/// The pipeline files of `paths`: files as given, directories' `*.yml` and `*.yaml` files
/// in name order.
pub(super) fn served_files(paths: &[PathBuf]) -> Result<Vec<ServedFile>, FolderError> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let read = |source| FolderError::Read {
                path: path.clone(),
                source,
            };
            let mut found = Vec::new();
            for entry in std::fs::read_dir(path).map_err(read)? {
                let entry = entry.map_err(read)?;
                // `treadle serve .` serves `hello.yml`, not `./hello.yml`.
                let p = if path == Path::new(".") {
                    PathBuf::from(entry.file_name())
                } else {
                    entry.path()
                };
                let yaml = p.extension().is_some_and(|e| e == "yml" || e == "yaml");
                if yaml && p.is_file() {
                    found.push(p);
                }
            }
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    let mut served: Vec<ServedFile> = Vec::new();
    for file in files {
        let name = pipeline_name(&file.display().to_string());
        if let Some(other) = served.iter().find(|s| s.name == name) {
            return Err(FolderError::SameName {
                name,
                a: other.file.display().to_string(),
                b: file.display().to_string(),
            });
        }
        served.push(ServedFile { name, file });
    }
    if served.is_empty() {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(FolderError::Nothing(shown.join(", ")));
    }
    Ok(served)
}
