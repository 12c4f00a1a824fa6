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

/// The fork step `entry` starts from, when this run forks at it; an error (the step
/// fails to start) when the run forked has no session for it or no such turn.
pub(crate) async fn forked_agent(ctx: &Ctx<'_>, entry: &Entry) -> Result<Option<Forked>, String> {
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
    let found = tokio::task::spawn_blocking(move || -> Result<_, String> {
        let row = step_sessions::of(&store.database(), of, &path)
            .map_err(|e| format!("cannot read step `{name}`'s session in run {of}: {e}"))?
            .ok_or_else(|| format!("step `{name}` of run {of} had no agent session to fork"))?;
        let journal = store.journal();
        let turns = journal
            .committed_turns(row.session)
            .map_err(|e| format!("cannot read run {of}'s session {}: {e}", row.session))?;
        let point = point(&turns, at.turn, &name, of)?;
        let effects = effects_before(journal, row.session, &turns, at.turn)
            .map_err(|e| format!("cannot read run {of}'s session {}: {e}", row.session))?;
        Ok((row.session, point, effects))
    })
    .await
    .map_err(|e| e.to_string())??;
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
) -> Result<ForkPoint, String> {
    let Some(n) = turn else {
        let first = turns
            .first()
            .ok_or_else(|| format!("step `{name}` of run {of} committed no turn to fork"))?;
        return Ok(ForkPoint::BeforeTurn(first.turn));
    };
    let index = usize::try_from(n).unwrap_or(usize::MAX).saturating_sub(1);
    let chosen = turns.get(index).ok_or_else(|| {
        format!(
            "step `{name}` of run {of} has {} turn(s); there is no turn {n}",
            turns.len()
        )
    })?;
    if !chosen.ended {
        return Err(format!(
            "turn {n} of step `{name}` in run {of} did not end; fork at `{name}` or an earlier turn"
        ));
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
