//! Content digests of artifact trees: every path, each file's bytes and exec bit, each
//! symlink's target, each directory (so an empty one counts) — never mtimes, owners or
//! other permission bits, which change from run to run without changing what a step sees.
//!
//! A tree is walked once to list its entries, then its files are hashed in parallel on
//! rayon's pool; each file goes through blake3's memory-mapped reader, and large files are
//! also split across threads inside blake3. The tree's digest is blake3 over the sorted
//! [`Manifest`] in a fixed binary encoding, so two trees with the same content hash the
//! same wherever they live.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// Files at least this large are hashed with several threads inside blake3 as well.
const LARGE_FILE: u64 = 8 << 20;

/// A 32-byte blake3 digest, shown and stored as lower-case hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The all-zero digest: "nothing before this step".
    pub const ZERO: Self = Self([0; 32]);

    /// Lower-case hex.
    pub fn hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    /// The first 12 hex digits, for the transcript.
    pub fn short(&self) -> String {
        self.hex().chars().take(12).collect()
    }

    /// Parses 64 hex digits.
    pub fn parse(hex: &str) -> Option<Self> {
        blake3::Hash::from_hex(hex)
            .ok()
            .map(|h| Self(*h.as_bytes()))
    }
}

impl From<blake3::Hash> for Digest {
    fn from(h: blake3::Hash) -> Self {
        Self(*h.as_bytes())
    }
}

impl Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.hex())
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).ok_or_else(|| serde::de::Error::custom("not a 64-digit hex digest"))
    }
}

/// What one path in a tree is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Node {
    /// A directory.
    Dir,
    /// A regular file.
    File {
        /// blake3 of its bytes.
        digest: Digest,
        /// Its length.
        size: u64,
        /// Whether its owner may execute it.
        exec: bool,
    },
    /// A symbolic link (never followed).
    Symlink {
        /// Where it points, as written.
        target: String,
    },
}

/// One path of a tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestEntry {
    /// Relative path, `/`-separated.
    pub path: String,
    /// What is there.
    #[serde(flatten)]
    pub node: Node,
}

/// Everything in a tree, sorted by path.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The entries.
    pub entries: Vec<ManifestEntry>,
}

/// Why a tree could not be hashed.
#[derive(Debug, thiserror::Error)]
pub enum DigestError {
    /// Reading failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A name that is not UTF-8 cannot be recorded in a manifest.
    #[error("{0} has a name that is not UTF-8; such trees are not cached")]
    NotUtf8(PathBuf),
    /// Something other than a file, directory or symlink (a socket, a device).
    #[error("{0} is not a file, directory or symlink")]
    Special(PathBuf),
}

impl Manifest {
    /// The tree's digest: blake3 over the entries in a fixed encoding.
    pub fn digest(&self) -> Digest {
        let mut h = blake3::Hasher::new();
        h.update(b"treadle-tree-v1\0");
        for e in &self.entries {
            let path = e.path.as_bytes();
            match &e.node {
                Node::Dir => {
                    h.update(b"d");
                    field(&mut h, path);
                }
                Node::File { digest, size, exec } => {
                    h.update(if *exec { b"x" } else { b"f" });
                    field(&mut h, path);
                    h.update(&size.to_le_bytes());
                    h.update(&digest.0);
                }
                Node::Symlink { target } => {
                    h.update(b"l");
                    field(&mut h, path);
                    field(&mut h, target.as_bytes());
                }
            }
        }
        h.finalize().into()
    }

    /// Total bytes of its files.
    pub fn bytes(&self) -> u64 {
        self.entries
            .iter()
            .map(|e| match e.node {
                Node::File { size, .. } => size,
                _ => 0,
            })
            .sum()
    }
}

// Length-prefixed, so that no two different entry lists encode to the same bytes.
fn field(h: &mut blake3::Hasher, bytes: &[u8]) {
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// Hashes one file's bytes.
pub fn hash_file(path: &Path, size: u64) -> Result<Digest, DigestError> {
    let io = |source| DigestError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut h = blake3::Hasher::new();
    if size >= LARGE_FILE {
        h.update_mmap_rayon(path).map_err(io)?;
    } else {
        h.update_mmap(path).map_err(io)?;
    }
    Ok(h.finalize().into())
}

/// Lists and hashes a tree. The root itself is not an entry.
pub fn manifest(root: &Path) -> Result<Manifest, DigestError> {
    let mut listed = Vec::new();
    walk(root, "", &mut listed)?;
    let entries = listed
        .into_par_iter()
        .map(|(path, node)| {
            let node = match node {
                Listed::File { size, exec } => {
                    let digest = hash_file(&root.join(&path), size)?;
                    Node::File { digest, size, exec }
                }
                Listed::Node(n) => n,
            };
            Ok(ManifestEntry { path, node })
        })
        .collect::<Result<Vec<_>, DigestError>>()?;
    Ok(Manifest { entries })
}

enum Listed {
    File { size: u64, exec: bool },
    Node(Node),
}

// Depth-first with sorted names, so the listing comes out already sorted by path.
fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, Listed)>) -> Result<(), DigestError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| DigestError::Io { path, source }
    };
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry
            .file_name()
            .into_string()
            .map_err(|_| DigestError::NotUtf8(entry.path()))?;
        names.push((name, entry));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, entry) in names {
        let path = entry.path();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let meta = fs::symlink_metadata(&path).map_err(io(&path))?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            let target = fs::read_link(&path).map_err(io(&path))?;
            let target = target
                .into_os_string()
                .into_string()
                .map_err(|_| DigestError::NotUtf8(path.clone()))?;
            out.push((rel, Listed::Node(Node::Symlink { target })));
        } else if kind.is_dir() {
            out.push((rel.clone(), Listed::Node(Node::Dir)));
            walk(&path, &rel, out)?;
        } else if kind.is_file() {
            let exec = meta.permissions().mode() & 0o100 != 0;
            out.push((
                rel,
                Listed::File {
                    size: meta.len(),
                    exec,
                },
            ));
        } else {
            return Err(DigestError::Special(path));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_not_mtime_decides() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        for d in [a.path(), b.path()] {
            fs::create_dir_all(d.join("sub/empty")).unwrap();
            fs::write(d.join("sub/f.txt"), "hello").unwrap();
            std::os::unix::fs::symlink("sub/f.txt", d.join("link")).unwrap();
        }
        let (ma, mb) = (manifest(a.path()).unwrap(), manifest(b.path()).unwrap());
        assert_eq!(ma.digest(), mb.digest());
        fs::set_permissions(
            b.path().join("sub/f.txt"),
            fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        assert_ne!(ma.digest(), manifest(b.path()).unwrap().digest());
        fs::set_permissions(
            b.path().join("sub/f.txt"),
            fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        fs::remove_file(b.path().join("link")).unwrap();
        std::os::unix::fs::symlink("elsewhere", b.path().join("link")).unwrap();
        assert_ne!(ma.digest(), manifest(b.path()).unwrap().digest());
    }
}
