//! The runner that calls hooks in order, and the in-flight `Active` operation it hands back.

use std::fmt;
use std::sync::Arc;

use crate::call::{HookCall, OperationOutcome};
use crate::hook::{Decision, Hook};

/// The reason prefix of a [`Decision::Ask`] that nobody could answer. Pipelines and
/// proofs match on it, so it is part of the contract.
pub const APPROVAL_REQUIRED: &str = "approval_required";

/// What [`HookRunner::authorize`] decided about a guard operation that no hook denied.
///
/// `#[non_exhaustive]`: a caller must refuse an answer it does not know (fail closed).
#[derive(Debug)]
#[must_use = "the operation's hooks must be finished with Active::finish"]
#[non_exhaustive]
pub enum Authorization {
    /// Every hook allowed it.
    Allowed(Active),
    /// At least one hook asked; the operation may run only if someone approves.
    Ask {
        /// The begun operation; finish it however the question ends.
        active: Active,
        /// The [`Hook::name`] of the first hook that asked.
        hook: String,
        /// The question(s), one per asking hook, joined by newlines.
        question: String,
    },
}

/// A guard hook refused an operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("denied by hook {hook}: {reason}")]
pub struct Denied {
    /// The [`Hook::name`] of the hook that denied.
    pub hook: String,
    pub reason: String,
}

/// The registered hooks, and the ordering rules for calling them.
///
/// Cheap to clone (one `Arc`). With no hooks it holds no allocation at all, and
/// [`HookRunner::begin`] / [`Active::finish`] only move the call around, so the runtime
/// can call them unconditionally.
#[derive(Clone, Default)]
pub struct HookRunner {
    // `None` when empty, so `Default` and the fast path touch no allocation and no refcount.
    hooks: Option<Arc<[Arc<dyn Hook>]>>,
}

impl HookRunner {
    /// A runner over `hooks`, which begin in this order and finish in reverse.
    pub fn new(hooks: Vec<Arc<dyn Hook>>) -> Self {
        Self {
            hooks: if hooks.is_empty() {
                None
            } else {
                Some(hooks.into())
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hooks.is_none()
    }

    pub fn len(&self) -> usize {
        self.slice().len()
    }

    /// The hooks' names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.slice().iter().map(|hook| hook.name())
    }

    fn slice(&self) -> &[Arc<dyn Hook>] {
        self.hooks.as_deref().unwrap_or(&[])
    }

    /// Begins an operation: runs every hook's `begin` in registration order.
    ///
    /// On a guard operation ([`Operation::is_guard`](crate::Operation::is_guard)) the first
    /// [`Decision::Deny`] stops it: the hooks that already began, the denying one included,
    /// finish with [`OperationOutcome::Denied`] in reverse order, the later hooks are never called,
    /// and the error names the hook and its reason. On any other operation a deny is
    /// ignored, with a `tracing` warning, because the runtime cannot stop it half-way.
    ///
    /// A [`Decision::Ask`] on a guard operation is a denial here (reason
    /// `approval_required: <question>`), because this caller has nobody to ask: permission
    /// that cannot be decided is refused (rule 7). Callers that can park the operation on
    /// a gate use [`HookRunner::authorize`] instead.
    ///
    /// On success the caller must end the operation with [`Active::finish`], whatever
    /// happens to it: a discarded step finishes with `Failed` or `Canceled` (rule 5).
    pub async fn begin(&self, call: HookCall) -> Result<Active, Denied> {
        match self.authorize(call).await? {
            Authorization::Allowed(active) => Ok(active),
            Authorization::Ask {
                active,
                hook,
                question,
            } => {
                let reason = format!("{APPROVAL_REQUIRED}: {question}");
                active
                    .finish(OperationOutcome::denied(reason.clone()), None)
                    .await;
                Err(Denied { hook, reason })
            }
        }
    }

    /// Begins an operation like [`HookRunner::begin`], but hands a [`Decision::Ask`] back
    /// to the caller instead of denying it.
    ///
    /// Every hook's `begin` runs (unless one denies), so a later hook can still deny what
    /// an earlier one asked about: deny beats ask, and ask beats allow. When several hooks
    /// ask, their questions are joined, one per line, and the first asker is named. The
    /// caller must finish the returned [`Active`] in every case, with
    /// [`OperationOutcome::Denied`] if the question is refused or never answered.
    pub async fn authorize(&self, mut call: HookCall) -> Result<Authorization, Denied> {
        let Some(hooks) = &self.hooks else {
            return Ok(Authorization::Allowed(Active::new(call, None)));
        };
        let mut asks: Vec<(String, String)> = Vec::new();
        for (index, hook) in hooks.iter().enumerate() {
            let (reason, asking) = match hook.begin(&call).await {
                Decision::Allow => continue,
                Decision::Deny { reason } => (reason, false),
                Decision::Ask { question } => (question, true),
                Decision::Rewrite { arguments } => {
                    rewrite(&mut call, hook.name(), arguments);
                    continue;
                }
            };
            if !call.op.is_guard() {
                tracing::warn!(
                    hook = hook.name(),
                    op = call.op.name(),
                    %reason,
                    "hook denied or asked about an operation that is not a guard; ignored"
                );
                continue;
            }
            if asking {
                asks.push((hook.name().to_owned(), reason));
                continue;
            }
            let outcome = OperationOutcome::Denied {
                reason: reason.clone(),
            };
            // `index` is in bounds (it came from `enumerate`), so this slice cannot fail.
            for begun in hooks[..=index].iter().rev() {
                begun.finish(&call, &outcome, None).await;
            }
            return Err(Denied {
                hook: hook.name().to_owned(),
                reason,
            });
        }
        let active = Active::new(call, Some(Arc::clone(hooks)));
        let mut asks = asks.into_iter();
        let Some((hook, first)) = asks.next() else {
            return Ok(Authorization::Allowed(active));
        };
        let question = asks.fold(first, |mut all, (_, next)| {
            all.push('\n');
            all.push_str(&next);
            all
        });
        Ok(Authorization::Ask {
            active,
            hook,
            question,
        })
    }

    /// Reports an operation that already happened (a notification): every hook's `begin`,
    /// in order, then every `finish`, in reverse. Decisions are ignored, even on guard
    /// operations, since there is nothing left to stop.
    pub async fn observe(
        &self,
        call: HookCall,
        outcome: OperationOutcome,
        output: Option<serde_json::Value>,
    ) {
        let Some(hooks) = &self.hooks else {
            return;
        };
        for hook in hooks.iter() {
            // Ignored on purpose: see the doc comment.
            let _decision = hook.begin(&call).await;
        }
        for hook in hooks.iter().rev() {
            hook.finish(&call, &outcome, output.as_ref()).await;
        }
    }
}

/// Puts a hook's [`Decision::Rewrite`] into a tool call's payload, where the later hooks
/// and the caller ([`Active::call`]) read it; on any other operation it is ignored.
fn rewrite(call: &mut HookCall, hook: &str, new: serde_json::Value) {
    match &mut call.payload {
        crate::call::Payload::ToolCall { arguments, .. } => *arguments = new,
        _ => tracing::warn!(
            hook,
            op = call.op.name(),
            "hook rewrote the arguments of an operation that is not a tool call; ignored"
        ),
    }
}

impl fmt::Debug for HookRunner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl FromIterator<Arc<dyn Hook>> for HookRunner {
    fn from_iter<I: IntoIterator<Item = Arc<dyn Hook>>>(iter: I) -> Self {
        Self::new(iter.into_iter().collect())
    }
}

/// An operation in flight: every hook has begun and none has finished.
///
/// End it with [`Active::finish`]. Dropping it instead is a bug in the caller (the hooks
/// never learn how the operation ended); debug builds report it on stderr.
#[must_use = "an operation's hooks must be finished with Active::finish"]
pub struct Active {
    call: HookCall,
    hooks: Option<Arc<[Arc<dyn Hook>]>>,
    // Set once every hook has finished, so `Drop` can tell a finished operation from a
    // leaked one (including a `finish` future that was itself dropped half-way).
    finished: bool,
}

impl Active {
    fn new(call: HookCall, hooks: Option<Arc<[Arc<dyn Hook>]>>) -> Self {
        Self {
            call,
            hooks,
            finished: false,
        }
    }

    /// What this operation is about.
    pub fn call(&self) -> &HookCall {
        &self.call
    }

    /// Ends the operation: runs every hook's `finish` in reverse registration order.
    pub async fn finish(mut self, outcome: OperationOutcome, output: Option<serde_json::Value>) {
        if let Some(hooks) = self.hooks.take() {
            for hook in hooks.iter().rev() {
                hook.finish(&self.call, &outcome, output.as_ref()).await;
            }
        }
        self.finished = true;
    }
}

impl fmt::Debug for Active {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Active")
            .field("call", &self.call)
            .field("finished", &self.finished)
            .finish_non_exhaustive()
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        // A panic here would abort during unwinding and hide the original error, so a
        // leaked operation is only reported, and only where someone is debugging.
        #[cfg(debug_assertions)]
        if !self.finished && !std::thread::panicking() {
            eprintln!(
                "treadle-hook: operation {} (session {}, turn {:?}, step {:?}) was dropped \
                 without Active::finish; its hooks never saw it end",
                self.call.op, self.call.session, self.call.turn, self.call.step,
            );
        }
    }
}
