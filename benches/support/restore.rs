//! The harness bench's `restore`: restoring one session of N committed tool steps, at
//! several N, with the journal's size on disk and the restoring process's peak memory.
//!
//! The parent writes each journal (non-durable, in batches of 1,000 steps), then restores it
//! in a child process of its own (this binary again, `--restore-child`), several times, so
//! that each restore's peak resident set (`VmHWM`) is its own and not the writer's. The
//! child times two phases apart: opening the journal and reading the session's events
//! (`read_ms`), then a full `Session::builder()...restore(id)` in a fresh open (`wall_ms`,
//! `cpu_ms` from `CLOCK_PROCESS_CPUTIME_ID`, every thread). Medians over the rounds.
//!
//! Sizes: `TREADLE_BENCH_RESTORE_STEPS` (comma-separated, default 1000,10000,100000).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{Value, json};
use treadle_session::event::{
    Block, Event, EventKind, Header, InputId, LoopId, Message, Role, SessionId, TurnId, Usage,
};
use treadle_session::{Journal, JournalOptions, Session};

use crate::probe::{loadavg, median, peak_rss_mb};

/// The flag that makes this binary a restore child.
pub const CHILD_FLAG: &str = "--restore-child";

/// The step counts to measure: the environment's list, or 1,000 / 10,000 / 100,000 (a small
/// pair in a smoke run).
fn sizes(full: bool) -> Vec<usize> {
    if let Ok(list) = std::env::var("TREADLE_BENCH_RESTORE_STEPS") {
        let sizes: Vec<usize> = list
            .split(',')
            .filter_map(|s| s.trim().replace('_', "").parse().ok())
            .collect();
        if !sizes.is_empty() {
            return sizes;
        }
    }
    if full {
        vec![1_000, 10_000, 100_000]
    } else {
        vec![20, 200]
    }
}

/// Writes the journals and restores each in child processes; one JSON line per size.
pub async fn run(endpoint: &str, full: bool) {
    for steps in sizes(full) {
        let rounds = match (full, steps) {
            (false, _) => 1,
            (true, s) if s >= 100_000 => 3,
            _ => 5,
        };
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("restore.redb");
        let t = Instant::now();
        let session = write_journal(&path, endpoint, steps).await;
        let write_ms = t.elapsed().as_secs_f64() * 1e3;
        // Before any restore, which appends its `SessionRestored` marker.
        let bytes = dir_bytes(dir.path());
        let results: Vec<Value> = (0..rounds)
            .map(|_| restore_in_child(&path, session, endpoint, steps))
            .collect();
        let pick = |key: &str| median(results.iter().filter_map(|r| r[key].as_f64()).collect());
        let (wall, cpu, read) = (pick("wall_ms"), pick("cpu_ms"), pick("read_ms"));
        println!(
            "{}",
            json!({
                "bench": "restore", "steps": steps, "rounds": rounds,
                "wall_ms": wall, "cpu_ms": cpu, "read_ms": read,
                "wall_us_per_step": wall * 1e3 / steps as f64,
                "cpu_us_per_step": cpu * 1e3 / steps as f64,
                "journal_bytes": bytes, "bytes_per_step": bytes as f64 / steps as f64,
                "peak_rss_mb": pick("peak_rss_mb"), "base_rss_mb": pick("base_rss_mb"),
                "write_ms": write_ms, "loadavg": loadavg(),
            })
        );
    }
}

/// The bytes of every file in the journal's directory (the redb file, and a log if any).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// One restore of `session` in a child process; the JSON line it printed.
fn restore_in_child(path: &Path, session: SessionId, endpoint: &str, steps: usize) -> Value {
    let exe = std::env::current_exe().expect("this binary");
    let out = Command::new(exe)
        .arg(CHILD_FLAG)
        .arg(path)
        .arg(session.to_string())
        .arg(endpoint)
        .arg(steps.to_string())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("restore child");
    assert!(out.status.success(), "restore child failed: {}", out.status);
    serde_json::from_slice(&out.stdout).expect("the child's JSON line")
}

/// Process CPU time (user + system, every thread) in ms.
fn cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// The child: `--restore-child PATH SESSION ENDPOINT STEPS`. Prints one JSON line.
pub fn child(args: &[String]) {
    let [path, session, endpoint, steps] = args else {
        panic!("usage: {CHILD_FLAG} PATH SESSION ENDPOINT STEPS");
    };
    let path = PathBuf::from(path);
    let session: SessionId = session.parse().expect("session id");
    let steps: usize = steps.parse().expect("steps");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let base_rss = peak_rss_mb();
        // Phase one: open and read every event of the session, as restore's first step.
        let t = Instant::now();
        let events = {
            let journal = Journal::open(&path).expect("journal");
            journal.read(session, 0, None).expect("read").len()
        };
        let read_ms = t.elapsed().as_secs_f64() * 1e3;
        // Start, turn, the steps and the end; the journal may add its own (claims).
        assert!(events >= steps + 3, "{events} events for {steps} steps");
        let (t, cpu) = (Instant::now(), cpu_ms());
        let restored = Session::builder()
            .endpoint(endpoint)
            .model("scripted")
            .journal_path(&path)
            .restore(session)
            .await
            .expect("restore");
        let (wall_ms, cpu_ms) = (t.elapsed().as_secs_f64() * 1e3, cpu_ms() - cpu);
        // Before `history()`, whose copy of the history is the caller's, not the restore's.
        let peak = peak_rss_mb();
        let history = restored.history().await.expect("history");
        assert_eq!(history.len(), 1 + 2 * steps);
        restored.shutdown().await;
        println!(
            "{}",
            json!({
                "wall_ms": wall_ms, "cpu_ms": cpu_ms, "read_ms": read_ms,
                "peak_rss_mb": peak, "base_rss_mb": base_rss,
            })
        );
    });
}

/// A journal holding one session: a turn of `steps` committed tool steps (an assistant tool
/// call and its result each) and its end.
async fn write_journal(path: &Path, endpoint: &str, steps: usize) -> SessionId {
    let options = JournalOptions {
        durable: false,
        ..JournalOptions::default()
    };
    let journal = Journal::open_with(path, options).expect("journal");
    let (id, main) = (SessionId::new(), LoopId::new());
    let started = EventKind::SessionStarted {
        model: "scripted".into(),
        endpoint: endpoint.into(),
        system: None,
        parent: None,
        fork: None,
    };
    journal
        .import(vec![Event::new(Header::in_loop(id, main), started)])
        .await
        .expect("append");
    let turn = TurnId::new();
    let header = || Header::in_loop(id, main).with_turn(turn);
    let message = Message::user("go");
    let mut batch = vec![Event::new(
        header(),
        EventKind::TurnStarted {
            input: InputId::new(),
            message,
        },
    )];
    for i in 0..steps {
        batch.push(Event::new(header(), step(i)));
        if batch.len() == 1000 {
            let full = std::mem::take(&mut batch);
            journal.import(full).await.expect("append");
        }
    }
    let done = EventKind::TurnDone {
        text: "done".into(),
        steps: steps as u32,
        usage: Usage::default(),
    };
    batch.push(Event::new(header(), done));
    journal.import(batch).await.expect("append");
    id
}

/// Step `i`: the assistant's call of `echo` and its result.
fn step(i: usize) -> EventKind {
    let call = format!("call_{i}");
    let messages = vec![
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: call.clone(),
                name: "echo".into(),
                arguments: format!("{{\"i\":{i}}}"),
            }],
        },
        Message {
            role: Role::Tool,
            content: vec![Block::ToolResult {
                call_id: call,
                content: i.to_string(),
                is_error: false,
            }],
        },
    ];
    EventKind::StepDone {
        index: i as u32,
        messages: messages.into(),
        usage: Usage::default(),
        model: "scripted".into(),
    }
}
