//! What most programs use, in one import: `use treadle_session::prelude::*;`.
//!
//! A session and its builder, tools and the `#[schema]` attribute their arguments take,
//! a turn's items, hooks and policies, gates and their answers, the event filter and kinds
//! a subscriber matches on, and the umbrella [`Error`]. Everything else is at the crate
//! root or in its modules. A name of yours with the same name wins over the glob.

pub use crate::hook::{
    Action, Decision, Hook, HookCall, Json, Operation, OperationOutcome, Policy,
};
pub use crate::{
    CatchUpItem, Effect, Error, FnTool, GateAnswer, GateQuestion, RestoreError, Session,
    SessionBuilder, Tool, ToolError, TurnItem, async_trait, schema,
};
pub use treadle_event::{DeltaKind, EventFilter, EventKind, SessionId};
