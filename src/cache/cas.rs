//! The content-addressed store under `.treadle/cas/`: one read-only object per distinct
//! file content, at `objects/<first two hex digits>/<the rest>`.
//!
//! Storing a tree adds only the objects not already there, so two outputs with the same
//! file share one object. Restoring a tree re-hashes every object it reads: an object that
//! no longer matches its name (a disk error, a hand edit) is reported as [`CasError::Corrupt`]
//! and removed, and the caller re-runs the step instead of replaying it.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::digest::{Digest, Manifest, Node, hash_file};

/// Errors of the object store.
#[derive(Debug, thiserror::Error)]
pub enum CasError {
    /// A filesystem operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An object is missing or its bytes do not match its digest.
    #[error("cache object {0} is missing or corrupt")]
    Corrupt(String),
    /// A manifest path would leave the destination directory.
    #[error("cache manifest path `{0}` is not a plain relative path")]
    BadPath(String),
}

fn io<'p>(what: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> CasError + 'p {
    move |source| CasError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// The object store.
#[derive(Debug, Clone)]
pub struct Cas {
    root: PathBuf,
}

impl Cas {
    /// The store rooted at `root` (created on first write).
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    fn object(&self, d: &Digest) -> PathBuf {
        let hex = d.hex();
        let (a, b) = hex.split_at(2);
        self.root.join("objects").join(a).join(b)
    }

    /// Adds the files of a tree (described by `manifest`, found under `src`). Returns the
    /// bytes newly stored.
    pub fn store(&self, src: &Path, manifest: &Manifest) -> Result<u64, CasError> {
        let tmp = self.root.join("tmp");
        fs::create_dir_all(&tmp).map_err(io("cannot create", &tmp))?;
        let mut seen = HashSet::new();
        let files: Vec<_> = manifest
            .entries
            .iter()
            .filter_map(|e| match &e.node {
                Node::File { digest, size, .. } if seen.insert(*digest) => {
                    Some((e.path.as_str(), *digest, *size))
                }
                _ => None,
            })
            .collect();
        files
            .into_par_iter()
            .map(|(path, digest, size)| {
                let dest = self.object(&digest);
                if dest.exists() {
                    return Ok(0);
                }
                if let Some(parent) = dest.parent() {
                    fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
                }
                let from = src.join(path);
                // Copy under a unique temporary name, then rename: a reader never sees a
                // half-written object, and two writers of one object cannot clash.
                let part = tmp.join(format!(
                    "{}.{}.{:?}",
                    digest.hex(),
                    std::process::id(),
                    std::thread::current().id()
                ));
                fs::copy(&from, &part).map_err(io("cannot store", &from))?;
                fs::set_permissions(&part, fs::Permissions::from_mode(0o444))
                    .map_err(io("cannot protect", &part))?;
                fs::rename(&part, &dest).map_err(io("cannot store", &dest))?;
                Ok(size)
            })
            .sum::<Result<u64, CasError>>()
    }

    /// Recreates a tree at `dest` (which must not exist), checking every object's digest.
    /// A corrupt object is removed before the error is returned.
    pub fn restore(&self, manifest: &Manifest, dest: &Path) -> Result<(), CasError> {
        fs::create_dir_all(dest).map_err(io("cannot create", dest))?;
        for e in &manifest.entries {
            let to = safe_join(dest, &e.path)?;
            match &e.node {
                Node::Dir => fs::create_dir_all(&to).map_err(io("cannot create", &to))?,
                Node::Symlink { target } => {
                    std::os::unix::fs::symlink(target, &to).map_err(io("cannot link", &to))?;
                }
                Node::File { .. } => {}
            }
        }
        manifest
            .entries
            .par_iter()
            .try_for_each(|e| -> Result<(), CasError> {
                let Node::File { digest, size, exec } = &e.node else {
                    return Ok(());
                };
                let object = self.object(digest);
                let actual = fs::metadata(&object)
                    .ok()
                    .filter(|m| m.len() == *size)
                    .and_then(|_| hash_file(&object, *size).ok());
                if actual != Some(*digest) {
                    // Best effort: a corrupt object that stays is re-detected next time.
                    let _ = fs::remove_file(&object);
                    return Err(CasError::Corrupt(digest.hex()));
                }
                let to = safe_join(dest, &e.path)?;
                fs::copy(&object, &to).map_err(io("cannot restore", &to))?;
                let mode = if *exec { 0o755 } else { 0o644 };
                fs::set_permissions(&to, fs::Permissions::from_mode(mode))
                    .map_err(io("cannot restore", &to))
            })
    }

    /// Total bytes of every object.
    pub fn size(&self) -> u64 {
        let Ok(dirs) = fs::read_dir(self.root.join("objects")) else {
            return 0;
        };
        dirs.flatten()
            .filter_map(|d| fs::read_dir(d.path()).ok())
            .flat_map(|files| files.flatten())
            .filter_map(|f| f.metadata().ok())
            .map(|m| m.len())
            .sum()
    }

    /// Removes every object not in `keep`; returns the bytes freed.
    pub fn sweep(&self, keep: &HashSet<Digest>) -> u64 {
        let Ok(dirs) = fs::read_dir(self.root.join("objects")) else {
            return 0;
        };
        let mut freed = 0;
        for dir in dirs.flatten() {
            let Ok(files) = fs::read_dir(dir.path()) else {
                continue;
            };
            let prefix = dir.file_name().to_string_lossy().into_owned();
            for f in files.flatten() {
                let name = format!("{prefix}{}", f.file_name().to_string_lossy());
                if Digest::parse(&name).is_some_and(|d| keep.contains(&d)) {
                    continue;
                }
                let len = f.metadata().map_or(0, |m| m.len());
                // Best effort: an object that cannot be removed only costs disk.
                if fs::remove_file(f.path()).is_ok() {
                    freed += len;
                }
            }
        }
        freed
    }
}

// Manifests come from the state file; refuse any path that could climb out of `dest`.
fn safe_join(dest: &Path, rel: &str) -> Result<PathBuf, CasError> {
    let ok = !rel.is_empty()
        && !rel.starts_with('/')
        && rel
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if ok {
        Ok(dest.join(rel))
    } else {
        Err(CasError::BadPath(rel.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::digest::manifest;

    #[test]
    fn round_trip_and_corruption() {
        let work = tempfile::tempdir().unwrap();
        let src = work.path().join("src");
        fs::create_dir_all(src.join("a")).unwrap();
        fs::write(src.join("a/one"), "same").unwrap();
        fs::write(src.join("two"), "same").unwrap();
        let m = manifest(&src).unwrap();
        let cas = Cas::new(work.path().join("cas"));
        assert_eq!(cas.store(&src, &m).unwrap(), 4, "deduplicated");
        let out = work.path().join("out");
        cas.restore(&m, &out).unwrap();
        assert_eq!(manifest(&out).unwrap().digest(), m.digest());
        let Node::File { digest, .. } = &m.entries[1].node else {
            panic!("a file")
        };
        let obj = cas.object(digest);
        fs::set_permissions(&obj, fs::Permissions::from_mode(0o644)).unwrap();
        fs::write(&obj, "evil").unwrap();
        let err = cas.restore(&m, &work.path().join("out2")).unwrap_err();
        assert!(matches!(err, CasError::Corrupt(_)), "{err}");
        assert!(!obj.exists());
    }
}
