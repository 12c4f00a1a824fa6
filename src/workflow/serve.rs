//! Serving workflows written in Rust ([`Server`]): a user's binary registers its workflows
//! and serves them with `treadle serve`'s own server (`crate::server::serve_with`): the same
//! API under `/api/v1` with its token and host checks, the run page, approvals, questions
//! and each run's events. A run is started by `POST /api/v1/runs` with
//! `{"pipeline": NAME, "input": VALUE}`, the input checked against the JSON Schema of the
//! workflow's `Input` (schemars) before anything starts. See docs/workflows.md.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use super::Agents;
use super::flow::{Options, Workflow, run_in};
use crate::run::Style;
use crate::server::workflows::{CodeWorkflow, CodeWorkflows, InputError, Launch, Running};
use crate::server::{ServeError, ServeOptions};

/// A server of workflows written in Rust (and, if given, of pipeline files beside them).
///
/// ```no_run
/// use treadle::workflow::{Flow, FlowError, Server, Shell, Workflow};
///
/// /// Greets whom it is given.
/// struct Hello;
///
/// impl Workflow for Hello {
///     type Input = String;
///     type Output = String;
///     const NAME: &'static str = "hello";
///
///     async fn run(&self, flow: &mut Flow, who: String) -> Result<String, FlowError> {
///         let greet = Shell::new("echo hello \"$WHO\"").env("WHO", who);
///         Ok(flow.shell("greet", greet).await?.stdout)
///     }
/// }
///
/// # async fn go() -> Result<(), treadle::server::ServeError> {
/// // POST /api/v1/runs {"pipeline": "hello", "input": "you"} starts a run.
/// Server::new(".treadle/state.redb")
///     .register(Hello)
///     .serve("127.0.0.1:8088".parse().expect("an address"))
///     .await
/// # }
/// ```
pub struct Server {
    options: ServeOptions,
    agents: Agents,
    makers: Vec<Maker>,
}

/// Makes a registered workflow's entry once the server's agents are known.
type Maker = Box<dyn FnOnce(&Agents) -> Arc<dyn CodeWorkflow> + Send>;

impl Server {
    /// A server recording its runs in the state file `state`, on loopback, no token.
    pub fn new(state: impl Into<PathBuf>) -> Self {
        Self {
            options: ServeOptions {
                paths: Vec::new(),
                addr: SocketAddr::from(([127, 0, 0, 1], 8088)),
                token_env: None,
                state: Some(state.into()),
                interval: std::time::Duration::from_secs(60),
                nats: None,
                unclaimed_warning: crate::dist::queued::UNCLAIMED_WARNING,
                allowed_hosts: Vec::new(),
                no_adopt: false,
                limits: Default::default(),
                identity: Default::default(),
            },
            agents: Agents::none(),
            makers: Vec::new(),
        }
    }

    /// The agents the workflows' agent steps name (for every workflow registered).
    pub fn agents(mut self, agents: Agents) -> Self {
        self.agents = agents;
        self
    }

    /// Serves `workflow` under its [`Workflow::NAME`].
    pub fn register<W>(mut self, workflow: W) -> Self
    where
        W: Workflow + Send + 'static,
        W::Input: DeserializeOwned + schemars::JsonSchema + 'static,
    {
        let workflow = Arc::new(workflow);
        self.makers.push(Box::new(move |agents: &Agents| {
            Arc::new(Registered {
                workflow,
                agents: agents.clone(),
                schema: schemars::schema_for!(W::Input).to_value(),
            }) as Arc<dyn CodeWorkflow>
        }));
        self
    }

    /// `treadle serve`'s options ([`ServeOptions`]): the token's variable, the names
    /// answered to, pipeline files served beside the workflows, ...
    pub fn options(mut self, edit: impl FnOnce(&mut ServeOptions)) -> Self {
        edit(&mut self.options);
        self
    }

    /// Serves on `addr` until Ctrl-C or SIGTERM, saying where it listens on stdout (as
    /// `treadle serve` does).
    pub async fn serve(self, addr: SocketAddr) -> Result<(), ServeError> {
        let stop = CancellationToken::new();
        let stopping = stop.clone();
        tokio::spawn(async move {
            until_signal().await;
            stopping.cancel();
        });
        self.serve_until(addr, stop, |ready| {
            crate::console::say!(
                "serving workflows on http://{} (state {})\n  open {}",
                ready.addr,
                ready.state.display(),
                ready.page
            );
        })
        .await
    }

    /// Serves on `addr` until `stop` is cancelled; `ready` is told the bound address, the
    /// state file and the page's address.
    pub async fn serve_until(
        self,
        addr: SocketAddr,
        stop: CancellationToken,
        ready: impl FnOnce(&crate::server::Ready<'_>),
    ) -> Result<(), ServeError> {
        let Self {
            mut options,
            agents,
            makers,
        } = self;
        options.addr = addr;
        let workflows = CodeWorkflows::new(makers.into_iter().map(|m| m(&agents)).collect());
        crate::server::serve_with(options, workflows, stop, ready).await
    }
}

/// Ctrl-C or SIGTERM.
async fn until_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// One registered workflow, as the server starts it.
struct Registered<W> {
    workflow: Arc<W>,
    agents: Agents,
    schema: serde_json::Value,
}

impl<W> CodeWorkflow for Registered<W>
where
    W: Workflow + Send + 'static,
    W::Input: DeserializeOwned + schemars::JsonSchema + 'static,
{
    fn name(&self) -> &str {
        W::NAME
    }

    fn input_schema(&self) -> &serde_json::Value {
        &self.schema
    }

    fn launch(&self, input: serde_json::Value, launch: Launch) -> Result<Running, InputError> {
        let input: W::Input =
            serde_json::from_value(input).map_err(|e| InputError(e.to_string()))?;
        let workflow = self.workflow.clone();
        let Launch {
            store,
            agents,
            cancel,
            resume,
            on_begin,
        } = launch;
        let mut options = Options::new(store.path())
            .agents(self.agents.clone())
            .resume(resume)
            .style(Style::Quiet);
        options.cancel = cancel;
        options.runner = Some(agents);
        Ok(Box::pin(async move {
            let report = run_in(&*workflow, input, options, store, Some(on_begin)).await?;
            Ok(report.run)
        }))
    }
}
