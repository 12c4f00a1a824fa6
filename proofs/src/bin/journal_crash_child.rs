//! A process that appends numbered event groups to a durable journal until it is killed.
//!
//! Usage: `journal_crash_child JOURNAL CHECKPOINT_BATCHES`. It opens JOURNAL (replaying
//! whatever write-ahead log an earlier, killed child left), prints `session ID`, then runs
//! three writers that append groups of one to three events concurrently, so that batches
//! hold several groups. After each acknowledged group it prints one line and flushes:
//!
//! `ack WRITER GROUP SEQ,SEQ,... end`
//!
//! Each event's reason is `WRITER/GROUP/INDEX/SIZE`. The `journal_wal` proof kills this
//! process with SIGKILL at a random moment and checks that every printed seq holds its
//! event, that seqs stay contiguous and that no group is partly journaled.

use std::io::Write;
use std::time::{Duration, Instant};

use treadle_event::{Event, EventKind, Header, SessionId};
use treadle_session::{Journal, JournalOptions};

/// A child nobody kills still stops on its own.
const MAX_RUN: Duration = Duration::from_secs(20);

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, checkpoint_batches] = args.as_slice() else {
        return Err("usage: journal_crash_child JOURNAL CHECKPOINT_BATCHES".into());
    };
    let options = JournalOptions {
        checkpoint_batches: checkpoint_batches.parse()?,
        ..JournalOptions::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let journal = Journal::open_with(path, options)?;
        let session = SessionId::new();
        // An import keeps a session's shape: its start first (then the writers' stops).
        let start = EventKind::SessionStarted {
            model: "m".into(),
            endpoint: "e".into(),
            system: None,
            parent: None,
            fork: None,
        };
        journal
            .import(vec![Event::new(Header::session(session), start)])
            .await?;
        say(&format!("session {session}"))?;
        let started = Instant::now();
        let writers = (0..3u32).map(|writer| {
            let journal = journal.clone();
            tokio::spawn(async move {
                let mut group = 0u64;
                while started.elapsed() < MAX_RUN {
                    let size = 1 + (group % 3) as usize;
                    let events: Vec<Event> = (0..size)
                        .map(|index| {
                            Event::new(
                                Header::session(session),
                                EventKind::SessionStopped {
                                    reason: format!("{writer}/{group}/{index}/{size}"),
                                },
                            )
                        })
                        .collect();
                    let seqs = journal.import(events).await?;
                    let seqs: Vec<String> = seqs.iter().map(u64::to_string).collect();
                    say(&format!("ack {writer} {group} {} end", seqs.join(",")))?;
                    group += 1;
                }
                Ok::<(), Error>(())
            })
        });
        for writer in futures::future::join_all(writers).await {
            writer??;
        }
        Ok::<(), Error>(())
    })?;
    Ok(())
}

/// One whole line per write, flushed, so that a kill leaves only complete lines behind.
fn say(line: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(format!("{line}\n").as_bytes())?;
    out.flush()
}
