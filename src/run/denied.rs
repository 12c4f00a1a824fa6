//! A confined command that failed on a path its confinement keeps from it, explained: the
//! failure names the path and how to lift the confinement (`confined: false`).
//!
//! Landlock refuses with EACCES, which programs print as "Permission denied", and a shell
//! that cannot execute a program exits 126. Either, with a path in the message that lies
//! outside what a confined command may reach (`crate::confine`), is taken as confinement's
//! doing: a tool installed under `$HOME` (a pyenv or nvm shim), another step's directory,
//! the project itself.

use std::path::Path;

/// The hint for a confined command that failed with `code` and wrote `stderr`, when a
/// path it was denied lies outside its reach; `dir` is its step directory.
pub(crate) fn hint(code: i32, stderr: &str, dir: &Path) -> Option<String> {
    let path = denied_path(stderr, dir);
    match (path, code) {
        (Some(p), _) => Some(format!(
            "hint: `{p}` is outside the step's directory, and the command is confined to it \
             (Landlock refused it: Permission denied); give the step `confined: false` if it \
             must reach that path, or make it an input of the step"
        )),
        (None, 126) => Some(
            "hint: exit code 126 means a program could not be executed; the command is \
             confined to its step directory and the system's directories, so a program \
             elsewhere (under $HOME, say) is refused: give the step `confined: false`"
                .to_owned(),
        ),
        (None, _) => None,
    }
}

/// The last path outside the command's reach on a line of `stderr` saying "Permission
/// denied".
fn denied_path(stderr: &str, dir: &Path) -> Option<String> {
    stderr
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("permission denied"))
        .flat_map(|l| {
            l.split_whitespace()
                .map(|w| w.trim_matches(|c: char| ":'\"`,;()[]".contains(c)))
                .filter(|w| w.starts_with('/') && w.len() > 1)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .rfind(|p| outside(Path::new(p), dir))
}

/// Whether a confined command in `dir` cannot reach `path`.
fn outside(path: &Path, dir: &Path) -> bool {
    let reachable = path.starts_with(dir)
        || path.starts_with("/dev")
        || crate::confine::SYSTEM.iter().any(|s| path.starts_with(s));
    !reachable
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shim_under_home_is_named() {
        let stderr = "/home/ann/.pyenv/shims/python: line 21: /home/ann/.pyenv/libexec/pyenv: \
                      Permission denied\n";
        let h = hint(126, stderr, Path::new("/work/p/.treadle/runs/1/0-check")).unwrap();
        assert!(
            h.contains("`/home/ann/.pyenv/libexec/pyenv` is outside"),
            "{h}"
        );
        assert!(h.contains("`confined: false`"), "{h}");
    }

    #[test]
    fn python_style_messages_and_paths_inside_are_told_apart() {
        let dir = Path::new("/w/run/0-step");
        let stderr = "PermissionError: [Errno 13] Permission denied: '/srv/data/x.csv'";
        assert_eq!(denied_path(stderr, dir).as_deref(), Some("/srv/data/x.csv"));
        let inside = "sh: 1: /w/run/0-step/out/run.sh: Permission denied";
        assert_eq!(denied_path(inside, dir), None);
        assert_eq!(hint(1, inside, dir), None);
        assert_eq!(hint(1, "/etc/shadow: Permission denied", dir), None);
    }

    #[test]
    fn exit_126_without_a_path_still_points_at_confinement() {
        let h = hint(126, "cannot execute", Path::new("/w")).unwrap();
        assert!(
            h.contains("exit code 126") && h.contains("`confined: false`"),
            "{h}"
        );
    }
}
