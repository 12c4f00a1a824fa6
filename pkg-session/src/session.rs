//! The [`Session`] handle and its [`SessionBuilder`]: the public face of the runtime.

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorRef};
use treadle_event::{
    Cause, Event, EventFilter, EventKind, Header, InputId, LoopId, LoopScope, Message, SessionId,
    Usage,
};
use treadle_hook::{Hook, HookRunner};

use crate::actor::{LoopActor, LoopArgs, LoopMsg};
use crate::context::LoopContext;
use crate::error::{RunError, SessionClosed, StartError, SubmitError};
use crate::hub::{Hub, HubOptions, Subscription};
use crate::inference::{ApiKey, ModelClient, ModelConfig, RetryPolicy};
use crate::journal::{Journal, ReadError};
use crate::restore::{self, RestoreError};
use crate::tool::{Tool, ToolSet};

/// Configures and starts a [`Session`].
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use treadle_session::Session;
///
/// let session = Session::builder()
///     .endpoint("http://127.0.0.1:8080/v1")
///     .model("qwen2.5-coder-0.5b")
///     .api_key_env("OPENAI_API_KEY")
///     .system_prompt("You are terse.")
///     .journal_path(".treadle/journal.redb")
///     .start()
///     .await?;
/// let report = session.run("Say hello.").await?;
/// println!("{}", report.text());
/// session.shutdown().await;
/// # Ok(()) }
/// ```
#[must_use]
pub struct SessionBuilder {
    endpoint: Option<String>,
    model: Option<String>,
    api_key_env: Option<String>,
    api_key: Option<ApiKey>,
    system: Option<String>,
    tools: Vec<Arc<dyn Tool>>,
    hooks: Vec<Arc<dyn Hook>>,
    journal: Option<JournalChoice>,
    max_steps: u32,
    queue_capacity: usize,
    temperature: Option<f32>,
    retry: Option<RetryPolicy>,
    subscriber_capacity: usize,
}

enum JournalChoice {
    Path(PathBuf),
    Shared(Journal),
}

impl SessionBuilder {
    /// The base URL of an OpenAI-compatible endpoint, such as `http://127.0.0.1:8080/v1`.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    pub fn model(mut self, name: impl Into<String>) -> Self {
        self.model = Some(name.into());
        self
    }

    /// The environment variable that holds the API key. It is read when the session starts
    /// and never written to the journal, events or errors.
    pub fn api_key_env(mut self, var: impl Into<String>) -> Self {
        self.api_key_env = Some(var.into());
        self
    }

    /// An API key given directly rather than through the environment.
    pub fn api_key(mut self, key: ApiKey) -> Self {
        self.api_key = Some(key);
        self
    }

    pub fn system_prompt(mut self, text: impl Into<String>) -> Self {
        self.system = Some(text.into());
        self
    }

    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.tools.push(Arc::new(tool));
        self
    }

    pub fn tools(mut self, tools: impl IntoIterator<Item = Arc<dyn Tool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Adds a hook. Hooks begin in the order they are added and finish in reverse.
    pub fn hook(mut self, hook: impl Hook) -> Self {
        self.hooks.push(Arc::new(hook));
        self
    }

    pub fn hooks(mut self, hooks: impl IntoIterator<Item = Arc<dyn Hook>>) -> Self {
        self.hooks.extend(hooks);
        self
    }

    /// Opens (or creates) the journal at `path`. Without a journal the session keeps one
    /// in a temporary file that is deleted with the process's temp directory.
    pub fn journal_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.journal = Some(JournalChoice::Path(path.into()));
        self
    }

    /// Shares an open journal (and its single writer thread) with other sessions.
    pub fn journal(mut self, journal: Journal) -> Self {
        self.journal = Some(JournalChoice::Shared(journal));
        self
    }

    /// The most model steps one turn may take before it fails (default 50).
    pub fn max_steps(mut self, steps: u32) -> Self {
        self.max_steps = steps;
        self
    }

    /// How many inputs may wait behind the running turn (default 16).
    pub fn queue_capacity(mut self, capacity: usize) -> Self {
        self.queue_capacity = capacity;
        self
    }

    /// How many undelivered events each subscription may hold (default 4096). A subscriber
    /// that falls further behind loses ephemeral events; an enduring event that does not
    /// fit closes the subscription with a resumable loss error.
    pub fn subscriber_capacity(mut self, capacity: usize) -> Self {
        self.subscriber_capacity = capacity;
        self
    }

    pub fn temperature(mut self, temperature: f32) -> Self {
        self.temperature = Some(temperature);
        self
    }

    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Starts the session: opens the journal, records `SessionStarted`, spawns the loop.
    pub async fn start(self) -> Result<Session, StartError> {
        let (client, journal) = self.connect()?;
        let session = SessionId::new();
        let loop_id = LoopId::new();
        let hub = self.hub(session, &journal);
        let started = Event::new(
            Header::in_loop(session, loop_id),
            EventKind::SessionStarted {
                model: client.model().to_owned(),
                endpoint: client.endpoint().to_owned(),
                system: self.system.clone(),
            },
        );
        let seqs = journal.append(vec![started.clone()]).await?;
        hub.publish(Arc::new(started), seqs.first().copied());
        self.launch(client, journal, hub, session, loop_id, Vec::new(), 0)
            .await
    }

    /// Restores session `id` from the journal this builder names, with this builder's
    /// model, tools and hooks. The history is exactly what the journal committed; a turn
    /// that was in flight when the process stopped is closed with `TurnInterrupted`.
    pub async fn restore(self, id: SessionId) -> Result<Session, RestoreError> {
        let (client, journal) = self.connect()?;
        let restored = restore::read(&journal, id)?;
        let hub = self.hub(id, &journal);
        if let Some(turn) = &restored.in_flight {
            let closing = restore::close_in_flight(id, restored.main_loop, turn);
            let seqs = journal.append(vec![closing.clone()]).await?;
            hub.publish(Arc::new(closing), seqs.first().copied());
        }
        Ok(self
            .launch(
                client,
                journal,
                hub,
                id,
                restored.main_loop,
                restored.history,
                restored.turns_started,
            )
            .await?)
    }

    fn connect(&self) -> Result<(ModelClient, Journal), StartError> {
        let endpoint = self.endpoint.clone().ok_or(StartError::MissingEndpoint)?;
        let model = self.model.clone().ok_or(StartError::MissingModel)?;
        let api_key = match (&self.api_key, &self.api_key_env) {
            (Some(key), _) => Some(key.clone()),
            (None, Some(var)) => Some(ApiKey::from_env(var)?),
            (None, None) => None,
        };
        let mut config = ModelConfig::new(endpoint, model);
        config.api_key = api_key;
        config.temperature = self.temperature;
        if let Some(retry) = self.retry {
            config.retry = retry;
        }
        let client = ModelClient::new(config)?;
        let journal = match &self.journal {
            Some(JournalChoice::Shared(journal)) => journal.clone(),
            Some(JournalChoice::Path(path)) => Journal::open(path)?,
            None => Journal::open(temp_journal_path())?,
        };
        Ok((client, journal))
    }

    fn hub(&self, session: SessionId, journal: &Journal) -> Hub {
        Hub::with_options(
            session,
            journal.clone(),
            HubOptions {
                queue_capacity: self.subscriber_capacity,
            },
        )
    }

    #[allow(clippy::too_many_arguments)]
    async fn launch(
        self,
        client: ModelClient,
        journal: Journal,
        hub: Hub,
        session: SessionId,
        loop_id: LoopId,
        history: Vec<Message>,
        turns_started: u32,
    ) -> Result<Session, StartError> {
        let ctx = Arc::new(LoopContext {
            session,
            loop_id,
            client,
            tools: ToolSet::new(self.tools),
            hooks: HookRunner::new(self.hooks),
            hub: hub.clone(),
            journal: journal.clone(),
            system: self.system,
            max_steps: self.max_steps,
            queue_capacity: self.queue_capacity,
        });
        let args = LoopArgs {
            ctx,
            history,
            turns_started,
        };
        let (actor, _join) = Actor::spawn(None, LoopActor, args)
            .await
            .map_err(|e| StartError::Spawn(e.to_string()))?;
        Ok(Session {
            inner: Arc::new(Inner {
                id: session,
                main_loop: loop_id,
                actor,
                hub,
                journal,
            }),
        })
    }
}

fn temp_journal_path() -> PathBuf {
    std::env::temp_dir()
        .join("treadle")
        .join(format!("session-{}.redb", uuid::Uuid::now_v7()))
}

/// A running conversation. Cheap to clone; every clone drives the same session.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

struct Inner {
    id: SessionId,
    main_loop: LoopId,
    actor: ActorRef<LoopMsg>,
    hub: Hub,
    journal: Journal,
}

/// How a turn ended, as [`Session::run`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnOutcome {
    Done { text: String },
    Failed { error: String },
    Interrupted { reason: String },
}

/// The end of one turn: its outcome, the steps it committed and the tokens they spent.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnReport {
    pub input: InputId,
    pub outcome: TurnOutcome,
    pub steps: u32,
    pub usage: Usage,
}

impl TurnReport {
    /// The final answer, or the error or interruption reason.
    pub fn text(&self) -> &str {
        match &self.outcome {
            TurnOutcome::Done { text } => text,
            TurnOutcome::Failed { error } => error,
            TurnOutcome::Interrupted { reason } => reason,
        }
    }

    pub fn is_done(&self) -> bool {
        matches!(self.outcome, TurnOutcome::Done { .. })
    }
}

impl Session {
    pub fn builder() -> SessionBuilder {
        SessionBuilder {
            endpoint: None,
            model: None,
            api_key_env: None,
            api_key: None,
            system: None,
            tools: Vec::new(),
            hooks: Vec::new(),
            journal: None,
            max_steps: 50,
            queue_capacity: 16,
            temperature: None,
            retry: None,
            subscriber_capacity: HubOptions::default().queue_capacity,
        }
    }

    pub fn id(&self) -> SessionId {
        self.inner.id
    }

    /// The loop of the main agent.
    pub fn main_loop(&self) -> LoopId {
        self.inner.main_loop
    }

    pub fn journal(&self) -> &Journal {
        &self.inner.journal
    }

    /// Submits an input. It runs now, or after the turns queued before it.
    pub async fn submit(&self, text: impl Into<String>) -> Result<InputId, SubmitError> {
        let text = text.into();
        match self
            .inner
            .actor
            .call(|reply| LoopMsg::Submit { text, reply }, None)
            .await
        {
            Ok(CallResult::Success(result)) => result,
            _ => Err(SubmitError::Closed),
        }
    }

    /// Live events from now on. There is no replay: subscribe before you submit when the
    /// first event matters, or use [`Session::subscribe_from`].
    pub fn subscribe(&self, filter: EventFilter) -> Subscription {
        self.inner.hub.subscribe(filter)
    }

    /// Enduring events from journal sequence `from_seq` on, then live events, with no gap
    /// and no duplicate.
    pub fn subscribe_from(
        &self,
        from_seq: u64,
        filter: EventFilter,
    ) -> Result<Subscription, ReadError> {
        self.inner.hub.subscribe_from(from_seq, filter)
    }

    /// Interrupts the running turn, which ends with `TurnInterrupted`; its committed steps
    /// stay. Returns whether a turn was running. Queued inputs still run.
    pub async fn interrupt(&self) -> Result<bool, SessionClosed> {
        match self
            .inner
            .actor
            .call(|reply| LoopMsg::Interrupt { reply }, None)
            .await
        {
            Ok(CallResult::Success(interrupted)) => Ok(interrupted),
            _ => Err(SessionClosed),
        }
    }

    /// The committed history of the main loop (the system prompt is configuration, not
    /// history, and is not included).
    pub async fn history(&self) -> Result<Vec<Message>, SessionClosed> {
        match self
            .inner
            .actor
            .call(|reply| LoopMsg::History { reply }, None)
            .await
        {
            Ok(CallResult::Success(history)) => Ok(history),
            _ => Err(SessionClosed),
        }
    }

    /// Submits `input` and waits for its turn to end.
    pub async fn run(&self, input: impl Into<String>) -> Result<TurnReport, RunError> {
        let filter = EventFilter {
            ephemeral: LoopScope::None,
            enduring: LoopScope::Only(vec![self.inner.main_loop]),
        };
        let mut events = self.subscribe(filter);
        let input = self.submit(input).await?;
        while let Some(delivery) = events.next().await {
            let event = delivery?.event;
            if let EventKind::InputCancelled {
                input: cancelled,
                reason,
            } = &event.kind
                && *cancelled == input
            {
                // Shutdown cancelled the input before it ran.
                return Ok(TurnReport {
                    input,
                    outcome: TurnOutcome::Failed {
                        error: reason.clone(),
                    },
                    steps: 0,
                    usage: Usage::default(),
                });
            }
            if event.header.cause != Some(Cause::Input(input)) {
                continue;
            }
            let (outcome, steps, usage) = match &event.kind {
                EventKind::TurnDone { text, steps, usage } => {
                    (TurnOutcome::Done { text: text.clone() }, *steps, *usage)
                }
                EventKind::TurnFailed {
                    error,
                    steps,
                    usage,
                } => (
                    TurnOutcome::Failed {
                        error: error.clone(),
                    },
                    *steps,
                    *usage,
                ),
                EventKind::TurnInterrupted {
                    reason,
                    steps,
                    usage,
                } => (
                    TurnOutcome::Interrupted {
                        reason: reason.clone(),
                    },
                    *steps,
                    *usage,
                ),
                _ => continue,
            };
            return Ok(TurnReport {
                input,
                outcome,
                steps,
                usage,
            });
        }
        Err(RunError::Closed)
    }

    /// Stops the session: interrupts the running turn, cancels queued inputs, records
    /// `SessionStopped` and ends every subscription. Safe to call more than once.
    pub async fn shutdown(&self) {
        let reason = "shutdown".to_owned();
        let _ = self
            .inner
            .actor
            .call(|reply| LoopMsg::Shutdown { reason, reply }, None)
            .await;
    }
}
