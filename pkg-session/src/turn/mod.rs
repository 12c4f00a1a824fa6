//! The turn task: answers one input, step by step, outside the loop actor.
//!
//! A step streams one model response, runs its tool batch, and asks the actor to commit
//! the group. The turn owns the staged messages of the step in flight; they are dropped if
//! the step fails or is interrupted, so a discarded step leaves no trace in the history
//! (rule 4). Hooks are begun and finished here, in the order of rule 5.
//!
//! A lone step's log sync overlaps the next model call (`overlap.rs`): in a loop without
//! hooks, a tool step's commit is sent to the actor and the next request goes out at once;
//! the deltas of that request are held until the commit is acknowledged, and a refused
//! commit ends the turn there, the call in flight dropped.
//!
//! A turn restored while parked on a permission gate (see `resume.rs`) starts at that
//! step's batch: the step keeps its id and index, skips inference (the assistant message
//! is the one journaled with the gate, so no inference hooks run for it), runs its batch,
//! commits, and the turn continues with fresh steps as usual.

use std::sync::Arc;

use ractor::ActorRef;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use treadle_event::{
    Block, DeltaKind, EventKind, FailureCause, Message, ModelFailure, Role, StepId, Usage,
};
use treadle_hook::{Active, HookCall, Operation, OperationOutcome, Payload};

use crate::context::LoopContext;
use crate::history::History;
use crate::inference::{Completion, InferenceRequest, PreparedRequest, ToolChoice, ToolSpec};
use crate::protocol::{LoopMsg, TurnCoords, TurnOptions};
use crate::repeats::RepeatWatch;
use crate::resume::{Prior, Resume};
use crate::subject::StagedStep;

mod overlap;
mod tools;

use overlap::Pending;

/// How a turn ends, before it becomes a terminal event.
enum End {
    Done(String),
    Failed(FailureCause, String),
    /// The model endpoint failed ([`FailureCause::Model`]), and how.
    ModelFailed(ModelFailure, String),
    Interrupted(String),
}

/// How a step ends.
enum StepEnd {
    /// Committed; `Some(text)` when the step was the final, text-only answer.
    Committed(Option<String>),
    /// Committed, and the turn ends here: the step after a turn-ending tool, or a loop.
    Ended(End),
    Discarded(End),
}

struct Turn {
    ctx: Arc<LoopContext>,
    actor: ActorRef<LoopMsg>,
    coords: TurnCoords,
    cancel: CancellationToken,
    /// The request of the next step: the history so far, each message encoded once.
    request: PreparedRequest,
    /// The typed-output reporting tool of this turn, if it has one.
    report_tool: Option<String>,
    /// Whether the next model call's `tool_choice` was forced for the first call only.
    forced: bool,
    usage: Usage,
    steps: u32,
    /// Tool calls the turn's committed and running steps made, against the per-turn limit.
    tool_calls: u32,
    /// The parked step a restored turn starts at, taken by its first step.
    resume: Option<Resume>,
    /// The turn's recent tool interactions, for loop detection.
    repeats: RepeatWatch,
    /// A turn-ending tool succeeded: the next step is the turn's last.
    closing: bool,
    /// The step's effect results that its commit journals (see `batch_scope::Deferred`).
    effects: Vec<EventKind>,
    /// The tool exchanges the turn commits as its first step (see `seed.rs`), taken by it.
    seed: Vec<Message>,
    /// Committed steps that made no model call (the seed's): not charged to the limit.
    seeded: u32,
    /// The last step's commit, sent and not yet acknowledged (see `overlap.rs`).
    pending: Option<Pending>,
}

/// Everything a turn task starts from.
pub(crate) struct TurnStart {
    pub ctx: Arc<LoopContext>,
    pub actor: ActorRef<LoopMsg>,
    pub coords: TurnCoords,
    /// The turn's number in its loop.
    pub index: u32,
    /// The committed history, ending with this turn's input (and, for a resumed turn,
    /// the steps it committed before the crash); shared with the actor's, not copied.
    pub history: History,
    pub input: String,
    pub options: TurnOptions,
    pub cancel: CancellationToken,
    /// Set when restore resumes a turn parked on a gate.
    pub resume: Option<Resume>,
}

/// The turn task. Its start comes boxed, so that the task's future, which holds its
/// argument for the whole turn, holds a pointer to it, not the start itself (the future's
/// size is what each turn in flight costs, docs/benchmarks.md).
pub(crate) async fn run(start: Box<TurnStart>) {
    let TurnStart {
        ctx,
        actor,
        coords,
        index,
        history,
        input,
        options,
        cancel,
        resume,
    } = *start;
    let ctx_repeat_limit = ctx.batch.repeat_limit;
    let span = crate::trace::turn(&ctx.span, ctx.loop_id, index);
    let mut tools: Vec<_> = ctx
        .tools
        .specs()
        .iter()
        .map(|s| ToolSpec::clone(s))
        .collect();
    let forced = options.first_choice.is_some() && options.report_tool.is_none();
    let mut tool_choice = options.first_choice;
    let report_tool = options.report_tool.map(|spec| {
        tool_choice = Some(ToolChoice::Named(spec.name.clone()));
        let name = spec.name.clone();
        tools.push(spec);
        name
    });
    let request = PreparedRequest::with_history(
        InferenceRequest {
            system: ctx.system.clone(),
            messages: Vec::new(),
            tools,
            tool_choice,
            response_format: options.response_format,
        },
        history,
    );
    let mut turn = Turn {
        ctx,
        actor,
        coords,
        cancel,
        request,
        report_tool,
        forced,
        usage: resume.as_ref().map(|r| r.usage).unwrap_or_default(),
        steps: resume.as_ref().map_or(0, |r| r.steps),
        tool_calls: resume.as_ref().map_or(0, |r| r.tool_calls),
        resume,
        repeats: RepeatWatch::new(ctx_repeat_limit),
        closing: false,
        effects: Vec::new(),
        seed: options.seed,
        seeded: 0,
        pending: None,
    };
    let end = turn.drive(index, input).instrument(span.clone()).await;
    // Steps count model calls; the seed's step made none.
    let (usage, steps) = (turn.usage, turn.steps - turn.seeded);
    crate::trace::record_usage(&span, &usage);
    span.record(
        "turn.outcome",
        match &end {
            End::Done(_) => "done",
            End::Failed(..) | End::ModelFailed(..) => "failed",
            End::Interrupted(_) => "interrupted",
        },
    );
    let terminal = match end {
        End::Done(text) => EventKind::TurnDone { text, steps, usage },
        End::Failed(failure, error) => EventKind::TurnFailed {
            error,
            steps,
            usage,
            failure,
            model: None,
        },
        End::ModelFailed(kind, error) => EventKind::TurnFailed {
            error,
            steps,
            usage,
            failure: FailureCause::Model,
            model: Some(kind),
        },
        End::Interrupted(reason) => EventKind::TurnInterrupted {
            reason,
            steps,
            usage,
        },
    };
    // If the actor is gone the session is shutting down and nobody waits for this.
    let _ = turn.actor.cast(LoopMsg::TurnEnded { coords, terminal });
}

impl Turn {
    fn hook_call(&self, op: Operation, step: Option<StepId>, payload: Payload) -> HookCall {
        debug_assert_eq!(op, payload.operation());
        let call =
            HookCall::new(self.ctx.session, self.ctx.loop_id, payload).with_turn(self.coords.turn);
        match step {
            Some(step) => call.with_step(step),
            None => call,
        }
    }

    /// Begins the hooks' operation `op`, if the loop has hooks. Their futures and their
    /// `Active` are boxed: most loops have no hooks, and the turn task's future, held for
    /// the whole turn, would otherwise carry their room on every await (the task's size is
    /// what each turn in flight costs, docs/benchmarks.md).
    fn begin(
        &self,
        op: Operation,
        step: Option<StepId>,
        payload: impl FnOnce() -> Payload,
    ) -> impl Future<Output = Result<Option<Box<Active>>, treadle_hook::Denied>> + Send + '_ {
        let begun = (!self.ctx.hooks.is_empty())
            .then(|| Box::pin(self.ctx.hooks.begin(self.hook_call(op, step, payload()))));
        async move {
            match begun {
                Some(begun) => begun.await.map(|active| Some(Box::new(active))),
                None => Ok(None),
            }
        }
    }

    async fn drive(&mut self, index: u32, input: String) -> End {
        let turn_hook = match self
            .begin(Operation::Turn, None, || Payload::Turn { index, input })
            .await
        {
            Ok(active) => active,
            Err(denied) => return End::Failed(FailureCause::Denied, denied.to_string()),
        };
        let end = self.steps().await;
        finish(turn_hook, outcome_of(&end), None).await;
        end
    }

    /// The turn's steps; a commit still unacknowledged when they end decides the turn: its
    /// terminal comes after that step's `StepDone`, or says why the step was refused.
    async fn steps(&mut self) -> End {
        let end = self.step_loop().await;
        match self.settle().await {
            Ok(()) => end,
            Err(error) => End::Failed(FailureCause::Journal, error.to_string()),
        }
    }

    async fn step_loop(&mut self) -> End {
        if !self.seed.is_empty()
            && let Err(end) = self.seed_step().await
        {
            return end;
        }
        loop {
            if self.cancel.is_cancelled() {
                return End::Interrupted("interrupted".into());
            }
            if self.steps - self.seeded >= self.ctx.max_steps {
                return End::Failed(
                    FailureCause::Limit,
                    format!(
                        "the turn used its limit of {} steps without a final answer",
                        self.ctx.max_steps
                    ),
                );
            }
            let resume = self.resume.take();
            let (step, index) = match &resume {
                Some(resume) => (resume.staged.step, resume.staged.index),
                None => (StepId::new(), self.steps),
            };
            let step_hook = match self
                .begin(Operation::Step, Some(step), || Payload::Step { index })
                .await
            {
                Ok(active) => active,
                Err(denied) => return End::Failed(FailureCause::Denied, denied.to_string()),
            };
            let end = match resume {
                Some(resume) => {
                    // Its calls were counted against the limit before the crash.
                    let wanted = resume.staged.message.tool_uses().count();
                    self.tool_calls = self
                        .tool_calls
                        .saturating_add(u32::try_from(wanted).unwrap_or(u32::MAX));
                    self.tool_step(resume.staged, resume.prior).await
                }
                None => self.step(step, index).await,
            };
            if step_hook.is_some() {
                let outcome = match &end {
                    StepEnd::Committed(_) | StepEnd::Ended(_) => OperationOutcome::Completed,
                    StepEnd::Discarded(end) => match outcome_of(end) {
                        OperationOutcome::Completed => OperationOutcome::Failed {
                            error: "discarded".into(),
                        },
                        other => other,
                    },
                };
                finish(step_hook, outcome, None).await;
            }
            match end {
                StepEnd::Committed(Some(text)) => return End::Done(text),
                StepEnd::Committed(None) => {}
                StepEnd::Ended(end) | StepEnd::Discarded(end) => return end,
            }
        }
    }

    /// Commits the turn's seed (see `seed.rs`) as its first step, between the step's hooks
    /// like any step, with no model call: the next request carries it.
    async fn seed_step(&mut self) -> Result<(), End> {
        let (step, index) = (StepId::new(), self.steps);
        let step_hook = self
            .begin(Operation::Step, Some(step), || Payload::Step { index })
            .await
            .map_err(|denied| End::Failed(FailureCause::Denied, denied.to_string()))?;
        let messages = std::mem::take(&mut self.seed);
        let end = self
            .commit_and_count(step, index, messages, Usage::default(), String::new(), None)
            .await;
        let (outcome, result) = match end {
            StepEnd::Discarded(end) => (outcome_of(&end), Err(end)),
            _ => {
                self.seeded += 1;
                (OperationOutcome::Completed, Ok(()))
            }
        };
        finish(step_hook, outcome, None).await;
        result
    }

    async fn step(&mut self, step: StepId, index: u32) -> StepEnd {
        let completion = match self.infer(step).await {
            Ok(completion) => completion,
            Err(end) => return StepEnd::Discarded(end),
        };
        if std::mem::take(&mut self.forced) {
            self.request.clear_tool_choice();
        }
        let Completion {
            message: mut assistant,
            usage,
            model,
            ..
        } = completion;
        if let Some((call_id, answer)) = self.reported(&mut assistant) {
            let results = Message {
                role: Role::Tool,
                content: vec![Block::ToolResult {
                    call_id,
                    content: "Answer received.".into(),
                    is_error: false,
                }],
            };
            let messages = vec![assistant, results];
            return self
                .commit_and_count(step, index, messages, usage, model, Some(answer))
                .await;
        }
        let calls = assistant.tool_uses().count();
        if self.closing && calls > 0 {
            return self
                .closing_step(step, index, assistant, usage, model)
                .await;
        }
        if calls > 0 {
            let limit = self.ctx.batch.max_calls_per_turn;
            let wanted = u32::try_from(calls).unwrap_or(u32::MAX);
            if self.tool_calls.saturating_add(wanted) > limit {
                // Tool uses without results cannot be committed, so the step is discarded.
                return StepEnd::Discarded(End::Failed(
                    FailureCause::Limit,
                    format!(
                        "the turn reached its limit of {limit} tool calls: {} made, {wanted} more asked",
                        self.tool_calls
                    ),
                ));
            }
            self.tool_calls += wanted;
        }
        let staged = StagedStep {
            step,
            index,
            message: assistant,
            usage,
            model,
        };
        self.tool_step(staged, Prior::default()).await
    }

    /// The step's model call, between its inference hooks: compacts the history if due,
    /// streams the answer (publishing its deltas), and materialises the assistant message.
    /// `Err` is how the turn ends when the call fails, is denied or is interrupted.
    async fn infer(&mut self, step: StepId) -> Result<Completion, End> {
        let ctx = self.ctx.clone();
        if self.pending.is_some() && crate::compact::due(&ctx, &self.request) {
            // A compaction rewrites the history: it waits for the step before it.
            self.settle()
                .await
                .map_err(|error| End::Failed(FailureCause::Journal, error.to_string()))?;
        }
        let scope = crate::compact::CompactScope {
            ctx: &ctx,
            actor: &self.actor,
            coords: self.coords,
            step,
            cancel: &self.cancel,
        };
        crate::compact::compact_if_due(&scope, &mut self.request).await;
        let inference_hook = self
            .begin(Operation::Inference, Some(step), || Payload::Inference {
                model: ctx.client.model().to_owned(),
                request: ctx.client.body(&self.request),
            })
            .await
            .map_err(|denied| End::Failed(FailureCause::Denied, denied.to_string()))?;

        let header = ctx.turn_header(self.coords, Some(step));
        // Text that may be a tool call written as text is held until that is known: a
        // subscriber printing text deltas never prints a call's JSON (text_calls.rs).
        let takes_text_calls = self.calls_may_be_text();
        let mut held = crate::text_calls::HeldText::new(takes_text_calls);
        let publish = |kind, index, text| {
            ctx.emit_now(&header, || EventKind::TokenDelta { kind, index, text });
        };
        // While the step before this one is unacknowledged, its deltas wait here.
        let pending = self.pending.take();
        let waiting = overlap::Waiting::new(pending.is_some());
        let mut on_delta = |kind, index, text: &str| {
            let text = match kind {
                DeltaKind::Text => match held.take(text) {
                    Some(text) => text,
                    None => return,
                },
                _ => text.to_owned(),
            };
            if let Some((kind, index, text)) = waiting.hold(kind, index, text, || {
                ctx.hub.wants_ephemeral(header.loop_id)
            }) {
                publish(kind, index, text);
            }
        };
        let call = ctx.client.complete(&self.request, &mut on_delta);
        let result = match pending {
            None => tokio::select! {
                biased;
                _ = self.cancel.cancelled() => None,
                result = call => Some(result),
            },
            Some(pending) => {
                let acked = || waiting.release(publish);
                match overlap::alongside(pending.ack, call, &self.cancel, acked).await {
                    Ok(result) => result,
                    Err(error) => {
                        self.undo(pending.before);
                        finish(inference_hook, OperationOutcome::Canceled, None).await;
                        return Err(End::Failed(FailureCause::Journal, error.to_string()));
                    }
                }
            }
        };
        let mut completion = match result {
            None => {
                finish(inference_hook, OperationOutcome::Canceled, None).await;
                return Err(End::Interrupted("interrupted".into()));
            }
            Some(Err(error)) => {
                let kind = error.failure();
                let error = error.to_string();
                let outcome = OperationOutcome::Failed {
                    error: error.clone(),
                };
                finish(inference_hook, outcome, None).await;
                return Err(End::ModelFailed(kind, error));
            }
            Some(Ok(completion)) => completion,
        };
        // The one point where a message from the model is materialised: nothing it says
        // (text, reasoning, tool arguments) is staged, journaled, published or passed to a
        // tool before its secrets are scrubbed.
        ctx.secrets.scrub_message(&mut completion.message);
        // Small models often write almost-JSON arguments; what they meant is recovered here,
        // once, so the batch, the journal and the next request all see valid JSON.
        let mut calls = 0;
        if takes_text_calls {
            let prefix = format!("call_{step}");
            calls = crate::text_calls::recover_text_calls(&mut completion.message, &prefix);
        }
        let rest = held.rest();
        if calls == 0 && !rest.is_empty() {
            // Not a call after all: the text held back is the answer's, published now.
            ctx.emit(header.clone(), || EventKind::TokenDelta {
                kind: DeltaKind::Text,
                index: None,
                text: rest,
            });
        }
        crate::repair::repair_tool_uses(&mut completion.message);
        if inference_hook.is_some() {
            let output = serde_json::to_value(&completion.message).ok();
            finish(inference_hook, OperationOutcome::Completed, output).await;
        }
        Ok(completion)
    }
}

/// Finishes the hooks' operation `active`, if it began; boxed, as [`Turn::begin`] says.
fn finish(
    active: Option<Box<Active>>,
    outcome: OperationOutcome,
    output: Option<serde_json::Value>,
) -> impl Future<Output = ()> + Send {
    let finishing = active.map(|active| Box::pin((*active).finish(outcome, output)));
    async move {
        if let Some(finishing) = finishing {
            finishing.await;
        }
    }
}

fn outcome_of(end: &End) -> OperationOutcome {
    match end {
        End::Done(_) => OperationOutcome::Completed,
        End::Failed(_, error) | End::ModelFailed(_, error) => OperationOutcome::Failed {
            error: error.clone(),
        },
        End::Interrupted(_) => OperationOutcome::Canceled,
    }
}
