//! [`SessionBuilder`]: configuring, starting and restoring a session and its loops.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use treadle_event::{Event, EventKind, GateAnswer, Header, LoopId, SessionId};
use treadle_hook::Hook;

use crate::compaction::Compaction;
use crate::context::BatchConfig;
use crate::delegate::SubAgent;
use crate::effect::EffectPolicy;
use crate::error::StartError;
use crate::hub::HubOptions;
use crate::inference::{
    ApiKey, DEFAULT_CALL_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_RESPONSE_BYTES, LimitNames,
    RetryPolicy, StructuredOutput,
};
use crate::journal::Journal;
use crate::redact::Secrets;
use crate::restore::{self, RestoreError, Restored};
use crate::resume::{self};
use crate::session::Session;
use crate::subject::GateQuestion;
use crate::tool::Tool;

mod launch;

use launch::claim_for_restore;

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
/// let report = session.turn("Say hello.").run().await?;
/// println!("{}", report.answer()?);
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
    top_p: Option<f32>,
    max_tokens: Option<u32>,
    reasoning_effort: Option<String>,
    retry: Option<RetryPolicy>,
    idle_timeout: Duration,
    connect_timeout: Option<Duration>,
    max_response_bytes: u64,
    call_timeout: Duration,
    limit_names: LimitNames,
    subscriber_capacity: usize,
    sub_agents: Vec<SubAgent>,
    structured_output: StructuredOutput,
    /// Tool batches and permission gates.
    batch: BatchConfig,
    /// Values scrubbed from assistant messages (the API key is added when read).
    secrets: Secrets,
    /// How each loop's history is kept within its budget.
    compaction: Compaction,
    /// Admits each journal append (see [`crate::fence`]).
    fence: Option<Arc<dyn crate::fence::WriteFence>>,
    /// The session that delegated to this one, journaled with `SessionStarted`.
    parent: Option<treadle_event::ParentLink>,
}

enum JournalChoice {
    Path(PathBuf),
    Shared(Journal),
}

impl Session {
    /// Configures a new session.
    pub fn builder() -> SessionBuilder {
        SessionBuilder::new()
    }
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
    /// in a temporary file that is removed when the session stops (its last handle is
    /// dropped or it is shut down, and its turn has ended).
    pub fn journal_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.journal = Some(JournalChoice::Path(path.into()));
        self
    }

    /// Shares an open journal (and its single writer thread) with other sessions. A file is
    /// open once per process anyway: [`SessionBuilder::journal_path`] with the same file
    /// shares the same handle.
    pub fn journal(mut self, journal: Journal) -> Self {
        self.journal = Some(JournalChoice::Shared(journal));
        self
    }

    /// Asks `fence` before every journal append of the session: once it refuses, the
    /// session writes nothing more, so the turn stops before its next effect, and its
    /// subscriptions end (a waiting [`TurnRequest::run`](crate::TurnRequest::run) returns [`RunError::Closed`]); see
    /// [`crate::fence`]. Without one every append goes ahead.
    ///
    /// [`RunError::Closed`]: crate::RunError::Closed
    pub fn fence(mut self, fence: Arc<dyn crate::fence::WriteFence>) -> Self {
        self.fence = Some(fence);
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

    /// Nucleus sampling (`top_p`) sent with every request.
    pub fn top_p(mut self, top_p: f32) -> Self {
        self.top_p = Some(top_p);
        self
    }

    /// The most tokens one model response may have (`max_tokens`).
    pub fn max_tokens(mut self, tokens: u32) -> Self {
        self.max_tokens = Some(tokens);
        self
    }

    /// `reasoning_effort` (`low`, `medium`, `high`) for models that take one.
    pub fn reasoning_effort(mut self, effort: impl Into<String>) -> Self {
        self.reasoning_effort = Some(effort.into());
        self
    }

    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// The longest the model endpoint may stay silent, before the response head (retries
    /// included) or between two pieces of the stream (default 120 s). Past it the step is
    /// discarded and the turn fails with an error naming the idle timeout.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// How long to wait for a TCP (and TLS) connection to the endpoint (default 10 s). Each
    /// attempt waits this long; a refused or timed-out connection is retried like any
    /// outage ([`SessionBuilder::retry`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// The most bytes one model response body may carry (default 8 MiB). The body is
    /// counted as it arrives; past the limit the step is discarded and the turn fails with
    /// an error naming the limit.
    pub fn max_response_bytes(mut self, bytes: u64) -> Self {
        self.max_response_bytes = bytes;
        self
    }

    /// The longest one model call may take in all, from the request (retries included) to
    /// the end of its stream (default 10 min), however steadily it flows. Past it the step
    /// is discarded and the turn fails with an error naming the limit.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// How the messages of the model limits name their settings (the library's setters by
    /// default): a program whose users set the limits elsewhere names that place.
    pub fn limit_names(mut self, names: LimitNames) -> Self {
        self.limit_names = names;
        self
    }

    /// Records that this session answers a call of `parent`'s tool (a sub-agent run as a
    /// session of its own): its `SessionStarted` carries the link.
    pub fn parent(mut self, parent: treadle_event::ParentLink) -> Self {
        self.parent = Some(parent);
        self
    }

    /// Adds a sub-agent: a loop of this session the main agent delegates to through a
    /// tool named after it.
    pub fn sub_agent(mut self, agent: SubAgent) -> Self {
        self.sub_agents.push(agent);
        self
    }

    /// How many calls of one tool batch may execute at once (default 8; at least 1).
    /// Sequential tools and calls sharing a write target are serialized regardless.
    pub fn max_parallel_tools(mut self, n: usize) -> Self {
        self.batch.max_parallel = n.max(1);
        self
    }

    /// The most tool calls one turn may make (default 256). A step whose calls would pass
    /// the limit is discarded and the turn ends with `TurnFailed` naming the limit.
    pub fn max_tool_calls_per_turn(mut self, n: u32) -> Self {
        self.batch.max_calls_per_turn = n;
        self
    }

    /// The model's context window in tokens (default 128 000). The history is compacted
    /// once its estimated size passes 80% of it (the rest is room for the system prompt,
    /// the tool schemas and the answer); see [`SessionBuilder::compact_after_tokens`].
    pub fn context_window(mut self, tokens: u64) -> Self {
        self.compaction.budget = crate::compaction::budget_for(tokens);
        self
    }

    /// Compacts a loop's history once its estimated size (text bytes / 4) passes `tokens`:
    /// the older messages are summarised by the loop's model and replaced by the summary,
    /// while the newest (about 30% of the budget) and every tool call with its results stay
    /// as they are. Journaled as `Compacted`, observed by hooks as `Operation::Compaction`.
    /// A failed summary leaves the history as it was. `0` never compacts. Overrides
    /// [`SessionBuilder::context_window`].
    pub fn compact_after_tokens(mut self, tokens: u64) -> Self {
        self.compaction.budget = tokens;
        self
    }

    /// The most bytes of one tool result that go into the history (default: all). A longer
    /// result is cut there, with a note saying how much was left out.
    pub fn max_tool_result_bytes(mut self, bytes: usize) -> Self {
        self.compaction.max_inline_bytes = Some(bytes);
        self
    }

    /// Loop detection: how many times one tool interaction (the same tool, arguments and
    /// result) may happen within a turn's last 10 tool steps before the model is told that
    /// repeating it changes nothing (default 3). Repeating it once more after that ends the
    /// turn with `TurnFailed` and cause `Repeated`. `0` turns loop detection off.
    pub fn repeat_limit(mut self, limit: u32) -> Self {
        self.batch.repeat_limit = limit;
        self
    }

    /// How long a permission gate waits for [`Session::respond_gate`] before it denies the
    /// call with `GateAnswer::Expired` (default 10 minutes).
    pub fn gate_deadline(mut self, deadline: std::time::Duration) -> Self {
        self.batch.gate_deadline = deadline;
        self
    }

    /// Whether nobody can answer permission gates (default `false`). A headless session
    /// denies every call a guard asks about with reason `approval_required`, without
    /// opening a gate; pipelines run headless.
    pub fn headless(mut self, headless: bool) -> Self {
        self.batch.headless = headless;
        self
    }

    /// What a restore does with an effectful call that a crash caught between its intent
    /// and its result (default [`EffectPolicy::Ask`]: a gate asks, answered like any gate
    /// with `Approve` to run it again, `Answer { value }` to skip it with that result, or
    /// `Deny` to fail the turn). Pure and idempotent calls are simply run again.
    pub fn unfinished_effects(mut self, policy: EffectPolicy) -> Self {
        self.batch.unfinished_effects = policy;
        self
    }

    /// Answers every gate the session opens with `handler`: it gets the typed
    /// [`GateQuestion`] (tool, arguments, reason; for an `ask_human` question its `human`
    /// question, to answer with `GateAnswer::Answer`) and returns the answer, which is journaled
    /// before the waiting call learns it. Without a handler, a gate is answered through
    /// [`Session::respond_gate`] by whoever subscribed; a session with neither denies at
    /// once (`approval_required`) instead of waiting out the deadline.
    ///
    /// ```
    /// use treadle_session::{GateAnswer, Session};
    /// let builder = Session::builder().on_gate(|request| async move {
    ///     if request.tool == "read_file" { GateAnswer::Approve } else { GateAnswer::deny("read-only") }
    /// });
    /// # drop(builder);
    /// ```
    pub fn on_gate<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(GateQuestion) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = GateAnswer> + Send + 'static,
    {
        self.batch.on_gate = Some(Arc::new(move |request| Box::pin(handler(request))));
        self
    }

    /// How [`TurnRequest::ask`](crate::TurnRequest::ask) asks for typed answers (default: `response_format`).
    pub fn structured_output(mut self, mode: StructuredOutput) -> Self {
        self.structured_output = mode;
        self
    }

    /// Secret values (besides the session's own API key, always included) scrubbed, in
    /// plain and common encoded forms, from every assistant message: its text and tool
    /// arguments are clean before they are journaled, published or passed to a tool.
    pub fn secrets<S: AsRef<str>>(mut self, values: impl IntoIterator<Item = S>) -> Self {
        self.secrets.extend(values);
        self
    }

    pub(crate) fn new() -> Self {
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
            top_p: None,
            max_tokens: None,
            reasoning_effort: None,
            retry: None,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            connect_timeout: None,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            limit_names: LimitNames::LIBRARY,
            subscriber_capacity: HubOptions::default().queue_capacity,
            sub_agents: Vec::new(),
            structured_output: StructuredOutput::default(),
            batch: BatchConfig::default(),
            secrets: Secrets::default(),
            compaction: Compaction::default(),
            fence: None,
            parent: None,
        }
    }

    /// Starts the session: opens the journal, records `SessionStarted`, spawns the loop.
    pub async fn start(mut self) -> Result<Session, StartError> {
        let (client, journal) = self.connect()?;
        let session = SessionId::new();
        let claim = journal
            .claim(session)
            .map_err(|_| StartError::Spawn("a new session id is already claimed".into()))?;
        let loop_id = LoopId::new();
        let hub = self.hub(session, &journal, loop_id);
        let started = Event::new(
            Header::in_loop(session, loop_id),
            EventKind::SessionStarted {
                model: client.model().to_owned(),
                endpoint: client.endpoint().to_owned(),
                system: self.system.clone(),
                parent: self.parent.clone(),
                fork: None,
            },
        );
        hub.commit(started).await?;
        let restored = Restored {
            main_loop: loop_id,
            loops: Default::default(),
            approvals: Default::default(),
            through_seq: 0,
        };
        let claim = Arc::new(claim);
        self.launch(client, journal, hub, restored, HashMap::new(), claim)
            .await
    }

    /// Restores session `id` from the journal this builder names, with this builder's
    /// model, tools and hooks. The history is exactly what the journal committed; a turn
    /// that was in flight when the process stopped is closed with `TurnInterrupted`, except
    /// a main-loop turn parked on an open permission gate: that gate is open again under
    /// its original id (answer it with [`Session::respond_gate`]; its recorded deadline
    /// still holds, and one that passed during the downtime has expired) and the turn
    /// resumes at that step's batch. So does a turn whose step was running an effectful
    /// call (rule 11): calls with a journaled result are not run again, and one with an
    /// intent and no result waits on an `effect` gate (see
    /// [`unfinished_effects`](Self::unfinished_effects)). `ApproveAlways` answers in the
    /// journal still hold.
    /// The journal records the restore (`SessionRestored`) before anything it settles.
    pub async fn restore(mut self, id: SessionId) -> Result<Session, RestoreError> {
        let (client, journal) = self.connect()?;
        let claim = Arc::new(claim_for_restore(&journal, id).await?);
        let mut restored = restore::read(&journal, id)?;
        let hub = self.hub(id, &journal, restored.main_loop);
        let marker = EventKind::SessionRestored {
            through_seq: restored.through_seq,
        };
        hub.commit(Event::new(Header::in_loop(id, restored.main_loop), marker))
            .await?;
        let resumed = resume::settle(&hub, id, &mut restored, &self.batch).await?;
        self.batch.approvals = restored.approvals.clone();
        Ok(self
            .launch(client, journal, hub, restored, resumed, claim)
            .await?)
    }
}
