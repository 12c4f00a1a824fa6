//! `Policy`: a tool-call guard configured by ordered rules (allow, deny or ask), fail closed.

use std::collections::BTreeMap;
use std::fmt;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::call::{HookCall, Payload};
use crate::hook::{Decision, Hook};

/// What a [`Rule`] (or a policy's default) does with a tool call.
///
/// In JSON or YAML: `"allow"`, `"ask"`, or `{"deny": "the reason the model reads"}`.
///
/// Spelled like the hook's [`Decision`] and the session's `GateAnswer`: `Allow` and `Ask`
/// are variants, a denial is `Deny { reason }`, built with [`Action::deny`]. The policy
/// turns `Ask` into [`Decision::Ask`] with a question it writes from the call, which is
/// why `Ask` carries none here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "ActionText", into = "ActionText")]
pub enum Action {
    Allow,
    /// Park the call on a permission gate; denied with `approval_required` where nobody
    /// can answer (a headless session).
    Ask,
    /// Refuse the call; the reason is the tool result the model reads.
    Deny {
        reason: String,
    },
}

impl Action {
    /// An [`Action::Deny`] with `reason`, as [`Decision::deny`] builds a hook's denial.
    pub fn deny(reason: impl Into<String>) -> Self {
        Action::Deny {
            reason: reason.into(),
        }
    }
}

/// The written form of an [`Action`], unchanged since `Deny` held a bare string:
/// `"allow"`, `"ask"`, `{"deny": "..."}`.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ActionText {
    Allow,
    Ask,
    Deny(String),
}

impl From<ActionText> for Action {
    fn from(text: ActionText) -> Self {
        match text {
            ActionText::Allow => Action::Allow,
            ActionText::Ask => Action::Ask,
            ActionText::Deny(reason) => Action::Deny { reason },
        }
    }
}

impl From<Action> for ActionText {
    fn from(action: Action) -> Self {
        match action {
            Action::Allow => ActionText::Allow,
            Action::Ask => ActionText::Ask,
            Action::Deny { reason } => ActionText::Deny(reason),
        }
    }
}

/// A regular expression over one argument of a call, kept with its source text so a
/// policy serializes back to what was written.
#[derive(Clone)]
pub struct ArgPattern {
    source: String,
    regex: Regex,
}

impl ArgPattern {
    /// Compiles `pattern`. It is searched for (unanchored); write `^...$` for a full match.
    pub fn new(pattern: impl Into<String>) -> Result<Self, PolicyError> {
        let source = pattern.into();
        let regex = Regex::new(&source).map_err(|e| PolicyError::Pattern {
            pattern: source.clone(),
            error: e.to_string(),
        })?;
        Ok(Self { source, regex })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern occurs in `value`: a string argument is matched as it is, any
    /// other value as its compact JSON text (so `^\d+$` can match a number).
    pub fn matches(&self, value: &Value) -> bool {
        match value {
            Value::String(text) => self.regex.is_match(text),
            other => self.regex.is_match(&other.to_string()),
        }
    }
}

impl fmt::Debug for ArgPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ArgPattern").field(&self.source).finish()
    }
}

impl PartialEq for ArgPattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl TryFrom<String> for ArgPattern {
    type Error = PolicyError;

    fn try_from(pattern: String) -> Result<Self, Self::Error> {
        Self::new(pattern)
    }
}

impl From<ArgPattern> for String {
    fn from(pattern: ArgPattern) -> String {
        pattern.source
    }
}

impl Serialize for ArgPattern {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.source)
    }
}

impl<'de> Deserialize<'de> for ArgPattern {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let source = String::deserialize(deserializer)?;
        // An invalid pattern is a configuration error, reported where the policy is loaded.
        ArgPattern::new(source).map_err(serde::de::Error::custom)
    }
}

/// A bad policy: an argument pattern that is not a valid regular expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("invalid argument pattern {pattern:?}: {error}")]
    Pattern { pattern: String, error: String },
}

/// One rule of a [`Policy`]: which calls it covers, and what to do with them.
///
/// A rule covers a call when all of these hold:
/// * `tool` matches the tool name: a glob where `*` is any run of characters and `?` any
///   one character (`"fs_*"`, `"*__write"`, `"*"`);
/// * `args`, if given, is a subset of the arguments: every key it names is present with an
///   equal value, objects compared recursively (`{"mode": "write"}`);
/// * every entry of `matches` finds its pattern in the named argument. The key is a
///   top-level argument name, or a JSON pointer when it starts with `/` (`"/options/dir"`).
///   A missing argument does not match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub tool: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub matches: BTreeMap<String, ArgPattern>,
    pub action: Action,
}

impl Rule {
    /// A rule for tools whose names match the glob `tool`.
    pub fn new(tool: impl Into<String>, action: Action) -> Self {
        Self {
            tool: tool.into(),
            args: None,
            matches: BTreeMap::new(),
            action,
        }
    }

    /// Narrows the rule to calls whose arguments contain `subset`.
    #[must_use]
    pub fn with_args(mut self, subset: Value) -> Self {
        self.args = Some(subset);
        self
    }

    /// Narrows the rule to calls whose argument `key` matches `pattern`.
    pub fn with_match(
        mut self,
        key: impl Into<String>,
        pattern: impl Into<String>,
    ) -> Result<Self, PolicyError> {
        self.matches.insert(key.into(), ArgPattern::new(pattern)?);
        Ok(self)
    }

    /// Whether this rule covers a call of `tool` with `arguments`.
    pub fn covers(&self, tool: &str, arguments: &Value) -> bool {
        glob_match(&self.tool, tool)
            && self
                .args
                .as_ref()
                .is_none_or(|subset| is_subset(subset, arguments))
            && self.matches.iter().all(|(key, pattern)| {
                let value = if key.starts_with('/') {
                    arguments.pointer(key)
                } else {
                    arguments.get(key)
                };
                value.is_some_and(|value| pattern.matches(value))
            })
    }
}

/// A tool-call guard configured by ordered rules; the first rule that covers a call decides.
///
/// A call no rule covers gets the `default` action. With no default, it is denied: a policy
/// that cannot decide refuses (rule 7, fail-closed). Only tool calls are judged; every other
/// operation is allowed.
///
/// Deserializes from the shape a pipeline file carries:
///
/// ```
/// use serde_json::json;
/// use treadle_hook::{Action, Policy};
///
/// let policy: Policy = serde_json::from_value(json!({
///     "rules": [
///         { "tool": "read_*", "action": "allow" },
///         { "tool": "write_file", "matches": { "path": "^/etc/" }, "action": { "deny": "no writes to /etc" } },
///         { "tool": "write_file", "action": "ask" },
///         { "tool": "shell", "args": { "cmd": "ls" }, "action": "allow" }
///     ],
///     "default": { "deny": "not on the list" }
/// })).unwrap();
/// assert_eq!(policy.decide("read_file", &json!({})), Action::Allow);
/// assert_eq!(policy.decide("write_file", &json!({"path": "/etc/passwd"})), Action::deny("no writes to /etc"));
/// assert_eq!(policy.decide("write_file", &json!({"path": "notes.md"})), Action::Ask);
/// assert_eq!(policy.decide("shell", &json!({"cmd": "rm -rf /"})), Action::deny("not on the list"));
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub rules: Vec<Rule>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Action>,
}

impl Policy {
    /// A policy with no rules and no default: it denies every tool call.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a rule; earlier rules win.
    #[must_use]
    pub fn rule(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Appends a rule that allows tools matching the glob `tool`.
    #[must_use]
    pub fn allow(self, tool: impl Into<String>) -> Self {
        self.rule(Rule::new(tool, Action::Allow))
    }

    /// Appends a rule that asks before running tools matching the glob `tool`.
    #[must_use]
    pub fn ask(self, tool: impl Into<String>) -> Self {
        self.rule(Rule::new(tool, Action::Ask))
    }

    /// Appends a rule that denies tools matching the glob `tool`, with `reason`.
    #[must_use]
    pub fn deny(self, tool: impl Into<String>, reason: impl Into<String>) -> Self {
        self.rule(Rule::new(tool, Action::deny(reason)))
    }

    /// The action for calls no rule covers. Interactive sessions usually want
    /// [`Action::Ask`]; leave it unset to deny them.
    #[must_use]
    pub fn default_action(mut self, action: Action) -> Self {
        self.default = Some(action);
        self
    }

    /// The action for a call of `tool` with `arguments`: the first covering rule's, else the
    /// default, else a denial.
    pub fn decide(&self, tool: &str, arguments: &Value) -> Action {
        self.rules
            .iter()
            .find(|rule| rule.covers(tool, arguments))
            .map(|rule| &rule.action)
            .or(self.default.as_ref())
            .cloned()
            .unwrap_or_else(|| {
                Action::deny(format!(
                    "no policy rule covers {tool} and the policy has no default, so the call \
                     is refused (fail closed)"
                ))
            })
    }
}

#[async_trait::async_trait]
impl Hook for Policy {
    fn name(&self) -> &str {
        "policy"
    }

    async fn begin(&self, call: &HookCall) -> Decision {
        let Payload::ToolCall {
            name, arguments, ..
        } = &call.payload
        else {
            return Decision::Allow;
        };
        match self.decide(name, arguments) {
            Action::Allow => Decision::Allow,
            Action::Deny { reason } => Decision::deny(reason),
            Action::Ask => Decision::ask(question(name, arguments)),
        }
    }
}

/// The question a person reads: the tool and its arguments, cut short if long.
fn question(tool: &str, arguments: &Value) -> String {
    const MAX: usize = 400;
    let mut args = arguments.to_string();
    if args.len() > MAX {
        let mut cut = MAX;
        while !args.is_char_boundary(cut) {
            cut -= 1;
        }
        args.truncate(cut);
        args.push('…');
    }
    format!("Allow the agent to call {tool} with {args}?")
}

/// Glob over tool names with `globset`: `*` matches any run (also empty), `?` exactly one
/// character, `[abc]` and `{a,b}` as usual. A pattern that is not a valid glob matches only
/// the name spelled exactly like it, so a broken pattern never widens a rule.
fn glob_match(pattern: &str, text: &str) -> bool {
    match globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
    {
        Ok(glob) => glob.compile_matcher().is_match(text),
        Err(_) => pattern == text,
    }
}

/// Whether `subset` is contained in `value`: objects key by key, recursively; anything
/// else (arrays included) by equality.
fn is_subset(subset: &Value, value: &Value) -> bool {
    match (subset, value) {
        (Value::Object(want), Value::Object(have)) => want
            .iter()
            .all(|(key, w)| have.get(key).is_some_and(|h| is_subset(w, h))),
        _ => subset == value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn globs_match_names() {
        assert!(glob_match("*", "anything"));
        assert!(glob_match("read_*", "read_file"));
        assert!(glob_match("*__write", "fs__write"));
        assert!(glob_match("re?d", "read"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("read_*", "write_file"));
        assert!(!glob_match("read", "read_file"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("{read,list}_*", "list_dir"));
        // Not a valid glob: only the exact name.
        assert!(glob_match("[", "["));
        assert!(!glob_match("[", "a"));
    }

    #[test]
    fn subsets_compare_objects_recursively() {
        let args = json!({"mode": "write", "opts": {"force": true, "n": 1}});
        assert!(is_subset(&json!({}), &args));
        assert!(is_subset(&json!({"opts": {"force": true}}), &args));
        assert!(!is_subset(&json!({"opts": {"force": false}}), &args));
        assert!(!is_subset(&json!({"missing": 1}), &args));
    }

    #[test]
    fn first_matching_rule_wins_then_default_then_deny() {
        let policy = Policy::new()
            .deny("shell", "no shell")
            .allow("*")
            .default_action(Action::Ask);
        assert_eq!(policy.decide("shell", &json!({})), Action::deny("no shell"));
        assert_eq!(policy.decide("read", &json!({})), Action::Allow);

        let asks = Policy::new().allow("read").default_action(Action::Ask);
        assert_eq!(asks.decide("write", &json!({})), Action::Ask);

        let undecided = Policy::new().allow("read");
        assert!(matches!(
            undecided.decide("write", &json!({})),
            Action::Deny { reason } if reason.contains("fail closed")
        ));
    }

    #[test]
    fn argument_patterns_match_strings_numbers_and_pointers() {
        let rule = Rule::new("write", Action::Allow)
            .with_match("path", r"^docs/")
            .and_then(|r| r.with_match("/opts/n", r"^\d+$"));
        let Ok(rule) = rule else {
            panic!("valid patterns")
        };
        assert!(rule.covers("write", &json!({"path": "docs/a.md", "opts": {"n": 3}})));
        assert!(!rule.covers("write", &json!({"path": "src/a.rs", "opts": {"n": 3}})));
        assert!(!rule.covers("write", &json!({"path": "docs/a.md"})));
    }

    #[test]
    fn a_bad_pattern_is_a_load_error_and_policies_round_trip() {
        let bad = serde_json::from_value::<Policy>(json!({
            "rules": [{ "tool": "x", "matches": { "p": "(" }, "action": "allow" }]
        }));
        let Err(error) = bad else {
            panic!("accepted a bad pattern")
        };
        assert!(
            error.to_string().contains("invalid argument pattern"),
            "{error}"
        );

        let policy = Policy::new()
            .rule(Rule::new("w*", Action::Ask).with_args(json!({"force": true})))
            .deny("shell", "no");
        let text = serde_json::to_string(&policy).unwrap_or_default();
        let back: Result<Policy, _> = serde_json::from_str(&text);
        assert_eq!(back.ok(), Some(policy));
    }

    #[tokio::test]
    async fn the_hook_asks_with_a_readable_question() {
        use treadle_event::{LoopId, SessionId};
        let policy = Policy::new().ask("write");
        let call = HookCall::new(
            SessionId::new(),
            LoopId::new(),
            Payload::ToolCall {
                call_id: "c1".into(),
                name: "write".into(),
                arguments: json!({"path": "a"}),
            },
        );
        assert_eq!(
            policy.begin(&call).await,
            Decision::ask(r#"Allow the agent to call write with {"path":"a"}?"#)
        );
    }
}
