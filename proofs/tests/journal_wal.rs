//! The durable journal survives SIGKILL at any point: every acknowledged append is there
//! after reopening, seqs stay contiguous, and no group is partly journaled (rules 2, 9, 10
//! rest on this).
//!
//! A child process (`journal_crash_child`) appends groups from three writers and prints each
//! acknowledged seq; it is killed with SIGKILL at a random moment: in the middle of appends,
//! of a checkpoint, of its open (which replays the log the previous child left). One journal
//! file is carried through all the runs, so each child starts from the crash of the last.
//! After each kill this process checks a copy of the files, taken the way the kill left
//! them, so that the chain itself is only ever opened by children.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use treadle_event::{EventKind, SessionId};
use treadle_proofs::{PATIENCE, pick, rng};
use treadle_session::{Journal, JournalView};

const RUNS: u64 = 30;

/// A group: `(session, writer, group number)`.
type GroupKey = (SessionId, u32, u64);

/// Each group → the seqs the child printed for it.
type Acked = BTreeMap<GroupKey, Vec<u64>>;

#[test]
fn a_journal_killed_at_random_points_keeps_every_acknowledged_append() {
    let child_bin = env!("CARGO_BIN_EXE_journal_crash_child");
    let dir = tempfile::tempdir().expect("dir");
    let chain = dir.path().join("chain.redb");
    let mut acked = Acked::new();
    let mut kills_before_session = 0;
    let mut replayed = 0;
    for seed in 0..RUNS {
        let mut rng = rng(seed);
        // Every other run checkpoints every 3 batches, so kills also land in checkpoints.
        let checkpoint_batches = if seed % 2 == 0 { 3 } else { 1024 };
        let mut child = Command::new(child_bin)
            .args([path_str(&chain), &checkpoint_batches.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        // The child's lines, read as they come: a kill meant for the appends waits for the
        // child to have opened its journal, so a loaded machine's slow start cannot turn it
        // into a kill before the start.
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut lines = Vec::new();
        // Mostly while appending; sometimes during the open and its replay.
        let wait = if seed % 5 == 0 {
            pick(&mut rng, 0..15)
        } else {
            while !lines
                .last()
                .is_some_and(|l: &String| l.starts_with("session "))
            {
                match rx.recv_timeout(PATIENCE) {
                    Ok(line) => lines.push(line),
                    Err(e) => panic!("seed {seed}: the child did not start: {e}"),
                }
            }
            pick(&mut rng, 20..200)
        };
        std::thread::sleep(Duration::from_millis(wait));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        reader.join().expect("reader thread");
        lines.extend(rx.try_iter());

        let mut session = None;
        for line in lines {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["session", id] => session = Some(id.parse::<SessionId>().expect("session id")),
                ["ack", writer, group, seqs, "end"] => {
                    let session = session.expect("session line first");
                    let seqs = seqs.split(',').map(|s| s.parse().expect("seq")).collect();
                    let key = (
                        session,
                        writer.parse().expect("writer"),
                        group.parse().expect("group"),
                    );
                    acked.insert(key, seqs);
                }
                // A line cut by the kill: not acknowledged as far as anyone knows.
                _ => {}
            }
        }
        if session.is_none() {
            kills_before_session += 1;
        }

        // What the kill left, opened as a copy.
        let image_dir = tempfile::tempdir().expect("image dir");
        let image = image_dir.path().join("image.redb");
        copy_if_present(&chain, &image);
        copy_if_present(&wal(&chain), &wal(&image));
        if !chain.exists() {
            assert!(
                acked.is_empty(),
                "seed {seed}: acknowledged appends but no journal file"
            );
            continue;
        }
        let journal =
            Journal::open(&image).unwrap_or_else(|e| panic!("seed {seed}: reopen: {e:?}"));
        check(&journal, &acked, seed);
        let stats = journal.stats();
        eprintln!(
            "seed {seed}: killed after {wait} ms; {} groups acknowledged so far; {} events replayed from the log",
            acked.len(),
            stats.replayed
        );
        replayed += stats.replayed;
    }
    assert!(
        acked.len() > 100,
        "the children acknowledged only {} groups",
        acked.len()
    );
    assert!(replayed > 0, "no run left anything in the log to replay");
    assert!(
        kills_before_session < RUNS as usize / 2,
        "most kills came before the child started"
    );
}

/// Every acknowledged group holds its events at its seqs, every journaled group is whole,
/// and the seqs of the file are exactly 1..=last.
fn check(journal: &JournalView, acked: &Acked, seed: u64) {
    // Each group → its events as (seq, index, size).
    let mut journaled: BTreeMap<GroupKey, Vec<(u64, usize, usize)>> = BTreeMap::new();
    let mut all_seqs = BTreeSet::new();
    for session in journal.sessions().expect("sessions") {
        for (seq, event) in journal.read(session, 0, None).expect("read") {
            assert!(all_seqs.insert(seq), "seed {seed}: seq {seq} twice");
            // The session's start, imported before the writers begin.
            if matches!(event.kind, EventKind::SessionStarted { .. }) {
                continue;
            }
            let EventKind::SessionStopped { reason } = &event.kind else {
                panic!("seed {seed}: unexpected event at {seq}: {event:?}");
            };
            let parts: Vec<u64> = reason
                .split('/')
                .map(|p| p.parse().expect("reason"))
                .collect();
            let [writer, group, index, size] = parts.as_slice() else {
                panic!("seed {seed}: bad reason {reason}");
            };
            journaled
                .entry((session, *writer as u32, *group))
                .or_default()
                .push((seq, *index as usize, *size as usize));
        }
    }
    if let Some(&last) = all_seqs.last() {
        assert_eq!(
            all_seqs.len() as u64,
            last,
            "seed {seed}: seqs are not contiguous from 1"
        );
    }
    for (key, events) in &journaled {
        let size = events[0].2;
        let indexes: Vec<usize> = events.iter().map(|e| e.1).collect();
        assert_eq!(
            indexes,
            (0..size).collect::<Vec<_>>(),
            "seed {seed}: group {key:?} is partial"
        );
        assert!(
            events.windows(2).all(|w| w[1].0 == w[0].0 + 1),
            "seed {seed}: group {key:?} is split"
        );
    }
    for (key, seqs) in acked {
        let found: Vec<u64> = journaled
            .get(key)
            .unwrap_or_else(|| {
                panic!("seed {seed}: acknowledged group {key:?} (seqs {seqs:?}) is lost")
            })
            .iter()
            .map(|e| e.0)
            .collect();
        assert_eq!(&found, seqs, "seed {seed}: group {key:?} moved");
    }
}

fn wal(db: &Path) -> std::path::PathBuf {
    let mut path = db.as_os_str().to_owned();
    path.push(".wal");
    path.into()
}

fn copy_if_present(from: &Path, to: &Path) {
    match std::fs::copy(from, to) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("copy {}: {e}", from.display()),
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}
