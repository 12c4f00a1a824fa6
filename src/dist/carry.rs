//! Artifact directories carried through the JetStream object store: packed into one byte
//! string (directories, files with their mode bits, symlinks as links), named by the
//! blake3 digest of that string, and unpacked on the other side. The same content is
//! stored once, whoever sends it.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use super::DistError;
use super::bus::{Bus, retrying};
use crate::blocking::WorkerStopped;

const DIR: u8 = 0;
const FILE: u8 = 1;
const LINK: u8 = 2;

/// Why an artifact cannot be packed, fetched or unpacked. A damaged object (`Truncated`,
/// `TooLarge`, `Outside`, `UnknownEntry`, `NotItsDigest`) is the sender's or the store's
/// fault and sending it again may help; `Io` is this machine's disk.
#[derive(Debug, thiserror::Error)]
pub enum CarryError {
    /// A file of the tree cannot be read or written here.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The packed bytes end inside an entry.
    #[error("a packed artifact is truncated")]
    Truncated,
    /// An entry's length does not fit in memory here.
    #[error("a packed artifact is too large")]
    TooLarge,
    /// An entry's path leaves the artifact's directory (`..`, an absolute path).
    #[error("a packed artifact names `{}`, outside its directory", .0.display())]
    Outside(PathBuf),
    /// An entry is neither a directory, a file nor a link.
    #[error("a packed artifact has an entry of unknown kind {0}")]
    UnknownEntry(u8),
    /// The object fetched is not the one its name (a blake3 digest) promises.
    #[error("object {0} does not match its digest")]
    NotItsDigest(String),
    /// The blocking task that packed or unpacked it stopped.
    #[error(transparent)]
    Stopped(#[from] WorkerStopped),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CarryError + '_ {
    move |source| CarryError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Packs the tree under `dir` (sorted, so the same tree packs to the same bytes).
pub fn pack(dir: &Path) -> Result<Vec<u8>, CarryError> {
    let mut out = Vec::new();
    pack_into(dir, Path::new(""), &mut out)?;
    Ok(out)
}

fn pack_into(root: &Path, rel: &Path, out: &mut Vec<u8>) -> Result<(), CarryError> {
    let here = root.join(rel);
    let mut entries: Vec<_> = fs::read_dir(&here)
        .map_err(io(&here))?
        .collect::<Result<_, _>>()
        .map_err(io(&here))?;
    entries.sort_by_key(fs::DirEntry::file_name);
    for e in entries {
        let path = e.path();
        let name = rel.join(e.file_name());
        let meta = fs::symlink_metadata(&path).map_err(io(&path))?;
        let rel_bytes = name.to_string_lossy().into_owned().into_bytes();
        if meta.file_type().is_symlink() {
            out.push(LINK);
            put_bytes(out, &rel_bytes);
            let target = fs::read_link(&path).map_err(io(&path))?;
            put_bytes(out, target.to_string_lossy().as_bytes());
        } else if meta.is_dir() {
            out.push(DIR);
            put_bytes(out, &rel_bytes);
            pack_into(root, &name, out)?;
        } else {
            out.push(FILE);
            put_bytes(out, &rel_bytes);
            out.extend_from_slice(&meta.permissions().mode().to_le_bytes());
            put_bytes(out, &fs::read(&path).map_err(io(&path))?);
        }
    }
    Ok(())
}

/// Reads the packed bytes back.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CarryError> {
        if self.0.len() < n {
            return Err(CarryError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn bytes(&mut self) -> Result<&'a [u8], CarryError> {
        let mut len = [0u8; 8];
        len.copy_from_slice(self.take(8)?);
        let n = usize::try_from(u64::from_le_bytes(len)).map_err(|_| CarryError::TooLarge)?;
        self.take(n)
    }
    /// A relative path that stays inside the tree.
    fn path(&mut self) -> Result<PathBuf, CarryError> {
        let p = PathBuf::from(String::from_utf8_lossy(self.bytes()?).into_owned());
        if p.components().all(|c| matches!(c, Component::Normal(_))) {
            Ok(p)
        } else {
            Err(CarryError::Outside(p))
        }
    }
}

/// Unpacks `packed` into the new directory `dest`.
pub fn unpack(packed: &[u8], dest: &Path) -> Result<(), CarryError> {
    fs::create_dir_all(dest).map_err(io(dest))?;
    let mut r = Reader(packed);
    while let Some(&kind) = r.0.first() {
        r.take(1)?;
        let path = dest.join(r.path()?);
        match kind {
            DIR => fs::create_dir_all(&path).map_err(io(&path))?,
            LINK => {
                let target = String::from_utf8_lossy(r.bytes()?).into_owned();
                std::os::unix::fs::symlink(target, &path).map_err(io(&path))?;
            }
            FILE => {
                let mut mode = [0u8; 4];
                mode.copy_from_slice(r.take(4)?);
                fs::write(&path, r.bytes()?).map_err(io(&path))?;
                let perms = fs::Permissions::from_mode(u32::from_le_bytes(mode) & 0o7777);
                fs::set_permissions(&path, perms).map_err(io(&path))?;
            }
            other => return Err(CarryError::UnknownEntry(other)),
        }
    }
    Ok(())
}

/// Stores the directory `dir`; returns its digest (the object's name).
pub async fn send(bus: &Bus, dir: &Path) -> Result<String, DistError> {
    let owned = dir.to_path_buf();
    let packed = crate::blocking::blocking(move || pack(&owned)).await?;
    Ok(put(bus, &packed).await)
}

/// Stores `bytes` in the object store under their blake3 digest (unless there already);
/// returns the digest.
pub async fn put(bus: &Bus, bytes: &[u8]) -> String {
    let digest = blake3::hash(bytes).to_hex().to_string();
    let present = bus.artifacts.info(&digest).await.is_ok();
    if !present {
        retrying("storing an artifact", || async {
            let mut reader = bytes;
            bus.artifacts.put(digest.as_str(), &mut reader).await
        })
        .await;
    }
    digest
}

/// The object `digest`, checked against its digest.
pub async fn get(bus: &Bus, digest: &str) -> Result<Vec<u8>, DistError> {
    use tokio::io::AsyncReadExt;
    let bytes = retrying("fetching an artifact", || async {
        let mut object = bus.artifacts.get(digest).await.map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        object
            .read_to_end(&mut buf)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(buf)
    })
    .await;
    if blake3::hash(&bytes).to_hex().as_str() != digest {
        return Err(CarryError::NotItsDigest(digest.to_owned()).into());
    }
    Ok(bytes)
}

/// Fetches the object `digest` and unpacks it into the new directory `dest`, checking it
/// against its digest.
pub async fn receive(bus: &Bus, digest: &str, dest: &Path) -> Result<(), DistError> {
    let packed = get(bus, digest).await?;
    let dest = dest.to_path_buf();
    Ok(crate::blocking::blocking(move || unpack(&packed, &dest)).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_packs_and_unpacks_the_same() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        fs::create_dir_all(src.join("sub")).unwrap();
        fs::write(src.join("a.txt"), "alpha").unwrap();
        fs::write(src.join("sub/run.sh"), "#!/bin/sh\n").unwrap();
        fs::set_permissions(src.join("sub/run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("a.txt", src.join("link")).unwrap();
        let packed = pack(&src).unwrap();
        let dest = tmp.path().join("dest");
        unpack(&packed, &dest).unwrap();
        assert_eq!(fs::read_to_string(dest.join("a.txt")).unwrap(), "alpha");
        let mode = fs::metadata(dest.join("sub/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            fs::read_link(dest.join("link")).unwrap(),
            Path::new("a.txt")
        );
        assert_eq!(pack(&dest).unwrap(), packed, "the same tree packs the same");
    }

    #[test]
    fn a_path_outside_the_directory_is_refused() {
        let mut packed = vec![FILE];
        put_bytes(&mut packed, b"../evil");
        packed.extend_from_slice(&0o644u32.to_le_bytes());
        put_bytes(&mut packed, b"x");
        let tmp = tempfile::tempdir().unwrap();
        let err = unpack(&packed, &tmp.path().join("d")).unwrap_err();
        assert!(matches!(err, CarryError::Outside(_)), "{err}");
        assert!(err.to_string().contains("outside"), "{err}");
    }
}
