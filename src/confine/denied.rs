//! A confined command that failed in a way its confinement may have caused, explained: the
//! failure names what was refused and how to grant it.
//!
//! Landlock refuses a file, a program or a TCP connection with EACCES, which programs
//! print as "Permission denied" (or, for some, "Operation not permitted"), and a shell that
//! cannot execute a program exits 126. The kernel does not tell treadle which refusal was
//! Landlock's, so the rule is: a confined command that exited 126, or printed one of those
//! words, gets the hint, unless every path named on such a line lies inside what it may
//! reach (the system's files refused by their permissions, not by confinement). Whatever
//! else the program printed (pyenv's shim prints its own path, a Python traceback a
//! quoted one, curl none) does not matter.

use std::path::Path;

/// The hint for a confined command that failed with `code` and wrote `stderr`; `dir` is
/// its step directory.
pub(crate) fn hint(code: i32, stderr: &str, dir: &Path) -> Option<String> {
    let refused: Vec<&str> = stderr.lines().filter(|l| refusal(l)).collect();
    if let Some(p) = refused.iter().rev().find_map(|l| outside_path(l, dir)) {
        return Some(format!(
            "hint: `{p}` is outside what the step may reach, and its commands are confined \
             (Landlock refused it: Permission denied); make it an input of the step, declare \
             it in `caches:` if it is a cache, or give the step `confined: false`"
        ));
    }
    if refused
        .iter()
        .any(|l| l.to_ascii_lowercase().contains("connect"))
    {
        return Some(
            "hint: the step's commands connect nowhere unless `network:` grants it \
             (default `none`); grant `network: [host:port]`, `loopback` or `any`"
                .to_owned(),
        );
    }
    let all_inside = !refused.is_empty()
        && refused.iter().all(|l| paths(l).next().is_some())
        && refused.iter().all(|l| outside_path(l, dir).is_none());
    if code == 126 || (!refused.is_empty() && !all_inside) {
        return Some(
            "hint: the command is confined, and a refusal (\"Permission denied\", exit 126) \
             usually means it reached outside what a step may: files outside its directory, \
             the system's and the toolchains' (read-only), or the network (none unless \
             `network:` grants it); see docs/security.md, or give the step `confined: false`"
                .to_owned(),
        );
    }
    None
}

/// Whether a line of output says something was refused.
fn refusal(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    l.contains("permission denied") || l.contains("operation not permitted")
}

/// The absolute paths named on a line.
fn paths(line: &str) -> impl Iterator<Item = &str> {
    line.split_whitespace()
        .map(|w| w.trim_matches(|c: char| ":'\"`,;()[]".contains(c)))
        .filter(|w| w.starts_with('/') && w.len() > 1)
}

/// The last path on `line` outside the command's reach.
fn outside_path<'a>(line: &'a str, dir: &Path) -> Option<&'a str> {
    paths(line).filter(|p| outside(Path::new(p), dir)).last()
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
        assert!(hint(1, stderr, dir).unwrap().contains("`/srv/data/x.csv`"));
        let inside = "sh: 1: /w/run/0-step/out/run.sh: Permission denied";
        assert_eq!(hint(1, inside, dir), None);
        assert_eq!(hint(1, "/etc/shadow: Permission denied", dir), None);
    }

    #[test]
    fn refusals_without_a_path_still_point_at_confinement() {
        let h = hint(126, "cannot execute", Path::new("/w")).unwrap();
        assert!(
            h.contains("exit 126") && h.contains("`confined: false`"),
            "{h}"
        );
        let h = hint(
            1,
            "PermissionError: [Errno 13] Permission denied",
            Path::new("/w"),
        )
        .unwrap();
        assert!(h.contains("network"), "{h}");
        let curl =
            "curl: (7) Failed to connect to 127.0.0.1 port 8080 after 0 ms: Permission denied";
        let h = hint(7, curl, Path::new("/w")).unwrap();
        assert!(h.contains("`network:`"), "{h}");
        assert_eq!(hint(1, "no such file", Path::new("/w")), None);
    }
}
