//! The Landlock ruleset of one confined command: what it may read and execute (the system,
//! the toolchains, its own places), its step directory whole, `/dev`'s devices, and the TCP
//! ports of its network plan.

use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, RulesetError, Scope, path_beneath_rules,
};

use super::{SYSTEM, TARGET, network, toolchains};

/// What a command may read and execute besides its step directory.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reads<'a> {
    /// System directories (and files).
    pub system: &'a [&'a str],
    /// Whether the directories on its `PATH` and the toolchain homes are readable too.
    pub toolchains: bool,
    /// Further places.
    pub readable: &'a [PathBuf],
}

impl Reads<'_> {
    /// A task's, `run_shell`'s or a hook's: the system and the toolchains.
    pub const TASK: Reads<'static> = Reads {
        system: SYSTEM,
        toolchains: true,
        readable: &[],
    };
}

/// The ruleset for a command in `dir` whose environment sets `envs`.
pub(super) fn rules<'a>(
    dir: &Path,
    reads: &Reads<'_>,
    net: &network::Plan,
    envs: impl Iterator<Item = (&'a std::ffi::OsStr, Option<&'a std::ffi::OsStr>)>,
) -> Result<RulesetCreated, RulesetError> {
    let read = AccessFs::from_read(TARGET);
    let all = AccessFs::from_all(TARGET);
    let devices = AccessFs::from_file(TARGET) | AccessFs::ReadDir;
    let envs: Vec<(&std::ffi::OsStr, &std::ffi::OsStr)> =
        envs.filter_map(|(k, v)| Some((k, v?))).collect();
    let var = |name: &str| {
        envs.iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| PathBuf::from(v))
    };
    let path_dirs: Vec<PathBuf> = var("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .filter(|p| p.is_absolute())
        .collect();
    let toolchains = match reads.toolchains {
        true => toolchains::readable(var("HOME").as_deref(), &path_dirs, var),
        false => Vec::new(),
    };
    let ruleset = Ruleset::default()
        // Best effort: an older kernel enforces what it knows (reported by the status).
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)?
        .scope(Scope::from_all(TARGET))?;
    let ruleset = network::handle(ruleset, net)?
        .create()?
        .add_rules(path_beneath_rules(reads.system, read))?
        .add_rules(path_beneath_rules(&toolchains, read))?
        .add_rules(path_beneath_rules(reads.readable, read))?
        .add_rules(path_beneath_rules(["/dev"], devices))?
        .add_rules(path_beneath_rules([dir], all))?;
    network::allow(ruleset, net)
}
