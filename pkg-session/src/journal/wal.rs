//! The journal's write-ahead log: one `fdatasync` of a small file per batch, in front of redb.
//!
//! A durable redb commit costs several fsyncs (data pages, then the header that points at
//! them), which on an ordinary disk is five to eight times one `fdatasync` of an append. So in
//! durable mode the writer thread makes each batch durable here first, commits it to redb
//! with `Durability::None`, and only then acknowledges it. redb stays the store and the index:
//! every read goes to redb, and this file is only read back when the journal is opened.
//!
//! # File format (`<db>.wal`, little-endian)
//!
//! * Header, at offset 0: `TRDLWAL\x01` (magic and format version), the generation (`u64`),
//!   and a CRC-32C of those 16 bytes (`u32`). The rest of the first 4 KiB is zeros, so that
//!   appending a record never rewrites the header's block.
//! * Records, back to back from offset 4096: the body length (`u32`), a CRC-32C of the length
//!   and the body (`u32`), then the body: the generation (`u64`), the entry count (`u32`) and
//!   each entry as seq (`u64`), event id (`u128`), session (`u128`), value length (`u32`)
//!   and the encoded value, exactly the bytes that go into `events.v1`.
//!
//! # Why a crash leaves nothing partial and loses nothing acknowledged
//!
//! * A batch is acknowledged only after its record was written and `sync_data` returned,
//!   and records are written strictly one after another, each synced before the next is
//!   written. So every record before an acknowledged one is complete too, and replay can
//!   stop at the first record that does not check out (zero length, runs past the end of
//!   the file, bad checksum, other generation): everything from there on was never
//!   acknowledged. A batch is one record, so it is replayed whole or not at all.
//! * The file is pre-extended by writing real zeros (not `set_len` or `fallocate`, which
//!   leave holes or unwritten extents that make every `fdatasync` also write metadata), and
//!   records overwrite it in place. The zeros also end the log: a length of 0 is "no more".
//! * A checkpoint (a durable redb commit, run by the writer) makes every logged batch durable
//!   in redb, after which the log is reset: the header gets the next generation, is synced,
//!   and writing starts again at offset 4096. Older records left further on carry an older
//!   generation and are ignored. A crash between the checkpoint and the reset replays
//!   records that redb already holds, which replay skips by event id (rule 10).
//! * The header is written only at creation and at a reset, both times before any record of
//!   its generation is written, and a reset only follows a checkpoint. So a header that does
//!   not check out means no record in the file is needed any more; the file then restarts
//!   from empty, so that no old record can ever match a new generation.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::error::WalError;

const MAGIC: [u8; 8] = *b"TRDLWAL\x01";
/// Magic, generation, checksum.
const HEADER_USED: usize = 8 + 8 + 4;
/// Where the first record starts.
pub(crate) const HEADER_LEN: u64 = 4096;
/// Body length and checksum in front of each record body.
const RECORD_HEAD: usize = 4 + 4;
/// The smallest step by which the file grows; the step doubles with the file's size up to
/// [`MAX_GROWTH`], so a journal that writes little keeps a small log.
const MIN_GROWTH: u64 = 1 << 20;
const MAX_GROWTH: u64 = 8 << 20;
/// Source of the zeros the file is extended with.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// The log file that belongs to the journal at `db`: the same path with `.wal` appended.
pub(crate) fn path_for(db: &Path) -> PathBuf {
    let mut path = OsString::from(db.as_os_str());
    path.push(".wal");
    PathBuf::from(path)
}

/// One event of a batch, as the writer logs it.
pub(crate) struct Entry<'a> {
    pub(crate) seq: u64,
    pub(crate) id: u128,
    pub(crate) session: u128,
    pub(crate) bytes: &'a [u8],
}

/// One event read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Replayed {
    pub(crate) seq: u64,
    pub(crate) id: u128,
    pub(crate) session: u128,
    pub(crate) bytes: Vec<u8>,
}

/// An open log, positioned for the next append.
pub(crate) struct Wal {
    file: File,
    path: PathBuf,
    generation: u64,
    /// Where the next record goes.
    offset: u64,
    /// The file's length. Every byte below it was written (a record, zeros or the header),
    /// so writing below it allocates nothing.
    len: u64,
    /// The header did not check out: the next reset empties the file first.
    restart: bool,
    /// The record being encoded; kept to reuse its allocation.
    buf: Vec<u8>,
}

impl Wal {
    /// Opens the log at `path`, creating it if needed, and returns it with the records of
    /// its current generation, in log order. Appends must wait for [`Wal::reset`], which the
    /// caller runs once these records are durably in redb.
    pub(crate) fn open(path: PathBuf) -> Result<(Wal, Vec<Vec<Replayed>>), WalError> {
        let created = !path
            .try_exists()
            .map_err(|source| WalError::io("inspect", &path, source))?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|source| WalError::io("open", &path, source))?;
        if created {
            // Without this a power loss could drop the new name, and with it every record
            // acknowledged through it. (A process crash cannot: the name is in the kernel.)
            sync_parent(&path)?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|source| WalError::io("read", &path, source))?;
        let scan = scan(&bytes);
        if let Some(reason) = scan.stopped {
            tracing::warn!(
                path = %path.display(),
                records = scan.records.len(),
                reason,
                "the write-ahead log ends in a record that was never acknowledged; ignoring it"
            );
        }
        let wal = Wal {
            file,
            generation: scan.generation.unwrap_or(0),
            restart: scan.generation.is_none(),
            offset: HEADER_LEN,
            len: bytes.len() as u64,
            path,
            buf: Vec::new(),
        };
        Ok((wal, scan.records))
    }

    /// The records of the log at `path` if there is one, for a journal opened in
    /// non-durable mode, which replays a log left by a durable run and then removes it.
    pub(crate) fn read_existing(path: &Path) -> Result<Option<Vec<Vec<Replayed>>>, WalError> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(scan(&bytes).records)),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(WalError::io("read", path, source)),
        }
    }

    /// Bytes of records written since the last reset.
    pub(crate) fn used(&self) -> u64 {
        self.offset - HEADER_LEN
    }

    /// The file this log writes.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one record holding `entries` and syncs it: once this returns `Ok`, the batch
    /// survives a crash. On an error the record may or may not be on disk; the caller must
    /// reset the log (after a checkpoint) before it appends again.
    pub(crate) fn append(&mut self, entries: &[Entry<'_>]) -> Result<(), WalError> {
        self.encode(entries)?;
        let end = self.offset + self.buf.len() as u64;
        if end > self.len {
            self.grow(end)?;
        }
        self.write_at(self.offset, "write a record to")?;
        // One fdatasync, of data only: the blocks were allocated and written when the file
        // was extended, so there is no metadata to flush except after a growth.
        self.file
            .sync_data()
            .map_err(|source| WalError::io("sync", &self.path, source))?;
        self.offset = end;
        Ok(())
    }

    /// Starts a new generation: every record written so far is dropped. Only call this when
    /// redb holds all of them durably (after a checkpoint, or after the replay at open).
    pub(crate) fn reset(&mut self) -> Result<(), WalError> {
        if self.restart || self.generation == u64::MAX {
            // Empty the file so that none of its old records can match the new generation.
            self.file
                .set_len(0)
                .map_err(|source| WalError::io("truncate", &self.path, source))?;
            self.len = 0;
            self.generation = 0;
            self.restart = false;
        }
        if self.len < HEADER_LEN + MIN_GROWTH {
            self.grow(HEADER_LEN + MIN_GROWTH)?;
        }
        self.generation += 1;
        self.buf.clear();
        self.buf.extend_from_slice(&MAGIC);
        self.buf.extend_from_slice(&self.generation.to_le_bytes());
        let crc = crc32c::crc32c(&self.buf);
        self.buf.extend_from_slice(&crc.to_le_bytes());
        self.write_at(0, "write the header of")?;
        // Synced now so that the new generation is on disk before any of its records.
        self.file
            .sync_data()
            .map_err(|source| WalError::io("sync", &self.path, source))?;
        self.offset = HEADER_LEN;
        Ok(())
    }

    fn encode(&mut self, entries: &[Entry<'_>]) -> Result<(), WalError> {
        let too_large = |bytes: usize| WalError::TooLarge { bytes };
        let buf = &mut self.buf;
        buf.clear();
        buf.extend_from_slice(&[0; RECORD_HEAD]);
        buf.extend_from_slice(&self.generation.to_le_bytes());
        let count = u32::try_from(entries.len()).map_err(|_| too_large(entries.len()))?;
        buf.extend_from_slice(&count.to_le_bytes());
        for entry in entries {
            buf.extend_from_slice(&entry.seq.to_le_bytes());
            buf.extend_from_slice(&entry.id.to_le_bytes());
            buf.extend_from_slice(&entry.session.to_le_bytes());
            let len = u32::try_from(entry.bytes.len()).map_err(|_| too_large(entry.bytes.len()))?;
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(entry.bytes);
        }
        let body = buf.len() - RECORD_HEAD;
        let body = u32::try_from(body).map_err(|_| too_large(body))?;
        buf[..4].copy_from_slice(&body.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&buf[..4]), &buf[RECORD_HEAD..]);
        buf[4..RECORD_HEAD].copy_from_slice(&crc.to_le_bytes());
        Ok(())
    }

    /// Extends the file with written zeros to at least `target` bytes. Not synced here: the
    /// `sync_data` that follows (of the record or header) also flushes the new size.
    fn grow(&mut self, target: u64) -> Result<(), WalError> {
        let step = self.len.clamp(MIN_GROWTH, MAX_GROWTH);
        let new_len = target.max(self.len + step);
        self.file
            .seek(SeekFrom::Start(self.len))
            .map_err(|source| WalError::io("extend", &self.path, source))?;
        let mut at = self.len;
        while at < new_len {
            let n = (new_len - at).min(ZEROS.len() as u64) as usize;
            self.file
                .write_all(&ZEROS[..n])
                .map_err(|source| WalError::io("extend", &self.path, source))?;
            at += n as u64;
            // Counted as written as it goes, so a failure half way leaves `len` true.
            self.len = at;
        }
        Ok(())
    }

    fn write_at(&mut self, offset: u64, op: &'static str) -> Result<(), WalError> {
        // One `pwrite` where there is one: a system call per batch fewer than seek + write.
        #[cfg(unix)]
        let written = std::os::unix::fs::FileExt::write_all_at(&self.file, &self.buf, offset);
        #[cfg(not(unix))]
        let written = self
            .file
            .seek(SeekFrom::Start(offset))
            .and_then(|_| self.file.write_all(&self.buf));
        written.map_err(|source| WalError::io(op, &self.path, source))
    }
}

/// What a log file holds.
struct Scan {
    /// The header's generation, if the header checks out.
    generation: Option<u64>,
    records: Vec<Vec<Replayed>>,
    /// Why reading stopped before the zeros or the end of the file, if it did.
    stopped: Option<&'static str>,
}

/// Reads the header and then records until the first one that does not check out.
fn scan(bytes: &[u8]) -> Scan {
    let mut out = Scan {
        generation: header(bytes),
        records: Vec::new(),
        stopped: None,
    };
    let Some(generation) = out.generation else {
        return out;
    };
    let mut at = HEADER_LEN as usize;
    while let Some(head) = bytes.get(at..).and_then(|rest| rest.get(..RECORD_HEAD)) {
        let mut head = Cursor(head);
        let (Some(len), Some(crc)) = (head.u32(), head.u32()) else {
            break;
        };
        if len == 0 {
            break;
        }
        let start = at + RECORD_HEAD;
        let Some(body) = start
            .checked_add(len as usize)
            .and_then(|end| bytes.get(start..end))
        else {
            out.stopped = Some("the last record runs past the end of the file");
            break;
        };
        if crc32c::crc32c_append(crc32c::crc32c(&len.to_le_bytes()), body) != crc {
            out.stopped = Some("a record's checksum does not match");
            break;
        }
        match entries(body, generation) {
            Body::Entries(entries) => out.records.push(entries),
            // Left over from before the last reset: the log ends here.
            Body::OtherGeneration => break,
            Body::Malformed => {
                out.stopped = Some("a record's checksum matches but its body is malformed");
                break;
            }
        }
        at = start + len as usize;
    }
    out
}

fn header(bytes: &[u8]) -> Option<u64> {
    let used = bytes.get(..HEADER_USED)?;
    let (checked, crc) = used.split_at(HEADER_USED - 4);
    let mut cursor = Cursor(checked);
    let magic = cursor.take(MAGIC.len())?;
    let generation = cursor.u64()?;
    let ok = magic == MAGIC && Cursor(crc).u32()? == crc32c::crc32c(checked);
    ok.then_some(generation)
}

enum Body {
    Entries(Vec<Replayed>),
    OtherGeneration,
    Malformed,
}

fn entries(body: &[u8], generation: u64) -> Body {
    let mut cursor = Cursor(body);
    let (Some(record_generation), Some(count)) = (cursor.u64(), cursor.u32()) else {
        return Body::Malformed;
    };
    if record_generation != generation {
        return Body::OtherGeneration;
    }
    // Not trusting `count` for the allocation: each entry takes at least 44 bytes.
    let mut out = Vec::with_capacity((count as usize).min(body.len() / 44));
    for _ in 0..count {
        let entry = (|| {
            let (seq, id, session) = (cursor.u64()?, cursor.u128()?, cursor.u128()?);
            let len = cursor.u32()? as usize;
            let bytes = cursor.take(len)?.to_vec();
            Some(Replayed {
                seq,
                id,
                session,
                bytes,
            })
        })();
        match entry {
            Some(entry) => out.push(entry),
            None => return Body::Malformed,
        }
    }
    if cursor.0.is_empty() {
        Body::Entries(out)
    } else {
        Body::Malformed
    }
}

/// Little-endian reads from the front of a slice, `None` when it is too short.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }

    fn u128(&mut self) -> Option<u128> {
        self.array().map(u128::from_le_bytes)
    }
}

/// Makes the directory entry of a new file durable.
fn sync_parent(path: &Path) -> Result<(), WalError> {
    #[cfg(unix)]
    {
        let parent = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        File::open(parent)
            .and_then(|dir| dir.sync_all())
            .map_err(|source| WalError::io("sync the directory of", path, source))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}
