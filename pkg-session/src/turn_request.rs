//! [`Session::turn`]: the one way to start a turn. It returns a [`TurnRequest`], whose
//! modifiers shape the turn (`choosing`, `seeded`) and whose terminals start it and say
//! what to wait for (`submit`, `run`, `answer`, here; `ask` in `typed.rs`, `stream` in
//! `stream.rs`). Every terminal submits through the one internal path,
//! `Session::submit_with`, with the request's `TurnOptions`.

use std::marker::PhantomData;

use treadle_event::InputId;

use crate::error::{RunError, SubmitError};
use crate::inference::ToolChoice;
use crate::protocol::TurnOptions;
use crate::seed::SeededCall;
use crate::session::{Session, TurnReport};

/// A turn about to start, from [`Session::turn`]. Nothing is submitted until a terminal
/// is awaited; each terminal consumes the request:
///
/// | terminal | submits, then | returns |
/// |---|---|---|
/// | [`submit`](TurnRequest::submit) | returns at once (the turn runs now, or after the turns queued before it) | its [`InputId`] |
/// | [`run`](TurnRequest::run) | waits for the turn to end | its [`TurnReport`] |
/// | [`answer`](TurnRequest::answer) | waits for the turn to end | its answer's text, or why it has none |
/// | [`ask`](TurnRequest::ask) | waits, and reads the answer as a `T` (one retry if it does not fit) | a `T` |
/// | [`stream`](TurnRequest::stream) | yields the turn's events as they happen | a [`TurnStream`](crate::TurnStream) |
///
/// The modifiers, [`choosing`](TurnRequest::choosing) and [`seeded`](TurnRequest::seeded),
/// combine with each other and with every terminal except one: a request that is
/// `choosing` has no `ask`, because a typed answer may decide the first model call's tool
/// choice itself (with [`StructuredOutput::ForcedTool`](crate::StructuredOutput), it
/// forces its reporting tool), so the choice could not be honoured. The type parameter
/// records this: `TurnRequest<'_, ModelChooses>` until `choosing` makes it
/// `TurnRequest<'_, Chosen>`, which has every terminal but `ask`.
///
/// ```no_run
/// # async fn demo(session: treadle_session::Session) -> Result<(), treadle_session::Error> {
/// use treadle_session::inference::ToolChoice;
/// let report = session
///     .turn("Check the build, then say whether it passed.")
///     .choosing(ToolChoice::Named("run_shell".into()))
///     .run()
///     .await?;
/// println!("{} after {} steps", report.answer()?, report.steps);
/// # Ok(()) }
/// ```
///
/// A typed answer after a choice does not compile (`TurnRequest<'_, Chosen>` has no `ask`):
///
/// ```compile_fail,E0599
/// # async fn demo(session: treadle_session::Session) {
/// use treadle_session::inference::ToolChoice;
/// #[treadle_session::schema]
/// struct Verdict {
///     approve: bool,
/// }
/// let turn = session.turn("Merge it?").choosing(ToolChoice::Required);
/// let verdict: Verdict = turn.ask().await.unwrap();
/// # }
/// ```
#[must_use = "a turn request does nothing until a terminal (submit, run, answer, ask, stream) is awaited"]
pub struct TurnRequest<'s, C = ModelChooses> {
    pub(crate) session: &'s Session,
    pub(crate) input: String,
    pub(crate) options: TurnOptions,
    choice: PhantomData<C>,
}

/// The state of a [`TurnRequest`] that has not been given [`TurnRequest::choosing`]: the
/// model chooses its tools on every call, and every terminal is open, `ask` included.
///
/// ```no_run
/// use treadle_session::{ModelChooses, SeededCall, Session, TurnRequest};
///
/// /// A turn that starts from the project's rules, still free to end in any terminal.
/// fn with_rules<'s>(
///     session: &'s Session,
///     input: &str,
///     rules: SeededCall,
/// ) -> TurnRequest<'s, ModelChooses> {
///     session.turn(input).seeded(vec![rules])
/// }
/// ```
#[derive(Debug, Clone, Copy)]
pub enum ModelChooses {}

/// The state of a [`TurnRequest`] whose first model call's tool choice was set with
/// [`TurnRequest::choosing`]: every terminal but `ask`, which could not honour it.
///
/// ```no_run
/// use treadle_session::inference::ToolChoice;
/// use treadle_session::{Chosen, Session, TurnRequest};
///
/// /// A turn whose first model call must call `tool`.
/// fn forcing<'s>(session: &'s Session, input: &str, tool: &str) -> TurnRequest<'s, Chosen> {
///     session.turn(input).choosing(ToolChoice::Named(tool.into()))
/// }
/// ```
#[derive(Debug, Clone, Copy)]
pub enum Chosen {}

impl Session {
    /// Starts describing a turn with `input` as its user message: the one way to start a
    /// turn. Add modifiers, then await a terminal of the [`TurnRequest`]; nothing is
    /// submitted before.
    ///
    /// ```no_run
    /// # async fn demo(session: treadle_session::Session) -> Result<(), treadle_session::Error> {
    /// println!("{}", session.turn("What is 2 + 3?").answer().await?);
    /// # Ok(()) }
    /// ```
    pub fn turn(&self, input: impl Into<String>) -> TurnRequest<'_> {
        TurnRequest {
            session: self,
            input: input.into(),
            options: TurnOptions::default(),
            choice: PhantomData,
        }
    }
}

impl<'s, C> TurnRequest<'s, C> {
    /// Makes the turn's first model call under `choice` (sent as the request's
    /// `tool_choice`): [`ToolChoice::Named`] forces one tool, as an agent that must call a
    /// tool before it may finish needs; the model chooses freely after that call. A server
    /// that ignores `tool_choice` answers as it would have anyway. Called twice, the last
    /// choice counts. The request then has no [`ask`](TurnRequest::ask).
    ///
    /// ```no_run
    /// # async fn demo(session: treadle_session::Session) -> Result<(), treadle_session::Error> {
    /// use treadle_session::inference::ToolChoice;
    /// let input = session
    ///     .turn("Record the result.")
    ///     .choosing(ToolChoice::Required)
    ///     .submit()
    ///     .await?;
    /// println!("queued as {input}");
    /// # Ok(()) }
    /// ```
    pub fn choosing(self, choice: ToolChoice) -> TurnRequest<'s, Chosen> {
        TurnRequest {
            session: self.session,
            input: self.input,
            options: TurnOptions {
                first_choice: Some(choice),
                ..self.options
            },
            choice: PhantomData,
        }
    }

    /// Starts the turn from `seed`: each call and its result follow the input in the
    /// conversation as though the model had made the call, so it reads them on its first
    /// model call without spending one on asking (see [`SeededCall`]). They are committed
    /// as the turn's first step, which makes no model call and is not counted in
    /// [`TurnReport::steps`]. Called twice, the calls are added in order.
    ///
    /// ```no_run
    /// # async fn demo(session: treadle_session::Session) -> Result<(), treadle_session::Error> {
    /// use treadle_session::{SeededCall, serde_json::json};
    /// let handed = SeededCall::new("ctx_0", "read_file", json!({"path": "RULES.md"}), "Be brief.");
    /// let report = session.turn("State the rule.").seeded(vec![handed]).run().await?;
    /// println!("{}", report.answer()?);
    /// # Ok(()) }
    /// ```
    pub fn seeded(mut self, seed: Vec<SeededCall>) -> Self {
        self.options.seed.extend(crate::seed::messages(seed));
        self
    }

    /// Submits the input and returns its id at once: the turn runs now, or after the turns
    /// queued before it. Follow it with [`Session::subscribe`] (subscribed first, so that
    /// no event is missed) or [`Session::last_turn`].
    ///
    /// ```no_run
    /// # async fn demo(session: treadle_session::Session) -> Result<(), treadle_session::Error> {
    /// let first = session.turn("Summarise README.md.").submit().await?;
    /// let second = session.turn("Now list its sections.").submit().await?; // queued
    /// println!("{first} then {second}");
    /// # Ok(()) }
    /// ```
    pub async fn submit(self) -> Result<InputId, SubmitError> {
        self.session.submit_with(self.input, self.options).await
    }

    /// Submits the input and waits for its turn to end: its report, whichever way it
    /// ended ([`TurnReport::answer`] makes a failed or interrupted turn an error).
    ///
    /// ```no_run
    /// # async fn demo(session: treadle_session::Session) -> Result<(), treadle_session::Error> {
    /// let report = session.turn("Say hello.").run().await?;
    /// println!("{:?} in {} steps, {} tokens", report.outcome, report.steps, report.usage.total());
    /// # Ok(()) }
    /// ```
    pub async fn run(self) -> Result<TurnReport, RunError> {
        self.session.run_with(self.input, self.options).await
    }

    /// Submits the input, waits for its turn to end and returns its answer: the text of a
    /// turn that ended `TurnDone`, or an error ([`Error::Turn`](crate::Error::Turn)) saying
    /// why a failed or interrupted turn has none. [`run`](TurnRequest::run) gives the
    /// whole report.
    ///
    /// ```no_run
    /// # async fn demo(session: treadle_session::Session) -> Result<(), treadle_session::Error> {
    /// println!("{}", session.turn("What is 2 + 3?").answer().await?);
    /// # Ok(()) }
    /// ```
    pub async fn answer(self) -> Result<String, crate::Error> {
        let report = self.run().await?;
        Ok(report.answer()?.to_owned())
    }
}

impl<C> std::fmt::Debug for TurnRequest<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurnRequest")
            .field("session", &self.session.id())
            .field("input", &self.input)
            .field("first_choice", &self.options.first_choice)
            .field("seed", &self.options.seed.len())
            .finish()
    }
}
