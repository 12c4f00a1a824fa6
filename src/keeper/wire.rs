//! What treadle and its spawner (`super::spawner`) say to each other on their socket: a
//! [`Request`] to start one command under a keeper, its descriptors beside it
//! (`SCM_RIGHTS`), and the [`Reply`] (the keeper's pid, or why the command did not start).
//!
//! A request is a header, `[body length: u32][descriptor count: u8]`, sent with the
//! descriptors (the command's stdout and stderr, then its Landlock rulesets), then the
//! body: the confinement's plain values (`Raw::encode`), then byte strings each prefixed
//! by its length (`u32`): the program, the directory, the argument count (as a string
//! of 4 bytes) and arguments, the environment count and `NAME=value` entries. All
//! integers little-endian. The format is private to one binary (both ends are the same
//! program), so it has no version.

use std::ffi::{CString, OsStr};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use crate::confine::command::{ENCODED, MAX_RULESETS, Raw};

/// The most descriptors a request carries: stdout, stderr and the rulesets.
pub(super) const MAX_FDS: usize = 2 + MAX_RULESETS;

/// The longest body accepted (a command's arguments and environment are bounded by the
/// kernel's `ARG_MAX`, a few MiB at most).
const MAX_BODY: usize = 64 << 20;

/// The length of a request's header.
const HEADER: usize = 5;

/// One command to start, as the spawner receives it.
pub(super) struct Request {
    /// What the command applies to itself; its ruleset descriptors are in `fds`.
    pub(super) raw: Raw,
    /// The program, a path or a name looked up on the command's `PATH`.
    pub(super) program: CString,
    /// Its working directory (absolute).
    pub(super) cwd: CString,
    /// Its arguments, `argv[0]` first.
    pub(super) argv: Vec<CString>,
    /// Its whole environment, `NAME=value`.
    pub(super) env: Vec<CString>,
    /// Its stdout and stderr.
    pub(super) stdout: OwnedFd,
    pub(super) stderr: OwnedFd,
    /// Kept open until the command has started (the rulesets), then closed.
    pub(super) _rulesets: Vec<OwnedFd>,
}

/// A request's body, built by treadle ([`encode`]).
pub(super) struct Encoded {
    pub(super) body: Vec<u8>,
}

/// Encodes a request's body; `None` when a string holds a NUL byte (which no program
/// could receive).
pub(super) fn encode<'a>(
    raw: &Raw,
    program: &OsStr,
    cwd: &OsStr,
    argv: impl ExactSizeIterator<Item = &'a OsStr>,
    env: &[Vec<u8>],
) -> Option<Encoded> {
    let mut body = raw.encode().to_vec();
    // A string (no NUL byte in it), or a count (its 4 bytes as a string).
    fn put(body: &mut Vec<u8>, bytes: &[u8], string: bool) -> Option<()> {
        if string && bytes.contains(&0) {
            return None;
        }
        body.extend_from_slice(&u32::try_from(bytes.len()).ok()?.to_le_bytes());
        body.extend_from_slice(bytes);
        Some(())
    }
    let count = |n: usize| u32::try_from(n).ok().map(u32::to_le_bytes);
    put(&mut body, program.as_bytes(), true)?;
    put(&mut body, cwd.as_bytes(), true)?;
    put(&mut body, &count(argv.len())?, false)?;
    for arg in argv {
        put(&mut body, arg.as_bytes(), true)?;
    }
    put(&mut body, &count(env.len())?, false)?;
    for entry in env {
        put(&mut body, entry, true)?;
    }
    Some(Encoded { body })
}

/// Sends a request: its header with `fds` beside it, then its body.
pub(super) fn send(socket: &mut impl SocketIo, request: &Encoded, fds: &[RawFd]) -> io::Result<()> {
    let mut header = [0u8; HEADER];
    let len = u32::try_from(request.body.len()).map_err(|_| io::Error::other("too long"))?;
    header[..4].copy_from_slice(&len.to_le_bytes());
    header[4] = u8::try_from(fds.len()).unwrap_or(u8::MAX);
    send_with_fds(socket.raw(), &header, fds)?;
    socket.write_all(&request.body)
}

/// A socket both ends read and write (a `UnixStream`, or the spawner's raw descriptor).
pub(super) trait SocketIo: Read + Write {
    fn raw(&self) -> RawFd;
}

impl SocketIo for std::os::unix::net::UnixStream {
    fn raw(&self) -> RawFd {
        self.as_raw_fd()
    }
}

/// Receives one request; `Ok(None)` at the end of the stream (treadle is gone).
pub(super) fn receive(socket: &mut impl SocketIo) -> io::Result<Option<Request>> {
    let mut header = [0u8; HEADER];
    let (n, fds) = receive_with_fds(socket.raw(), &mut header)?;
    if n == 0 {
        return Ok(None);
    }
    socket.read_exact(&mut header[n..])?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len > MAX_BODY || fds.len() != usize::from(header[4]) || fds.len() < 2 {
        return Err(io::Error::other("a malformed request"));
    }
    let mut body = vec![0u8; len];
    socket.read_exact(&mut body)?;
    decode(&body, fds)
        .ok_or_else(|| io::Error::other("a malformed request"))
        .map(Some)
}

/// Reads a body back, with the descriptors received beside it.
fn decode(body: &[u8], mut fds: Vec<OwnedFd>) -> Option<Request> {
    let plan: &[u8; ENCODED] = body.get(..ENCODED)?.try_into().ok()?;
    let rulesets = fds.split_off(2);
    let raw_fds: Vec<RawFd> = rulesets.iter().map(AsRawFd::as_raw_fd).collect();
    let raw = Raw::decode(plan, &raw_fds)?;
    let mut rest = &body[ENCODED..];
    let mut take = || -> Option<&[u8]> {
        let len = usize::try_from(u32::from_le_bytes(rest.get(..4)?.try_into().ok()?)).ok()?;
        let bytes = rest.get(4..4 + len)?;
        rest = &rest[4 + len..];
        Some(bytes)
    };
    let cstr = |b: &[u8]| CString::new(b).ok();
    let count = |b: &[u8]| usize::try_from(u32::from_le_bytes(b.try_into().ok()?)).ok();
    let program = cstr(take()?)?;
    let cwd = cstr(take()?)?;
    let argc = count(take()?)?;
    let argv = (0..argc)
        .map(|_| take().and_then(cstr))
        .collect::<Option<Vec<_>>>()?;
    let envc = count(take()?)?;
    let env = (0..envc)
        .map(|_| take().and_then(cstr))
        .collect::<Option<Vec<_>>>()?;
    let mut stdio = fds.into_iter();
    Some(Request {
        raw,
        program,
        cwd,
        argv,
        env,
        stdout: stdio.next()?,
        stderr: stdio.next()?,
        _rulesets: rulesets,
    })
}

/// The spawner's answer: the keeper's pid (0 when none was started), and why the command
/// did not start (errno 0: it runs). `[pid: i32][errno: i32][length: u32][message]`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Reply {
    pub(super) pid: i32,
    pub(super) errno: i32,
    pub(super) message: Vec<u8>,
}

impl Reply {
    /// The longest message sent.
    pub(super) const MAX: usize = 4096;

    /// The reply for `pid` and `failure`, the bytes the failing process reported
    /// ([`failure`]), empty when it started.
    pub(super) fn new(pid: i32, failure: &[u8]) -> Reply {
        match failure.get(..4) {
            None => Reply {
                pid,
                errno: 0,
                message: Vec::new(),
            },
            Some(errno) => Reply {
                pid,
                // Never 0 for a failure.
                errno: i32::from_le_bytes(errno.try_into().unwrap_or([0; 4])).max(1),
                message: failure[4..failure.len().min(4 + Self::MAX)].to_vec(),
            },
        }
    }

    pub(super) fn write(&self, out: &mut impl Write) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(12 + self.message.len());
        bytes.extend_from_slice(&self.pid.to_le_bytes());
        bytes.extend_from_slice(&self.errno.to_le_bytes());
        let len = u32::try_from(self.message.len()).unwrap_or(0);
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&self.message[..usize::try_from(len).unwrap_or(0)]);
        out.write_all(&bytes)
    }

    pub(super) fn read(input: &mut impl Read) -> io::Result<Reply> {
        let mut head = [0u8; 12];
        input.read_exact(&mut head)?;
        let int = |i: usize| [head[i], head[i + 1], head[i + 2], head[i + 3]];
        let len = usize::try_from(u32::from_le_bytes(int(8))).unwrap_or(usize::MAX);
        let mut message = vec![0u8; len.min(Self::MAX)];
        input.read_exact(&mut message)?;
        Ok(Reply {
            pid: i32::from_le_bytes(int(0)),
            errno: i32::from_le_bytes(int(4)),
            message,
        })
    }

    /// Why the command did not start, as an error (`None`: it runs). An OS error alone is
    /// that error (so a missing program reads as `std`'s spawn would say it).
    pub(super) fn error(&self) -> Option<io::Error> {
        if self.errno == 0 {
            return None;
        }
        Some(match self.message.is_empty() {
            true => io::Error::from_raw_os_error(self.errno),
            false => io::Error::other(String::from_utf8_lossy(&self.message).into_owned()),
        })
    }
}

/// The bytes a process that failed to start the command writes for the spawner: the
/// errno of an OS error alone, else `EINVAL` and the message. Allocates (the keeper and
/// the command are forks of the single-threaded spawner, where that is safe).
pub(super) fn failure(err: &io::Error) -> Vec<u8> {
    let (errno, text) = match err.raw_os_error() {
        Some(n) => (n, String::new()),
        None => (libc::EINVAL, err.to_string()),
    };
    let mut out = errno.to_le_bytes().to_vec();
    out.extend_from_slice(&text.as_bytes()[..text.len().min(Reply::MAX)]);
    out
}

/// A control buffer for up to [`MAX_FDS`] descriptors, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Control([u8; 64]);

/// Sends `data` with `fds` beside it (`SCM_RIGHTS`).
fn send_with_fds(socket: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::other("too many descriptors"));
    }
    let mut control = Control([0; 64]);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    let bytes = std::mem::size_of_val(fds);
    // SAFETY: msghdr, iovec and the control buffer live on this stack for the call; the
    // control message (CMSG_SPACE of at most MAX_FDS descriptors, 40 bytes) fits the
    // 64-byte buffer, its header written at the buffer's aligned start. `sendmsg` only
    // reads `data`.
    let sent = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = libc::CMSG_SPACE(bytes as u32) as usize;
            let header = libc::CMSG_FIRSTHDR(&msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(bytes as u32) as usize;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(header),
                bytes,
            );
        }
        loop {
            let n = libc::sendmsg(socket, &msg, libc::MSG_NOSIGNAL);
            if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break n;
            }
        }
    };
    match usize::try_from(sent) {
        Ok(n) if n == data.len() => Ok(()),
        // A stream socket took part of the header: the rest follows without descriptors.
        Ok(n) => {
            // SAFETY: the socket is borrowed for this write only, never closed here.
            let file = unsafe { std::fs::File::from_raw_fd(socket) };
            std::mem::ManuallyDrop::new(file).write_all(&data[n..])
        }
        Err(_) => Err(io::Error::last_os_error()),
    }
}

/// Receives into `buf` (some of it) with the descriptors beside it, close-on-exec.
fn receive_with_fds(socket: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut control = Control([0; 64]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut fds = Vec::new();
    // SAFETY: msghdr, iovec and the control buffer live on this stack for the call; the
    // control messages read are within `msg_controllen` (CMSG_FIRSTHDR/NXTHDR check it),
    // and each descriptor received is owned here from then on.
    let n = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = control.0.len();
        let n = loop {
            let n = libc::recvmsg(socket, &mut msg, libc::MSG_CMSG_CLOEXEC);
            if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break n;
            }
        };
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
        if msg.msg_flags & libc::MSG_CTRUNC != 0 {
            return Err(io::Error::other("too many descriptors in a request"));
        }
        n
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    Ok((n, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_travels_whole() {
        let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let raw = Raw {
            rulesets: [-1; MAX_RULESETS],
            own_pids: true,
            proc_rule: false,
            proc_access: 7,
            namespace: None,
        };
        let argv = [OsStr::new("sh"), OsStr::new("-c"), OsStr::new("echo é")];
        let env = vec![b"PATH=/bin".to_vec(), b"A=".to_vec()];
        let body = encode(
            &raw,
            OsStr::new("/bin/sh"),
            OsStr::new("/tmp"),
            argv.into_iter(),
            &env,
        )
        .unwrap();
        let (r, w) = std::io::pipe().unwrap();
        let (r, w) = (OwnedFd::from(r), OwnedFd::from(w));
        send(&mut a, &body, &[r.as_raw_fd(), w.as_raw_fd()]).unwrap();
        let got = receive(&mut b).unwrap().unwrap();
        assert_eq!(got.raw, raw);
        assert_eq!(got.program.as_bytes(), b"/bin/sh");
        assert_eq!(got.cwd.as_bytes(), b"/tmp");
        let argv: Vec<&[u8]> = got.argv.iter().map(|a| a.as_bytes()).collect();
        assert_eq!(argv, [&b"sh"[..], b"-c", "echo é".as_bytes()]);
        assert_eq!(got.env.len(), 2);
        drop(a);
        assert!(receive(&mut b).unwrap().is_none(), "the end of the stream");
        // A NUL byte cannot be sent.
        let argv = [OsStr::new("a\0b")];
        assert!(
            encode(
                &raw,
                OsStr::new("x"),
                OsStr::new("/"),
                argv.into_iter(),
                &[]
            )
            .is_none()
        );
    }

    #[test]
    fn a_reply_says_the_error_as_the_os_said_it() {
        let mut bytes = Vec::new();
        let missing = io::Error::from_raw_os_error(libc::ENOENT);
        Reply::new(12, &failure(&missing))
            .write(&mut bytes)
            .unwrap();
        let reply = Reply::read(&mut &bytes[..]).unwrap();
        assert_eq!(reply.pid, 12);
        assert_eq!(reply.error().unwrap().kind(), io::ErrorKind::NotFound);
        let mut bytes = Vec::new();
        Reply::new(5, &[]).write(&mut bytes).unwrap();
        assert!(Reply::read(&mut &bytes[..]).unwrap().error().is_none());
        let mut bytes = Vec::new();
        let other = io::Error::other("Landlock: refused");
        Reply::new(5, &failure(&other)).write(&mut bytes).unwrap();
        let err = Reply::read(&mut &bytes[..]).unwrap().error().unwrap();
        assert_eq!(err.to_string(), "Landlock: refused");
    }
}
