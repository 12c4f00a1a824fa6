//! [`run_agent_step`]: one agent step as one session turn (two when a verdict is missing).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use treadle_event::Usage;
use treadle_hook::HookEvent;
use treadle_session::event::FailureCause;
use treadle_session::{Journal, Tool, TurnOutcome};

use super::budget::{BudgetGuard, add_costs};
use super::controls::{ConfidenceFloor, Escalation, Question, QuestionKind};
use super::cost::{Cost, cost};
use super::delegate::{Parent, Runner};
use super::error::AgentError;
use super::escalation;
use super::mcp::StepServers;
use super::observe::{AgentEvent, AgentObserver};
use super::record::{AgentOutcome, AgentStatus};
use super::required::Required;
use super::session_builder::{secret_values, session_builder};
use super::spec::AgentStep;
use super::turns::converse;
use super::verdict::{VerdictSlot, VerdictTool};
use crate::pipeline::mcp::server_of;
use crate::tools::{Workspace, grant};

/// Runs one agent step: starts a session on `journal` with the step's tools confined to its
/// directory, runs the prompt as one turn, and reports what happened.
///
/// * The MCP servers the grant names are started first and stopped when the step ends,
///   whatever happened; a server that does not start fails the step with
///   [`AgentError::Mcp`].
/// * Text, tool calls, tool results and finally tokens and cost are shown to `observer`
///   as they happen.
/// * With `verdicts`, a `verdict` tool is added. A turn that ends without a valid verdict
///   is followed by one more turn asking for it; a second miss is
///   [`AgentStatus::NoVerdict`].
/// * A token budget refuses the next model call once spent:
///   [`AgentStatus::BudgetExceeded`].
/// * `cancel` interrupts the turn (Ctrl-C, the step's timeout): [`AgentStatus::Interrupted`].
///
/// The API key is read from its variable by the session and is hidden from `run_shell`'s
/// environment; it appears in no event, outcome or error.
pub async fn run_agent_step(
    step: &AgentStep,
    journal: &Journal,
    observer: &dyn AgentObserver,
    cancel: &CancellationToken,
) -> Result<AgentOutcome, AgentError> {
    if step.model.provider == crate::pipeline::model::CLI_PROVIDER {
        return super::cli::run_cli_step(step, observer, cancel).await;
    }
    // Sub-agents report through a channel (their tools outlive this borrow of `observer`);
    // it is drained here while the step runs, and once more after.
    let (events, mut nested) = tokio::sync::mpsc::unbounded_channel();
    let work = run_step(step, journal, observer, cancel, events);
    tokio::pin!(work);
    let result = loop {
        tokio::select! {
            Some(event) = nested.recv() => observer.on_event(event),
            result = &mut work => break result,
        }
    };
    while let Ok(event) = nested.try_recv() {
        observer.on_event(event);
    }
    result
}

/// What the step's sessions share besides their tools: the sub-agents' account and the
/// required tools' tallies.
struct Links {
    parent: Parent,
    required: Required,
}

/// Runs a sub-agent's step with this same runner, on `journal`.
fn runner(journal: &Journal) -> Runner {
    let journal = journal.clone();
    Arc::new(move |step, observer, cancel| {
        let journal = journal.clone();
        Box::pin(async move {
            run_agent_step(&step, &journal, observer.as_ref(), &cancel)
                .await
                .map_err(super::delegate::RunFailure::from)
        })
    })
}

async fn run_step(
    step: &AgentStep,
    journal: &Journal,
    observer: &dyn AgentObserver,
    cancel: &CancellationToken,
    events: tokio::sync::mpsc::UnboundedSender<AgentEvent>,
) -> Result<AgentOutcome, AgentError> {
    let workspace = Workspace::new(&step.dir)?
        .with_env(step.env.iter().cloned())
        .hide_env(
            step.secret_vars
                .iter()
                .chain(&step.model.api_key_env)
                .cloned(),
        )
        .with_access(step.pass_env.iter().cloned(), step.confined)
        .with_network(step.network.clone())
        .with_fence(step.granted.fence.clone());
    // The keys' values, so that a tool result carrying one (an artifact a task wrote, a
    // command's output) reaches neither the model nor the journal in the state file.
    let secrets = secret_values(step);
    // MCP names (`server__tool`, `server__*`) go to their servers; custom tools and
    // sub-agents are the grant's own; the rest are built in.
    let (remote, builtin): (Vec<&str>, Vec<&str>) = step
        .tools
        .iter()
        .map(String::as_str)
        .filter(|t| !step.granted.owns(t))
        .partition(|t| server_of(t).is_some());
    let mut tools = grant(&builtin, &workspace)?;
    let parent = Parent {
        step: step.clone(),
        run: runner(journal),
        events,
        cancel: cancel.clone(),
        delegated: Arc::default(),
        guard: Arc::default(),
        session: Arc::default(),
    };
    let own = step.granted.build(&workspace, &parent)?;
    tools.extend(own.tools);
    let links = Links {
        parent,
        required: own.required.with_files(&step.dir, &step.owed_files),
    };
    let mcp = super::mcp::confined(&step.mcp, &workspace, &step.controls.hooks.project);
    let (servers, remote_tools) = StepServers::start(&mcp, &remote).await?;
    tools.extend(super::call_budget::limit(
        remote_tools,
        &step.granted.mcp_limits,
    ));
    // MCP results are masked too: a stdio server inherits the environment, key included.
    let tools = match &step.controls.wrap_tools {
        Some(wrap) => wrap(tools),
        None => tools,
    };
    let tools = crate::tools::Masked::wrap_all(tools, &secrets);
    let result = match run_session(step, journal, observer, cancel, tools.clone(), &links).await {
        Ok(outcome) => escalate(step, journal, observer, cancel, tools, outcome, &links).await,
        Err(e) => Err(e),
    };
    servers.shutdown().await;
    result.map(|outcome| with_delegated(outcome, &links))
}

/// Tells the step's `on_session` (a sub-agent's session is its parent's call, not the
/// step's) the id of its session, off the async threads: it writes to the state file.
async fn noted(step: &AgentStep, id: treadle_session::event::SessionId) {
    if let (Some(note), None) = (step.controls.on_session.clone(), &step.parent)
        && let Err(e) = tokio::task::spawn_blocking(move || note(id)).await
    {
        tracing::warn!("keeping the id of session {id}: {e}");
    }
}

/// The outcome with the tokens and cost of the step's sub-agents added.
fn with_delegated(mut outcome: AgentOutcome, links: &Links) -> AgentOutcome {
    (outcome.usage, outcome.cost) = with_delegated_usage(outcome.usage, outcome.cost, links);
    outcome
}

fn with_delegated_usage(mut usage: Usage, mut spent: Cost, links: &Links) -> (Usage, Cost) {
    if let Some((theirs, their_cost)) = links.parent.delegated.spent() {
        usage += theirs;
        spent = add_costs(spent, their_cost);
    }
    (usage, spent)
}

/// Escalates a verdict below the step's `min_confidence:`: to the stronger agent named in
/// `escalate_to:` (which decides again in a session of its own, with the same tools), and
/// when that too is unsure, or when `escalate_to` is a person, to a person through the
/// step's asker. Each escalation is shown and kept in the outcome.
async fn escalate(
    step: &AgentStep,
    journal: &Journal,
    observer: &dyn AgentObserver,
    cancel: &CancellationToken,
    tools: Vec<Arc<dyn Tool>>,
    mut outcome: AgentOutcome,
    links: &Links,
) -> Result<AgentOutcome, AgentError> {
    let Some(floor) = &step.controls.confidence else {
        return Ok(outcome);
    };
    if let Escalation::Agent { name, model } = &floor.escalate_to
        && let Some(low) = escalation::below(floor, &outcome)
    {
        observer.on_event(AgentEvent::Notice(format!(
            "verdict `{}` at confidence {:.2} is below min_confidence {:.2}: agent `{name}` decides again",
            low.verdict, low.confidence, low.min_confidence
        )));
        let mut stronger = step.clone();
        // It decides again in a session of its own, which a resume does not restore.
        stronger.controls.resume = None;
        stronger.controls.on_session = None;
        stronger.model = (**model).clone();
        stronger.controls.confidence = Some(ConfidenceFloor {
            min: floor.min,
            escalate_to: Escalation::Human,
        });
        let again = run_session(&stronger, journal, observer, cancel, tools, links).await?;
        outcome = escalation::decided_again(outcome, low, name, again);
    }
    let Some(low) = escalation::below(floor, &outcome) else {
        return Ok(outcome);
    };
    let question = escalation::question(&step.name, &low);
    observer.on_event(AgentEvent::Notice(format!(
        "escalated to a person: {question}"
    )));
    let answer = step
        .controls
        .ask(Question {
            kind: QuestionKind::Escalation,
            message: question,
        })
        .await;
    let outcome = escalation::answered(outcome, low, &answer);
    if let Some(last) = outcome.escalations.last() {
        observer.on_event(AgentEvent::Notice(format!("escalation {}", last.result)));
    }
    Ok(outcome)
}

/// Runs the `session_start` or `session_end` command hooks of a step's session.
async fn notify(
    hooks: &[Arc<treadle_hook::CommandHook>],
    event: HookEvent,
    session: &treadle_session::Session,
) {
    for hook in hooks {
        hook.notify(event, session.id(), session.main_loop()).await;
    }
}

/// Runs the session of the step with its tools (the verdict tool is added here).
async fn run_session(
    step: &AgentStep,
    journal: &Journal,
    observer: &dyn AgentObserver,
    cancel: &CancellationToken,
    mut tools: Vec<Arc<dyn Tool>>,
    links: &Links,
) -> Result<AgentOutcome, AgentError> {
    let slot = VerdictSlot::default();
    if !step.verdicts.is_empty() {
        let tool =
            VerdictTool::new(step.verdicts.clone(), slot.clone()).owing(links.required.clone());
        tools.push(Arc::new(if step.controls.confidence.is_some() {
            tool.with_confidence()
        } else {
            tool
        }));
    }
    let guard = Arc::new(
        BudgetGuard::new(step.budgets.clone())
            .with_dollars(step.controls.dollars.clone(), step.price(&step.model.model))
            .with_delegated(links.parent.delegated.clone()),
    );

    let (reports, hook_lines) = super::hook_order::HookLines::new();
    let command_hooks = step.controls.hooks.build(&step.name, &step.dir, reports);
    let builder = session_builder(step, journal, tools.clone(), guard.clone(), &command_hooks);
    // A step taken over from a worker that stopped goes on from its session.
    let (session, asking) = match step.controls.resume {
        Some(id) => {
            let session = builder.restore(id).await?;
            let asking = super::resumed::answer_open_gates(&session, step)?;
            (session, asking)
        }
        None => match step.controls.fork {
            Some((parent, point)) => (
                builder.fork(parent, point).await?,
                super::resumed::OpenGates::none(),
            ),
            None => (builder.start().await?, super::resumed::OpenGates::none()),
        },
    };
    noted(step, session.id()).await;
    links.parent.attach(session.id(), &guard);
    if let Some(link) = &step.parent {
        observer.on_event(AgentEvent::Notice(format!(
            "session {} answers the `{}` call of session {}",
            session.id(),
            link.tool,
            link.session
        )));
    }

    let sources = super::turns::Sources {
        step,
        journal,
        tools: &tools,
        guard: &guard,
        command_hooks: &command_hooks,
        hook_lines: &hook_lines,
        slot: &slot,
        required: &links.required,
        observer,
        cancel,
    };
    notify(&command_hooks, HookEvent::SessionStart, &session).await;
    let conversed = match converse(&session, &sources).await {
        Ok((turns, served)) => sources.cascade(session.id(), turns, served).await,
        Err(e) => Err(AgentError::from(e)),
    };
    notify(&command_hooks, HookEvent::SessionEnd, &session).await;
    // What no event followed (`session_end`'s, the last call's when the session stopped).
    hook_lines.rest(observer);
    let (turns, served, fell_back) = conversed?;
    drop(asking);

    // The answer to the reminder may be the verdict word as text too.
    if turns.last.is_done() {
        super::verdict::text_verdict(step, &turns.text, &slot, observer);
    }
    let verdict = slot.get();
    let status = owed_files_failure(step_status(step, &turns, &guard, &slot, links), links);
    let model = served.unwrap_or_else(|| step.model.model.clone());
    // After a failover each source's calls cost its own model's price.
    let price = step.price(&model);
    let cost = match &fell_back {
        Some(f) => f.cost(price.as_ref()),
        None => cost(&turns.usage, price.as_ref()),
    };
    // What the step's line shows includes its sub-agents; the outcome adds them once, at
    // the end (`with_delegated`).
    let shown = with_delegated_usage(turns.usage, cost, links);
    observer.on_event(AgentEvent::Usage {
        usage: shown.0,
        model: model.clone(),
        cost: shown.1,
    });
    Ok(AgentOutcome {
        fallback_model: fell_back.map(|f| f.model),
        text: turns.text,
        verdict: verdict.as_ref().map(|v| v.verdict.clone()),
        confidence: verdict.as_ref().and_then(|v| v.confidence),
        verdict_reason: verdict.map(|v| v.reason),
        escalations: Vec::new(),
        typed_output: turns.typed.and_then(Result::ok),
        tool_calls: turns.calls,
        usage: turns.usage,
        model,
        cost,
        steps: turns.steps,
        status,
    })
}

/// How the step ended, from its last turn, its guard, its verdict and what it still owes.
fn step_status(
    step: &AgentStep,
    turns: &super::turns::Turns,
    guard: &BudgetGuard,
    slot: &VerdictSlot,
    links: &Links,
) -> AgentStatus {
    let verdict = slot.get();
    match &turns.last.outcome {
        TurnOutcome::Failed { error, failure, .. } => {
            match (guard.tripped(), guard.tripped_dollars()) {
                (Some(tripped), _) => AgentStatus::BudgetExceeded {
                    spent: tripped.spent,
                    limit: tripped.limit,
                    scope: tripped.scope.to_string(),
                },
                (None, Some(tripped)) => AgentStatus::DollarBudgetExceeded {
                    spent_usd: tripped.spent,
                    limit_usd: tripped.limit,
                    scope: tripped.scope.to_string(),
                },
                (None, None) => AgentStatus::Failed {
                    error: error.clone(),
                    cause: *failure,
                },
            }
        }
        TurnOutcome::Interrupted { reason } => AgentStatus::Interrupted {
            reason: reason.clone(),
        },
        TurnOutcome::Done { .. } if !links.required.missing().is_empty() => {
            AgentStatus::RequiredToolMissing {
                tools: links.required.missing(),
            }
        }
        TurnOutcome::Done { .. } if !step.verdicts.is_empty() && verdict.is_none() => {
            AgentStatus::NoVerdict {
                allowed: step.verdicts.clone(),
            }
        }
        TurnOutcome::Done { .. } => match &turns.typed {
            Some(Err(reason)) => AgentStatus::InvalidOutput {
                reason: reason.to_string(),
            },
            _ => AgentStatus::Succeeded,
        },
    }
}

/// A step that gave up while owing a file of `assert: files:` fails naming the file,
/// whichever backstop stopped it (no verdict, a required tool, the turn limit, the loop
/// detector): they all follow from the missing work. A step that ended normally is left
/// to the assert, which names the file too; an infrastructure failure is left alone.
fn owed_files_failure(status: AgentStatus, links: &Links) -> AgentStatus {
    let gave_up = match &status {
        AgentStatus::NoVerdict { .. } | AgentStatus::RequiredToolMissing { .. } => true,
        AgentStatus::Failed { cause, .. } => {
            matches!(cause, FailureCause::Limit | FailureCause::Repeated)
        }
        _ => false,
    };
    let files = links.required.missing_files();
    if !gave_up || files.is_empty() {
        return status;
    }
    AgentStatus::Failed {
        error: super::required::files_failure(&files),
        cause: FailureCause::Other,
    }
}
