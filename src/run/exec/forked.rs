//! The agent step a forked run forks (`treadle run --fork RUN --at STEP[/TURN]`): the
//! session that step had in RUN (`step_sessions`), the point of it to fork at, and what
//! that session did before the point that a fork cannot take back.
//!
//! * `--at STEP`: the fork is taken before the step's first turn: its conversation starts
//!   over with the new message (the same step, asked another way).
//! * `--at STEP/N`: after turn N of the step's session (turns count from 1), which must
//!   have ended: the conversation goes on from there with the new message.
//!
//! The session of RUN is only read; the fork is a session of its own in the same journal
//! (`SessionBuilder::fork`), which the step then runs on. Effectful tool calls journaled
//! before the point (`EffectIntent`) are named in the transcript: they happened, in RUN's
//! step directory and in the world, and the fork does not undo them.

use treadle_session::ForkPoint;
use treadle_session::event::{EventKind, SessionId, TurnId};

use super::Ctx;
use crate::pipeline::outline::Entry;
use crate::run::step_sessions;
use crate::run::transcript::Event;

/// The fork an agent step starts from.
pub(crate) struct Forked {
    /// The step's session in the run forked.
    pub parent: SessionId,
    pub point: ForkPoint,
    /// The message the step goes on with (`None`: its own prompt).
    pub prompt: Option<String>,
}

/// Why a step cannot start from the fork its run asked for (the step fails to start).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ForkError {
    #[error("cannot read step `{name}`'s session in run {of}: {source}")]
    Sessions {
        name: String,
        of: u64,
        source: crate::run::StateError,
    },
    #[error("step `{name}` of run {of} had no agent session to fork")]
    NoSession { name: String, of: u64 },
    #[error("cannot read run {of}'s session {session}: {source}")]
    Journal {
        of: u64,
        session: SessionId,
        source: treadle_session::journal::ReadError,
    },
    #[error("step `{name}` of run {of} committed no turn to fork")]
    NoTurn { name: String, of: u64 },
    #[error("step `{name}` of run {of} has {count} turn(s); there is no turn {turn}")]
    NoSuchTurn {
        name: String,
        of: u64,
        count: usize,
        turn: u32,
    },
    #[error(
        "turn {turn} of step `{name}` in run {of} did not end; fork at `{name}` or an earlier turn"
    )]
    Unended { name: String, of: u64, turn: u32 },
    #[error(transparent)]
    Stopped(#[from] crate::blocking::WorkerStopped),
}

/// The fork step `entry` starts from, when this run forks at it; an error (the step
/// fails to start) when the run forked has no session for it or no such turn.
pub(crate) async fn forked_agent(
    ctx: &Ctx<'_>,
    entry: &Entry,
) -> Result<Option<Forked>, ForkError> {
    let Some(at) = ctx
        .cache
        .as_ref()
        .and_then(|c| c.fork_at(entry.seq))
        .cloned()
    else {
        return Ok(None);
    };
    let (store, path, of) = (ctx.store.clone(), entry.path.clone(), at.of);
    let name = entry.name.clone();
    let found = crate::blocking::blocking(move || -> Result<_, ForkError> {
        let row = step_sessions::of(&store.database(), of, &path)
            .map_err(|source| ForkError::Sessions {
                name: name.clone(),
                of,
                source,
            })?
            .ok_or_else(|| ForkError::NoSession {
                name: name.clone(),
                of,
            })?;
        let session = row.session;
        let journal = store.journal();
        let unread = |source| ForkError::Journal {
            of,
            session,
            source,
        };
        let turns = journal.committed_turns(session).map_err(unread)?;
        let point = point(&turns, at.turn, &name, of)?;
        let effects = effects_before(journal, session, &turns, at.turn).map_err(unread)?;
        Ok((session, point, effects))
    })
    .await?;
    let (parent, point, effects) = found;
    let place = match at.turn {
        Some(n) => format!("after turn {n}"),
        None => "before its first turn".to_owned(),
    };
    ctx.emit(Event::Notice {
        run: ctx.run,
        text: format!(
            "`{}` forks run {of}'s session {parent} {place}: the steps before it came from run {of}, and it goes on with {}",
            entry.name,
            if at.prompt.is_some() {
                "the new message"
            } else {
                "its own prompt"
            }
        ),
    });
    if !effects.is_empty() {
        // Arguments are the model's words: masked like any output of the step.
        let effects = ctx.transcript.redactor().mask(&effects.join(", "));
        ctx.emit(Event::Notice {
            run: ctx.run,
            text: format!(
                "`{}`: these calls of run {of} ran before the fork point and had effects, which the fork does not undo (files they wrote are in run {of}'s step directory, not in this one): {}",
                entry.name, effects
            ),
        });
    }
    Ok(Some(Forked {
        parent,
        point,
        prompt: at.prompt,
    }))
}

/// The point `--at STEP[/TURN]` names in the step's committed turns.
fn point(
    turns: &[treadle_session::CommittedTurn],
    turn: Option<u32>,
    name: &str,
    of: u64,
) -> Result<ForkPoint, ForkError> {
    let name = name.to_owned();
    let Some(n) = turn else {
        let first = turns.first().ok_or(ForkError::NoTurn { name, of })?;
        return Ok(ForkPoint::BeforeTurn(first.turn));
    };
    let index = usize::try_from(n).unwrap_or(usize::MAX).saturating_sub(1);
    let Some(chosen) = turns.get(index) else {
        return Err(ForkError::NoSuchTurn {
            name,
            of,
            count: turns.len(),
            turn: n,
        });
    };
    if !chosen.ended {
        return Err(ForkError::Unended { name, of, turn: n });
    }
    Ok(ForkPoint::AfterTurn(chosen.turn))
}

/// The effectful calls (`name arguments`) journaled in the turns before the point.
fn effects_before(
    journal: &treadle_session::Journal,
    session: SessionId,
    turns: &[treadle_session::CommittedTurn],
    turn: Option<u32>,
) -> Result<Vec<String>, treadle_session::journal::ReadError> {
    let kept = usize::try_from(turn.unwrap_or(0)).unwrap_or(usize::MAX);
    let before: Vec<TurnId> = turns.iter().take(kept).map(|t| t.turn).collect();
    let events = journal.read(session, 0, None)?;
    Ok(events
        .iter()
        .filter(|(_, e)| e.header.turn.is_some_and(|t| before.contains(&t)))
        .filter_map(|(_, e)| match &e.kind {
            EventKind::EffectIntent {
                name, arguments, ..
            } => Some(format!("{name} {arguments}")),
            _ => None,
        })
        .collect())
}
