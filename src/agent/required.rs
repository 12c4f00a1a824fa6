//! What a step owes before it may end: the custom tools with `required: true` (a call that
//! succeeded, exit code 0) and the files of its `assert: files:` (there and not empty).
//!
//! When the model stops short, it is told, by name, everything it still owes, and the
//! conversation goes on: up to [`REMINDERS`] times for tools alone, [`FILE_REMINDERS`] times
//! while a file is owed (steps gives five chances; they do not reset). Still short after
//! that, the step fails naming what is missing. A reminder owed a tool has its first model
//! call forced to it through `tool_choice` (see `turns.rs`), like the verdict's; a file
//! has no tool to force, so its reminder is text. The step's turn limit stays the backstop.
//! The verdict tool refuses a decision while a file is owed (see `verdict.rs`): the files
//! are the work the decision reports on.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::custom_tool::Tally;

/// How many times a model that stops short of its required tools is told which it owes.
pub(crate) const REMINDERS: u32 = 3;

/// How many times a model that stops without a file of `assert: files:` is told (steps'
/// five chances).
pub(crate) const FILE_REMINDERS: u32 = 5;

/// What a step owes: its required tools, with their calls counted, and its files.
#[derive(Clone, Default)]
pub(crate) struct Required {
    tools: Vec<(String, Arc<Tally>)>,
    files: Vec<String>,
    /// Where the files are looked for (the step directory).
    dir: PathBuf,
}

impl Required {
    /// Adds a required tool.
    pub(crate) fn push(&mut self, name: String, tally: Arc<Tally>) {
        self.tools.push((name, tally));
    }

    /// Adds the files of `assert: files:`, relative to the step directory `dir`.
    pub(crate) fn with_files(mut self, dir: &Path, files: &[String]) -> Self {
        self.dir = dir.to_path_buf();
        self.files = files.to_vec();
        self
    }

    /// The required tools no call of which has succeeded yet.
    pub(crate) fn missing(&self) -> Vec<String> {
        self.tools
            .iter()
            .filter(|(_, tally)| tally.successes() == 0)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The owed files that are not there, or are empty.
    pub(crate) fn missing_files(&self) -> Vec<String> {
        missing_files(&self.dir, &self.files)
    }

    /// Everything still owed.
    pub(crate) fn owed(&self) -> Owed {
        Owed {
            tools: self.missing(),
            files: self.missing_files(),
        }
    }
}

/// The files of `files` (relative to `dir`) that do not exist or are empty: an empty file
/// is a missing one, as for the assert (a model may `touch` the path to the letter).
pub(crate) fn missing_files(dir: &Path, files: &[String]) -> Vec<String> {
    files
        .iter()
        .filter(|f| !std::fs::metadata(dir.join(f)).is_ok_and(|m| m.is_file() && m.len() > 0))
        .cloned()
        .collect()
}

/// `file`, relative to the step directory, as seen from the agent's `dir:` `sub` (both
/// relative, `/`-separated): `sub/x` is `x`, anything else climbs out with `..`.
pub(crate) fn relative_to_dir(sub: &str, file: &str) -> String {
    let parts = |p: &'_ str| -> Vec<String> {
        p.split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .map(str::to_owned)
            .collect()
    };
    let (sub, file) = (parts(sub), parts(file));
    let common = sub.iter().zip(&file).take_while(|(a, b)| a == b).count();
    let mut out = vec!["..".to_owned(); sub.len() - common];
    out.extend_from_slice(&file[common..]);
    out.join("/")
}

/// What a step still owes at one moment.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Owed {
    pub tools: Vec<String>,
    pub files: Vec<String>,
}

impl Owed {
    pub(crate) fn is_empty(&self) -> bool {
        self.tools.is_empty() && self.files.is_empty()
    }

    /// How many reminders a step owing this may be given in all.
    pub(crate) fn reminders(&self) -> u32 {
        if self.files.is_empty() {
            REMINDERS
        } else {
            FILE_REMINDERS
        }
    }

    /// What the model is told when it stops while owing this: every item at once, since
    /// told one at a time it would spend a turn on each.
    pub(crate) fn reminder(&self) -> String {
        let mut parts = vec!["You are trying to finish, but this step is not done.".to_owned()];
        if !self.files.is_empty() {
            parts.push(files_reminder(&self.files));
        }
        if !self.tools.is_empty() {
            parts.push(format!(
                "It cannot end until a call of {} has succeeded (exit code 0): call {} now with the arguments it needs.",
                list(&self.tools),
                if self.tools.len() == 1 { "it" } else { "each" }
            ));
        }
        parts.push("Then finish.".to_owned());
        parts.join(" ")
    }

    /// The transcript's line for the reminder.
    pub(crate) fn notice(&self) -> String {
        let mut owed = Vec::new();
        if !self.files.is_empty() {
            owed.push(format!("file(s) {} are missing", list(&self.files)));
        }
        if !self.tools.is_empty() {
            owed.push(format!(
                "required tool(s) {} have not succeeded",
                list(&self.tools)
            ));
        }
        format!("{}; asking again", owed.join(" and "))
    }
}

/// The sentence naming the owed files that are missing.
pub(crate) fn files_reminder(files: &[String]) -> String {
    format!(
        "This step's `assert: files:` lists files it must leave behind, and {} {} not there (or empty). A later step reads these files; your final message reaches nobody. Write {} now with your tools.",
        list(files),
        if files.len() == 1 { "is" } else { "are" },
        if files.len() == 1 { "it" } else { "them" }
    )
}

/// Why a step that gave up owing `files` failed: the files, whichever limit stopped it.
pub(crate) fn files_failure(files: &[String]) -> String {
    format!(
        "the step ended without {} that its `assert: files:` demands",
        list(files)
    )
}

/// `a`, `a` and `b`, `a`, `b` and `c`, each in backticks.
pub(crate) fn list(names: &[String]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owed_files_are_named_from_the_agents_dir() {
        assert_eq!(relative_to_dir("repo", "repo/out/x.md"), "out/x.md");
        assert_eq!(relative_to_dir("repo/cmd/", "repo/out.md"), "../out.md");
        assert_eq!(relative_to_dir("./repo", "report/x.md"), "../report/x.md");
    }

    #[test]
    fn reminders_name_every_missing_tool_and_file() -> Result<(), std::io::Error> {
        let tools = vec!["post_review".to_owned(), "tag".to_owned()];
        let only_tool = Owed {
            tools: tools[..1].to_vec(),
            files: Vec::new(),
        };
        assert!(
            only_tool
                .reminder()
                .contains("a call of `post_review` has succeeded")
        );
        assert_eq!(only_tool.reminders(), REMINDERS);
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("out"))?;
        std::fs::write(dir.path().join("out/empty.md"), "")?;
        std::fs::write(dir.path().join("out/full.md"), "x")?;
        let files = ["out/empty.md", "out/full.md", "out/absent.md"].map(str::to_owned);
        let mut required = Required::default().with_files(dir.path(), &files);
        required.push("post_review".into(), Arc::default());
        required.push("tag".into(), Arc::default());
        let owed = required.owed();
        assert_eq!(owed.tools, tools);
        // An empty file is owed like an absent one.
        assert_eq!(owed.files, ["out/empty.md", "out/absent.md"]);
        assert_eq!(owed.reminders(), FILE_REMINDERS);
        let text = owed.reminder();
        assert!(
            text.contains("`out/empty.md` and `out/absent.md` are not there"),
            "{text}"
        );
        assert!(text.contains("`post_review` and `tag`"), "{text}");
        assert!(owed.notice().starts_with("file(s) `out/empty.md`"));
        Ok(())
    }
}
