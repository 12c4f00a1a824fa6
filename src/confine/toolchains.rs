//! The user's toolchains a confined command may read and execute, and the places holding
//! credentials it may never reach, whatever rule would include them.
//!
//! The rule (docs/security.md, "Toolchains"): besides every directory on the command's
//! `PATH`, a *toolchain home* is readable: for a `PATH` entry under `$HOME`, the directory
//! right below `$HOME` it lies in (`~/.cargo/bin` gives `~/.cargo`, `~/.pyenv/shims`
//! `~/.pyenv`, `~/.nvm/versions/node/v22/bin` `~/.nvm`), and the homes the managers name
//! by their variables or defaults ([`MANAGER_HOMES`]). A home that holds a credential place
//! ([`CREDENTIALS`]; `~/.cargo/credentials.toml`, `~/.local/share/keyrings`) is granted entry
//! by entry instead, the credential places left out; `$HOME` itself, `/` and any parent of
//! `$HOME` are never granted. Landlock cannot deny beneath a path it allows, so leaving out
//! is the only way to deny.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// Places under `$HOME` that hold credentials or treadle's own state: never readable by a
/// confined command, never writable as a cache.
pub const CREDENTIALS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".config/hub",
    ".config/containers",
    ".config/op",
    ".config/git/credentials",
    ".docker",
    ".kube",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".local/share/keyrings",
    ".password-store",
    ".vault-token",
    ".terraform.d",
    ".pki",
    ".treadle",
];

/// Toolchain managers' homes: the variable that moves each, and its default under `$HOME`.
pub const MANAGER_HOMES: &[(&str, &str)] = &[
    ("RUSTUP_HOME", ".rustup"),
    ("CARGO_HOME", ".cargo"),
    ("PYENV_ROOT", ".pyenv"),
    ("NVM_DIR", ".nvm"),
    ("ASDF_DATA_DIR", ".asdf"),
    ("VOLTA_HOME", ".volta"),
    ("RBENV_ROOT", ".rbenv"),
    ("GOPATH", "go"),
    ("BUN_INSTALL", ".bun"),
    ("DENO_INSTALL", ".deno"),
    ("SDKMAN_DIR", ".sdkman"),
    ("PNPM_HOME", ".local/share/pnpm"),
    ("", ".local"),
];

/// Whether `path` is, or lies inside, a credential place of `home`.
pub fn is_credential(path: &Path, home: &Path) -> bool {
    CREDENTIALS.iter().any(|c| path.starts_with(home.join(c)))
}

/// Whether a credential place of `home` lies strictly inside `path`.
fn holds_credential(path: &Path, home: &Path) -> bool {
    CREDENTIALS
        .iter()
        .any(|c| home.join(c).starts_with(path) && home.join(c) != path)
}

/// The paths a command whose environment has `home` and `path_dirs` may read and execute
/// beyond the system's: its `PATH` directories and the toolchain homes, credential places
/// left out; `var` reads the command's environment (the managers' variables). Computed
/// once per environment in a process: a task's rules are built for every command, the
/// directory listings this needs only once.
pub fn readable(
    home: Option<&Path>,
    path_dirs: &[PathBuf],
    var: impl Fn(&str) -> Option<PathBuf>,
) -> Vec<PathBuf> {
    type Key = (Option<PathBuf>, Vec<PathBuf>, Vec<Option<PathBuf>>);
    static SEEN: Mutex<Vec<(Key, Vec<PathBuf>)>> = Mutex::new(Vec::new());
    let named: Vec<Option<PathBuf>> = MANAGER_HOMES
        .iter()
        .map(|(v, _)| (!v.is_empty()).then(|| var(v)).flatten())
        .map(|p| p.filter(|p| p.is_absolute()))
        .collect();
    let key = (home.map(Path::to_path_buf), path_dirs.to_vec(), named);
    let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, found)) = seen.iter().find(|(k, _)| *k == key) {
        return found.clone();
    }
    let found = compute(home, path_dirs, &key.2);
    // A handful of distinct environments per process; a bound keeps a pathological one
    // (a `PATH` per step) from growing it for ever.
    if seen.len() >= 64 {
        seen.remove(0);
    }
    seen.push((key, found.clone()));
    found
}

fn compute(home: Option<&Path>, path_dirs: &[PathBuf], named: &[Option<PathBuf>]) -> Vec<PathBuf> {
    let Some(home) = home.filter(|h| h.is_absolute() && *h != Path::new("/")) else {
        // No home to guard: PATH directories only, never `/`.
        return path_dirs
            .iter()
            .filter(|d| *d != Path::new("/"))
            .cloned()
            .collect();
    };
    let mut roots: Vec<PathBuf> = Vec::new();
    for dir in path_dirs {
        if home.starts_with(dir) {
            // `$HOME`, `/` or a parent of `$HOME` on PATH: granting it would grant every
            // credential place.
            continue;
        }
        match dir
            .strip_prefix(home)
            .ok()
            .and_then(|r| r.components().next())
        {
            Some(first) => roots.push(home.join(first)),
            None => roots.push(dir.clone()),
        }
    }
    for ((_, default), named) in MANAGER_HOMES.iter().zip(named) {
        roots.push(named.clone().unwrap_or_else(|| home.join(default)));
    }
    let mut out = Vec::new();
    for root in roots {
        if home.starts_with(&root) {
            continue;
        }
        grant(&root, home, &mut out, 3);
    }
    out.sort();
    out.dedup();
    out
}

/// Adds `path` to `out`, or, when a credential place lies inside it, each of its entries
/// that is not one (down to `depth` levels).
fn grant(path: &Path, home: &Path, out: &mut Vec<PathBuf>, depth: u32) {
    if is_credential(path, home) || !path.exists() {
        return;
    }
    if !holds_credential(path, home) {
        out.push(path.to_path_buf());
        return;
    }
    let Some(entries) = (depth > 0).then(|| std::fs::read_dir(path).ok()).flatten() else {
        return;
    };
    for entry in entries.flatten() {
        grant(&entry.path(), home, out, depth - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homes_of_path_entries_are_granted_and_credentials_left_out() {
        let h = tempfile::tempdir().unwrap();
        let home = h.path();
        for d in [
            ".cargo/bin",
            ".cargo/registry",
            ".pyenv/shims",
            ".ssh",
            ".local/bin",
            ".local/share/keyrings",
            ".local/share/pipx",
            "bin",
        ] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::write(home.join(".cargo/credentials.toml"), "token").unwrap();
        let path = [
            home.join(".cargo/bin"),
            home.join(".pyenv/shims"),
            home.to_path_buf(),
            PathBuf::from("/"),
            home.join("bin"),
        ];
        let got = compute(Some(home), &path, &vec![None; MANAGER_HOMES.len()]);
        assert!(got.contains(&home.join(".pyenv")), "{got:?}");
        assert!(got.contains(&home.join(".cargo/bin")), "{got:?}");
        assert!(got.contains(&home.join(".cargo/registry")), "{got:?}");
        assert!(got.contains(&home.join(".local/bin")), "{got:?}");
        assert!(got.contains(&home.join(".local/share/pipx")), "{got:?}");
        assert!(got.contains(&home.join("bin")), "{got:?}");
        for denied in [
            home.to_path_buf(),
            PathBuf::from("/"),
            home.join(".cargo"),
            home.join(".cargo/credentials.toml"),
            home.join(".ssh"),
            home.join(".local"),
            home.join(".local/share/keyrings"),
        ] {
            assert!(!got.contains(&denied), "{denied:?} in {got:?}");
        }
        assert!(got.iter().all(|p| !is_credential(p, home)), "{got:?}");
    }
}
