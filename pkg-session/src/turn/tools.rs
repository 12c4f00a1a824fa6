//! A step's tool half: its batch run, loop detection, the closing step after a
//! turn-ending tool, and the commit through the loop actor.

use std::sync::Arc;

use tokio::sync::oneshot;
use treadle_event::{Block, EventKind, FailureCause, Message, Role, StepId, Usage};

use crate::batch::{self, BatchOutcome};
use crate::batch_scope::{BatchScope, Call, Deferred};
use crate::error::CommitError;
use crate::protocol::{LoopMsg, StepCommit};
use crate::repeats::{Interaction, Repeats};
use crate::resume::Prior;
use crate::subject::StagedStep;

use super::overlap::{self, Pending};
use super::{End, StepEnd, Turn};

/// The result of a call made after the turn's work was done.
const TURN_OVER: &str = "not run: the turn was over (its final tool call already succeeded)";

impl Turn {
    /// Runs the batch of a staged assistant message (if it has tool uses) and commits the
    /// step. `prior` holds the gates a resumed step found in the journal.
    pub(super) async fn tool_step(&mut self, staged: StagedStep, prior: Prior) -> StepEnd {
        let ctx = self.ctx.clone();
        let calls: Vec<Call> = staged
            .message
            .tool_uses()
            .map(|u| Call {
                id: u.id.to_owned(),
                name: u.name.to_owned(),
                arguments: u.arguments.to_owned(),
            })
            .collect();
        let final_text = calls.is_empty().then(|| staged.message.text_content());
        let mut results = None;
        let deferred = Deferred::default();
        if !calls.is_empty() {
            let scope = BatchScope {
                ctx: &ctx,
                actor: &self.actor,
                coords: self.coords,
                step: staged.step,
                staged: &staged,
                cancel: &self.cancel,
                deferred: &deferred,
            };
            // Boxed for the batch's while: the batch's future is the largest part of a
            // step's, and unboxed it sized the turn task for the whole turn, the model call
            // included (docs/benchmarks.md, in flight).
            let outcome = Box::pin(batch::run_batch(&scope, calls, prior)).await;
            self.effects = deferred.take();
            match outcome {
                BatchOutcome::Done(message) => results = Some(message),
                BatchOutcome::Failed(reason) => {
                    return StepEnd::Discarded(End::Failed(FailureCause::Other, reason));
                }
                BatchOutcome::Canceled => {
                    return StepEnd::Discarded(End::Interrupted("interrupted".into()));
                }
            }
        }
        if let Some(results) = results.as_mut() {
            crate::compact::cap_results(results, ctx.compaction.max_inline_bytes);
        }
        let stuck = match results.as_mut() {
            Some(results) => self.watch(&staged.message, results),
            None => Repeats::Fine,
        };
        let StagedStep {
            step,
            index,
            message,
            usage,
            model,
        } = staged;
        let mut messages = vec![message];
        messages.extend(results);
        // The turn goes on after this step: its log sync may overlap the next model call
        // (see `overlap.rs`), unless hooks watch the step's end, which rule 5 puts after
        // the journal's append and before the next step's begin, or a fence admits the
        // append: a worker whose lease went elsewhere makes no model call after it.
        let overlap = final_text.is_none()
            && matches!(stuck, Repeats::Fine)
            && self.ctx.hooks.is_empty()
            && !self.ctx.hub.fenced();
        let end = if overlap {
            self.send_and_count(step, index, messages, usage, model)
                .await
        } else {
            self.commit_and_count(step, index, messages, usage, model, final_text)
                .await
        };
        match (end, stuck) {
            (StepEnd::Committed(_), Repeats::Stuck(why)) => {
                StepEnd::Ended(End::Failed(FailureCause::Repeated, why))
            }
            (end, _) => end,
        }
    }

    /// Loop detection over a step's results, and whether a turn-ending tool succeeded in
    /// it (the next step is then the turn's last). The calls are the step's `assistant`
    /// message's tool uses, borrowed, not copied: the batch ran exactly those, in order.
    pub(super) fn watch(&mut self, assistant: &Message, results: &mut Message) -> Repeats {
        let interactions: Vec<Interaction<'_>> = assistant
            .tool_uses()
            .map(|u| Interaction {
                name: u.name,
                arguments: u.arguments,
            })
            .collect();
        let succeeded = results.content.iter().map(|b| match b {
            Block::ToolResult { is_error, .. } => !is_error,
            _ => false,
        });
        if interactions
            .iter()
            .zip(succeeded)
            .any(|(call, ok)| ok && self.ctx.tools.get(call.name).is_some_and(|t| t.ends_turn()))
        {
            self.closing = true;
        }
        self.repeats.observe(&interactions, results)
    }

    /// The step after a turn-ending tool, when the model called tools again: they are not
    /// run, each is answered that the turn is over, and the turn ends with the step's text.
    pub(super) async fn closing_step(
        &mut self,
        step: StepId,
        index: u32,
        assistant: Message,
        usage: Usage,
        model: String,
    ) -> StepEnd {
        let text = assistant.text_content();
        // Each call not run still gets its one start and one end (rule 6), so a live view,
        // and a transcript replayed from it, show it answered as not run.
        for call in assistant.tool_uses() {
            let header = || self.ctx.turn_header(self.coords, Some(step));
            self.ctx.emit(header(), || EventKind::ToolCallStarted {
                call_id: call.id.to_owned(),
                name: call.name.to_owned(),
                arguments: call.arguments.to_owned(),
            });
            self.ctx.emit(header(), || EventKind::ToolCallCompleted {
                call_id: call.id.to_owned(),
                name: call.name.to_owned(),
                content: TURN_OVER.to_owned(),
                is_error: true,
            });
        }
        let results = Message {
            role: Role::Tool,
            content: assistant
                .tool_uses()
                .map(|u| Block::ToolResult {
                    call_id: u.id.to_owned(),
                    content: TURN_OVER.to_owned(),
                    is_error: true,
                })
                .collect(),
        };
        let messages = vec![assistant, results];
        match self
            .commit_and_count(step, index, messages, usage, model, None)
            .await
        {
            StepEnd::Committed(_) => StepEnd::Ended(End::Done(text)),
            other => other,
        }
    }

    /// Commits a step's group, charging it the tokens of any sub-agents it delegated to.
    pub(super) async fn commit_and_count(
        &mut self,
        step: StepId,
        index: u32,
        messages: Vec<Message>,
        usage: Usage,
        model: String,
        final_text: Option<String>,
    ) -> StepEnd {
        let committed = match self.step_commit(step, index, messages, usage, model).await {
            Ok((commit, messages)) => {
                let usage = commit.usage;
                self.commit(commit).await.map(|()| (messages, usage))
            }
            Err(error) => Err(error),
        };
        let (messages, usage) = match committed {
            Ok(committed) => committed,
            Err(error) => {
                return StepEnd::Discarded(End::Failed(FailureCause::Journal, error.to_string()));
            }
        };
        self.request.extend(messages);
        self.usage += usage;
        self.steps += 1;
        StepEnd::Committed(final_text)
    }

    /// [`Turn::commit_and_count`] of a step the turn goes on after, without waiting for
    /// the acknowledgement: the next step's model call waits for it (see `overlap.rs`).
    async fn send_and_count(
        &mut self,
        step: StepId,
        index: u32,
        messages: Vec<Message>,
        usage: Usage,
        model: String,
    ) -> StepEnd {
        let sent = match self.step_commit(step, index, messages, usage, model).await {
            Ok((commit, messages)) => {
                let usage = commit.usage;
                self.send(commit).map(|ack| (ack, messages, usage))
            }
            Err(error) => Err(error),
        };
        let (ack, messages, usage) = match sent {
            Ok(sent) => sent,
            Err(error) => {
                return StepEnd::Discarded(End::Failed(FailureCause::Journal, error.to_string()));
            }
        };
        self.pending = Some(Pending {
            ack,
            before: self.counts(),
        });
        self.request.extend(messages);
        self.usage += usage;
        self.steps += 1;
        StepEnd::Committed(None)
    }

    /// A step's group as the actor commits it, and its messages for the next request (the
    /// same allocation: see `history.rs`). The commit before it is acknowledged first: the
    /// actor takes one step at a time.
    async fn step_commit(
        &mut self,
        step: StepId,
        index: u32,
        messages: Vec<Message>,
        mut usage: Usage,
        model: String,
    ) -> Result<(StepCommit, Arc<[Message]>), CommitError> {
        self.settle().await?;
        usage += self.ctx.take_delegated();
        let messages = crate::history::group(messages);
        let commit = StepCommit {
            step,
            index,
            messages: Arc::clone(&messages),
            usage,
            model,
            effects: std::mem::take(&mut self.effects),
        };
        Ok((commit, messages))
    }

    /// Whether a text answer made only of tool calls is taken as those calls: when tools
    /// are offered and the answer is not asked for in a shape of its own.
    pub(super) fn calls_may_be_text(&self) -> bool {
        self.request.offers_tools()
            && !self.request.has_response_format()
            && self.report_tool.is_none()
    }

    /// If the model called this turn's reporting tool, keeps only that call in the message
    /// and returns its id and arguments: the turn's typed answer.
    pub(super) fn reported(&self, assistant: &mut Message) -> Option<(String, String)> {
        let name = self.report_tool.as_deref()?;
        let (id, arguments) = assistant
            .tool_uses()
            .find(|u| u.name == name)
            .map(|u| (u.id.to_owned(), u.arguments.to_owned()))?;
        // Other calls in the same message never run, so they must not stay in the history
        // without results.
        assistant
            .content
            .retain(|b| !matches!(b, Block::ToolUse { id: other, .. } if *other != id));
        Some((id, arguments))
    }

    /// Asks the actor to journal and commit the step's group (the step.commit point of
    /// rule 5: the journal-append hooks run around the append, in the hub); the answer
    /// comes on the receiver once the journal acknowledged the group and it is published.
    pub(super) fn send(
        &self,
        commit: StepCommit,
    ) -> Result<oneshot::Receiver<Result<(), CommitError>>, CommitError> {
        let (reply, ack) = oneshot::channel();
        self.actor
            .cast(LoopMsg::Commit {
                coords: self.coords,
                commit,
                reply: reply.into(),
            })
            .map_err(|_| CommitError::ActorGone)?;
        Ok(ack)
    }

    /// Asks the actor to commit the step's group and waits for the answer.
    pub(super) async fn commit(&self, commit: StepCommit) -> Result<(), CommitError> {
        overlap::acknowledged(self.send(commit)?).await
    }
}
