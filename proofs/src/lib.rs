//! Shared scaffolding for the proofs: one scripted model server, one session, random
//! schedules, and readers of what the session published and journaled.
//!
//! Each file in `tests/` proves one rule of the runtime (see `DESIGN.md`) and runs its
//! scenario under many random schedules: the scripted server delays each chunk by a
//! seeded random amount and the tools sleep a random while, so the interleavings of
//! deltas, tool calls, commits and subscribers differ from run to run.

pub mod binary;

use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use tempfile::TempDir;
use treadle_event::{Delivery, Event, EventKind, Message, SessionId};
use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};
use treadle_session::{FnTool, JournalView, Session, SessionBuilder, Subscription, ToolError};

/// How many schedules each proof runs.
pub const SCHEDULES: u64 = 50;

/// Upper bound for any single wait in a proof; a proof that hits it has found a hang.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A scripted server with seeded chunk jitter, and a temp dir for the journal.
pub struct World {
    pub server: ScriptedServer,
    pub dir: TempDir,
    pub seed: u64,
}

impl World {
    /// Starts a server playing `script` with random per-chunk delays of up to `max_jitter`.
    pub async fn start(script: Script, seed: u64, max_jitter: Duration) -> World {
        let server = ScriptedServer::builder()
            .jitter(Duration::ZERO, max_jitter, seed)
            .start(script)
            .await
            .expect("start scripted server");
        World {
            server,
            dir: tempfile::tempdir().expect("temp dir"),
            seed,
        }
    }

    pub fn journal_path(&self) -> std::path::PathBuf {
        self.dir.path().join("journal.redb")
    }

    /// A builder pointed at this world's server and journal, with the `echo` tool whose
    /// calls sleep a random while (seeded by the world).
    pub fn session(&self) -> SessionBuilder {
        Session::builder()
            .endpoint(self.server.base_url())
            .model("scripted")
            .journal_path(self.journal_path())
            .tool(echo_tool(self.seed))
    }
}

/// Arguments of the `echo` tool.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    #[serde(default)]
    pub i: serde_json::Value,
}

/// `echo` returns its argument `i` after sleeping 0–3 ms, chosen by a seeded generator.
pub fn echo_tool(
    seed: u64,
) -> FnTool<EchoArgs, impl Fn(EchoArgs) -> EchoFuture + Send + Sync + 'static> {
    let rng = Arc::new(std::sync::Mutex::new(rand::rngs::StdRng::seed_from_u64(
        seed,
    )));
    FnTool::new("echo", "Returns its argument i.", move |args: EchoArgs| {
        let delay = {
            let mut rng = rng.lock().unwrap_or_else(|p| p.into_inner());
            Duration::from_micros(rng.random_range(0..3000))
        };
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            Ok::<_, ToolError>(args.i.to_string())
        }) as EchoFuture
    })
    .effect(treadle_session::Effect::Pure)
}

/// Arguments of the `charge` tool.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct ChargeArgs {
    pub amount: u64,
}

/// An effectful `charge` tool: it waits `before`, appends one line (`charged <amount>`) to
/// `log` (synced, so executions are counted across processes), waits `after`, and returns.
/// A kill in `before` lands before the effect, one in `after` after it: both between the
/// call's journaled intent and its result.
pub fn charge_tool(
    log: std::path::PathBuf,
    before: Duration,
    after: Duration,
) -> impl treadle_session::Tool {
    FnTool::new("charge", "Charges an amount.", move |args: ChargeArgs| {
        let log = log.clone();
        async move {
            use std::io::Write as _;
            tokio::time::sleep(before).await;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .map_err(|e| ToolError(format!("cannot open the log: {e}")))?;
            writeln!(file, "charged {}", args.amount)
                .and_then(|()| file.sync_all())
                .map_err(|e| ToolError(format!("cannot append to the log: {e}")))?;
            tokio::time::sleep(after).await;
            Ok::<_, ToolError>(format!("charged {}", args.amount))
        }
    })
    .effect(treadle_session::Effect::Effectful)
}

pub type EchoFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, ToolError>> + Send>>;

/// Reads deliveries until the first terminal event (or the stream ends), with a deadline.
pub async fn until_terminal(sub: &mut Subscription) -> Vec<Delivery> {
    let mut out = Vec::new();
    let deadline = tokio::time::sleep(PATIENCE);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => panic!("no terminal event within {PATIENCE:?}; got {} events", out.len()),
            next = sub.next() => match next {
                Some(Ok(d)) => {
                    let terminal = d.event.kind.terminal().is_some();
                    out.push(d);
                    if terminal {
                        return out;
                    }
                }
                Some(Err(lost)) => panic!("subscription lost: {lost}"),
                None => return out,
            }
        }
    }
}

/// The committed history as the journal records it: each turn's input message, then each
/// step's messages, in journal order.
pub fn history_from_journal(journal: &JournalView, session: SessionId) -> Vec<Message> {
    journal
        .read(session, 0, None)
        .expect("read journal")
        .into_iter()
        .flat_map(|(_, event)| committed_messages(&event))
        .collect()
}

/// Every event the journal holds for `session`, in order.
pub fn journaled(journal: &JournalView, session: SessionId) -> Vec<Event> {
    journal
        .read(session, 0, None)
        .expect("read journal")
        .into_iter()
        .map(|(_, event)| event)
        .collect()
}

/// The tool results the model read in the server's last request, in order (a result that
/// is not a plain string, as its JSON text).
pub fn results_read_by_model(server: &ScriptedServer) -> Vec<String> {
    let requests = server.requests();
    let Some(last) = requests.last() else {
        return Vec::new();
    };
    last.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| match &m["content"] {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// The messages an enduring event adds to the history.
pub fn committed_messages(event: &Event) -> Vec<Message> {
    match &event.kind {
        EventKind::TurnStarted { message, .. } => vec![message.clone()],
        EventKind::StepDone { messages, .. } => messages.to_vec(),
        _ => Vec::new(),
    }
}

/// Names of the events, for readable assertion messages.
pub fn names(deliveries: &[Delivery]) -> Vec<&'static str> {
    deliveries.iter().map(|d| d.event.kind.name()).collect()
}

/// A seeded generator for a schedule's own choices (how many steps, when to interrupt).
pub fn rng(seed: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed ^ 0x7265_6164_6c65)
}

/// Picks a value in `range` with the schedule's generator.
pub fn pick(rng: &mut rand::rngs::StdRng, range: std::ops::Range<u64>) -> u64 {
    rng.random_range(range)
}

/// A script of `turns` turns; each makes a random number (1..=3) of `echo` tool steps, each
/// with a little text before the call, then answers with text. Returns the script and the
/// number of steps per turn (tool steps plus the final text step).
pub fn tool_turns(seed: u64, turns: usize) -> (Script, Vec<usize>) {
    let mut rng = rng(seed);
    let mut replies = Vec::new();
    let mut steps = Vec::new();
    for t in 0..turns {
        let tool_steps = pick(&mut rng, 1..4) as usize;
        for s in 0..tool_steps {
            replies.push(
                Reply::text(format!("turn {t} step {s}: calling echo. "))
                    .with_tool_calls([ToolCall::new("echo", serde_json::json!({ "i": s }))])
                    .usage(10 + s as u64, 5),
            );
        }
        replies.push(Reply::text(format!("The answer to turn {t} is {}.", t * 7)).usage(20, 8));
        steps.push(tool_steps + 1);
    }
    (Script::new(replies), steps)
}

/// Arguments of the line-counting `write` tool.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct WriteArgs {
    pub path: String,
}

/// A `write` tool that appends one line (`wrote <path>`) to the file `log` per execution,
/// so executions are counted across processes (a killed child and its restorer).
pub fn line_counting_write(log: std::path::PathBuf) -> impl treadle_session::Tool {
    FnTool::new("write", "Writes a file.", move |args: WriteArgs| {
        let log = log.clone();
        async move {
            use std::io::Write as _;
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .map_err(|e| ToolError(format!("cannot open the log: {e}")))?;
            writeln!(file, "wrote {}", args.path)
                .and_then(|()| file.sync_all())
                .map_err(|e| ToolError(format!("cannot append to the log: {e}")))?;
            Ok::<_, ToolError>(format!("wrote {}", args.path))
        }
    })
}

/// How many times [`line_counting_write`] ran against `log`.
pub fn lines_in(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

/// A session in a child process (one of this crate's `treadle-*-child` binaries) that a
/// proof kills: started on `server` with its journal and the log of what its tool did in a
/// directory the proof owns, after it printed its session id.
pub struct ChildSession {
    pub child: std::process::Child,
    pub session: SessionId,
    pub journal: std::path::PathBuf,
    /// Outside the workspace the session could touch: only the child's tool writes it.
    pub log: std::path::PathBuf,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl ChildSession {
    /// Starts `bin SERVER JOURNAL LOG EXTRA...` with `journal.redb` and `log` in `dir`, and
    /// reads its first line, `session ID`.
    pub fn spawn(
        bin: &str,
        server: &ScriptedServer,
        dir: &std::path::Path,
        log: &str,
        extra: &[&str],
    ) -> ChildSession {
        use std::io::BufRead;
        let journal = dir.join("journal.redb");
        let log = dir.join(log);
        let mut child = std::process::Command::new(bin)
            .args([
                server.base_url(),
                journal.to_str().expect("utf-8 path"),
                log.to_str().expect("utf-8 path"),
            ])
            .args(extra)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = std::io::BufReader::new(stdout).lines();
        let session = lines
            .next()
            .expect("a line")
            .expect("read")
            .strip_prefix("session ")
            .expect("session line")
            .parse()
            .expect("session id");
        ChildSession {
            child,
            session,
            journal,
            log,
            lines,
        }
    }

    /// The child's next line of output.
    pub fn next_line(&mut self) -> String {
        self.lines.next().expect("a line").expect("read")
    }

    /// SIGKILLs the child and reaps it.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }
}
