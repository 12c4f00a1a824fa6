//! The spawner process's side (see `super::spawner`): a loop that receives a request,
//! starts its keeper with `clone(CLONE_PARENT)` (so that the keeper is treadle's child,
//! not the spawner's), waits until the command runs or could not start, and replies.
//!
//! The spawner is a fork of treadle made before any thread, so it is single-threaded and
//! may allocate; so may the keeper and the command it forks up to the keeper's own life
//! (`super::life::live`) and the command's exec. It runs none of treadle's other code.

use std::ffi::CString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::life;
use super::wire::{self, Reply, Request, SocketIo};

/// The spawner's end of its socket.
pub(super) struct Socket(pub(super) OwnedFd);

impl Read for Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: read(2) into `buf`, within its length.
        let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }
}

impl io::Write for Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: send(2) of `buf`, within its length; no SIGPIPE if treadle is gone.
        let n = unsafe {
            libc::send(
                self.0.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        usize::try_from(n).map_err(|_| io::Error::last_os_error())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl SocketIo for Socket {
    fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// The spawner's life: serves requests until treadle closes the socket (or dies), then
/// exits. `treadle` is its parent's pid.
pub(super) fn serve(mut socket: Socket, treadle: libc::pid_t) -> ! {
    loop {
        let request = match wire::receive(&mut socket) {
            Ok(Some(request)) => request,
            // Treadle is gone, or the stream is broken: nothing more will be asked.
            Ok(None) | Err(_) => exit(0),
        };
        let reply = start(&request, treadle);
        drop(request);
        if io::Write::write_all(&mut socket, &{
            let mut bytes = Vec::new();
            let _ = reply.write(&mut bytes);
            bytes
        })
        .is_err()
        {
            exit(0);
        }
    }
}

fn exit(code: libc::c_int) -> ! {
    // SAFETY: _exit ends the spawner without running anything of treadle's.
    unsafe { libc::_exit(code) }
}

/// A command ready for `execve`: everything allocated before the fork.
struct Exec<'a> {
    /// The paths to try, in order (the program, or it in each `PATH` directory).
    paths: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    request: &'a Request,
}

impl<'a> Exec<'a> {
    fn new(request: &'a Request) -> Exec<'a> {
        let nul_ended = |v: &'a [CString]| {
            v.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<_>>()
        };
        Exec {
            paths: candidates(request),
            argv: nul_ended(&request.argv),
            envp: nul_ended(&request.env),
            request,
        }
    }
}

/// Where `execve` looks for the program: itself when it names a path, else each directory
/// of the command's own `PATH` (the default search path without one), as `execvp` does
/// with the command's environment rather than the spawner's.
fn candidates(request: &Request) -> Vec<CString> {
    let program = request.program.as_bytes();
    if program.contains(&b'/') || program.is_empty() {
        return vec![request.program.clone()];
    }
    let path = request
        .env
        .iter()
        .find_map(|e| e.as_bytes().strip_prefix(b"PATH="))
        .unwrap_or(b"/bin:/usr/bin");
    path.split(|b| *b == b':')
        .filter_map(|dir| {
            // An empty entry is the current directory.
            let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
            let mut full = dir.to_vec();
            full.push(b'/');
            full.extend_from_slice(program);
            CString::new(full).ok()
        })
        .collect()
}

/// Starts the request's keeper and waits until its command runs or could not start.
fn start(request: &Request, treadle: libc::pid_t) -> Reply {
    let exec = Exec::new(request);
    let (status_r, status_w) = match pipe() {
        Ok(ends) => ends,
        Err(e) => return Reply::new(0, &wire::failure(&e)),
    };
    // SAFETY: clone(2) with CLONE_PARENT and no new stack acts as fork(2), its child
    // treadle's (the spawner's parent's); the spawner is single-threaded, so the child may
    // go on with this process's memory as its own.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::CLONE_PARENT | libc::SIGCHLD,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    match pid {
        -1 => Reply::new(0, &wire::failure(&io::Error::last_os_error())),
        0 => {
            drop(status_r);
            keeper(&exec, status_w, treadle)
        }
        pid => {
            drop(status_w);
            // Nothing read: the command's exec closed the last copy of the write end.
            let mut said = Vec::new();
            let _ = std::fs::File::from(status_r).read_to_end(&mut said);
            Reply::new(i32::try_from(pid).unwrap_or(0), &said)
        }
    }
}

/// In the keeper (a child of treadle, cloned by the spawner): its own process group, then
/// the keeper's life (`life::begin`, `life::live`), the command exec'd in its fork.
fn keeper(exec: &Exec<'_>, status: OwnedFd, treadle: libc::pid_t) -> ! {
    // SAFETY: setpgid and prctl on this process: a group of its own, out of reach of the
    // terminal's Ctrl-C and killed whole by `super::stop_and_wait`; a name that says
    // what it is in `ps` (the command, forked next, takes its program's at exec).
    unsafe {
        libc::setpgid(0, 0);
        libc::prctl(libc::PR_SET_NAME, c"treadle-keeper".as_ptr(), 0, 0, 0);
    }
    // SAFETY: this process is single-threaded (a fork of the spawner).
    match unsafe { life::begin(treadle, exec.request.raw.own_pids) } {
        Err(e) => fail(&status, &e),
        Ok(life::Begun::Command(pids)) => {
            let err = command(exec, pids);
            fail(&status, &err)
        }
        // SAFETY: the keeper, after `begin` returned it; it closes every descriptor
        // (`status` among them) and never returns.
        Ok(life::Begun::Keeper { command, set }) => unsafe { life::live(command, treadle, &set) },
    }
}

/// Writes why the command did not start for the spawner, and exits.
fn fail(status: &OwnedFd, err: &io::Error) -> ! {
    let bytes = wire::failure(err);
    // SAFETY: write(2) of a buffer this process owns to its own descriptor, then _exit.
    unsafe {
        libc::write(status.as_raw_fd(), bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
}

/// In the command: its output, its directory, its confinement, then its exec. Returns
/// only with why it could not start.
fn command(exec: &Exec<'_>, pids: crate::confine::pid::Pids) -> io::Error {
    let request = exec.request;
    // SAFETY: dup2 onto standard output and error (the received descriptors are above 2:
    // the spawner holds 0 to 2), chdir to a NUL-terminated path; the spawner ignored
    // SIGPIPE as Rust programs do, the command starts with the default.
    unsafe {
        if libc::dup2(request.stdout.as_raw_fd(), 1) < 0
            || libc::dup2(request.stderr.as_raw_fd(), 2) < 0
            || libc::chdir(request.cwd.as_ptr()) != 0
        {
            return io::Error::last_os_error();
        }
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // SAFETY: in the command, between `begin` and exec; the rulesets are this process's.
    if let Err(e) = unsafe { life::confine_command(pids, &request.raw) } {
        return e;
    }
    // As `execvp`: a path not found moves to the next directory; a path found but refused
    // is what is reported if nothing else runs.
    let mut refused = None;
    let mut last = io::Error::from_raw_os_error(libc::ENOENT);
    for path in &exec.paths {
        // SAFETY: execve with NUL-terminated strings and NULL-ended arrays built above.
        unsafe { libc::execve(path.as_ptr(), exec.argv.as_ptr(), exec.envp.as_ptr()) };
        last = io::Error::last_os_error();
        match last.raw_os_error() {
            Some(libc::EACCES) => refused = Some(io::Error::from_raw_os_error(libc::EACCES)),
            Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG) => {}
            _ => return last,
        }
    }
    refused.unwrap_or(last)
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two new descriptors, owned from here on.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}
