//! Workflows written in Rust: one executor, two front ends.
//!
//! A workflow is an async function of a [`Flow`]. Each call on the flow ([`Flow::shell`],
//! [`Flow::agent`] (typed with [`AgentTask::output`]), [`Flow::http`], [`Flow::workflow`],
//! the calls that wait for people ([`Flow::approval`], [`Flow::human_input`],
//! [`Flow::decision`]), the labelled branches ([`Flow::when`], [`Flow::when_dynamic`],
//! [`Flow::skip`]), or [`Flow::step`]
//! with any typed step) builds a [`crate::pipeline::Step`], the very value loading makes of the
//! same step written in YAML, appends it to the run's plan and hands it to the executor
//! that runs YAML steps (`crate::run::open_run`). So a step of a workflow has the key a
//! YAML step has (kind, configuration, inputs, and the key of the step before it), the
//! same record in the state file, the same transcript, and shows in `treadle runs` and on
//! `treadle serve`'s page like a YAML run's.
//!
//! Why this shape:
//! * **The Rust front end makes typed steps, nothing else.** It has no executor, cache or
//!   record of its own to drift from YAML's; `tests/workflow_keys.rs` runs a workflow and
//!   the equivalent pipeline and finds the same keys and records.
//! * **Control flow is Rust's.** Loops, branches on a verdict and fan-outs over a typed
//!   value are plain code, so the calls are few: a step, and what it gave back.
//! * **Steps are identified by the order they are called in.** A workflow run again with
//!   [`Options::resume`] (or [`Options::resume_last`], which finds the run its program was
//!   killed in: `resume.rs`) calls the same steps in the same order; each recorded step whose
//!   key is unchanged gives back its recorded result without running, and a changed step
//!   (and so, through the chained keys, every step after it) runs again. A workflow must
//!   therefore decide what to call from its input and its steps' results only.
//! * **`&mut Flow`** makes the steps of one run sequential, which gives each a place in
//!   the chain; work that should run at once belongs in one step.
//!
//! What steps give back (`replies.rs`; the calls that run them are `outputs.rs`): a shell
//! step's [`ShellOutput`] (stdout and stderr apart; a failed command's in its
//! [`FlowError`]), an agent step's [`AgentReply`] or typed answer, and handles on the
//! output artifacts a step declared ([`Artifact`], `artifact.rs`, with its own
//! [`ArtifactError`]).
//!
//! Serving and planning:
//! * [`Server`] serves registered workflows with `treadle serve`'s server (its API, page,
//!   approvals and events); a run starts with the workflow's typed input as JSON, checked
//!   against its schema (`serve.rs`; the server's side is `crate::server::code`);
//! * [`plan()`] calls a workflow whose steps do not run and says which a run would replay
//!   from the cache, which it would run, and where what follows depends on an output known
//!   only once its step runs (`plan.rs`; the planner the flow's steps go to is
//!   `planner.rs`).
//!
//! ```no_run
//! use treadle::workflow::{self, Flow, FlowError, Options, Shell, Workflow};
//!
//! struct Hello;
//!
//! impl Workflow for Hello {
//!     type Input = String;
//!     type Output = String;
//!     const NAME: &'static str = "hello";
//!
//!     async fn run(&self, flow: &mut Flow, who: String) -> Result<String, FlowError> {
//!         let out = flow.shell("greet", Shell::new(format!("echo hello {who}"))).await?;
//!         Ok(out.stdout)
//!     }
//! }
//!
//! # async fn go() -> Result<(), FlowError> {
//! let report = workflow::run(&Hello, "you".into(), Options::new(".treadle/state.redb")).await?;
//! println!("run {}: {:?}", report.run, report.output);
//! # Ok(())
//! # }
//! ```

mod agents;
mod artifact;
mod calls;
mod flow;
mod http;
mod outputs;
mod people;
mod plan;
mod planner;
mod replies;
mod resume;
mod serve;

pub use agents::Agents;
pub use artifact::{Artifact, ArtifactError};
pub use calls::{AgentTask, Shell};
pub use flow::{Flow, FlowError, Options, Report, Workflow, run};
pub use http::{Http, HttpOutput};
pub use outputs::{AgentAsk, Typed};
pub use people::{Approval, Ask, Escalation};
pub use plan::{Plan, Unevaluable, plan};
pub use replies::{AgentReply, ShellOutput};
pub use resume::Resume;
pub use serve::Server;
