//! The step directory a tool may touch, and the one function that turns a model's path into
//! a real path inside it.
//!
//! Every built-in tool resolves its `path` argument through [`Workspace::resolve`] before it
//! touches the file system, so confinement is decided in one place. A path is refused when
//! it is absolute, when its `..` components climb above the root, or when a symlink on the
//! way leads outside the root. Symlinks are judged by canonicalizing the deepest ancestor of
//! the path that exists, so a path to a file not yet written (for `write_file`) is judged by
//! the directory it would be written into.
//!
//! The workspace also carries the web fence of `web_fetch` (the hosts of its `allow:`).
//!
//! Confinement covers the file tools only: `run_shell` runs `sh -c` with the step directory
//! as its working directory, and a shell can name any path. Grant it to agents you would
//! trust with a shell.

use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// Why a path given by the model was refused. The message is what the model reads.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    /// The path was absolute.
    #[error(
        "path {path:?} is absolute, which is outside the step directory; use a path relative to it"
    )]
    Absolute {
        /// The path as the model wrote it.
        path: String,
    },
    /// The path's `..` components climb above the step directory.
    #[error("path {path:?} is outside the step directory; use a path relative to it")]
    Escapes {
        /// The path as the model wrote it.
        path: String,
    },
    /// A symlink on the way leads outside the step directory.
    #[error(
        "path {path:?} leads outside the step directory through a symlink; use a path inside it"
    )]
    SymlinkOut {
        /// The path as the model wrote it.
        path: String,
    },
    /// The path exists but cannot be resolved (a dangling symlink, a symlink loop, no
    /// permission).
    #[error("path {path:?} cannot be resolved: {source}")]
    Unresolvable {
        /// The path as the model wrote it.
        path: String,
        /// What the file system said.
        source: io::Error,
    },
}

/// Why a [`Workspace`] could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot use {root} as a step directory: {source}")]
pub struct WorkspaceError {
    root: PathBuf,
    source: io::Error,
}

/// The directory a step's tools are confined to, plus what `run_shell` adds to or hides
/// from the environment. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Workspace {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    env: Vec<(String, String)>,
    hidden_env: Vec<String>,
    /// Variables `run_shell` inherits from treadle's environment besides the allow-list.
    pass_env: Vec<String>,
    /// Whether `run_shell` commands are confined to the root (see `crate::confine`).
    confined: bool,
    /// What they may connect to; `None`: the default for `confined`.
    network: Option<crate::confine::grant::Network>,
    /// The hosts `web_fetch` may reach (`allow:` of its grant).
    fence: super::web_fetch::Fence,
}

impl Workspace {
    /// Opens `root`, which must be an existing directory. It is canonicalized once, so later
    /// checks compare canonical paths.
    pub fn new(root: impl AsRef<Path>) -> Result<Self, WorkspaceError> {
        let root = root.as_ref();
        let error = |source| WorkspaceError {
            root: root.to_path_buf(),
            source,
        };
        let canonical = root.canonicalize().map_err(error)?;
        if !canonical.is_dir() {
            return Err(error(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            )));
        }
        Ok(Self {
            inner: Arc::new(Inner {
                root: canonical,
                env: Vec::new(),
                hidden_env: Vec::new(),
                pass_env: Vec::new(),
                confined: true,
                network: None,
                fence: super::web_fetch::Fence::default(),
            }),
        })
    }

    /// Adds variables to the environment of `run_shell` commands (a step's `env:`).
    #[must_use]
    pub fn with_env(self, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut inner = self.into_inner();
        inner.env.extend(vars);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Removes variables from the environment of `run_shell` commands. The agent step hides
    /// its API key variable this way, so a model cannot print its own key.
    #[must_use]
    pub fn hide_env(self, names: impl IntoIterator<Item = String>) -> Self {
        let mut inner = self.into_inner();
        inner.hidden_env.extend(names);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Lets `run_shell` commands inherit these variables too (a step's `pass_env:`), and
    /// confines them to the root unless `confined` is false (a step's `confined:`).
    #[must_use]
    pub fn with_access(self, pass_env: impl IntoIterator<Item = String>, confined: bool) -> Self {
        let mut inner = self.into_inner();
        inner.pass_env.extend(pass_env);
        inner.confined = confined;
        Self {
            inner: Arc::new(inner),
        }
    }

    fn into_inner(self) -> Inner {
        Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            root: shared.root.clone(),
            env: shared.env.clone(),
            hidden_env: shared.hidden_env.clone(),
            pass_env: shared.pass_env.clone(),
            confined: shared.confined,
            network: shared.network.clone(),
            fence: shared.fence.clone(),
        })
    }

    /// What `run_shell` commands may connect to (a step's `network:`); `None` keeps the
    /// default (`none` when confined, `any` when not).
    #[must_use]
    pub fn with_network(self, network: Option<crate::confine::grant::Network>) -> Self {
        let mut inner = self.into_inner();
        inner.network = network;
        Self {
            inner: Arc::new(inner),
        }
    }

    /// What `run_shell` commands may connect to.
    pub(crate) fn network(&self) -> crate::confine::grant::Network {
        self.inner
            .network
            .clone()
            .unwrap_or_else(|| crate::confine::default_network(self.inner.confined))
    }

    /// Fences `web_fetch` to these hosts (its grant's `allow:`).
    #[must_use]
    pub fn with_fence(self, fence: super::web_fetch::Fence) -> Self {
        let mut inner = self.into_inner();
        inner.fence = fence;
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The hosts `web_fetch` may reach.
    pub fn fence(&self) -> &super::web_fetch::Fence {
        &self.inner.fence
    }

    /// The canonical root directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    pub(crate) fn env(&self) -> &[(String, String)] {
        &self.inner.env
    }

    pub(crate) fn hidden_env(&self) -> &[String] {
        &self.inner.hidden_env
    }

    pub(crate) fn pass_env(&self) -> &[String] {
        &self.inner.pass_env
    }

    pub(crate) fn confined(&self) -> bool {
        self.inner.confined
    }

    /// Resolves a path the model gave, relative to the root, into a real path inside it.
    ///
    /// The result need not exist; its deepest existing ancestor is canonical and inside the
    /// root. An empty path means the root.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, PathError> {
        let relative = normalize(path)?;
        let joined = self.root().join(&relative);

        // Find the deepest ancestor that exists. `symlink_metadata` does not follow links,
        // so a dangling symlink counts as existing and fails canonicalization below instead
        // of letting a later write follow it out of the root.
        let mut existing = joined.as_path();
        let mut tail = Vec::new();
        while std::fs::symlink_metadata(existing).is_err() {
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    tail.push(name.to_owned());
                    existing = parent;
                }
                // The root exists, so the walk ends at it at the latest.
                _ => break,
            }
        }
        let mut canonical = existing
            .canonicalize()
            .map_err(|source| PathError::Unresolvable {
                path: path.to_owned(),
                source,
            })?;
        if !canonical.starts_with(self.root()) {
            return Err(PathError::SymlinkOut {
                path: path.to_owned(),
            });
        }
        for name in tail.into_iter().rev() {
            canonical.push(name);
        }
        Ok(canonical)
    }

    /// `path` relative to the root, for messages the model reads; `.` for the root itself.
    pub fn display(&self, path: &Path) -> String {
        match path.strip_prefix(self.root()) {
            Ok(relative) if relative.as_os_str().is_empty() => ".".to_owned(),
            Ok(relative) => relative.to_string_lossy().into_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }
}

/// Removes `.` and folds `..` lexically, refusing absolute paths and climbs above the root.
///
/// Folding `..` before touching the file system is what the OS will be handed, so the path
/// that is checked is the path that is used.
fn normalize(path: &str) -> Result<PathBuf, PathError> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::Prefix(_) | Component::RootDir => {
                return Err(PathError::Absolute {
                    path: path.to_owned(),
                });
            }
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(PathError::Escapes {
                        path: path.to_owned(),
                    });
                }
            }
            Component::Normal(part) => parts.push(part),
        }
    }
    Ok(parts.iter().collect())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("step")).unwrap();
        let ws = Workspace::new(dir.path().join("step")).unwrap();
        (dir, ws)
    }

    #[test]
    fn relative_paths_resolve_inside() {
        let (_dir, ws) = workspace();
        assert_eq!(ws.resolve("a/b.txt").unwrap(), ws.root().join("a/b.txt"));
        assert_eq!(ws.resolve("").unwrap(), ws.root());
        assert_eq!(ws.resolve("./a/../b").unwrap(), ws.root().join("b"));
        assert_eq!(ws.display(&ws.resolve("a/./c").unwrap()), "a/c");
        assert_eq!(ws.display(ws.root()), ".");
    }

    #[test]
    fn parent_escapes_are_refused() {
        let (_dir, ws) = workspace();
        for path in ["..", "../x", "a/../../x", "a/b/../../../x"] {
            let err = ws.resolve(path).unwrap_err();
            assert!(matches!(err, PathError::Escapes { .. }), "{path}: {err}");
        }
        assert_eq!(
            ws.resolve("../x").unwrap_err().to_string(),
            r#"path "../x" is outside the step directory; use a path relative to it"#
        );
    }

    #[test]
    fn absolute_paths_are_refused() {
        let (_dir, ws) = workspace();
        let err = ws.resolve("/etc/passwd").unwrap_err();
        assert!(matches!(err, PathError::Absolute { .. }));
        assert!(err.to_string().contains("outside the step directory"));
        // Even an absolute path that happens to point inside: the model should use relative
        // paths, and refusing is simpler to explain than a rule about prefixes.
        let inside = ws.root().join("a").to_string_lossy().into_owned();
        assert!(ws.resolve(&inside).is_err());
    }

    #[test]
    fn symlinks_out_are_refused() {
        let (dir, ws) = workspace();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), "s").unwrap();
        symlink(&outside, ws.root().join("link")).unwrap();
        symlink(outside.join("secret"), ws.root().join("file-link")).unwrap();
        symlink(dir.path().join("missing"), ws.root().join("dangling")).unwrap();

        for path in ["link", "link/secret", "link/new/file.txt", "file-link"] {
            let err = ws.resolve(path).unwrap_err();
            assert!(matches!(err, PathError::SymlinkOut { .. }), "{path}: {err}");
        }
        // A dangling link could be written through; it is refused, not treated as absent.
        assert!(ws.resolve("dangling").is_err());
        assert!(ws.resolve("dangling/x").is_err());
    }

    #[test]
    fn symlinks_inside_are_followed() {
        let (_dir, ws) = workspace();
        std::fs::create_dir(ws.root().join("real")).unwrap();
        symlink(ws.root().join("real"), ws.root().join("alias")).unwrap();
        assert_eq!(
            ws.resolve("alias/f.txt").unwrap(),
            ws.root().join("real/f.txt")
        );
    }

    #[test]
    fn root_must_be_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        assert!(Workspace::new(dir.path().join("f")).is_err());
        assert!(Workspace::new(dir.path().join("missing")).is_err());
    }
}
