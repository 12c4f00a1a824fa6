//! The loop actor: the only writer of a loop's committed history, inbox and status.
//!
//! The actor never awaits a model or a tool. It starts a turn task per input and takes that
//! task's commit requests as messages. A commit is journaled first; only after the journal
//! acknowledges it do the messages join the history and the event reach subscribers
//! (rule 2, commit-before-publish).

use std::collections::VecDeque;
use std::sync::Arc;

use futures::future::Either;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio_util::sync::CancellationToken;
use treadle_event::{Event, EventKind, Header, InputId, Message, TurnId};

use crate::context::LoopContext;
use crate::error::{CommitError, GateError, SubmitError};
use crate::gate::Gates;
use crate::history::History;
use crate::journal::AppendError;
use crate::protocol::{LoopMsg, StepCommit, TurnCoords, TurnOptions};
use crate::resume::ResumedTurn;
use crate::turn::{self, TurnStart};

pub(crate) struct LoopActor;

pub(crate) struct LoopState {
    ctx: Arc<LoopContext>,
    history: History,
    queue: VecDeque<(InputId, String, TurnOptions)>,
    running: Option<Running>,
    turns_started: u32,
    stopping: Option<Stopping>,
    /// Permission gates waiting for an answer.
    gates: Gates,
    /// A turn restore resumes, started once the actor runs. Boxed: a turn's start is large,
    /// and this is empty but for a moment after a restore.
    resuming: Option<Box<TurnStart>>,
}

struct Running {
    coords: TurnCoords,
    cancel: CancellationToken,
}

struct Stopping {
    reason: String,
    replies: Vec<RpcReplyPort<()>>,
}

pub(crate) struct LoopArgs {
    pub ctx: Arc<LoopContext>,
    pub history: History,
    /// Turns this loop already ran (non-zero after a restore); numbers the next turn.
    pub turns_started: u32,
    /// A turn that was parked on a gate at a crash, to resume (see `resume.rs`).
    pub resume: Option<ResumedTurn>,
}

impl Actor for LoopActor {
    type Msg = LoopMsg;
    type State = LoopState;
    type Arguments = LoopArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<LoopMsg>,
        args: LoopArgs,
    ) -> Result<LoopState, ActorProcessingErr> {
        let mut state = LoopState {
            ctx: args.ctx,
            history: args.history,
            queue: VecDeque::new(),
            running: None,
            turns_started: args.turns_started,
            stopping: None,
            gates: Gates::default(),
            resuming: None,
        };
        if let Some(resumed) = args.resume {
            // The resumed turn is running from the first message on: its gates can be
            // answered, and a submit queues behind it, as before the crash.
            let coords = resumed.coords;
            for gate in resumed.gates {
                state.gates.adopt(coords, gate);
            }
            let cancel = CancellationToken::new();
            state.running = Some(Running {
                coords,
                cancel: cancel.clone(),
            });
            state.resuming = Some(Box::new(TurnStart {
                ctx: state.ctx.clone(),
                actor: myself,
                coords,
                index: resumed.index,
                history: state.history.clone(),
                input: resumed.input,
                // Typed-output options are not journaled, and whoever asked is gone.
                options: TurnOptions::default(),
                cancel,
                resume: Some(resumed.turn),
            }));
        }
        Ok(state)
    }

    async fn post_start(
        &self,
        _myself: ActorRef<LoopMsg>,
        state: &mut LoopState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(start) = state.resuming.take() {
            tokio::spawn(turn::run(start));
        }
        Ok(())
    }

    fn handle(
        &self,
        myself: ActorRef<LoopMsg>,
        message: LoopMsg,
        state: &mut LoopState,
    ) -> impl Future<Output = Result<(), ActorProcessingErr>> + Send {
        // ractor keeps the future this returns, twice over, in the box of the actor's loop
        // for the session's whole life, idle or not. So it is only a step's commit (the
        // message of every step); the other messages are answered here or in a boxed
        // future of their own (docs/benchmarks.md, the idle session).
        match message {
            LoopMsg::Commit {
                coords,
                commit,
                reply,
            } => Either::Left(async move {
                let result = state.commit(coords, commit).await;
                let _ = reply.send(result);
                Ok(())
            }),
            message => Either::Right(match state.handle_at_once(message) {
                None => Either::Left(std::future::ready(Ok(()))),
                Some(message) => Either::Right(Box::pin(async move {
                    state.handle_awaited(&myself, message).await;
                    Ok(())
                })),
            }),
        }
    }
}

impl LoopState {
    /// Handles a message that needs no wait; gives back one that does.
    fn handle_at_once(&mut self, message: LoopMsg) -> Option<LoopMsg> {
        match message {
            LoopMsg::Interrupt { reply } => {
                let interrupted = match &self.running {
                    Some(running) => {
                        running.cancel.cancel();
                        true
                    }
                    None => false,
                };
                let _ = reply.send(interrupted);
            }
            LoopMsg::Cancel => {
                if let Some(running) = &self.running {
                    running.cancel.cancel();
                }
            }
            LoopMsg::History { reply } => {
                let _ = reply.send(self.history.to_vec());
            }
            LoopMsg::Record {
                header,
                kind,
                reply,
            } => {
                // Not awaited here: the intents of a batch's parallel calls then reach the
                // journal writer together and share its batches (one fsync), instead of
                // one fsync each in turn. Each call still waits for its own ack.
                let ctx = self.ctx.clone();
                tokio::spawn(async move {
                    let _ = reply.send(ctx.record(header, kind).await);
                });
            }
            message => return Some(message),
        }
        None
    }

    /// Handles a message that waits for the journal, but for a step's commit, which
    /// `handle` awaits itself (inline, so that its future stays small).
    async fn handle_awaited(&mut self, myself: &ActorRef<LoopMsg>, message: LoopMsg) {
        match message {
            LoopMsg::Submit {
                text,
                options,
                reply,
            } => {
                let result = self.submit(myself, text, options).await;
                let _ = reply.send(result);
            }
            LoopMsg::TurnEnded { coords, terminal } => {
                self.turn_ended(myself, coords, terminal).await;
            }
            LoopMsg::Compact {
                coords,
                compacted,
                reply,
            } => {
                let result = self.compact(coords, compacted).await;
                let _ = reply.send(result);
            }
            LoopMsg::OpenGate { request, reply } => {
                let result = self.gates.open(&self.ctx, request).await;
                let _ = reply.send(result);
            }
            LoopMsg::ResolveGate {
                gate,
                answer,
                reply,
            } => {
                let result = self.gates.resolve(&self.ctx, gate, answer).await;
                match reply {
                    Some(reply) => {
                        let _ = reply.send(result);
                    }
                    // An on_gate handler's answer the gate refused: it stays open.
                    None => {
                        if let Err(GateError::Refused { reason, .. }) = result {
                            tracing::warn!(%gate, %reason, "a gate refused its handler's answer");
                        }
                    }
                }
            }
            LoopMsg::Shutdown { reason, reply } => {
                self.begin_shutdown(reason, reply).await;
                self.finish_shutdown_if_idle(myself).await;
            }
            // Answered by `handle` (a step's commit) and `handle_at_once` (the rest).
            LoopMsg::Commit { .. }
            | LoopMsg::Interrupt { .. }
            | LoopMsg::Cancel
            | LoopMsg::History { .. }
            | LoopMsg::Record { .. } => {}
        }
    }

    /// Journals an enduring event, then publishes it (rule 2).
    async fn record(&self, header: Header, kind: EventKind) -> Result<u64, AppendError> {
        self.ctx.record(header, kind).await
    }

    async fn submit(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        text: String,
        options: TurnOptions,
    ) -> Result<InputId, SubmitError> {
        if self.stopping.is_some() {
            return Err(SubmitError::Closed);
        }
        let input = InputId::new();
        if self.running.is_none() && self.queue.is_empty() {
            self.start_turn(myself, input, text, options).await?;
            return Ok(input);
        }
        if self.queue.len() >= self.ctx.queue_capacity {
            let capacity = self.ctx.queue_capacity;
            let reason = format!(
                "the input queue is full ({capacity} waiting); submit again after a turn ends"
            );
            self.record(
                self.ctx.loop_header(),
                EventKind::InputCancelled { input, reason },
            )
            .await?;
            return Err(SubmitError::QueueFull { input, capacity });
        }
        self.queue.push_back((input, text, options));
        self.ctx
            .emit(self.ctx.loop_header(), || EventKind::InputQueued {
                input,
                position: self.queue.len() as u32,
            });
        Ok(input)
    }

    async fn start_turn(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        input: InputId,
        text: String,
        options: TurnOptions,
    ) -> Result<(), AppendError> {
        let coords = TurnCoords {
            turn: TurnId::new(),
            input,
        };
        let message = Message::user(text.clone());
        self.record(
            self.ctx.turn_header(coords, None),
            EventKind::TurnStarted {
                input,
                message: message.clone(),
            },
        )
        .await?;
        self.history.push(message);
        let cancel = CancellationToken::new();
        self.running = Some(Running {
            coords,
            cancel: cancel.clone(),
        });
        let index = self.turns_started;
        self.turns_started += 1;
        tokio::spawn(turn::run(Box::new(TurnStart {
            ctx: self.ctx.clone(),
            actor: myself.clone(),
            coords,
            index,
            history: self.history.clone(),
            input: text,
            options,
            cancel,
            resume: None,
        })));
        Ok(())
    }

    async fn commit(&mut self, coords: TurnCoords, commit: StepCommit) -> Result<(), CommitError> {
        if self.running.as_ref().map(|r| r.coords.turn) != Some(coords.turn) {
            return Err(CommitError::NotRunning);
        }
        // The step's last effect result goes in the same append, before the StepDone: one
        // log sync for both (see `batch_scope::Deferred`). Each event gets a header of its
        // own: a header carries the event's id, and the journal keeps one event per id.
        let header = || self.ctx.turn_header(coords, Some(commit.step));
        let mut events: Vec<Event> = commit
            .effects
            .into_iter()
            .map(|kind| Event::new(header(), kind))
            .collect();
        // Shared with the event and the turn's request, not copied.
        let messages = Arc::clone(&commit.messages);
        events.push(Event::new(
            header(),
            EventKind::StepDone {
                index: commit.index,
                messages: commit.messages,
                usage: commit.usage,
                model: commit.model,
            },
        ));
        // Journaled and acknowledged before anyone sees it (rule 2); the messages join the
        // history only after that acknowledgement.
        self.ctx.hub.commit_group(events).await?;
        self.history.push_group(messages);
        Ok(())
    }

    /// Journals a compaction of the running turn, then applies it to the history (rule 2:
    /// the journal first, like a step's commit).
    async fn compact(
        &mut self,
        coords: TurnCoords,
        compacted: crate::protocol::Compacted,
    ) -> Result<(), CommitError> {
        if self.running.as_ref().map(|r| r.coords.turn) != Some(coords.turn) {
            return Err(CommitError::NotRunning);
        }
        let replaced = compacted.replaced.min(self.history.len());
        let event = Event::new(
            self.ctx.turn_header(coords, None),
            EventKind::Compacted {
                replaced: u32::try_from(replaced).unwrap_or(u32::MAX),
                summary: compacted.summary.clone(),
                tokens_before: compacted.tokens_before,
                tokens_after: compacted.tokens_after,
            },
        );
        self.ctx.hub.commit(event).await?;
        // The history is rewritten as one group (compactions are rare).
        let mut messages = self.history.to_vec();
        crate::compact::apply(&mut messages, replaced, compacted.summary);
        self.history = History::from(messages);
        Ok(())
    }

    async fn turn_ended(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        coords: TurnCoords,
        terminal: EventKind,
    ) {
        if self.running.as_ref().map(|r| r.coords.turn) != Some(coords.turn) {
            return;
        }
        // Gates of the turn close before its terminal, so none outlives its turn.
        self.gates.close_turn(&self.ctx, coords.turn).await;
        if let Err(error) = self
            .record(self.ctx.turn_header(coords, None), terminal)
            .await
        {
            tracing::error!(%error, turn = %coords.turn, "could not journal the end of a turn");
        }
        self.running = None;
        if self.stopping.is_some() {
            self.finish_shutdown_if_idle(myself).await;
            return;
        }
        while let Some((input, text, options)) = self.queue.pop_front() {
            match self.start_turn(myself, input, text, options).await {
                Ok(()) => break,
                Err(error) => {
                    tracing::error!(%error, %input, "could not start a queued turn");
                }
            }
        }
        if self.running.is_none() {
            // Parked until the next input, perhaps for long: hold the history, not the
            // room it grew into (a Vec doubles), and no empty queue's buffer.
            self.history.shrink_to_fit();
            self.queue.shrink_to_fit();
        }
    }

    async fn begin_shutdown(&mut self, reason: String, reply: Option<RpcReplyPort<()>>) {
        // A restore may now wait for this session's loops to end instead of refusing.
        self.ctx.claim.mark_stopping();
        let stopping = self.stopping.get_or_insert_with(|| Stopping {
            reason,
            replies: Vec::new(),
        });
        stopping.replies.extend(reply);
        if let Some(running) = &self.running {
            running.cancel.cancel();
        }
        for (input, _, _) in std::mem::take(&mut self.queue) {
            let kind = EventKind::InputCancelled {
                input,
                reason: "the session shut down before this input ran".into(),
            };
            if let Err(error) = self.record(self.ctx.loop_header(), kind).await {
                tracing::error!(%error, %input, "could not journal a cancelled input");
            }
        }
    }

    async fn finish_shutdown_if_idle(&mut self, myself: &ActorRef<LoopMsg>) {
        if self.running.is_some() {
            return;
        }
        let Some(stopping) = self.stopping.take() else {
            return;
        };
        // Sub-agent loops stop quietly; the main loop speaks for the session.
        if self.ctx.owns_session {
            let header = Header::session(self.ctx.session);
            let kind = EventKind::SessionStopped {
                reason: stopping.reason,
            };
            if let Err(error) = self.record(header, kind).await {
                tracing::error!(%error, "could not journal the end of the session");
            }
            self.ctx.hub.close();
        }
        for reply in stopping.replies {
            let _ = reply.send(());
        }
        // Later messages find the actor gone and get SessionClosed.
        myself.stop(None);
        self.stopping = Some(Stopping {
            reason: String::new(),
            replies: Vec::new(),
        });
    }
}
