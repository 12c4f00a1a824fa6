//! The policy of a CLI agent (`@claude`, `@codex`; docs/security.md, "CLI agents"): narrower
//! than a task's in what it reads, as wide as its step's `network:` plus treadle's loopback
//! ports for it.
//!
//! A task reads the system's whole configuration (`/etc`) and the user's toolchains; a
//! CLI agent is a program of its own plus the tools its grant names, so it reads the
//! system's programs and libraries, the few files of `/etc` a program needs to start
//! (the loader's cache, time zone, certificates, name resolution), its own install and
//! `node`'s directory, and does anything in its step directory (where its scratch `HOME`
//! is). The toolchains come in only with its shell (`run_shell` granted): then its Bash
//! is a task's shell. `/etc/passwd`, `/etc/shadow` and the rest of `/etc` stay out.

use std::path::{Path, PathBuf};

use super::{ConfineError, Reads, network, prepare};
use crate::confine::grant::Network;

/// System places a CLI agent reads and executes (those that exist): programs, libraries,
/// the kernel's views, and the files of `/etc` a program reads to start, none of them
/// about the machine's users or secrets.
pub const SYSTEM: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/nix",
    "/proc",
    "/sys",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
];

/// What a CLI agent may reach.
#[derive(Debug, Clone, Copy)]
pub struct CliPolicy<'a> {
    /// Its step directory, where it may do anything.
    pub dir: &'a Path,
    /// Its install (the program's directory and its package's).
    pub install: &'a [PathBuf],
    /// Whether its shell is granted: then it reads the toolchains, as a task does.
    pub shell: bool,
    /// The step's `network:`.
    pub network: &'a Network,
    /// treadle's loopback ports it must reach whatever its `network:` (its model proxy,
    /// its MCP bridge).
    pub treadle_ports: &'a [u16],
}

/// Starts the CLI `cmd` confined by `policy` (unconfined without Landlock: the run has
/// said so already). As [`super::spawn`], `cmd` has no `pre_exec` work.
pub async fn spawn(
    mut cmd: tokio::process::Command,
    policy: &CliPolicy<'_>,
) -> Result<tokio::process::Child, ConfineError> {
    if super::abi().is_none() {
        return cmd.spawn().map_err(ConfineError::Start);
    }
    let mut net = network::plan_beside(policy.network, policy.treadle_ports)?;
    let mut readable = policy.install.to_vec();
    readable.extend(node_dirs(&cmd));
    let reads = Reads {
        system: SYSTEM,
        toolchains: policy.shell,
        readable: &readable,
    };
    let Some(ruleset) = prepare(&mut cmd, policy.dir, &reads, &net)? else {
        return cmd.spawn().map_err(ConfineError::Start);
    };
    let layer = net.layer.take();
    super::spawn_restricted(cmd, ruleset, layer, policy.dir).await
}

/// The directory of the `node` found on `cmd`'s `PATH`, and of the file it links to: an
/// npm-installed CLI may be a node script.
fn node_dirs(cmd: &tokio::process::Command) -> Vec<PathBuf> {
    let path = cmd
        .as_std()
        .get_envs()
        .find(|(k, _)| *k == "PATH")
        .and_then(|(_, v)| v)
        .map(std::ffi::OsStr::to_owned)
        .unwrap_or_default();
    let Some(node) = std::env::split_paths(&path)
        .filter(|d| d.is_absolute())
        .map(|d| d.join("node"))
        .find(|n| n.is_file())
    else {
        return Vec::new();
    };
    let real = std::fs::canonicalize(&node).ok();
    [Some(node), real]
        .into_iter()
        .flatten()
        .filter_map(|n| n.parent().map(Path::to_path_buf))
        .collect()
}
