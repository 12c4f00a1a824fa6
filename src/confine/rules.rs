//! The Landlock ruleset of one confined command: what it may read and execute (the system,
//! the toolchains, its own places), its step directory whole, `/dev`'s devices, and the TCP
//! ports of its network plan. The paths it reads are opened once per process ([`base`]).

use std::path::{Path, PathBuf};

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreated, RulesetError,
    Scope,
};

use super::{ConfineError, SYSTEM, TARGET, base, network, toolchains};

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

/// The ruleset for a command in `dir` whose environment sets `envs`: its own (the step
/// directory, the network plan's ports) with the rules it shares with other commands of
/// the same environment ([`base`]), whose paths are opened once.
pub(super) fn rules<'a>(
    dir: &Path,
    reads: &Reads<'_>,
    net: &network::Plan,
    envs: impl Iterator<Item = (&'a std::ffi::OsStr, Option<&'a std::ffi::OsStr>)>,
) -> Result<RulesetCreated, ConfineError> {
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
    let mut wanted: base::Wanted = (reads.system.iter().map(PathBuf::from))
        .chain(toolchains)
        .map(|p| (p, read))
        .collect();
    wanted.push((PathBuf::from("/dev"), devices));
    let shared = base::base(wanted);
    // A caller's own places (a hook's project, a CLI's install) are opened for each command:
    // they may be deleted and made again while a server runs, and a kept descriptor would
    // still name the old directory.
    let own = base::open(
        &reads
            .readable
            .iter()
            .map(|p| (p.clone(), read))
            .collect::<Vec<_>>(),
    );
    let ruleset = Ruleset::default()
        // Best effort: an older kernel enforces what it knows (reported by the status).
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(rules_error(dir))?
        .scope(Scope::from_all(TARGET))
        .map_err(rules_error(dir))?;
    let ruleset = network::handle(ruleset, net)
        .and_then(|r| r.create())
        .and_then(|r| network::allow(r, net))
        .map_err(rules_error(dir))?;
    base::add_to(&ruleset, [&*shared, &own], dir).map_err(|source| ConfineError::Rule {
        dir: dir.to_path_buf(),
        source,
    })?;
    Ok(ruleset)
}

fn rules_error(dir: &Path) -> impl Fn(RulesetError) -> ConfineError + '_ {
    move |source| ConfineError::Rules {
        dir: dir.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller's own place (a hook's project) deleted and made again between two commands
    /// is read by the second: its rule is opened for each command, not kept from the first.
    #[test]
    fn a_readable_place_made_again_is_read_by_the_next_command() {
        if super::super::abi().is_none() {
            crate::console::tell!("SKIP: no Landlock");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let (project, step) = (root.path().join("project"), root.path().join("step"));
        std::fs::create_dir(&step).unwrap();
        let confined_read = |text: &str| {
            std::fs::create_dir(&project).unwrap();
            std::fs::write(project.join("f"), text).unwrap();
            let (step, project) = (step.clone(), project.clone());
            std::thread::spawn(move || {
                let readable = [project.clone()];
                let reads = Reads {
                    system: &[],
                    toolchains: false,
                    readable: &readable,
                };
                let plan = network::Plan::default();
                let ruleset = rules(&step, &reads, &plan, std::iter::empty()).unwrap();
                ruleset.restrict_self().unwrap();
                std::fs::read_to_string(project.join("f"))
            })
            .join()
            .unwrap()
        };
        assert_eq!(confined_read("one").unwrap(), "one");
        std::fs::remove_dir_all(&project).unwrap();
        assert_eq!(confined_read("two").unwrap(), "two");
    }
}
