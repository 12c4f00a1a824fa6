//! The turns of one agent step on its session: the prompt, the required-tool and verdict
//! reminders, the `output_schema:` retry, and interrupting a turn when the step is cancelled.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use treadle_event::{Block, EventFilter, LoopScope, Message, Usage};
use treadle_session::{Journal, RunError, Session, Tool, TurnReport};

use super::budget::BudgetGuard;
use super::catch_up::Shown;
use super::context_files::Handed;
use super::forward::{Events, forward};
use super::interrupt::{interruptible, run_forcing, run_turn};
use super::observe::{AgentEvent, AgentObserver};
use super::record::calls_from_history;
use super::required::Required;
use super::spec::AgentStep;
use super::typed_output;
use super::verdict::{VERDICT_TOOL, VerdictSlot, reminder};

/// What every source's session is built and driven with: the same step, tools, guard and
/// verdict slot, whichever model serves.
pub(super) struct Sources<'a> {
    pub(super) step: &'a AgentStep,
    pub(super) journal: &'a Journal,
    pub(super) tools: &'a [Arc<dyn Tool>],
    pub(super) guard: &'a Arc<BudgetGuard>,
    pub(super) command_hooks: &'a [Arc<treadle_hook::CommandHook>],
    /// Their reports, shown beside the events they belong to.
    pub(super) hook_lines: &'a super::hook_order::HookLines,
    pub(super) slot: &'a VerdictSlot,
    pub(super) required: &'a Required,
    pub(super) observer: &'a dyn AgentObserver,
    pub(super) cancel: &'a CancellationToken,
}

/// Runs the step's turns (as `sources` gives it) on `session` with the guard counting its
/// usage and the observer shown its events; what they added up to and the model that
/// served.
pub(super) async fn converse(
    session: &Session,
    sources: &Sources<'_>,
) -> Result<(Turns, Option<String>), RunError> {
    sources.guard.attach(session.subscribe(EventFilter {
        ephemeral: LoopScope::None,
        enduring: LoopScope::Only(vec![session.main_loop()]),
    }));
    // A restored session is followed from its journal: what it committed before this
    // process (or before the subscription) is shown once, with the rest (`catch_up`).
    let events = match &sources.step.controls.shown {
        Some(before) if sources.step.controls.resume == Some(session.id()) => Events::Restored(
            session.subscribe_from(0, EventFilter::all())?,
            Shown::after(before.to_vec()),
        ),
        _ => {
            // What the model is told before the prompt, for the run page (a restored
            // session's was said by the process that started it).
            if let Some(system) = &sources.step.system {
                sources.observer.on_event(AgentEvent::Prompt {
                    role: "system".to_owned(),
                    text: system.clone(),
                });
            }
            Events::Live(session.subscribe(EventFilter::all()))
        }
    };
    // The forwarder ends when `drive` shuts the session down, which ends the subscription.
    let (turns, served) = tokio::join!(
        drive(session, sources),
        forward(events, sources.hook_lines, sources.observer)
    );
    Ok((turns?, served))
}

/// What the turns of a step added up to.
pub(super) struct Turns {
    pub last: TurnReport,
    pub text: String,
    pub usage: Usage,
    pub steps: u32,
    pub calls: Vec<super::RecordedCall>,
    /// The typed answer (`output_schema:`), or why there is none.
    pub typed: Option<Result<serde_json::Value, typed_output::OutputError>>,
}

impl Turns {
    /// Adds one more turn; its answer becomes the step's unless it said nothing (an answer
    /// to a reminder is often a tool call alone).
    fn absorb(&mut self, again: TurnReport) {
        self.usage += again.usage;
        self.steps += again.steps;
        if !again.is_done() || again.answer().is_ok_and(|text| !text.trim().is_empty()) {
            self.text = outcome_text(&again);
        }
        self.last = again;
    }
}

/// Runs the turn (and the verdict reminder), reads the history, and shuts the session down
/// whatever happened.
async fn drive(session: &Session, sources: &Sources<'_>) -> Result<Turns, RunError> {
    let result = turns(session, sources).await;
    let calls = match &result {
        Ok(_) => session
            .history()
            .await
            .map(|history| model_calls(sources.step, history))
            .unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    session.shutdown().await;
    result.map(|mut turns| {
        turns.calls = calls;
        turns
    })
}

async fn turns(session: &Session, sources: &Sources<'_>) -> Result<Turns, RunError> {
    let Sources {
        step,
        slot,
        required,
        observer,
        cancel,
        ..
    } = *sources;
    let prompt = match &step.controls.output {
        Some(typed) => typed_output::prompt(&step.prompt, typed),
        None => step.prompt.clone(),
    };
    let first = match step.controls.resume {
        Some(_) => super::resumed::first_turn(session, &prompt, cancel).await?,
        // Only at turn zero: a source taking over after an outage (`failover.rs`) goes on
        // with a history that already holds them.
        None if !step.handed.is_empty() && session.history().await.is_ok_and(|h| h.is_empty()) => {
            seeded_turn(session, step, &prompt, observer, cancel).await?
        }
        None => run_turn(session, &prompt, cancel).await?,
    };
    let mut turns = Turns {
        text: outcome_text(&first),
        usage: first.usage,
        steps: first.steps,
        last: first,
        calls: Vec::new(),
        typed: None,
    };
    // One count for every reminder of the step: they do not reset when what is owed
    // changes, so the bounds do not multiply.
    let mut reminded = 0;
    while turns.last.is_done() {
        let owed = required.owed();
        if owed.is_empty() || reminded >= owed.reminders() {
            break;
        }
        reminded += 1;
        observer.on_event(AgentEvent::Notice(owed.notice()));
        let again = match owed.tools.first() {
            // steps forces the tool through `tool_choice` (a named one, or the string form
            // `required` for servers that refuse it); the reminder text stays for servers
            // that ignore both, and `max_turns` is the backstop.
            Some(tool) => {
                run_forcing(session, &owed.reminder(), cancel, step.forced_choice(tool)).await?
            }
            // A file has no tool to force: the model chooses how to write it.
            None => run_turn(session, &owed.reminder(), cancel).await?,
        };
        turns.absorb(again);
    }
    if turns.last.is_done() {
        super::verdict::text_verdict(step, &turns.text, slot, observer);
    }
    if !step.verdicts.is_empty() && turns.last.is_done() && slot.get().is_none() {
        let ask = reminder(&step.verdicts);
        observer.on_event(AgentEvent::Notice(format!(
            "no verdict was given; asking once more: {ask}"
        )));
        // The answer to the reminder is often only the verdict call; the first turn's text
        // stays the step's answer unless the second one says something.
        let again = run_forcing(session, &ask, cancel, step.forced_choice(VERDICT_TOOL)).await?;
        turns.absorb(again);
    }
    if let Some(typed) = &step.controls.output
        && turns.last.is_done()
    {
        turns.typed = Some(typed_turns(session, step, typed, &mut turns, observer, cancel).await?);
    }
    Ok(turns)
}

/// Checks the answer against `output_schema:`, asks once more with the reason when it does
/// not fit, and writes the valid answer to its output.
async fn typed_turns(
    session: &Session,
    step: &AgentStep,
    typed: &super::controls::TypedOutput,
    turns: &mut Turns,
    observer: &dyn AgentObserver,
    cancel: &CancellationToken,
) -> Result<Result<serde_json::Value, typed_output::OutputError>, RunError> {
    let checked = match typed_output::check(&turns.text, typed) {
        Ok(value) => Ok(value),
        Err(reason) => {
            observer.on_event(AgentEvent::Notice(format!(
                "the answer does not match output_schema; asking once more: {reason}"
            )));
            let again =
                run_turn(session, &typed_output::retry(&reason.to_string()), cancel).await?;
            turns.usage += again.usage;
            turns.steps += again.steps;
            turns.text = outcome_text(&again);
            let done = again.is_done();
            turns.last = again;
            if done {
                typed_output::check(&turns.text, typed)
            } else {
                // The retry's own failure (budget, interrupt) is the step's status.
                Err(reason)
            }
        }
    };
    Ok(checked.and_then(|value| {
        typed_output::write(&step.dir, typed, &value)?;
        Ok(value)
    }))
}

/// The answer of a turn, or the reason it has none (for the step's record).
fn outcome_text(report: &TurnReport) -> String {
    match report.answer() {
        Ok(text) => text.to_owned(),
        Err(why) => why.to_string(),
    }
}

/// The calls the model made in `history`: the calls that handed the step what it starts
/// with are treadle's, and no `tool_calls:` assert counts them.
fn model_calls(step: &AgentStep, mut history: Vec<Message>) -> Vec<super::RecordedCall> {
    let handed: Vec<String> = (0..step.handed.len()).map(Handed::call_id).collect();
    if !handed.is_empty() {
        for message in &mut history {
            message
                .content
                .retain(|b| !matches!(b, Block::ToolUse { id, .. } if handed.contains(id)));
        }
    }
    calls_from_history(&history)
}

/// Runs the step's first turn with what it is handed (`context: { from }` decisions as
/// `read_step`, `context_paths:` files as `read_file`) as calls and results after the
/// prompt, as though the model had made them (steps' turn zero): no model call is spent on
/// them, and the transcript says what was handed.
async fn seeded_turn(
    session: &Session,
    step: &AgentStep,
    prompt: &str,
    observer: &dyn AgentObserver,
    cancel: &CancellationToken,
) -> Result<TurnReport, RunError> {
    for handed in &step.handed {
        observer.on_event(AgentEvent::Notice(handed.notice()));
    }
    let seed = step
        .handed
        .iter()
        .enumerate()
        .map(|(i, handed)| handed.seeded(i))
        .collect();
    interruptible(session, session.turn(prompt).seeded(seed).run(), cancel).await
}
