//! The keeper with real processes: a command's tree, `setsid` escapees included, ends with
//! it, with a stop, and its exit is reported as the command's.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};

use super::*;

/// Starts `script` under a keeper, marked with `mark`; returns it and the first line it
/// printed.
async fn start(script: &str, mark: &str) -> (Kept, String) {
    let mut cmd = tokio::process::Command::new(crate::environ::sh());
    cmd.arg("-c").arg(script).env_clear().env(MARK, mark);
    crate::environ::set_command_env(&mut cmd, &[], [(&MARK.to_owned(), &mark.to_owned())]);
    let mut child = spawn(cmd, None, Confinement::default()).await.unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap_or_default();
    (child, first)
}

/// Whether `pid` is a process that still runs (a zombie has ended).
fn running(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

fn gone_within(pid: &str, limit: Duration) -> bool {
    let t0 = Instant::now();
    while running(pid) {
        if t0.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[tokio::test]
async fn a_setsid_grandchild_dies_when_the_command_exits() {
    let (mut child, pid) = start("setsid sleep 300 & echo $!; exit 3", "t-exit").await;
    assert!(!pid.is_empty());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        status.code(),
        Some(3),
        "the command's exit code, not the keeper's"
    );
    assert!(
        gone_within(&pid, Duration::from_secs(5)),
        "sleep {pid} outlived its command"
    );
}

#[tokio::test]
async fn a_stop_kills_the_group_and_what_left_it() {
    let script = "setsid sh -c 'sleep 300 & sleep 300' & sleep 300 & echo $!; wait";
    let (mut child, pid) = start(script, "t-stop").await;
    // The shell, its sleep, the setsid'd shell and its two sleeps (which left the group),
    // once they have all started.
    let entry = format!("{MARK}=t-stop");
    let t0 = Instant::now();
    let marked_before = loop {
        let now = marked(entry.as_bytes()).unwrap();
        if now.len() >= 5 {
            break now;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "never all started: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let t0 = Instant::now();
    stop_and_wait(&mut child, Duration::from_secs(5)).await;
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "the keeper did not end on SIGTERM"
    );
    assert!(gone_within(&pid, Duration::from_secs(5)));
    for p in marked_before {
        assert!(
            gone_within(&p.to_string(), Duration::from_secs(5)),
            "{p} lives on"
        );
    }
}

#[tokio::test]
async fn a_command_killed_by_a_signal_is_reported_so() {
    let (mut child, _) = start("echo go; kill -TERM $$; sleep 5", "t-signal").await;
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
}

#[tokio::test]
async fn leftovers_of_a_run_are_found_by_their_mark_and_killed() {
    // Started without a keeper, in a session of its own: nothing but the mark finds it.
    let mut cmd = std::process::Command::new("setsid");
    cmd.args(["sleep", "300"])
        .env(MARK, "t-leftover")
        .stdin(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let pid = child.id().to_string();
    let t0 = Instant::now();
    while marked(format!("{MARK}=t-leftover").as_bytes())
        .unwrap()
        .is_empty()
    {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the marked sleep never showed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let found = stop_leftovers("t-leftover", Duration::from_secs(5)).unwrap();
    assert_eq!(found, 1);
    let _ = child.wait();
    assert!(!running(&pid));
    assert_eq!(
        stop_leftovers("t-leftover", Duration::from_secs(1)).unwrap(),
        0
    );
}

#[test]
fn marks_differ_by_run_and_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.redb"), dir.path().join("b.redb"));
    assert_eq!(mark(&a, 1), mark(&a, 1));
    assert_ne!(mark(&a, 1), mark(&a, 2));
    assert_ne!(mark(&a, 1), mark(&b, 1));
}
