//! [`run_cli_step`]: one agent step as one conversation of a coding-agent CLI, rejoined
//! (claude's `--resume`, codex's `exec resume`) when a run ends without what the step demands (a file of `assert: files:`,
//! the verdict) or dies without reporting a result.

use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;
use treadle_event::FailureCause;
use treadle_session::Tool;

use super::bridge::Bridge;
use super::command::{Join, Run};
use super::driver::{Cli, CliError};
use super::proxy::{KeyHeader, Proxy};
use super::stream::Transcript;
use crate::agent::cost::{Cost, cost};
use crate::agent::delegate::Parent;
use crate::agent::error::AgentError;
use crate::agent::mcp::StepServers;
use crate::agent::observe::{AgentEvent, AgentObserver};
use crate::agent::record::{AgentOutcome, AgentStatus};
use crate::agent::session_builder::secret_values;
use crate::agent::spec::AgentStep;
use crate::agent::verdict::{VerdictSlot, VerdictTool};
use crate::pipeline::mcp::server_of;
use crate::tools::{Workspace, grant};

/// The scratch `HOME` of a step's CLI, inside the step directory's temporary directory
/// (so a confined CLI may write it), removed when the step ends, with the CLI's session
/// transcript in it.
const HOME: &str = "treadle-cli-home";

/// Runs `step` with its CLI in its directory. Its events go to `observer` as they
/// are read; `cancel` (Ctrl-C, the step's timeout) kills the CLI.
pub async fn run_cli_step(
    step: &AgentStep,
    observer: &dyn AgentObserver,
    cancel: &CancellationToken,
) -> Result<AgentOutcome, AgentError> {
    let (cli, model) = Cli::of(step)?;
    let program = cli.program(&step.name)?;
    let workspace = Workspace::new(&step.dir)?
        .with_env(step.env.iter().cloned())
        .hide_env(step.model.api_key_env.iter().cloned())
        .with_access(step.pass_env.iter().cloned(), step.confined)
        .with_fence(step.granted.fence.clone());
    let slot = VerdictSlot::default();
    let (servers, tools) = bridged_tools(step, cli, &workspace, &slot, cancel).await?;
    // Absolute: the CLI runs in the step directory, so a relative path would be read
    // from inside it.
    let dir = std::path::absolute(&step.dir).unwrap_or_else(|_| step.dir.clone());
    let home = dir.join(crate::confine::TMP).join(HOME);
    let ran = Ran {
        step,
        cli,
        model,
        program: &program,
        home: &home,
    };
    let result = converse(&ran, tools, &slot, observer, cancel).await;
    servers.shutdown().await;
    // The CLI's session (its whole transcript) goes with the step, as a hosted agent's
    // conversation stays in treadle's journal only.
    let _ = tokio::fs::remove_dir_all(&home).await;
    result
}

/// The tools the CLI reaches through the bridge: granted built-ins it has no tool of its
/// own for, custom tools, MCP grants and the verdict, each masking the step's secrets.
async fn bridged_tools(
    step: &AgentStep,
    cli: Cli,
    workspace: &Workspace,
    slot: &VerdictSlot,
    cancel: &CancellationToken,
) -> Result<(StepServers, Vec<Arc<dyn Tool>>), AgentError> {
    let (remote, builtin): (Vec<&str>, Vec<&str>) = step
        .tools
        .iter()
        .map(String::as_str)
        .filter(|t| !step.granted.owns(t) && cli.native(t).is_none())
        .partition(|t| server_of(t).is_some());
    let mut tools = grant(&builtin, workspace)?;
    let (events, _dropped) = tokio::sync::mpsc::unbounded_channel();
    let parent = Parent {
        step: step.clone(),
        run: Arc::new(|_, _, _| {
            Box::pin(async { Err(crate::agent::delegate::NoDelegation.into()) })
        }),
        events,
        cancel: cancel.clone(),
        delegated: Arc::default(),
        guard: Arc::default(),
        session: Arc::default(),
    };
    tools.extend(step.granted.build(workspace, &parent)?.tools);
    let (servers, remote_tools) = StepServers::start(&step.mcp, &remote).await?;
    tools.extend(remote_tools);
    if !step.verdicts.is_empty() {
        let tool = VerdictTool::new(step.verdicts.clone(), slot.clone());
        tools.push(Arc::new(if step.controls.confidence.is_some() {
            tool.with_confidence()
        } else {
            tool
        }));
    }
    Ok((
        servers,
        crate::tools::Masked::wrap_all(tools, &secret_values(step)),
    ))
}

/// How one run of the CLI ended.
enum Exit {
    /// It reported a result (in the transcript).
    Reported,
    /// It ended without one: the reason, for the retry prompt and the failure.
    Died(String),
    /// The step was cancelled.
    Cancelled,
    /// It made more model calls than the step allows.
    TooManyCalls(u32),
}

/// What every run of the step shares.
struct Ran<'a> {
    step: &'a AgentStep,
    cli: Cli,
    /// The model after `@cli/`.
    model: &'a str,
    program: &'a Path,
    home: &'a Path,
}

impl Ran<'_> {
    /// What the runs so far cost: the CLI's tokens priced as a hosted model's are
    /// (`prices:`), unpriced without a price. claude's own `total_cost_usd` is its guess
    /// from Anthropic's list, wrong for any other endpoint: it is not a price.
    fn cost(&self, transcript: &Transcript) -> Cost {
        cost(&transcript.usage, self.step.price(self.model).as_ref())
    }
}

async fn converse(
    ran: &Ran<'_>,
    tools: Vec<Arc<dyn Tool>>,
    slot: &VerdictSlot,
    observer: &dyn AgentObserver,
    cancel: &CancellationToken,
) -> Result<AgentOutcome, AgentError> {
    let step = ran.step;
    // No bridge when nothing is bridged: a configured MCP server makes the CLI offer its
    // own MCP resource tools (codex's `list_mcp_resources`...), which the step never granted.
    let bridge = match tools.is_empty() {
        true => None,
        false => Some(Bridge::start(tools).await.map_err(CliError::from)?),
    };
    let bridged = bridge.is_some();
    let (upstream, header) = match ran.cli {
        Cli::Claude => (super::claude::ANTHROPIC, KeyHeader::XApiKey),
        Cli::Codex => (super::codex::OPENAI, KeyHeader::Bearer),
    };
    let upstream = super::command::endpoint(step).unwrap_or(upstream);
    let proxy = Proxy::start(upstream, header, super::command::key(step))
        .await
        .map_err(CliError::from)?;
    let config = match ran.cli {
        Cli::Claude => super::claude::write_config(ran.home, bridge.as_ref())?,
        Cli::Codex => super::codex::write_config(ran.home, step, bridge.as_ref(), &proxy)?,
    };
    let ports: Vec<u16> = std::iter::once(proxy.port())
        .chain(bridge.as_ref().map(Bridge::port))
        .collect();
    let usd_left = step
        .controls
        .dollars
        .iter()
        .map(|b| b.limit - b.spent_before)
        .reduce(f64::min);
    let session = uuid::Uuid::now_v7().to_string();
    let mut transcript = Transcript::default();
    // The nudges and the retries after a death share one budget of runs (steps' rule):
    // otherwise the two limits would multiply.
    let runs = step.cli.attempts.max(1) + 5;
    let mut prompt = step.prompt.clone();
    let mut status = None;
    for run in 1..=runs {
        let reported = transcript.session.clone();
        let join = match &reported {
            Some(id) => Join::Resume(id),
            None => Join::Start(&session),
        };
        let cmd = Run {
            step,
            cli: ran.cli,
            model: ran.model,
            program: ran.program,
            home: ran.home,
            config: &config,
            bridged,
            proxy: &proxy,
            usd_left,
            join,
        }
        .command();
        transcript.ended = None;
        let exit = one_run(ran, cmd, &ports, &prompt, &mut transcript, observer, cancel).await?;
        let next = after(ran, exit, &transcript, slot, usd_left, run == runs);
        match next {
            Ok(again) => {
                observer.on_event(AgentEvent::Notice(format!(
                    "the CLI is woken again ({}, run {} of at most {runs}): {again}",
                    ran.cli.resume(),
                    run + 1
                )));
                prompt = again;
            }
            Err(done) => {
                status = Some(done);
                break;
            }
        }
    }
    drop(bridge);
    let status = status.unwrap_or(AgentStatus::Succeeded);
    let cost = ran.cost(&transcript);
    observer.on_event(AgentEvent::Usage {
        usage: transcript.usage,
        model: step.model.model.clone(),
        cost,
    });
    let verdict = slot.get();
    Ok(AgentOutcome {
        text: transcript.text,
        verdict: verdict.as_ref().map(|v| v.verdict.clone()),
        confidence: verdict.as_ref().and_then(|v| v.confidence),
        verdict_reason: verdict.map(|v| v.reason),
        tool_calls: transcript.calls,
        usage: transcript.usage,
        model: step.model.model.clone(),
        cost,
        steps: transcript.messages,
        status,
        escalations: Vec::new(),
        typed_output: None,
        fallback_model: None,
    })
}

/// After a run: the step's end (`Err`), or what to tell the CLI when it is woken again
/// (`Ok`).
fn after(
    ran: &Ran<'_>,
    exit: Exit,
    transcript: &Transcript,
    slot: &VerdictSlot,
    usd_left: Option<f64>,
    last: bool,
) -> Result<String, AgentStatus> {
    let step = ran.step;
    match exit {
        Exit::Cancelled => Err(AgentStatus::Interrupted {
            reason: "the step was cancelled; the CLI was stopped".to_owned(),
        }),
        Exit::TooManyCalls(limit) => Err(AgentStatus::Failed {
            error: format!(
                "the CLI made more than {limit} model calls (max_turns); it was stopped"
            ),
            cause: FailureCause::Limit,
        }),
        Exit::Died(why) if last => Err(AgentStatus::Failed {
            error: format!("the {} CLI failed: {why}", ran.cli.name()),
            cause: FailureCause::Other,
        }),
        Exit::Died(why) => Ok(format!(
            "Your previous run stopped before it finished ({why}). Continue the task \
             from where you were; do not start over.{}",
            missing(step, slot)
                .map(|m| format!(" {m}"))
                .unwrap_or_default()
        )),
        Exit::Reported => reported_end(ran, transcript, slot, usd_left, last),
    }
}

/// After a run that reported its result: the step's end (`Err`), or what to tell the CLI
/// when it is woken again (`Ok`).
fn reported_end(
    ran: &Ran<'_>,
    transcript: &Transcript,
    slot: &VerdictSlot,
    usd_left: Option<f64>,
    last: bool,
) -> Result<String, AgentStatus> {
    let step = ran.step;
    let ended = transcript.ended.as_ref();
    // claude stops itself at `--max-budget-usd` by its own count; that stop is honoured
    // with the figure it counted when the step has no price of its own.
    let claude_stopped = ended.is_some_and(|e| e.subtype == "error_max_budget_usd");
    let spent = ran
        .cost(transcript)
        .usd()
        .or((claude_stopped && ran.cli == Cli::Claude).then_some(transcript.usd));
    let over = |spent: f64| AgentStatus::DollarBudgetExceeded {
        spent_usd: Some(spent),
        limit_usd: step
            .controls
            .dollars
            .iter()
            .map(|b| b.limit)
            .fold(f64::INFINITY, f64::min),
        scope: step
            .controls
            .dollars
            .first()
            .map_or("step".to_owned(), |b| b.scope.to_string()),
    };
    if let Some(spent) = spent
        && (claude_stopped || usd_left.is_some_and(|left| spent > left))
    {
        return Err(over(spent));
    }
    if let Some(e) = ended.filter(|e| e.is_error) {
        return Err(AgentStatus::Failed {
            error: format!(
                "the {} CLI ended with `{}`{}",
                ran.cli.name(),
                e.subtype,
                e.result
                    .as_ref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            cause: FailureCause::Other,
        });
    }
    let Some(missing) = missing(step, slot) else {
        return Err(AgentStatus::Succeeded);
    };
    if !last {
        return Ok(missing);
    }
    let files = missing_files(step);
    Err(if files.is_empty() {
        AgentStatus::NoVerdict {
            allowed: step.verdicts.clone(),
        }
    } else {
        AgentStatus::Failed {
            error: crate::agent::required::files_failure(&files),
            cause: FailureCause::Other,
        }
    })
}

/// The files of `assert: files:` that are not there (or empty).
fn missing_files(step: &AgentStep) -> Vec<String> {
    crate::agent::required::missing_files(&step.dir, &step.owed_files)
}

/// What the step still lacks, said to the CLI; `None` when nothing is missing.
fn missing(step: &AgentStep, slot: &VerdictSlot) -> Option<String> {
    let mut lacks = Vec::new();
    let files = missing_files(step);
    if !files.is_empty() {
        lacks.push(crate::agent::required::files_reminder(&files));
    }
    if !step.verdicts.is_empty() && slot.get().is_none() {
        lacks.push(format!(
            "You have not recorded your decision: call the tool `{}` with one of: {}.",
            super::tools::bridged(crate::agent::VERDICT_TOOL),
            step.verdicts.join(", ")
        ));
    }
    (!lacks.is_empty()).then(|| lacks.join(" "))
}

/// Starts one run, gives it `prompt`, and reads its output to the end.
async fn one_run(
    ran: &Ran<'_>,
    cmd: tokio::process::Command,
    ports: &[u16],
    prompt: &str,
    transcript: &mut Transcript,
    observer: &dyn AgentObserver,
    cancel: &CancellationToken,
) -> Result<Exit, AgentError> {
    let step = ran.step;
    let start = |source| CliError::Start {
        step: step.name.clone(),
        cli: ran.cli,
        source,
    };
    let mut child = if step.confined {
        // Its install: the program's directory and its package's (codex's `codex-path`).
        let install: Vec<std::path::PathBuf> = ran
            .program
            .ancestors()
            .skip(1)
            .take(2)
            .map(Path::to_path_buf)
            .collect();
        let network = step
            .network
            .clone()
            .unwrap_or_else(|| crate::confine::default_network(true));
        let policy = crate::confine::cli::CliPolicy {
            dir: &step.dir,
            install: &install,
            shell: step.tools.iter().any(|t| t == "run_shell"),
            network: &network,
            treadle_ports: ports,
        };
        crate::confine::cli::spawn(cmd, &policy)
            .await
            .map_err(start)?
    } else {
        let mut cmd = cmd;
        cmd.spawn()
            .map_err(|e| start(crate::confine::ConfineError::Start(e)))?
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A CLI that exits before reading its prompt reports that itself, below.
        let _ = stdin.write_all(prompt.as_bytes()).await;
    }
    let stderr = child.stderr.take().map(|mut err| {
        tokio::spawn(async move {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text).await;
            text
        })
    });
    let limit = step.model_call_limit();
    let mut exit = None;
    if let Some(stdout) = child.stdout.take() {
        let mut lines = BufReader::new(stdout).lines();
        loop {
            let line = tokio::select! {
                () = cancel.cancelled() => { exit = Some(Exit::Cancelled); break }
                line = lines.next_line() => line,
            };
            let Ok(Some(line)) = line else { break };
            for event in transcript.read(ran.cli, &line) {
                observer.on_event(event);
            }
            if transcript.messages > limit {
                exit = Some(Exit::TooManyCalls(limit));
                break;
            }
        }
    }
    if exit.is_some() {
        let _ = child.start_kill();
    }
    let status = child.wait().await;
    let stderr = match stderr {
        Some(task) => task.await.unwrap_or_default(),
        None => String::new(),
    };
    if let Some(exit) = exit {
        return Ok(exit);
    }
    if transcript.ended.is_some() {
        return Ok(Exit::Reported);
    }
    let tail: String = {
        let t = stderr.trim();
        let cut = t.len().saturating_sub(500);
        let cut = (cut..=t.len())
            .find(|&i| t.is_char_boundary(i))
            .unwrap_or(t.len());
        t[cut..].to_owned()
    };
    Ok(Exit::Died(match status {
        Ok(s) => format!(
            "it exited ({s}) without a result{}",
            if tail.is_empty() {
                String::new()
            } else {
                format!(": {tail}")
            }
        ),
        Err(e) => format!("it could not be waited for: {e}"),
    }))
}
