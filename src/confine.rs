//! Confinement of the commands a step runs (tasks, `run_shell`) with the kernel's Landlock:
//! the sandbox policy of docs/security.md.
//!
//! A confined command may read and execute the system's read-only paths ([`SYSTEM`]), the
//! directories on its `PATH` and the user's toolchain homes ([`toolchains`], credential
//! places never), use the devices under `/dev`, write its declared caches, and do anything
//! inside its own step directory, which holds a copy of each declared input and the
//! directories of its outputs; its `TMPDIR` is `.tmp` there. Everything else (other steps'
//! directories and artifacts, the project, the rest of `$HOME`, the state file) is out of
//! reach, and Landlock also keeps it from signalling processes outside it. It connects
//! where its `network:` grant says ([`network`]; never to the serving server's port), and
//! it starts without `CAP_SYS_PTRACE`, so it cannot read treadle's or its keeper's memory.
//! Under its keeper it is the first process of a PID namespace of its own, with a `/proc`
//! of that namespace ([`pid`]): other tasks, their keepers and treadle are not there to read.
//!
//! The rules are built in the parent (paths are opened there) and applied one of two ways,
//! treadle itself staying unconfined either way:
//!
//! * [`spawn`]: in a short-lived thread of its own, which restricts itself and then starts
//!   the command, which inherits the thread's Landlock domain; the thread then ends. The
//!   command is started with `posix_spawn` (a `vfork`-like clone sharing treadle's memory),
//!   because nothing runs in the child between fork and exec. A `fork` copies the page
//!   tables of treadle's whole address space for every command and takes a copy-on-write
//!   fault for each page written afterwards; for a watcher starting a thousand checks a
//!   round that was most of its time (docs/benchmarks.md, "The watcher's poll round").
//! * [`for_keeper`]: by the command itself, after its keeper forked it and before it execs
//!   (`command`), for tasks and tool commands, which run under a keeper
//!   ([`crate::keeper::spawn`]): the rulesets built here travel to it as descriptors;
//!   [`confine`] applies the same in the child between fork and exec, for a command
//!   without a keeper (an MCP server).
//!
//! Where the kernel has no Landlock the command runs unconfined: [`unavailable`] says why,
//! and the run says so once.
//!
//! Submodules: `cli` (the narrower policy of a CLI agent: its install, not the system's
//! configuration; its `network:` and treadle's loopback ports for it), `toolchains` (the
//! user's toolchains readable, credential places never), `grant` (the `network:` grant as
//! the pipeline file writes it, parsed once), `network` (that grant enforced: TCP rules,
//! the server's port, namespaces), `command` (what the command does to itself before it
//! execs: one function for both ways of starting a keeper), `pid` (a PID namespace and `/proc` of the command's
//! own), `denied` (the hint for a refusal), `rules` (the ruleset of one command from what
//! it may read), `base` (the path rules commands share, opened once per process). The
//! grant's type lives here, not in `pipeline`,
//! which re-exports it, so that confinement depends on nothing of the pipeline's.
//!
//! The `landlock` crate is the Landlock project's own Rust binding (rust-landlock),
//! used by its kernel developers' tests; it degrades to "not enforced" on old kernels.

mod base;
pub mod cli;
pub(crate) mod command;
pub(crate) mod denied;
pub mod grant;
pub mod network;
pub(crate) mod pid;
mod rules;
pub mod toolchains;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use command::Confinement;
use grant::Network;
use rules::{Reads, rules};

use landlock::{
    ABI, Access, AccessFs, Ruleset, RulesetCreated, RulesetCreatedAttr, RulesetError,
    path_beneath_rules,
};

/// The Landlock ABI whose rights are asked for; newer kernels enforce exactly these.
const TARGET: ABI = ABI::V6;

/// System directories a confined command may read and execute (those that exist).
pub const SYSTEM: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/run",
    "/proc", "/sys", "/nix",
];

/// The confined command's temporary directory, inside its step directory: a shared
/// `/tmp` would let steps read each other's files (and a project kept under `/tmp`).
pub const TMP: &str = ".tmp";

/// Why a command could not be confined.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// The rules could not be built.
    #[error("cannot confine the command to {dir}: {source}")]
    Rules {
        /// The step directory.
        dir: PathBuf,
        /// What Landlock said.
        source: RulesetError,
    },
    /// A rule could not be added to its ruleset.
    #[error("cannot confine the command to {dir}: Landlock: {source}")]
    Rule {
        /// The step directory.
        dir: PathBuf,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// Its temporary directory could not be made.
    #[error("cannot create {path}: {source}")]
    Tmp {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The thread that starts it could not confine itself.
    #[error("cannot confine the command to {dir}: Landlock: {source}")]
    Restrict {
        /// The step directory.
        dir: PathBuf,
        /// What Landlock said.
        source: RulesetError,
    },
    /// The command could not be started (or its starting thread could not be).
    #[error("cannot start the command: {0}")]
    Start(std::io::Error),
    /// Its network grant cannot be given on this machine.
    #[error(transparent)]
    Network(#[from] network::NetworkError),
    /// A declared cache is a credential place, or cannot be made.
    #[error("cache `{path}`: {why}")]
    Cache {
        /// The cache's directory.
        path: PathBuf,
        /// Why it cannot be granted.
        why: String,
    },
}

/// What a task's or a `run_shell` command may reach (docs/security.md, the policy table).
#[derive(Debug, Clone, Copy)]
pub struct Policy<'a> {
    /// Its step directory, where it may do anything.
    pub dir: &'a Path,
    /// Whether its file access is confined (a step's `confined:`); `false` leaves only the
    /// network rules.
    pub files: bool,
    /// What it may connect to.
    pub network: &'a Network,
    /// Directories it may also write (declared caches).
    pub writable: &'a [PathBuf],
    /// Directories it may also read and execute (an MCP server's project, where its
    /// program lives).
    pub readable: &'a [PathBuf],
}

/// The network a step gets when it names none: `none` when its files are confined,
/// `any` when it is not (`confined: false` lifts the sandbox).
pub fn default_network(files: bool) -> Network {
    if files { Network::None } else { Network::Any }
}

/// Why this machine has no Landlock to confine commands with.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// The kernel has it but does not turn it on.
    #[error(
        "Landlock is built into this kernel but not enabled \
         (add `landlock` to the `lsm=` boot parameter)"
    )]
    NotEnabled,
    /// The kernel was built without it.
    #[error(
        "this kernel has no Landlock (Linux 5.13 or later with \
         CONFIG_SECURITY_LANDLOCK is needed)"
    )]
    NotBuilt,
    /// The probe failed some other way.
    #[error("the Landlock probe failed: {0}")]
    Probe(std::io::Error),
}

/// The Landlock ABI version this kernel offers, or why there is none. Probed once.
fn probe() -> &'static Result<i32, Unavailable> {
    static PROBE: OnceLock<Result<i32, Unavailable>> = OnceLock::new();
    PROBE.get_or_init(|| {
        // SAFETY: landlock_create_ruleset with a null attribute, size 0 and the VERSION flag
        // only returns the ABI version (or an error); it reads and creates nothing.
        let version = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                1u32, // LANDLOCK_CREATE_RULESET_VERSION
            )
        };
        if version >= 1 {
            Ok(i32::try_from(version).unwrap_or(i32::MAX))
        } else {
            let err = std::io::Error::last_os_error();
            Err(match err.raw_os_error() {
                Some(libc::EOPNOTSUPP) => Unavailable::NotEnabled,
                Some(libc::ENOSYS) => Unavailable::NotBuilt,
                _ => Unavailable::Probe(err),
            })
        }
    })
}

/// The kernel's Landlock ABI version, when it has Landlock.
pub fn abi() -> Option<i32> {
    probe().as_ref().ok().copied()
}

/// Why commands run unconfined on this machine, or `None` when Landlock is there.
pub fn unavailable() -> Option<&'static Unavailable> {
    probe().as_ref().err()
}

/// Starts `cmd` confined to `dir` (unconfined without Landlock: the run has said so
/// already). `cmd` must have no `pre_exec` work and, when its environment sets `PATH`, an
/// absolute program path, or the standard library falls back to `fork` (still correct,
/// only slower). Must be called within a tokio runtime.
pub async fn spawn(
    cmd: tokio::process::Command,
    dir: &Path,
) -> Result<tokio::process::Child, ConfineError> {
    spawn_reading(cmd, dir, &[]).await
}

/// [`spawn`], with `readable` (and what is beneath) readable and executable too: a hook
/// command reads the project its scripts live in, and writes only in its step directory.
pub async fn spawn_reading(
    mut cmd: tokio::process::Command,
    dir: &Path,
    readable: &[PathBuf],
) -> Result<tokio::process::Child, ConfineError> {
    let Some(ruleset) = prepare(
        &mut cmd,
        dir,
        &Reads {
            readable,
            ..Reads::TASK
        },
        &network::Plan::default(),
    )?
    else {
        return cmd.spawn().map_err(ConfineError::Start);
    };
    // Hooks and resource scripts keep the network (`any`), but never the serving
    // server's port.
    let layer = network::plan(&Network::Any)?.layer;
    spawn_restricted(cmd, ruleset, layer, dir).await
}

/// Starts `cmd` from a short-lived thread restricted by `ruleset` and `layer`.
async fn spawn_restricted(
    mut cmd: tokio::process::Command,
    ruleset: RulesetCreated,
    layer: Option<RulesetCreated>,
    dir: &Path,
) -> Result<tokio::process::Child, ConfineError> {
    let runtime = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let dir = dir.to_path_buf();
    std::thread::Builder::new()
        .name("treadle-confine".to_owned())
        .stack_size(SPAWNER_STACK)
        .spawn(move || {
            // The child's exit is watched by the runtime, so it is started inside it.
            let _inside = runtime.enter();
            let restricted = ruleset
                .restrict_self()
                .and_then(|_| layer.map(|l| l.restrict_self()).transpose());
            let started = match restricted {
                Ok(_) => cmd.spawn().map_err(ConfineError::Start),
                Err(source) => Err(ConfineError::Restrict { dir, source }),
            };
            // The receiver is gone only when the caller was dropped; the child then goes
            // with this result (`kill_on_drop`).
            let _ = tx.send(started);
            // The thread ends here, and its Landlock domain with it.
        })
        .map_err(ConfineError::Start)?;
    rx.await.unwrap_or_else(|_| {
        Err(ConfineError::Start(std::io::Error::other(
            "the thread starting the command ended without a word",
        )))
    })
}

/// Stack of the short-lived thread [`spawn`] starts a command from: it only builds the
/// argument and environment arrays (on the heap) and calls `posix_spawn`, whose child runs
/// on a stack of its own.
const SPAWNER_STACK: usize = 256 << 10;

/// Sets `cmd`'s temporary directory inside `dir` and builds its ruleset; `None` without
/// Landlock.
fn prepare(
    cmd: &mut tokio::process::Command,
    dir: &Path,
    reads: &Reads<'_>,
    net: &network::Plan,
) -> Result<Option<RulesetCreated>, ConfineError> {
    if abi().is_none() {
        return Ok(None);
    }
    let tmp = dir.join(TMP);
    std::fs::create_dir_all(&tmp).map_err(|source| ConfineError::Tmp {
        path: tmp.clone(),
        source,
    })?;
    // Absolute: the command runs in `dir`, where a relative path names another place.
    // A `TMPDIR` that does not exist sends SQLite (codex's state) on to `/var/tmp`, which
    // `access()` says is writable and Landlock then refuses.
    let tmp = std::path::absolute(&tmp).unwrap_or(tmp);
    cmd.env("TMPDIR", &tmp);
    rules(dir, reads, net, cmd.as_std().get_envs()).map(Some)
}

/// Makes `cmd` confined by `policy` when it starts, applied between fork and exec: for a
/// command started without a keeper (an MCP server); see [`for_keeper`] otherwise.
pub fn confine(cmd: &mut tokio::process::Command, policy: &Policy<'_>) -> Result<(), ConfineError> {
    let confinement = for_keeper(cmd, policy)?;
    let raw = confinement.raw();
    // SAFETY: the closure runs in the child between fork and exec; `apply` makes system
    // calls only (it allocates only to report an error). The rulesets' descriptors stay
    // open in the closure until `cmd` is dropped, and close at the command's exec.
    unsafe {
        cmd.pre_exec(move || {
            let _held = &confinement;
            command::apply(&raw)
        });
    }
    Ok(())
}

/// Prepares `cmd`'s confinement by `policy` (its `TMPDIR`, its rulesets, its namespaces),
/// which the command applies to itself when its keeper starts it
/// ([`crate::keeper::spawn`], [`command::apply`]). Without Landlock the file rules are not
/// applied (the run has said so already); the network's still are, by a namespace, or the
/// command is refused ([`network::NetworkError`]).
pub fn for_keeper(
    cmd: &mut tokio::process::Command,
    policy: &Policy<'_>,
) -> Result<Confinement, ConfineError> {
    let mut net = network::plan(policy.network)?;
    let ruleset = if policy.files {
        for path in policy.writable {
            cache_dir(path, cmd)?;
        }
        let reads = Reads {
            readable: policy.readable,
            ..Reads::TASK
        };
        prepare(cmd, policy.dir, &reads, &net)?
            .map(|r| writable(r, policy.writable))
            .transpose()
            .map_err(|source| ConfineError::Rules {
                dir: policy.dir.to_path_buf(),
                source,
            })?
    } else {
        network_only(&net).map_err(|source| ConfineError::Rules {
            dir: policy.dir.to_path_buf(),
            source,
        })?
    };
    // A confined command sees its own processes only: its keeper makes it the first of a
    // PID namespace, and it mounts that namespace's `/proc`, which its ruleset must then
    // let it read.
    let own_pids = policy.files;
    let proc_rule = own_pids && ruleset.is_some();
    let rulesets = [ruleset, net.layer.take()]
        .into_iter()
        .flatten()
        .filter_map(Option::<std::os::fd::OwnedFd>::from)
        .collect();
    Ok(Confinement {
        rulesets,
        own_pids,
        proc_rule,
        proc_access: pid::proc_access(),
        namespace: net.namespace,
    })
}

/// Between fork and exec: takes `CAP_SYS_PTRACE` out of every capability set of the
/// calling process (a no-op for a process without it). Without it, a command running as
/// root cannot read the `/proc/PID/environ` or `mem` of treadle or its keepers, which are
/// not dumpable (`crate::environ::take_keys`), nor of any process whose capabilities it
/// does not hold. System calls only.
pub(crate) fn drop_ptrace() {
    const CAP_SYS_PTRACE: u32 = 19;
    const VERSION_3: u32 = 0x2008_0522;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: prctl, capget and capset with a header and data on this stack, laid out as
    // the kernel's `__user_cap_header_struct` and two `__user_cap_data_struct`s.
    unsafe {
        libc::prctl(
            libc::PR_CAPBSET_DROP,
            CAP_SYS_PTRACE as libc::c_ulong,
            0,
            0,
            0,
        );
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        if libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()) == 0 {
            let bit = !(1u32 << CAP_SYS_PTRACE);
            data[0].effective &= bit;
            data[0].permitted &= bit;
            data[0].inheritable &= bit;
            libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr());
        }
    }
}

/// A ruleset handling TCP alone, for an unconfined command with a network grant; `None`
/// when the plan handles no TCP in the command's own ruleset.
fn network_only(net: &network::Plan) -> Result<Option<RulesetCreated>, RulesetError> {
    if net.ports.is_none() || abi().is_none() {
        return Ok(None);
    }
    let ruleset = network::handle(Ruleset::default(), net)?.create()?;
    network::allow(ruleset, net).map(Some)
}

/// Adds full access to each declared cache directory.
fn writable(ruleset: RulesetCreated, caches: &[PathBuf]) -> Result<RulesetCreated, RulesetError> {
    ruleset.add_rules(path_beneath_rules(caches, AccessFs::from_all(TARGET)))
}

/// Checks that a declared cache directory is not a credential place (nor holds one, nor
/// is `$HOME` or a parent of it) and makes it.
fn cache_dir(path: &Path, cmd: &tokio::process::Command) -> Result<(), ConfineError> {
    let home = cmd
        .as_std()
        .get_envs()
        .find(|(k, _)| *k == "HOME")
        .and_then(|(_, v)| v)
        .map(PathBuf::from);
    let refuse = |why: &str| ConfineError::Cache {
        path: path.to_path_buf(),
        why: why.to_owned(),
    };
    if let Some(home) = home.as_deref() {
        if home.starts_with(path) {
            return Err(refuse(
                "it is $HOME or holds it; name a directory inside it",
            ));
        }
        if toolchains::is_credential(path, home)
            || toolchains::CREDENTIALS
                .iter()
                .any(|c| home.join(c).starts_with(path))
        {
            return Err(refuse(
                "it is, or holds, a place of credentials (docs/security.md), which no step may write",
            ));
        }
    }
    std::fs::create_dir_all(path).map_err(|e| refuse(&e.to_string()))
}

#[cfg(test)]
mod tests;
