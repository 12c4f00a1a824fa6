//! [`run_agent_step`]: one agent step as one session turn (two when a verdict is missing).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use treadle_event::{EventFilter, LoopScope, Usage};
use treadle_hook::Hook;
use treadle_session::{
    ApiKey, GateAnswer, Journal, RunError, Session, SessionBuilder, StartError, Tool, TurnOutcome,
    TurnReport,
};

use super::budget::{BudgetGuard, add_costs};
use super::controls::{ConfidenceFloor, Escalation, Question, QuestionKind};
use super::cost::{Cost, cost};
use super::delegate::{Parent, Runner};
use super::escalation;
use super::failover;
use super::mcp::{McpToolsError, StepServers};
use super::observe::{AgentEvent, AgentObserver, forward};
use super::record::{AgentOutcome, AgentStatus, calls_from_history};
use super::required::{self, Required};
use super::spec::AgentStep;
use super::typed_output;
use super::verdict::{VerdictSlot, VerdictTool, reminder};
use crate::pipeline::mcp::server_of;
use crate::resource::template::TemplateError;
use crate::tools::{UnknownTool, Workspace, WorkspaceError, grant};

/// How often an interrupt is repeated while a cancelled turn has not ended: an input that
/// was still queued when the first interrupt came starts a turn the first one missed.
const INTERRUPT_RETRY: Duration = Duration::from_millis(100);

/// Why an agent step could not run at all. These are configuration or infrastructure
/// errors (exit code 2); a step that ran and failed is an [`AgentOutcome`] whose status says
/// why.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The step directory is unusable.
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    /// The grant names a tool that does not exist.
    #[error(transparent)]
    UnknownTool(#[from] UnknownTool),
    /// An MCP server did not start, or lacks a granted tool.
    #[error(transparent)]
    Mcp(#[from] McpToolsError),
    /// The session did not start (a missing API key variable, an unusable journal, ...).
    #[error("cannot start the agent session: {0}")]
    Start(#[from] StartError),
    /// The session stopped answering in the middle of the step.
    #[error("the agent session ended unexpectedly: {0}")]
    Session(#[from] RunError),
    /// A custom tool's `run:` is not a template treadle reads.
    #[error("a custom tool's `run:` cannot be read: {0}")]
    CustomTool(#[from] TemplateError),
    /// The conversation could not be restored on a `fallback:` source.
    #[error("cannot continue the conversation on the fallback model: {0}")]
    Restore(#[from] treadle_session::RestoreError),
}

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
                .map_err(|e| e.to_string())
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
        .hide_env(step.model.api_key_env.iter().cloned())
        .with_access(step.pass_env.iter().cloned(), step.confined)
        .with_fence(step.granted.fence.clone());
    // The keys' values, so that a tool result carrying one (an artifact a task wrote, a
    // command's output) reaches neither the model nor the journal in the state file.
    let secrets = secrets_of(step);
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
        required: own.required,
    };
    let (servers, remote_tools) = StepServers::start(&step.mcp, &remote).await?;
    tools.extend(remote_tools);
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

/// The secret values of a step: its model's API key and its MCP servers' bearer tokens.
fn secrets_of(step: &AgentStep) -> Vec<String> {
    let bearers = step
        .mcp
        .iter()
        .filter_map(|server| match &server.transport {
            treadle_session::mcp::McpTransport::Http { bearer, .. } => {
                bearer.as_ref().map(|b| b.expose().to_owned())
            }
            treadle_session::mcp::McpTransport::Stdio { .. } => None,
        });
    step.model
        .api_key_env
        .iter()
        .filter_map(|var| crate::environ::var(var))
        .chain(bearers)
        .collect()
}

/// The session of the step: its endpoint, model, key, tools, budget guard and limits.
pub(super) fn session_builder(
    step: &AgentStep,
    journal: &Journal,
    tools: Vec<Arc<dyn Tool>>,
    guard: Arc<BudgetGuard>,
) -> SessionBuilder {
    let mut hooks: Vec<Arc<dyn Hook>> = vec![guard];
    if let Some(policy) = step.controls.policy() {
        hooks.push(Arc::new(policy));
    }
    let mut builder = Session::builder()
        .endpoint(step.model.base_url.clone())
        .model(step.model.model.clone())
        .tools(tools)
        .hooks(hooks)
        .max_steps(step.model_call_limit())
        // Nobody watches a pipeline's agent step: a guard's question is denied
        // (approval_required), never left waiting, unless `permissions:` may ask, and
        // then the step's asker takes the question to a person. Questions (`ask_human`)
        // go to the step's answerer either way (a handler answers them headless too).
        .headless(!step.controls.may_ask())
        .unfinished_effects(step.unfinished_effects)
        // The bearer tokens (the session adds its own key) are scrubbed from what the
        // model says.
        .secrets(secrets_of(step))
        .journal(journal.clone());
    if let Some(fence) = &step.controls.fence {
        builder = builder.fence(fence.clone());
    }
    if let Some(var) = &step.model.api_key_env {
        // Read where `main` keeps it: the variable itself is gone from the environment.
        // The session scrubs its key (in plain and encoded forms) from what the model says.
        builder = match crate::environ::var(var) {
            Some(key) => builder.api_key(ApiKey::new(key.trim().to_owned())),
            None => builder.api_key_env(var.clone()),
        };
    }
    if step.controls.may_ask() || step.answerer.is_some() {
        let controls = step.controls.clone();
        let answerer = step.answerer.clone();
        builder = builder.on_gate(move |request| {
            let (controls, answerer) = (controls.clone(), answerer.clone());
            async move {
                if let Some(question) = request.human {
                    return match answerer {
                        Some(answerer) => (answerer.ask)(question).await,
                        None => GateAnswer::deny("nobody answers questions in this step"),
                    };
                }
                if !controls.may_ask() {
                    return GateAnswer::deny("nobody answers permissions in this step");
                }
                let answer = controls
                    .ask(Question {
                        kind: QuestionKind::Permission,
                        message: request.reason,
                    })
                    .await;
                if answer.approved {
                    GateAnswer::Approve
                } else {
                    let comment = answer
                        .comment
                        .map_or_else(String::new, |c| format!(": {c}"));
                    GateAnswer::deny(format!("refused by {}{comment}", answer.by))
                }
            }
        });
        if let Some(deadline) = step.answerer.as_ref().and_then(|a| a.deadline) {
            builder = builder.gate_deadline(deadline);
        }
    }
    if let Some(system) = &step.system {
        builder = builder.system_prompt(system.clone());
    }
    if let Some(link) = &step.parent {
        builder = builder.parent(link.clone());
    }
    if let Some(temperature) = step.temperature {
        builder = builder.temperature(temperature);
    }
    if let Some(top_p) = step.dials.top_p {
        builder = builder.top_p(top_p);
    }
    if let Some(tokens) = step.dials.max_tokens {
        builder = builder.max_tokens(tokens);
    }
    if let Some(effort) = &step.dials.reasoning_effort {
        builder = builder.reasoning_effort(effort.clone());
    }
    if let Some(idle) = step.model_idle {
        builder = builder.idle_timeout(idle);
    }
    if let Some(bytes) = step.model_response {
        builder = builder.max_response_bytes(bytes);
    }
    let conversation = &step.conversation;
    if let Some(window) = conversation.context_window {
        builder = builder.context_window(window);
    }
    if let Some(tokens) = conversation.compact_after_tokens {
        builder = builder.compact_after_tokens(tokens);
    }
    if let Some(bytes) = conversation.max_context_bytes.filter(|b| *b > 0) {
        builder = builder.max_tool_result_bytes(usize::try_from(bytes).unwrap_or(usize::MAX));
    }
    builder
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
        let tool = VerdictTool::new(step.verdicts.clone(), slot.clone());
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

    let session = session_builder(step, journal, tools.clone(), guard.clone())
        .start()
        .await?;
    links.parent.attach(session.id(), &guard);
    if let Some(link) = &step.parent {
        observer.on_event(AgentEvent::Notice(format!(
            "session {} answers the `{}` call of session {}",
            session.id(),
            link.tool,
            link.session
        )));
    }

    let sources = failover::Sources {
        step,
        journal,
        tools: &tools,
        guard: &guard,
        slot: &slot,
        required: &links.required,
        observer,
        cancel,
    };
    let (turns, served) = converse(&session, &sources).await?;
    let (turns, served, fallback_model) = sources.cascade(session.id(), turns, served).await?;

    let verdict = slot.get();
    let status = match &turns.last.outcome {
        TurnOutcome::Failed { error, cause } => match (guard.tripped(), guard.tripped_dollars()) {
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
                cause: *cause,
            },
        },
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
                reason: reason.clone(),
            },
            _ => AgentStatus::Succeeded,
        },
    };
    let model = served.unwrap_or_else(|| step.model.model.clone());
    let cost = cost(&turns.usage, step.price(&model).as_ref());
    // What the step's line shows includes its sub-agents; the outcome adds them once, at
    // the end (`with_delegated`).
    let shown = with_delegated_usage(turns.usage, cost, links);
    observer.on_event(AgentEvent::Usage {
        usage: shown.0,
        model: model.clone(),
        cost: shown.1,
    });
    Ok(AgentOutcome {
        fallback_model,
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

/// Runs the step's turns (as `sources` gives it) on `session` with the guard counting its
/// usage and the observer shown its events; what they added up to and the model that
/// served.
pub(super) async fn converse(
    session: &Session,
    sources: &failover::Sources<'_>,
) -> Result<(Turns, Option<String>), RunError> {
    sources.guard.attach(session.subscribe(EventFilter {
        ephemeral: LoopScope::None,
        enduring: LoopScope::Only(vec![session.main_loop()]),
    }));
    let events = session.subscribe(EventFilter::all());
    // The forwarder ends when `drive` shuts the session down, which ends the subscription.
    let (turns, served) = tokio::join!(
        drive(
            session,
            sources.step,
            sources.slot,
            sources.required,
            sources.observer,
            sources.cancel
        ),
        forward(events, sources.observer)
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
    pub typed: Option<Result<serde_json::Value, String>>,
}

impl Turns {
    /// Adds one more turn; its answer becomes the step's unless it said nothing (an answer
    /// to a reminder is often a tool call alone).
    fn absorb(&mut self, again: TurnReport) {
        self.usage += again.usage;
        self.steps += again.steps;
        if !again.is_done() || again.text().is_some_and(|text| !text.trim().is_empty()) {
            self.text = outcome_text(&again);
        }
        self.last = again;
    }
}

/// Runs the turn (and the verdict reminder), reads the history, and shuts the session down
/// whatever happened.
async fn drive(
    session: &Session,
    step: &AgentStep,
    slot: &VerdictSlot,
    required: &Required,
    observer: &dyn AgentObserver,
    cancel: &CancellationToken,
) -> Result<Turns, RunError> {
    let result = turns(session, step, slot, required, observer, cancel).await;
    let calls = match &result {
        Ok(_) => session
            .history()
            .await
            .map(|history| calls_from_history(&history))
            .unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    session.shutdown().await;
    result.map(|mut turns| {
        turns.calls = calls;
        turns
    })
}

async fn turns(
    session: &Session,
    step: &AgentStep,
    slot: &VerdictSlot,
    required: &Required,
    observer: &dyn AgentObserver,
    cancel: &CancellationToken,
) -> Result<Turns, RunError> {
    let prompt = match &step.controls.output {
        Some(typed) => typed_output::prompt(&step.prompt, typed),
        None => step.prompt.clone(),
    };
    let first = run_turn(session, &prompt, cancel).await?;
    let mut turns = Turns {
        text: outcome_text(&first),
        usage: first.usage,
        steps: first.steps,
        last: first,
        calls: Vec::new(),
        typed: None,
    };
    let mut reminded = 0;
    while turns.last.is_done() && reminded < required::REMINDERS {
        let missing = required.missing();
        if missing.is_empty() {
            break;
        }
        reminded += 1;
        let ask = required::reminder(&missing);
        observer.on_event(AgentEvent::Notice(format!(
            "required tool(s) {} have not succeeded; asking again",
            required::list(&missing)
        )));
        let again = run_turn(session, &ask, cancel).await?;
        turns.absorb(again);
    }
    if !step.verdicts.is_empty() && turns.last.is_done() && slot.get().is_none() {
        let ask = reminder(&step.verdicts);
        observer.on_event(AgentEvent::Notice(format!(
            "no verdict was given; asking once more: {ask}"
        )));
        let again = run_turn(session, &ask, cancel).await?;
        turns.usage += again.usage;
        turns.steps += again.steps;
        // The answer to the reminder is often only the verdict call; the first turn's text
        // stays the step's answer unless the second one says something.
        if !again.is_done() || again.text().is_some_and(|text| !text.trim().is_empty()) {
            turns.text = outcome_text(&again);
        }
        turns.last = again;
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
) -> Result<Result<serde_json::Value, String>, RunError> {
    let checked = match typed_output::check(&turns.text, typed) {
        Ok(value) => Ok(value),
        Err(reason) => {
            observer.on_event(AgentEvent::Notice(format!(
                "the answer does not match output_schema; asking once more: {reason}"
            )));
            let again = run_turn(session, &typed_output::retry(&reason), cancel).await?;
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

/// Runs one turn, interrupting it when `cancel` fires.
async fn run_turn(
    session: &Session,
    input: &str,
    cancel: &CancellationToken,
) -> Result<TurnReport, RunError> {
    let run = session.run(input);
    tokio::pin!(run);
    tokio::select! {
        report = &mut run => return report,
        () = cancel.cancelled() => {}
    }
    loop {
        // Interrupting a session that is already shut down only fails; the turn's report
        // (or its error) still comes from `run`.
        let _ = session.interrupt().await;
        tokio::select! {
            report = &mut run => return report,
            () = tokio::time::sleep(INTERRUPT_RETRY) => {}
        }
    }
}
