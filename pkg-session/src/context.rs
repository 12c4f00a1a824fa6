//! What every turn of a loop shares: its coordinates, model client, tools, hooks and hub.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use treadle_event::{Cause, Event, EventKind, Header, LoopId, SessionId, StepId, Usage};
use treadle_hook::HookRunner;

use crate::approvals::Approvals;
use crate::compaction::Compaction;
use crate::hub::Hub;
use crate::inference::ModelClient;
use crate::journal::{AppendError, SessionClaim};
use crate::protocol::TurnCoords;
use crate::redact::Secrets;
use crate::subject::GateHandler;
use crate::tool::ToolSet;

/// The fixed configuration of one loop. Built once; turns hold it behind an `Arc`.
pub(crate) struct LoopContext {
    pub session: SessionId,
    pub loop_id: LoopId,
    pub client: ModelClient,
    pub tools: ToolSet,
    pub hooks: HookRunner,
    pub hub: Hub,
    pub system: Option<String>,
    pub max_steps: u32,
    pub queue_capacity: usize,
    /// Tokens spent by sub-agent loops on behalf of this loop's running step; the step
    /// takes them when it commits, so a delegation is charged to the step that asked.
    pub delegated: Arc<Mutex<Usage>>,
    /// How tool batches and permission gates run.
    pub batch: BatchConfig,
    /// Whether this is the main loop, which records the session's end and closes its hub.
    pub owns_session: bool,
    /// The session's claim on its journal, held by every loop until it stops (rule 1).
    pub claim: Arc<SessionClaim>,
    /// Scrubbed from each assistant message before it goes anywhere.
    pub secrets: Arc<Secrets>,
    /// The session's tracing span, parent of every turn's span (see `trace`).
    pub span: tracing::Span,
    /// How the loop's history is kept within its budget.
    pub compaction: Compaction,
}

/// How a loop runs tool batches and permission gates (set on the session builder).
#[derive(Clone)]
pub(crate) struct BatchConfig {
    /// Most calls of one batch that execute at once.
    pub max_parallel: usize,
    /// Most tool calls one turn may make; the step that would pass it ends the turn.
    pub max_calls_per_turn: u32,
    /// How long a permission gate waits for an answer before it denies (`Expired`).
    pub gate_deadline: Duration,
    /// Nobody can answer a gate: an `Ask` is denied with `approval_required`.
    pub headless: bool,
    /// Tools approved with `ApproveAlways`, shared by every loop of the session.
    pub approvals: Approvals,
    /// Answers every gate the session opens, if set.
    pub on_gate: Option<GateHandler>,
    /// Identical tool interactions allowed in a turn's recent steps before the model is
    /// nudged (see `repeats.rs`); `0` turns loop detection off.
    pub repeat_limit: u32,
    /// What a restore does with an effectful call a crash interrupted.
    pub unfinished_effects: crate::effect::EffectPolicy,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_parallel: 8,
            max_calls_per_turn: 256,
            gate_deadline: Duration::from_secs(600),
            headless: false,
            approvals: Approvals::default(),
            on_gate: None,
            repeat_limit: crate::repeats::DEFAULT_REPEAT_LIMIT,
            unfinished_effects: crate::effect::EffectPolicy::Ask,
        }
    }
}

impl LoopContext {
    pub(crate) fn loop_header(&self) -> Header {
        Header::in_loop(self.session, self.loop_id)
    }

    pub(crate) fn turn_header(&self, coords: TurnCoords, step: Option<StepId>) -> Header {
        let header = self
            .loop_header()
            .with_turn(coords.turn)
            .with_cause(Cause::Input(coords.input));
        match step {
            Some(step) => header.with_step(step),
            None => header,
        }
    }

    /// Takes the tokens sub-agents spent for this loop since the last call.
    pub(crate) fn take_delegated(&self) -> Usage {
        std::mem::take(
            &mut *self
                .delegated
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Journals an enduring event, then publishes it (rule 2, see [`Hub::commit`]). Only
    /// the loop actor calls this: it is the loop's single journal writer.
    pub(crate) async fn record(&self, header: Header, kind: EventKind) -> Result<u64, AppendError> {
        self.hub.commit(Event::new(header, kind)).await
    }

    /// Publishes an ephemeral event. Never journaled, never blocks. `kind` is built only
    /// when a subscriber takes the loop's ephemeral events: most turns (`TurnRequest::run`, a
    /// pipeline step) have none, and building each token delta's event (its id, time,
    /// text and `Arc`) for nobody was a measurable share of a step (docs/benchmarks.md).
    pub(crate) fn emit(&self, header: Header, kind: impl FnOnce() -> EventKind) {
        if !self.hub.wants_ephemeral(header.loop_id) {
            return;
        }
        let kind = kind();
        debug_assert!(!kind.class().is_enduring());
        self.hub.publish(Arc::new(Event::new(header, kind)), None);
    }

    /// [`Self::emit`], stamped (time and id) when it is published rather than when
    /// `header` was made: a model call's deltas share one header made before its request,
    /// and a delta carrying that time would say the first token came at once.
    pub(crate) fn emit_now(&self, header: &Header, kind: impl FnOnce() -> EventKind) {
        if !self.hub.wants_ephemeral(header.loop_id) {
            return;
        }
        let header = Header {
            id: treadle_event::EventId::new(),
            at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            ..header.clone()
        };
        self.emit(header, kind);
    }
}
