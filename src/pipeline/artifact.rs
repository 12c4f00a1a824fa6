//! What an artifact name may be (`inputs:`, `outputs:`, a `get:`'s artifact): one rule,
//! used by the checks before a run and again by the workspace before it touches a path.
//!
//! An artifact is a directory directly inside a step's directory, so its name is one
//! path component: it cannot be absolute, climb with `..`, nest (`build/out`) or be hidden.

use std::path::Path;

use super::at::At;
use super::diagnostic::{Diagnostic, Problem};
use super::format::Step;

/// The longest artifact name.
pub const MAX_LEN: usize = 64;

/// Why `name` is not an artifact name; `None` when it is one.
pub fn name_problem(name: &str) -> Option<&'static str> {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return Some("it is empty");
    };
    if name.len() > MAX_LEN {
        return Some("it is longer than 64 characters");
    }
    if name.contains('/') || name.contains('\\') {
        return Some(
            "it is a path, not one name (an artifact is a directory directly in the step's directory)",
        );
    }
    if first == '.' {
        return Some(
            "it starts with `.` (`..` would leave the step's directory; hidden names are not allowed)",
        );
    }
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if !plain(first) || !chars.all(plain) {
        return Some("it has a character other than letters, digits, `-`, `_` and `.`");
    }
    None
}

/// A located error for each artifact name of `step` that breaks the rule.
pub fn check_step(file: &Path, step: &Step) -> Vec<Diagnostic> {
    let named = step
        .inputs
        .iter()
        .filter(|n| n.value != super::resource_type::ALL_INPUTS)
        .map(|n| ("input", n));
    let named = named.chain(step.outputs.iter().map(|n| ("output", n)));
    let got = match &step.kind {
        super::step::StepKind::Get(super::leaf_step::GetStep { name, .. }) => Some(name),
        _ => None,
    };
    let named = named.chain(got.map(|n| ("get", n)));
    named
        .filter_map(|(what, n): (&str, &At<String>)| {
            let why = name_problem(&n.value)?;
            Some(Diagnostic::new(
                file,
                n.pos,
                Problem::InvalidValue,
                format!("{what} `{}` is not an artifact name: {why}", n.value),
                "name it with letters, digits, `-`, `_` and `.` only, e.g. `build-out`; the step finds it as a directory of that name in its working directory",
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::name_problem;

    #[test]
    fn plain_names_pass_and_paths_do_not() {
        for ok in ["dist", "build-out", "site_v2", "report.json", "A1"] {
            assert_eq!(name_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "/srv/site",
            "build/out",
            ".git",
            "a\\b",
            "a b",
            "é",
            "a\0b",
        ] {
            assert!(name_problem(bad).is_some(), "{bad:?}");
        }
        assert!(name_problem(&"a".repeat(65)).is_some());
    }
}
