//! The served files, followed: a served directory is listed again whenever the server
//! looks at what it serves (the pipelines list, a run or plan asked for by name), so a
//! pipeline file added to it is served, and one removed is not, without a restart. A
//! file's content is read for each run and plan, so an edit is seen by the next one.
//!
//! Listing on each look, rather than watching the directory (inotify), keeps it exact
//! with no background task: a listing costs one `read_dir` per served directory, which is
//! nothing beside loading the pipeline the request then loads.

use std::path::PathBuf;
use std::sync::Mutex;

use super::app::{ServedFile, served_files};

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
