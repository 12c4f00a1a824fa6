//! `hooks:` on an `agents:` entry and on `defaults:`: command hooks by event (docs/hooks.md)
//! and the [`treadle_hook::CommandSpec`]s they become; their checks (keys, matchers,
//! timeouts, that each command exists) are in [`super::check_hooks`].
//!
//! Decisions: the hooks of `defaults:` run for every agent, before the agent's own (the
//! wider scope begins first and finishes last, rule 5); an agent cannot drop a default
//! hook, because a team's policy hook that any agent could switch off would guard nothing.

use schemars::JsonSchema;
use serde::Deserialize;
use treadle_hook::{CommandSpec, DEFAULT_TIMEOUT, HookEvent, Matcher, OnHookError};

use super::at::At;
use super::duration::DurationSpec;

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
