//! The checks of `hooks:` (on `agents:` entries and `defaults:`): matchers, empty commands,
//! timeouts, that each command exists, and `validate`'s warning about hooks that let calls
//! through when they fail. The keys are in [`super::hook_def`].

use std::path::Path;

use treadle_hook::{HookEvent, Matcher};

use super::at::{At, Pos};
use super::diagnostic::{Finding, Problem};
use super::format::Pipeline;
use super::hook_def::{HookEntry, Hooks, OnHookErrorSpec};

/// Every `hooks:` of the file with the name of its owner.
fn all_hooks(pipeline: &Pipeline) -> Vec<(String, &Hooks)> {
    let defaults = pipeline
        .defaults
        .as_ref()
        .and_then(|d| d.hooks.as_ref())
        .map(|h| ("`defaults:`".to_owned(), h));
    let agents = pipeline.agents.iter().filter_map(|a| {
        a.hooks
            .as_ref()
            .map(|h| (format!("agent `{}`", a.name.value), h))
    });
    defaults.into_iter().chain(agents).collect()
}

/// The problems of every `hooks:`: matchers that are not regular expressions, matchers on
/// events that have no tool, empty commands, a zero timeout; and with `machine`, commands
/// that do not exist (a path relative to `project`, or a program on PATH).
pub fn check(pipeline: &Pipeline, project: &Path, machine: bool) -> Vec<Finding> {
    let mut out = Vec::new();
    for (owner, hooks) in all_hooks(pipeline) {
        for (event, entries) in hooks.by_event() {
            for entry in entries {
                entry_problems(&owner, event, &entry.value, &mut out);
                if machine {
                    command_exists(&owner, event, &entry.value.command, project, &mut out);
                }
            }
        }
    }
    out
}

fn entry_problems(owner: &str, event: HookEvent, entry: &HookEntry, out: &mut Vec<Finding>) {
    if let Some(matcher) = &entry.matcher {
        if let Err(e) = Matcher::new(matcher.value.clone()) {
            out.push((
                matcher.pos,
                Problem::InvalidValue,
                format!("{owner}: hook `{event}`: {e}"),
                "write a tool name, `*`, or a regular expression such as `write_file|edit_file`"
                    .to_owned(),
            ));
        } else if !event.is_tool_event() && !matches!(matcher.value.as_str(), "" | "*") {
            out.push((
                matcher.pos,
                Problem::InvalidValue,
                format!(
                    "{owner}: hook `{event}` has a `matcher:`, but `{event}` is not about a tool"
                ),
                "remove `matcher:`; only `pre_tool_use` and `post_tool_use` hooks match tools"
                    .to_owned(),
            ));
        }
    }
    if entry.command.value.trim().is_empty() {
        out.push((
            entry.command.pos,
            Problem::InvalidValue,
            format!("{owner}: hook `{event}` has an empty `command:`"),
            "write the command line to run, such as `./hooks/check.sh`".to_owned(),
        ));
    }
    if let Some(timeout) = &entry.timeout
        && timeout.value.0.is_zero()
    {
        out.push((
            timeout.pos,
            Problem::InvalidValue,
            format!("{owner}: hook `{event}` has a timeout of 0"),
            "give the hook time to answer, such as `timeout: 5s`".to_owned(),
        ));
    }
}

/// Shell words that start a command line without naming a program.
const SHELL_WORDS: &[&str] = &[
    "if", "for", "while", "until", "case", "{", "(", "!", "exec", "set", "cd", "echo", "printf",
    "test", "[", "true", "false", "read", "export", "exit", "command", "eval", ":",
];

/// The program a hook's command line starts (its first word), unless the line starts with
/// a shell keyword or builtin, or an assignment.
fn program_of(command: &str) -> Option<&str> {
    let first = command.split_whitespace().next()?;
    let first = first.trim_matches(|c| c == '"' || c == '\'');
    if SHELL_WORDS.contains(&first) || first.contains('=') || first.starts_with('$') {
        return None;
    }
    Some(first)
}

fn command_exists(
    owner: &str,
    event: HookEvent,
    command: &At<String>,
    project: &Path,
    out: &mut Vec<Finding>,
) {
    let Some(program) = program_of(&command.value) else {
        return;
    };
    let (found, hint) = if program.contains('/') {
        let path = project.join(program);
        (
            path.is_file(),
            format!(
                "create {} (paths are relative to the pipeline's directory) and make it executable",
                path.display()
            ),
        )
    } else {
        (
            crate::environ::find_program(program).is_some(),
            format!("install `{program}` or give its path"),
        )
    };
    if !found {
        out.push((
            command.pos,
            Problem::Machine,
            format!("{owner}: hook `{event}`: command `{program}` does not exist"),
            hint,
        ));
    }
}

/// `validate`'s warnings: every hook that lets calls through when it fails.
pub fn warnings(pipeline: &Pipeline) -> Vec<(Pos, String)> {
    let mut out = Vec::new();
    for (owner, hooks) in all_hooks(pipeline) {
        for (event, entries) in hooks.by_event() {
            for entry in entries {
                if let Some(on) = &entry.value.on_hook_error
                    && on.value == OnHookErrorSpec::Allow
                    && event.is_guard()
                {
                    out.push((
                        on.pos,
                        format!(
                            "{owner}: hook `{event}` `{}` has `on_hook_error: allow`: if it crashes, \
                             hangs or prints garbage, the call it guards runs anyway",
                            entry.value.command.value.trim()
                        ),
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::program_of;

    #[test]
    fn the_program_is_the_first_word_unless_the_shell_has_it() {
        assert_eq!(
            program_of("./hooks/no-push.sh --strict"),
            Some("./hooks/no-push.sh")
        );
        assert_eq!(program_of("jq -r .tool_input"), Some("jq"));
        assert_eq!(program_of("if grep -q x; then exit 2; fi"), None);
        assert_eq!(program_of("LC_ALL=C ./x"), None);
        assert_eq!(program_of("  "), None);
    }
}
