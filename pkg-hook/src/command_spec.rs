//! What one command hook is: the event it fires on, the tools it matches, the command, its
//! timeout and what a failure of it means ([`CommandSpec`]).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use regex::Regex;

/// The timeout of a hook command that sets none (Claude Code's default too).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// When a command hook runs. Each event is one point of the operations the
/// [`HookRunner`](crate::HookRunner) orders (rule 5):
///
/// | event | runs at | may block |
/// |---|---|---|
/// | `pre_tool_use` | the begin of a [`ToolCall`](crate::Operation::ToolCall) | yes (a guard) |
/// | `post_tool_use` | the finish of a [`ToolExecution`](crate::Operation::ToolExecution) | no |
/// | `user_prompt_submit` | the begin of a [`Turn`](crate::Operation::Turn) | yes (a guard) |
/// | `stop` | the finish of a [`Turn`](crate::Operation::Turn) | no |
/// | `pre_compact` | the begin of a [`Compaction`](crate::Operation::Compaction) | no |
/// | `session_start`, `session_end` | [`CommandHook::notify`](crate::CommandHook::notify), called by the owner of the session | no |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookEvent {
    PreToolUse,
    PostToolUse,
    UserPromptSubmit,
    Stop,
    SessionStart,
    SessionEnd,
    PreCompact,
}

impl HookEvent {
    /// Every event, in the order the pipeline file lists them.
    pub const ALL: [HookEvent; 7] = [
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::UserPromptSubmit,
        HookEvent::Stop,
        HookEvent::SessionStart,
        HookEvent::SessionEnd,
        HookEvent::PreCompact,
    ];

    /// The snake-case name, as the pipeline file writes it (`pre_tool_use`).
    pub fn name(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "pre_tool_use",
            HookEvent::PostToolUse => "post_tool_use",
            HookEvent::UserPromptSubmit => "user_prompt_submit",
            HookEvent::Stop => "stop",
            HookEvent::SessionStart => "session_start",
            HookEvent::SessionEnd => "session_end",
            HookEvent::PreCompact => "pre_compact",
        }
    }

    /// Claude Code's name for the event (`PreToolUse`), sent as `hook_event_name`.
    pub fn claude_name(self) -> &'static str {
        match self {
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::Stop => "Stop",
            HookEvent::SessionStart => "SessionStart",
            HookEvent::SessionEnd => "SessionEnd",
            HookEvent::PreCompact => "PreCompact",
        }
    }

    /// Whether the hook guards an operation: its failure denies it (unless
    /// [`OnHookError::Allow`]) and its answer can stop it.
    pub fn is_guard(self) -> bool {
        matches!(self, HookEvent::PreToolUse | HookEvent::UserPromptSubmit)
    }

    /// Whether the event is about one tool, so that its matcher applies.
    pub fn is_tool_event(self) -> bool {
        matches!(self, HookEvent::PreToolUse | HookEvent::PostToolUse)
    }
}

impl fmt::Display for HookEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not one of the [`HookEvent`]s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown hook event {0:?}; the events are pre_tool_use, post_tool_use, user_prompt_submit, stop, session_start, session_end and pre_compact"
)]
pub struct UnknownEvent(pub String);

impl FromStr for HookEvent {
    type Err = UnknownEvent;

    /// Reads the snake-case name, or Claude Code's (`PreToolUse`).
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        HookEvent::ALL
            .into_iter()
            .find(|e| e.name() == name || e.claude_name() == name)
            .ok_or_else(|| UnknownEvent(name.to_owned()))
    }
}

/// Which tools a tool hook runs for: `*` (or nothing) for every tool, else a regular
/// expression that must match the whole tool name (`run_shell`, `write_file|edit_file`,
/// `mcp__.*`), so a plain name matches only that tool, as in Claude Code.
#[derive(Clone)]
pub struct Matcher {
    source: String,
    // `None`: every tool.
    regex: Option<Regex>,
}

/// A matcher that is not a valid regular expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid matcher {pattern:?}: {error}")]
pub struct BadMatcher {
    pub pattern: String,
    pub error: String,
}

impl Matcher {
    /// Every tool.
    pub fn any() -> Self {
        Self {
            source: "*".to_owned(),
            regex: None,
        }
    }

    /// Compiles `pattern`: `*` or an empty pattern matches every tool, anything else is a
    /// regular expression anchored at both ends.
    ///
    /// ```
    /// use treadle_hook::Matcher;
    ///
    /// let m = Matcher::new("write_file|edit_file").unwrap();
    /// assert!(m.matches("edit_file"));
    /// assert!(!m.matches("write_file_twice"));
    /// assert!(Matcher::new("*").unwrap().matches("anything"));
    /// assert!(Matcher::new("(unclosed").is_err());
    /// ```
    pub fn new(pattern: impl Into<String>) -> Result<Self, BadMatcher> {
        let source = pattern.into();
        if source.is_empty() || source == "*" {
            return Ok(Self {
                source,
                regex: None,
            });
        }
        let regex = Regex::new(&format!("^(?:{source})$")).map_err(|e| BadMatcher {
            pattern: source.clone(),
            error: e.to_string(),
        })?;
        Ok(Self {
            source,
            regex: Some(regex),
        })
    }

    /// Whether the hook runs for `tool`.
    pub fn matches(&self, tool: &str) -> bool {
        self.regex.as_ref().is_none_or(|r| r.is_match(tool))
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl fmt::Debug for Matcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Matcher").field(&self.source).finish()
    }
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

/// What a guard hook's failure (a crash, a timeout, a kill, unreadable JSON, a command
/// that cannot start) means for the operation it guards.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnHookError {
    /// The operation is denied, with a reason naming the hook and its failure (rule 7).
    #[default]
    Deny,
    /// The operation goes on, and the failure is reported: an explicit opt-out, for hooks
    /// that only advise.
    Allow,
}

impl OnHookError {
    pub fn name(self) -> &'static str {
        match self {
            OnHookError::Deny => "deny",
            OnHookError::Allow => "allow",
        }
    }
}

/// One command hook: run `command` (with `sh -c`) on `event` for the tools `matcher`
/// matches, for at most `timeout`.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandSpec {
    pub event: HookEvent,
    /// Only for tool events; other events ignore it.
    pub matcher: Matcher,
    /// A shell command line, run with `sh -c`.
    pub command: String,
    pub timeout: Duration,
    pub on_error: OnHookError,
}

impl CommandSpec {
    /// A hook running `command` on `event` for every tool, with the [`DEFAULT_TIMEOUT`],
    /// failing closed.
    pub fn new(event: HookEvent, command: impl Into<String>) -> Self {
        Self {
            event,
            matcher: Matcher::any(),
            command: command.into(),
            timeout: DEFAULT_TIMEOUT,
            on_error: OnHookError::Deny,
        }
    }

    #[must_use]
    pub fn matching(mut self, matcher: Matcher) -> Self {
        self.matcher = matcher;
        self
    }

    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    #[must_use]
    pub fn on_error(mut self, on_error: OnHookError) -> Self {
        self.on_error = on_error;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_read_both_spellings() {
        for event in HookEvent::ALL {
            assert_eq!(event.name().parse::<HookEvent>(), Ok(event));
            assert_eq!(event.claude_name().parse::<HookEvent>(), Ok(event));
        }
        let err = "on_write".parse::<HookEvent>().unwrap_err();
        assert!(err.to_string().contains("pre_tool_use"), "{err}");
    }

    #[test]
    fn a_plain_name_matches_only_that_tool() {
        let m = Matcher::new("run_shell").unwrap();
        assert!(m.matches("run_shell"));
        assert!(!m.matches("run_shell2"));
        assert!(!m.matches("xrun_shell"));
        assert!(Matcher::new("").unwrap().matches("read_file"));
    }
}
