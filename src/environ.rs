//! The environment: API keys taken out of treadle's own at start-up, and the allow-listed
//! environment every command treadle starts (tasks, `run_shell`, MCP servers) gets.
//!
//! A key left in the process environment can be read back by anything the process starts
//! (inherited variables, `/proc/<treadle>/environ`). So the binary calls [`take_keys`]
//! first thing, before the async runtime starts any thread: every variable is moved out of
//! the original environment block (what `/proc/PID/environ` shows) and the block zeroed;
//! then each named key is copied into this module, its bytes overwritten, and the variable
//! removed. Treadle then reads keys only
//! through [`var`]. Commands start from [`command_env`]: the variables in [`ALLOWED`]
//! (and `LC_*`), never the rest of treadle's environment; a step's `env:` is added on top.

use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Variables a command inherits from treadle's environment (besides `LC_*`).
pub const ALLOWED: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "TMPDIR",
    // Where the toolchain managers live (locations, not secrets): their shims and proxies
    // find their toolchains through these, and `crate::confine::toolchains` grants the
    // same homes.
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "CARGO_HOME",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "NVM_DIR",
    "ASDF_DIR",
    "ASDF_DATA_DIR",
    "VOLTA_HOME",
    "RBENV_ROOT",
    "GOPATH",
    "GOROOT",
    "BUN_INSTALL",
    "DENO_INSTALL",
    "SDKMAN_DIR",
    "PNPM_HOME",
    "JAVA_HOME",
];

/// The keys taken out of the process environment by [`take_keys`].
static KEYS: OnceLock<BTreeMap<String, String>> = OnceLock::new();

/// Takes each named variable out of the process environment, keeping its value for
/// [`var`]. Later calls do nothing.
///
/// # Safety
///
/// No other thread may exist (changing the environment is unsound while another thread
/// reads it): call it at the top of `main`, before the async runtime is built.
pub unsafe fn take_keys<S: AsRef<str>>(names: impl IntoIterator<Item = S>) {
    // First, so that the block is wiped whole, the keys' entries with it.
    // SAFETY: single-threaded, per this function's contract.
    unsafe { wipe_block() };
    let mut keys = BTreeMap::new();
    for name in names {
        let name = name.as_ref();
        if name.is_empty() || name.contains(['=', '\0']) || keys.contains_key(name) {
            continue;
        }
        let Ok(value) = std::env::var(name) else {
            continue;
        };
        // SAFETY: single-threaded, per this function's contract.
        unsafe {
            wipe(name);
            std::env::remove_var(name);
        }
        keys.insert(name.to_owned(), value);
    }
    // Other processes of the same user may then neither read this one's memory nor its
    // /proc entries (environ, mem, maps), nor those of its keepers, which are forks of it
    // and inherit the flag; a root process may only with CAP_SYS_PTRACE, which the
    // commands treadle starts do not have (`crate::confine`). Always, not only when keys
    // were taken: a server's token, an http step's secret and the pipeline's variables
    // are in memory too.
    // SAFETY: prctl with PR_SET_DUMPABLE takes plain integers.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    // A second call keeps the first call's keys; there is nothing else to do with them.
    let _ = KEYS.set(keys);
}

/// Overwrites the value of `name` where the C environment holds it. For a variable treadle
/// was started with, that is the block the kernel shows as `/proc/PID/environ`; removing
/// the variable alone leaves those bytes in place.
///
/// # Safety
///
/// No other thread may read or change the environment meanwhile.
unsafe fn wipe(name: &str) {
    let Ok(c_name) = std::ffi::CString::new(name) else {
        return;
    };
    // SAFETY: `getenv` returns null or a pointer to the NUL-terminated value inside the
    // environment, which this process owns and may write; the length comes from `strlen`
    // on that same string, so every byte written is inside it.
    unsafe {
        let value = libc::getenv(c_name.as_ptr());
        if value.is_null() {
            return;
        }
        let len = libc::strlen(value);
        std::ptr::write_bytes(value, b'*', len);
    }
}

/// Moves every variable out of the environment block the process was started with (each
/// is set again, which makes the C library copy it to the heap) and zeroes that block.
/// `/proc/PID/environ` shows that block, of treadle and of its keepers (forks of it), and
/// some kernels let a process without `CAP_SYS_PTRACE` read it even from one that is not
/// dumpable (Linux 6.18 here did); the heap is only readable through `/proc/PID/mem`,
/// which they refuse. The variables keep their values for treadle itself.
///
/// # Safety
///
/// No other thread may read or change the environment meanwhile.
unsafe fn wipe_block() {
    // SAFETY: `environ` is the C library's NULL-terminated array of NUL-terminated
    // strings, which this process owns; it is read before any entry is replaced, and each
    // original string is zeroed only after the entry no longer points to it.
    unsafe {
        unsafe extern "C" {
            static mut environ: *mut *mut libc::c_char;
        }
        let mut original = Vec::new();
        let mut at = environ;
        while !at.is_null() && !(*at).is_null() {
            original.push((*at, libc::strlen(*at)));
            at = at.add(1);
        }
        for (name, value) in std::env::vars_os() {
            std::env::set_var(name, value);
        }
        let mut now = Vec::new();
        let mut at = environ;
        while !at.is_null() && !(*at).is_null() {
            now.push(*at);
            at = at.add(1);
        }
        for (ptr, len) in original {
            if !now.contains(&ptr) {
                std::ptr::write_bytes(ptr, 0, len);
            }
        }
    }
}

/// A variable's value: a key taken at start-up, or else the process environment.
pub fn var(name: &str) -> Option<String> {
    KEYS.get()
        .and_then(|keys| keys.get(name).cloned())
        .or_else(|| std::env::var(name).ok())
}

/// Whether a command may inherit `name` from treadle's environment.
pub fn allowed(name: &str) -> bool {
    ALLOWED.contains(&name) || name.starts_with("LC_")
}

/// The environment a command starts from: treadle's allowed variables, and those named
/// in `pass` (a step's `pass_env:`). A taken key is never among them: it is no longer in
/// the environment at all.
pub fn command_env(pass: &[String]) -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| allowed(k) || pass.contains(k))
        .filter(|(k, _)| !KEYS.get().is_some_and(|keys| keys.contains_key(k)))
        .collect()
}

/// Where `sh` is: the first on treadle's `PATH` (the `PATH` commands get), else
/// `/bin/sh`. Looked up once. A command whose environment sets `PATH` is started with
/// `posix_spawn` only when its program is a path (the standard library otherwise forks to
/// search the new `PATH`), so shells are started by this path, not by the name `sh`.
pub fn sh() -> &'static std::path::Path {
    static SH: OnceLock<std::path::PathBuf> = OnceLock::new();
    SH.get_or_init(|| {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join("sh"))
            .find(|p| p.is_file())
            .unwrap_or_else(|| "/bin/sh".into())
    })
}

/// Gives `cmd` the allowed environment, the `pass` variables and `extra` (later values
/// win), and nothing else.
pub fn set_command_env<'a>(
    cmd: &mut tokio::process::Command,
    pass: &[String],
    extra: impl IntoIterator<Item = (&'a String, &'a String)>,
) {
    cmd.env_clear().envs(command_env(pass)).envs(extra);
}

/// Looks a program up on PATH (what a command named without a `/` would run).
pub fn find_program(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_names_are_inherited() {
        for name in ["PATH", "HOME", "LANG", "LC_ALL", "TERM"] {
            assert!(allowed(name), "{name}");
        }
        for name in [
            "OPENAI_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "SSH_AUTH_SOCK",
            "LD_PRELOAD",
        ] {
            assert!(!allowed(name), "{name}");
        }
        let env = command_env(&[]);
        assert!(env.iter().all(|(k, _)| allowed(k)), "{env:?}");
    }

    #[tokio::test]
    async fn a_command_sees_the_allow_list_and_its_extra_variables_only() {
        let mut cmd = tokio::process::Command::new("env");
        let extra = [("STEP_VAR".to_owned(), "1".to_owned())];
        set_command_env(
            &mut cmd,
            &["CARGO".to_owned()],
            extra.iter().map(|(k, v)| (k, v)),
        );
        let out = cmd.output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let names: Vec<&str> = text.lines().filter_map(|l| l.split('=').next()).collect();
        // cargo sets CARGO for tests; passed by name, it is inherited too.
        assert!(
            names.contains(&"STEP_VAR") && names.contains(&"CARGO"),
            "{text}"
        );
        assert!(
            names
                .iter()
                .all(|n| allowed(n) || ["STEP_VAR", "CARGO"].contains(n)),
            "{text}"
        );
    }
}
