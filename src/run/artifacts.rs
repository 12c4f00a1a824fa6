//! Artifacts: the directory each step runs in, its inputs and its collected outputs.
//!
//! A run owns `<state dir>/runs/<id>/`. Each step attempt gets a fresh
//! `steps/<seq>-<name>-<attempt>/` holding a copy of each declared input (files made
//! read-only) and an empty directory per output. Inputs are copied, not hard-linked: a
//! hard link shares the inode, and permission bits do not stop a command running as root
//! from writing through it into the artifact every later step sees. After a step
//! succeeds its output directories are moved (a rename, no copy) to `artifacts/`, where
//! the next steps' inputs are copied from. A name that is both an input and an output is
//! copied writable and collected again, so a step can extend an artifact.
//!
//! Directories stay writable so that `rm -rf .treadle` works for any user; only file
//! contents are protected, and each step only ever changes its own copy.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Runs whose directories are kept; older ones are removed when a run starts.
const KEEP_RUNS: u64 = 20;

/// Errors preparing or collecting a step's directory.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    /// A filesystem operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An input that no step of this run has produced (e.g. its producer was skipped).
    #[error("input `{0}` was not produced by any step that ran")]
    MissingInput(String),
    /// The step removed one of its output directories.
    #[error("output `{0}` is missing: the step removed its directory")]
    MissingOutput(String),
    /// The step replaced an output directory with a symlink or a file; it is not followed.
    #[error(
        "output `{0}` is no longer a directory (the step replaced it with a symlink or a file); an output must be the directory the step was given"
    )]
    ReplacedOutput(String),
    /// A name that would reach outside the step's directory (refused by the checks first).
    #[error("`{name}` is not an artifact name: {why}")]
    BadName {
        /// The name.
        name: String,
        /// Why not.
        why: &'static str,
    },
}

/// Refuses a name that is not one plain path component, before any path is built from it.
fn plain(name: &str) -> Result<(), ArtifactError> {
    match crate::pipeline::artifact::name_problem(name) {
        None => Ok(()),
        Some(why) => Err(ArtifactError::BadName {
            name: name.to_owned(),
            why,
        }),
    }
}

fn io<'p>(what: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> ArtifactError + 'p {
    move |source| ArtifactError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// The artifacts of one run.
#[derive(Debug)]
pub struct Artifacts {
    root: PathBuf,
    artifacts: Mutex<HashMap<String, PathBuf>>,
    versions: Mutex<u32>,
}

impl Artifacts {
    /// Makes the run's directory under `state_dir`, pruning old runs' directories.
    pub fn create(state_dir: &Path, run: u64) -> Result<Self, ArtifactError> {
        let runs = state_dir.join("runs");
        let root = runs.join(run.to_string());
        fs::create_dir_all(root.join("steps")).map_err(io("cannot create", &root))?;
        fs::create_dir_all(root.join("artifacts")).map_err(io("cannot create", &root))?;
        if let Ok(entries) = fs::read_dir(&runs) {
            for e in entries.flatten() {
                let old = e.file_name().to_str().and_then(|n| n.parse::<u64>().ok());
                if old.is_some_and(|old| old + KEEP_RUNS <= run) {
                    // Best effort: a leftover directory costs disk, not correctness.
                    let _ = fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(Self {
            root,
            artifacts: Mutex::new(HashMap::new()),
            versions: Mutex::new(0),
        })
    }

    /// The run's directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where an artifact currently lives, if some step produced it.
    pub fn artifact(&self, name: &str) -> Option<PathBuf> {
        self.artifacts.lock().ok()?.get(name).cloned()
    }

    /// The names of every artifact produced so far, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .artifacts
            .lock()
            .map(|a| a.keys().cloned().collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// A step's `inputs:` by name, `all` (a put's) read as every artifact produced so far.
    pub fn inputs_of(&self, step: &crate::pipeline::Step) -> Vec<String> {
        let all = crate::pipeline::resource_type::ALL_INPUTS;
        if step.inputs.iter().any(|i| i.value == all) {
            return self.names();
        }
        step.inputs.iter().map(|i| i.value.clone()).collect()
    }

    /// Makes a fresh directory for one attempt of a step, with its inputs and empty
    /// outputs, named `SEQ-NAME-ATTEMPT` (read back by [`seq_of_step_dir`]).
    pub fn prepare(
        &self,
        seq: u32,
        name: &str,
        attempt: u32,
        inputs: &[String],
        outputs: &[String],
    ) -> Result<PathBuf, ArtifactError> {
        let dir = self.step_dir(seq, name, attempt);
        inputs.iter().chain(outputs).try_for_each(|n| plain(n))?;
        // One `mkdir` when the steps' directory is there and this one is not (the common
        // case); a directory left by an earlier attempt is cleared first.
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                fs::remove_dir_all(&dir).map_err(io("cannot clear", &dir))?;
                fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
            }
            Err(_) => fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?,
        }
        for input in inputs {
            let src = self
                .artifact(input)
                .ok_or_else(|| ArtifactError::MissingInput(input.clone()))?;
            let writable = outputs.contains(input);
            copy_tree(&src, &dir.join(input), writable)?;
        }
        for output in outputs.iter().filter(|o| !inputs.contains(o)) {
            let path = dir.join(output);
            fs::create_dir_all(&path).map_err(io("cannot create", &path))?;
        }
        Ok(dir)
    }

    /// Moves a finished step's outputs into the run's artifacts.
    pub fn collect(&self, dir: &Path, outputs: &[String]) -> Result<(), ArtifactError> {
        for output in outputs {
            plain(output)?;
            let src = dir.join(output);
            // Not `is_dir`: that follows a symlink the step may have put in its place.
            match fs::symlink_metadata(&src) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(ArtifactError::ReplacedOutput(output.clone())),
                Err(_) => return Err(ArtifactError::MissingOutput(output.clone())),
            }
            let dest = self.next_version(output)?;
            fs::rename(&src, &dest).map_err(io("cannot collect output", &src))?;
            let before = match self.artifacts.lock() {
                Ok(mut map) => map.insert(output.clone(), dest.clone()),
                Err(_) => None,
            };
            // Outside the lock: other steps collect while this line is written.
            self.note_collected(dir, output, &dest, before.as_deref());
        }
        Ok(())
    }

    /// Notes which step directory made which version of an artifact, and the version it
    /// replaced, in `collected.jsonl` (the run page's added, changed and removed files of
    /// a step). Best effort: a lost line costs that page its list, not the run.
    fn note_collected(&self, dir: &Path, output: &str, dest: &Path, before: Option<&Path>) {
        use std::io::Write;
        let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
        let line = serde_json::json!({
            "seq": name(dir).as_deref().and_then(seq_of_step_dir),
            "step": name(dir),
            "output": output,
            "dir": name(dest),
            "before": before.and_then(name),
        });
        if let Ok(mut f) = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.root.join("collected.jsonl"))
        {
            let _ = writeln!(f, "{line}");
        }
    }

    /// Makes the directory `dir` (on the same filesystem) the artifact `name`: an input a
    /// worker received, or an output a worker sent back.
    pub fn adopt(&self, name: &str, dir: &Path) -> Result<(), ArtifactError> {
        plain(name)?;
        let dest = self.next_version(name)?;
        fs::rename(dir, &dest).map_err(io("cannot adopt artifact", dir))?;
        if let Ok(mut map) = self.artifacts.lock() {
            map.insert(name.to_owned(), dest);
        }
        Ok(())
    }

    /// Makes each of `outputs` an empty artifact that `across:` cells collect into, so a
    /// matrix whose cells all failed still hands the steps after it a directory.
    pub fn begin_collection(&self, outputs: &[String]) -> Result<(), ArtifactError> {
        for output in outputs {
            plain(output)?;
            let dest = self.next_version(output)?;
            fs::create_dir_all(&dest).map_err(io("cannot create", &dest))?;
            if let Ok(mut map) = self.artifacts.lock() {
                map.insert(output.clone(), dest);
            }
        }
        Ok(())
    }

    /// Moves a finished cell's outputs into its place in the collected artifacts:
    /// `ARTIFACT/value/value`, one segment per axis.
    pub fn collect_cell(
        &self,
        dir: &Path,
        outputs: &[String],
        segments: &[String],
    ) -> Result<(), ArtifactError> {
        for output in outputs {
            plain(output)?;
            self.place_cell(&dir.join(output), output, segments)?;
        }
        Ok(())
    }

    /// Moves a cell's output `name` that a worker collected (the directory `received`,
    /// holding it at `value/value` as [`Artifacts::collect_cell`] placed it there) into
    /// its place in this run's collected artifact.
    pub fn adopt_cell(
        &self,
        name: &str,
        received: &Path,
        segments: &[String],
    ) -> Result<(), ArtifactError> {
        plain(name)?;
        segments.iter().try_for_each(|s| plain(s))?;
        let src = segments
            .iter()
            .fold(received.to_path_buf(), |p, s| p.join(s));
        self.place_cell(&src, name, segments)?;
        // What is left is the emptied path down to the cell's place.
        let _ = fs::remove_dir_all(received);
        Ok(())
    }

    /// Moves the directory `src` to `ARTIFACT/value/value` under the collected `output`.
    fn place_cell(
        &self,
        src: &Path,
        output: &str,
        segments: &[String],
    ) -> Result<(), ArtifactError> {
        segments.iter().try_for_each(|s| plain(s))?;
        match fs::symlink_metadata(src) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(ArtifactError::ReplacedOutput(output.to_owned())),
            Err(_) => return Err(ArtifactError::MissingOutput(output.to_owned())),
        }
        let root = self
            .artifact(output)
            .ok_or_else(|| ArtifactError::MissingOutput(output.to_owned()))?;
        let dest = segments.iter().fold(root, |p, s| p.join(s));
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
        }
        if dest.exists() {
            fs::remove_dir_all(&dest).map_err(io("cannot clear", &dest))?;
        }
        fs::rename(src, &dest).map_err(io("cannot collect output", src))?;
        Ok(())
    }

    fn next_version(&self, output: &str) -> Result<PathBuf, ArtifactError> {
        let version = {
            let mut v = self
                .versions
                .lock()
                .map_err(|_| ArtifactError::MissingOutput(output.to_owned()))?;
            *v += 1;
            *v
        };
        Ok(self
            .root
            .join("artifacts")
            .join(format!("{output}.{version}")))
    }

    /// The directory of attempt `attempt` of step `seq` named `name` ([`Self::prepare`]
    /// makes it).
    pub fn step_dir(&self, seq: u32, name: &str, attempt: u32) -> PathBuf {
        let safe = dir_name(name);
        self.root
            .join("steps")
            .join(format!("{seq:03}-{safe}-{attempt}"))
    }

    /// Removes every step directory of the run (once it ended well: none is gone on in).
    pub fn discard_steps(&self) {
        // Best effort: it only costs disk when they stay.
        let _ = fs::remove_dir_all(self.root.join("steps"));
    }

    /// Removes a step directory that is no longer needed.
    pub fn discard(&self, dir: &Path) {
        // Most step directories hold nothing but their empty temporary directory by now:
        // two `rmdir`s, where walking the tree takes about fifteen system calls.
        let _ = fs::remove_dir(dir.join(crate::confine::TMP));
        if fs::remove_dir(dir).is_err() {
            // Best effort: it only costs disk when it stays.
            let _ = fs::remove_dir_all(dir);
        }
    }
}

/// A step's name as a directory's: its first 40 characters, each but ASCII letters, digits,
/// `-` and `_` written `_`.
pub fn dir_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect()
}

/// Copies a tree, keeping symlinks as links (never following them) and making files
/// read-only unless `writable`.
pub fn copy_tree(src: &Path, dest: &Path, writable: bool) -> Result<(), ArtifactError> {
    fs::create_dir_all(dest).map_err(io("cannot create", dest))?;
    for entry in fs::read_dir(src).map_err(io("cannot read", src))? {
        let entry = entry.map_err(io("cannot read", src))?;
        let from = entry.path();
        let to = dest.join(entry.file_name());
        let kind = entry.file_type().map_err(io("cannot stat", &from))?;
        if kind.is_symlink() {
            let target = fs::read_link(&from).map_err(io("cannot read link", &from))?;
            std::os::unix::fs::symlink(&target, &to).map_err(io("cannot link", &to))?;
        } else if kind.is_dir() {
            copy_tree(&from, &to, writable)?;
        } else {
            fs::copy(&from, &to).map_err(io("cannot copy", &from))?;
            let mut perms = fs::metadata(&to)
                .map_err(io("cannot stat", &to))?
                .permissions();
            let mode = if writable {
                perms.mode() | 0o200
            } else {
                perms.mode() & !0o222
            };
            perms.set_mode(mode);
            fs::set_permissions(&to, perms).map_err(io("cannot protect", &to))?;
        }
    }
    Ok(())
}

/// The step sequence number a step directory's name starts with (see [`Artifacts::prepare`]).
pub(crate) fn seq_of_step_dir(name: &str) -> Option<u32> {
    name.split('-').next()?.parse().ok()
}
