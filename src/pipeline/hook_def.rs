//! `hooks:` on an `agents:` entry and on `defaults:`: command hooks by event (docs/hooks.md),
//! their checks (keys, matchers, timeouts, that each command exists), and the
//! [`treadle_hook::CommandSpec`]s they become.
//!
//! Decisions: the hooks of `defaults:` run for every agent, before the agent's own (the
//! wider scope begins first and finishes last, rule 5); an agent cannot drop a default
//! hook, because a team's policy hook that any agent could switch off would guard nothing.

use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;
use treadle_hook::{CommandSpec, DEFAULT_TIMEOUT, HookEvent, Matcher, OnHookError};

use super::at::{At, Pos};
use super::check_flow::Finding;
use super::diagnostic::Problem;
use super::duration::DurationSpec;
use super::format::Pipeline;

/// `hooks:`: the commands run on each event, in the order written.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Hooks {
    /// Before a tool call is allowed: a guard (exit 2 or a `deny` blocks it, a failure denies it).
    #[serde(default)]
    pub pre_tool_use: Vec<At<HookEntry>>,
    /// After a tool ran, with its result.
    #[serde(default)]
    pub post_tool_use: Vec<At<HookEntry>>,
    /// Before the step's prompt goes to the model: a guard.
    #[serde(default)]
    pub user_prompt_submit: Vec<At<HookEntry>>,
    /// When the agent has answered.
    #[serde(default)]
    pub stop: Vec<At<HookEntry>>,
    /// When the agent step's session starts.
    #[serde(default)]
    pub session_start: Vec<At<HookEntry>>,
    /// When the agent step's session ends.
    #[serde(default)]
    pub session_end: Vec<At<HookEntry>>,
    /// Before older turns of the conversation are summarised.
    #[serde(default)]
    pub pre_compact: Vec<At<HookEntry>>,
}

/// One hook.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookEntry {
    /// For `pre_tool_use` and `post_tool_use`: a tool name, a regular expression matching
    /// whole tool names (`write_file|edit_file`), or `*` (the default) for every tool.
    #[serde(default)]
    pub matcher: Option<At<String>>,
    /// The command line, run with `sh -c` in the project directory; the JSON envelope is
    /// on its stdin.
    pub command: At<String>,
    /// How long the hook may take (default 60s); past it the hook is killed, which denies
    /// a guard's call.
    #[serde(default)]
    pub timeout: Option<At<DurationSpec>>,
    /// `deny` (the default): a guard hook that fails denies. `allow`: its failure is
    /// reported and the call goes on.
    #[serde(default)]
    pub on_hook_error: Option<At<OnHookErrorSpec>>,
}

/// `on_hook_error:`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnHookErrorSpec {
    #[default]
    Deny,
    Allow,
}

/// One hook of a pipeline, ready to be installed: its name (where it is written) and spec.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedSpec {
    /// `defaults.hooks.pre_tool_use[0]` or `hooks.pre_tool_use[0]`.
    pub name: String,
    pub spec: CommandSpec,
}

impl Hooks {
    /// The entries by event, in [`HookEvent::ALL`] order.
    pub fn by_event(&self) -> [(HookEvent, &[At<HookEntry>]); 7] {
        [
            (HookEvent::PreToolUse, &self.pre_tool_use),
            (HookEvent::PostToolUse, &self.post_tool_use),
            (HookEvent::UserPromptSubmit, &self.user_prompt_submit),
            (HookEvent::Stop, &self.stop),
            (HookEvent::SessionStart, &self.session_start),
            (HookEvent::SessionEnd, &self.session_end),
            (HookEvent::PreCompact, &self.pre_compact),
        ]
    }

    /// The specs, named under `scope` (`hooks` or `defaults.hooks`). A matcher that does
    /// not compile is left out here; the checks refuse the file before it runs.
    pub fn specs(&self, scope: &str) -> Vec<NamedSpec> {
        let mut out = Vec::new();
        for (event, entries) in self.by_event() {
            for (index, entry) in entries.iter().enumerate() {
                let Ok(matcher) = entry
                    .value
                    .matcher
                    .as_ref()
                    .map_or(Ok(Matcher::any()), |m| Matcher::new(m.value.clone()))
                else {
                    continue;
                };
                let on_error = match entry.value.on_hook_error.as_ref().map(|o| o.value) {
                    Some(OnHookErrorSpec::Allow) => OnHookError::Allow,
                    _ => OnHookError::Deny,
                };
                let spec = CommandSpec::new(event, entry.value.command.value.clone())
                    .matching(matcher)
                    .timeout(
                        entry
                            .value
                            .timeout
                            .as_ref()
                            .map_or(DEFAULT_TIMEOUT, |t| t.value.0),
                    )
                    .on_error(on_error);
                out.push(NamedSpec {
                    name: format!("{scope}.{event}[{index}]"),
                    spec,
                });
            }
        }
        out
    }
}

/// The hooks an agent runs with: those of `defaults:` first, then its own.
pub fn agent_specs(pipeline: &Pipeline, agent: &super::agent_def::Agent) -> Vec<NamedSpec> {
    let defaults = pipeline
        .defaults
        .as_ref()
        .and_then(|d| d.hooks.as_ref())
        .map(|h| h.specs("defaults.hooks"))
        .unwrap_or_default();
    let own = agent
        .hooks
        .as_ref()
        .map(|h| h.specs("hooks"))
        .unwrap_or_default();
    defaults.into_iter().chain(own).collect()
}

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
