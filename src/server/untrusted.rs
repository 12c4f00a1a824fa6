//! Reading the files steps made, which the server treats as untrusted input: a file is
//! opened without following a symlink and without blocking (`O_NOFOLLOW | O_NONBLOCK`),
//! then judged by what the opened descriptor is (`fstat`), so a FIFO, a device or a socket
//! put where a file was checked is refused, never waited on; a file's bytes are streamed in
//! bounded chunks, never read whole; and at most [`READERS`] requests read such files at
//! once (the others are answered 503 at once, with `Retry-After`).

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::{Arc, LazyLock};

use axum::body::{Body, Bytes};
use tokio::io::AsyncReadExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::error::ApiError;

/// The most requests of this process that read steps' files at once (downloads and
/// `/changes`). Each holds about one [`CHUNK`] (and the connection's write buffer).
pub const READERS: usize = 16;

/// The bytes read, and sent, at a time.
pub const CHUNK: usize = 64 * 1024;

/// How many bytes of a file's start decide whether it is shown as text.
const SNIFF: usize = 8 * 1024;

static PERMITS: LazyLock<Arc<Semaphore>> = LazyLock::new(|| Arc::new(Semaphore::new(READERS)));

/// A place among the [`READERS`], held while a file is read; 503 when none is free.
pub fn reader() -> Result<OwnedSemaphorePermit, ApiError> {
    PERMITS.clone().try_acquire_owned().map_err(|_| {
        ApiError::Busy(format!(
            "{READERS} downloads are under way; try again in a moment"
        ))
    })
}

/// A regular file, opened: its descriptor and size (as the descriptor says).
pub struct Opened {
    pub file: std::fs::File,
    pub size: u64,
}

/// Opens `path` as a regular file, or says why not (`shown` names it in the answer).
pub fn open_regular(path: &Path, shown: &str) -> Result<Opened, ApiError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                ApiError::NotFound(format!("the run has no artifact file `{shown}`"))
            }
            _ => ApiError::Internal(format!("cannot open `{shown}`: {e}")),
        })?;
    let meta = file
        .metadata()
        .map_err(|e| ApiError::Internal(format!("cannot read `{shown}`: {e}")))?;
    let kind = meta.file_type();
    let what = if kind.is_file() {
        return Ok(Opened {
            file,
            size: meta.len(),
        });
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_block_device() || kind.is_char_device() {
        "a device"
    } else {
        "not a file"
    };
    Err(ApiError::Unprocessable(format!(
        "`{shown}` is {what}, not a regular file: only regular files are served"
    )))
}

/// Whether bytes that start a file look like text: no NUL, and UTF-8 but perhaps for a
/// character cut at the end.
pub fn looks_like_text(head: &[u8]) -> bool {
    !head.contains(&0)
        && match std::str::from_utf8(head) {
            Ok(_) => true,
            Err(e) => e.error_len().is_none(),
        }
}

/// The start of `opened` (at most [`SNIFF`] bytes), the file left at its start again.
pub fn sniff(opened: &mut Opened) -> std::io::Result<Vec<u8>> {
    use std::io::{Seek, SeekFrom};
    let mut head = Vec::with_capacity(SNIFF);
    (&opened.file).take(SNIFF as u64).read_to_end(&mut head)?;
    opened.file.seek(SeekFrom::Start(0))?;
    Ok(head)
}

/// The body that streams `opened`'s bytes (at most its size when opened) in [`CHUNK`]s,
/// holding `permit` until the last is sent or the client is gone.
pub fn stream(opened: Opened, permit: OwnedSemaphorePermit) -> Body {
    let file = tokio::fs::File::from_std(opened.file);
    let state = (file, opened.size, permit);
    let chunks = futures::stream::unfold(state, |(mut file, left, permit)| async move {
        if left == 0 {
            return None;
        }
        let want = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
        let mut buf = vec![0u8; want];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                let left = left.saturating_sub(n as u64);
                Some((
                    Ok::<_, std::io::Error>(Bytes::from(buf)),
                    (file, left, permit),
                ))
            }
            Err(e) => Some((Err(e), (file, 0, permit))),
        }
    });
    Body::from_stream(chunks)
}

/// The whole of a small regular file (at most `cap` bytes), or `None` when it is larger,
/// not a regular file, or unreadable.
pub fn read_at_most(path: &Path, cap: u64) -> Option<Vec<u8>> {
    let opened = open_regular(path, "").ok()?;
    if opened.size > cap {
        return None;
    }
    let mut bytes = Vec::new();
    opened.file.take(cap).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// A regular file's size and the hash of its bytes, read in [`CHUNK`]s; `None` when it is
/// not a regular file or unreadable.
pub fn digest(path: &Path) -> Option<(u64, blake3::Hash)> {
    let opened = open_regular(path, "").ok()?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK];
    let mut file = opened.file.take(opened.size);
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Some((opened.size, hasher.finalize())),
            Ok(n) => {
                hasher.update(buf.get(..n)?);
            }
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_refused_at_once_and_a_symlink_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        assert!(matches!(
            open_regular(&fifo, "fifo"),
            Err(ApiError::Unprocessable(_))
        ));
        std::fs::write(dir.path().join("real"), "x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        assert!(matches!(
            open_regular(&dir.path().join("link"), "link"),
            Err(ApiError::NotFound(_))
        ));
        assert_eq!(
            open_regular(&dir.path().join("real"), "real").unwrap().size,
            1
        );
    }

    #[test]
    fn text_is_judged_by_its_start() {
        assert!(looks_like_text("héllo".as_bytes()));
        // A character cut by the end of the sniffed bytes.
        assert!(looks_like_text(&"é".as_bytes()[..1]));
        assert!(!looks_like_text(b"a\0b"));
        assert!(!looks_like_text(&[0xff, 0x41]));
    }
}
