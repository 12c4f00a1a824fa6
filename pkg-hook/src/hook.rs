//! The `Hook` trait a plugin implements, and the `Decision` a guard returns.

use crate::Json;
use crate::call::{HookCall, OperationOutcome};

/// A hook's answer to the beginning of an operation.
///
/// `#[non_exhaustive]` so further answers can be added without breaking plugins: hooks
/// only construct decisions, and only the runner (in this crate) matches on them all.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Let the operation run.
    Allow,
    /// Stop the operation, if it is a guard ([`Operation::is_guard`](crate::Operation::is_guard));
    /// ignored with a warning otherwise.
    Deny { reason: String },
    /// Let the operation run only if someone approves it: the runtime parks a tool call on a
    /// permission gate with this question. Where nobody can answer (a headless session, or
    /// a guard operation that cannot be parked: a turn or an inference) the operation is
    /// denied, never allowed (rule 7, fail-closed). Ignored with a warning on operations
    /// that are not guards.
    Ask { question: String },
    /// Let a tool call run with these arguments instead of the model's (a JSON object):
    /// the hooks after this one see them, and the runtime checks them against the tool's
    /// schema again before the call runs. Ignored, with a warning, on other operations.
    Rewrite { arguments: serde_json::Value },
}

impl Decision {
    /// A [`Decision::Deny`] with `reason`; for a tool call the model reads it as the
    /// call's result (rule 6), so word it for the model.
    pub fn deny(reason: impl Into<String>) -> Self {
        Decision::Deny {
            reason: reason.into(),
        }
    }

    /// An [`Decision::Ask`] with `question`, written for the person who will answer it.
    pub fn ask(question: impl Into<String>) -> Self {
        Decision::Ask {
            question: question.into(),
        }
    }

    /// A [`Decision::Rewrite`] to `arguments`.
    pub fn rewrite(arguments: serde_json::Value) -> Self {
        Decision::Rewrite { arguments }
    }

    pub fn is_allow(&self) -> bool {
        matches!(self, Decision::Allow)
    }
}

/// An observer of the runtime's operations, and for guard operations a veto.
///
/// For every operation that begins, [`Hook::begin`] is called once and, unless the caller
/// is buggy, [`Hook::finish`] once, with the same [`HookCall`]. Hooks nest like scopes:
/// `begin` runs in registration order and `finish` in reverse, so the first hook registered
/// sees the widest span. Both default to doing nothing, so implement only what you need.
///
/// Hooks run inline on the runtime's task: a slow hook delays the operation it observes.
/// Hand expensive work (network, disk) to a task or channel of your own. A hook must not
/// panic: a panic unwinds through the turn that called it.
#[async_trait::async_trait]
pub trait Hook: Send + Sync + 'static {
    /// A short name, used in [`Denied`](crate::Denied) and in logs. The default is the
    /// implementing type's name without its module path or generic arguments
    /// (`my_app::AuditLog<W>` gives `AuditLog`); override it when two hooks share a type.
    fn name(&self) -> &str {
        short_type_name(std::any::type_name::<Self>())
    }

    /// Called when an operation begins. For a guard operation, [`Decision::Deny`] stops it.
    async fn begin(&self, call: &HookCall) -> Decision {
        let _ = call;
        Decision::Allow
    }

    /// Called when an operation ends, including when it was denied, failed or canceled.
    ///
    /// `output` is the operation's result where one exists: the inference response (the
    /// assistant message JSON), the tool result, the gate answer. [`Json`] is
    /// `serde_json::Value`, re-exported so a hook needs no `serde_json` dependency.
    async fn finish(&self, call: &HookCall, outcome: &OperationOutcome, output: Option<&Json>) {
        let _ = (call, outcome, output);
    }
}

/// `type_name`'s last path segment, generic arguments dropped: `a::b::Log<c::D>` → `Log`.
fn short_type_name(full: &'static str) -> &'static str {
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base)
}

#[cfg(test)]
mod tests {
    use super::short_type_name;

    #[test]
    fn the_default_name_is_the_bare_type_name() {
        assert_eq!(short_type_name("my_app::audit::AuditLog"), "AuditLog");
        assert_eq!(short_type_name("my_app::Log<alloc::string::String>"), "Log");
        assert_eq!(short_type_name("Local"), "Local");
    }
}
