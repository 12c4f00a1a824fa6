//! The run's event log (not an agent session's journal): every enduring transcript
//! [`Event`] of a run, numbered from 1 with no gaps, in the state file, and the live
//! channel that serves it to followers.
//!
//! # The rule
//!
//! An event is committed to the `run_events` table *before* it is published live, and both
//! happen in [`EventLog::record`] under one lock, so the live order is the journal order.
//! A follower ([`follow`]) subscribes to the live channel first, then reads the journal after
//! its cursor, then drains the live channel skipping what it has already seen: an event
//! committed before the subscription is in the read, one committed after it is on the
//! channel, and the skip removes the overlap. No gap, no duplicate. A follower that falls
//! behind the channel (it lags) starts the same three steps again from its cursor.
//!
//! Token deltas ([`Live::Token`]) are live only: not journaled, never replayed.

use std::sync::{Arc, Mutex};

use futures::Stream;
use redb::{Database, ReadableDatabase, TableDefinition};
use tokio::sync::broadcast;

use super::state::StateError;

/// `(run, seq)` → the event's JSON line, as `treadle run --json` prints it.
const RUN_EVENTS: TableDefinition<(u64, u64), &str> = TableDefinition::new("run_events");

/// How many live items a slow follower may be behind before it lags (and catches up from
/// the journal; it loses only token deltas).
pub const LIVE_CAPACITY: usize = 1 << 16;

/// One journaled event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Journaled {
    /// Its sequence number in the run, from 1.
    pub seq: u64,
    /// The event's kind (`step_started`, ...), its JSON `event` field.
    pub kind: String,
    /// The event as one JSON object.
    pub json: Arc<str>,
}

/// What a follower receives.
#[derive(Debug, Clone)]
pub enum Live {
    /// An enduring event, in journal order.
    Event(Journaled),
    /// A piece of an agent step's text as the model streams it (live only).
    Token {
        /// The step's outline seq.
        step: u32,
        /// The piece.
        text: Arc<str>,
    },
}

/// One run's journal writer and live channel.
pub struct EventLog {
    db: Arc<Database>,
    run: u64,
    // The next seq; held while committing and publishing, which makes them one step.
    next: Mutex<u64>,
    live: broadcast::Sender<Live>,
}

impl std::fmt::Debug for EventLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventLog").field("run", &self.run).finish()
    }
}

fn db_err(e: impl Into<redb::Error>) -> StateError {
    StateError::of_redb(e.into())
}

/// Creates the journal's table if the file does not have it yet.
pub fn ensure_table(db: &Database) -> Result<(), StateError> {
    let txn = db.begin_write().map_err(db_err)?;
    txn.open_table(RUN_EVENTS).map_err(db_err)?;
    txn.commit().map_err(db_err)
}

/// The kind of an event line: its `event` field.
fn kind_of(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v.get("event").and_then(|k| k.as_str()).map(str::to_owned))
        .unwrap_or_default()
}

impl EventLog {
    /// The journal of `run`, continuing after the events it already has.
    pub fn open(db: Arc<Database>, run: u64) -> Result<Self, StateError> {
        ensure_table(&db)?;
        let last = last_seq(&db, run)?;
        let (live, _) = broadcast::channel(LIVE_CAPACITY);
        Ok(Self {
            db,
            run,
            next: Mutex::new(last + 1),
            live,
        })
    }

    /// The run.
    pub fn run(&self) -> u64 {
        self.run
    }

    /// Whether it holds no event yet.
    pub fn is_empty(&self) -> bool {
        self.next.lock().is_ok_and(|next| *next == 1)
    }

    /// Commits one event line (already masked) and then publishes it; returns its seq.
    pub fn record(&self, json: &str) -> Result<u64, StateError> {
        // Not synced: the run's end (a durable commit) persists every event before it. A crash
        // loses at most the tail, after which the run is recorded as running, which is true.
        self.commit(&[json], redb::Durability::None, |_| Ok(()))
    }

    /// Commits one event line durably in one transaction with `also` (other writes to the
    /// state file), then publishes it. The run's last event goes with the record of its
    /// end: a run recorded as ended has its `run_finished` in its journal, and a crash
    /// before that commit leaves neither (the run is then still running, and goes on).
    pub fn record_with(
        &self,
        json: &str,
        also: impl FnOnce(&redb::WriteTransaction) -> Result<(), StateError>,
    ) -> Result<u64, StateError> {
        self.commit(&[json], redb::Durability::Immediate, also)
    }

    /// Commits event lines (already masked) in one transaction with `also`, at
    /// `durability`, then publishes them in order; returns the seq of the first. A step's
    /// events go with its record: its start with the record that says it runs, its end
    /// with the record of its end and the cache's result of it, one commit each instead
    /// of one per event and one per record (issue 42). No line: `also` alone.
    pub fn record_all_with(
        &self,
        lines: &[&str],
        durability: redb::Durability,
        also: impl FnOnce(&redb::WriteTransaction) -> Result<(), StateError>,
    ) -> Result<u64, StateError> {
        self.commit(lines, durability, also)
    }

    fn commit(
        &self,
        lines: &[&str],
        durability: redb::Durability,
        also: impl FnOnce(&redb::WriteTransaction) -> Result<(), StateError>,
    ) -> Result<u64, StateError> {
        let mut next = self
            .next
            .lock()
            .map_err(|_| StateError::Poisoned("the run journal"))?;
        let first = *next;
        let mut txn = self.db.begin_write().map_err(db_err)?;
        let _ = txn.set_durability(durability);
        if !lines.is_empty() {
            let mut table = txn.open_table(RUN_EVENTS).map_err(db_err)?;
            for (seq, json) in (first..).zip(lines) {
                table.insert((self.run, seq), *json).map_err(db_err)?;
            }
        }
        also(&txn)?;
        txn.commit().map_err(db_err)?;
        *next = first + lines.len() as u64;
        // Published only now, in seq order under the lock: no follower sees an event
        // before its commit. No follower is not an error: the events are in the journal.
        for (seq, json) in (first..).zip(lines) {
            let _ = self.live.send(Live::Event(Journaled {
                seq,
                kind: kind_of(json),
                json: Arc::from(*json),
            }));
        }
        Ok(first)
    }

    /// Publishes a token delta of agent step `step` to whoever follows now.
    pub fn token(&self, step: u32, text: &str) {
        let _ = self.live.send(Live::Token {
            step,
            text: Arc::from(text),
        });
    }

    /// How many followers are subscribed now.
    pub fn followers(&self) -> usize {
        self.live.receiver_count()
    }

    /// How far the slowest follower is behind (items published that it has not taken);
    /// past [`LIVE_CAPACITY`] it lags and loses token deltas.
    pub fn backlog(&self) -> usize {
        self.live.len()
    }

    /// A receiver of everything published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Live> {
        self.live.subscribe()
    }
}

/// The last seq journaled for `run` (0: none).
pub fn last_seq(db: &Database, run: u64) -> Result<u64, StateError> {
    let txn = db.begin_read().map_err(db_err)?;
    let table = match txn.open_table(RUN_EVENTS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(db_err(e)),
    };
    let last = table
        .range((run, 0)..=(run, u64::MAX))
        .map_err(db_err)?
        .next_back()
        .transpose()
        .map_err(db_err)?;
    Ok(last.map_or(0, |(k, _)| k.value().1))
}

/// The journaled events of `run` after `after`, in order.
pub fn read_after(db: &Database, run: u64, after: u64) -> Result<Vec<Journaled>, StateError> {
    read_page(db, run, after, usize::MAX)
}

/// How many journaled events a follower reads at a time while it catches up: a follower
/// that stops reading holds one page, not the rest of the run.
const PAGE: usize = 256;

/// How many items wait between a [`Pace::CutOff`] follower's task and its reader, and how
/// many journaled events it reads at a time while it catches up. Events read from the
/// journal are the follower's own copies (live ones are shared by every follower): with
/// 200 followers that stopped reading during a catch-up, a page of 256 and a queue of
/// 1,024 held about 2 MB each of a run printing 4 KB lines (docs/benchmarks.md, "The
/// server's memory under followers that do not read"). How far behind such a follower may
/// fall is counted on the live channel instead, whose items are shared.
const CUT_OFF_QUEUE: usize = 16;

/// At most `limit` journaled events of `run` after `after`, in order.
fn read_page(
    db: &Database,
    run: u64,
    after: u64,
    limit: usize,
) -> Result<Vec<Journaled>, StateError> {
    let txn = db.begin_read().map_err(db_err)?;
    let table = match txn.open_table(RUN_EVENTS) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(db_err(e)),
    };
    let mut out = Vec::new();
    let Some(from) = after.checked_add(1) else {
        return Ok(out);
    };
    for entry in table
        .range((run, from)..=(run, u64::MAX))
        .map_err(db_err)?
        .take(limit)
    {
        let (k, v) = entry.map_err(db_err)?;
        let json = v.value();
        out.push(Journaled {
            seq: k.value().1,
            kind: kind_of(json),
            json: Arc::from(json),
        });
    }
    Ok(out)
}

/// What a follower does when its reader falls behind the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Waits for it (an in-process reader that always catches up).
    Wait,
    /// Ends the stream once this many live items wait unread: a remote reader that stopped
    /// reading is cut off (it resumes from its last seq, losing no enduring event), instead
    /// of keeping the run's items alive. Catching up from the journal always waits: it is
    /// read a few events at a time ([`CUT_OFF_QUEUE`]), as the reader takes them.
    CutOff(usize),
}

/// Follows a run from after `after`: the journal, then (when `live` is the running run's
/// journal) what it publishes, each enduring event once and in order. Ends after the run's
/// `run_finished` event, or, for a run not running here, once the journal is read.
pub fn follow(
    db: Arc<Database>,
    run: u64,
    live: Option<Arc<EventLog>>,
    after: u64,
) -> impl Stream<Item = Result<Live, StateError>> + Send {
    follow_paced(db, run, live, after, Pace::Wait)
}

/// [`follow`], with what to do with a reader that falls behind.
pub fn follow_paced(
    db: Arc<Database>,
    run: u64,
    live: Option<Arc<EventLog>>,
    after: u64,
    pace: Pace,
) -> impl Stream<Item = Result<Live, StateError>> + Send {
    let (capacity, page) = match pace {
        Pace::Wait => (256, PAGE),
        Pace::CutOff(_) => (CUT_OFF_QUEUE, CUT_OFF_QUEUE),
    };
    async_stream(capacity, move |tx| async move {
        let mut live = live;
        let mut cursor = after;
        loop {
            // 1. Subscribe first, so nothing committed from now on is missed.
            let mut rx = live.as_ref().map(|j| j.subscribe());
            // 2. Catch up from the journal, a page at a time.
            loop {
                let db2 = db.clone();
                let read = tokio::task::spawn_blocking(move || read_page(&db2, run, cursor, page))
                    .await
                    .map_err(StateError::from)
                    .and_then(|r| r);
                let caught = match read {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                let full = caught.len() == page;
                for event in caught {
                    cursor = event.seq;
                    let last = event.kind == "run_finished";
                    if tx.send(Ok(Live::Event(event))).await.is_err() || last {
                        return;
                    }
                }
                if !full {
                    break;
                }
            }
            let Some(rx) = rx.as_mut() else { return };
            // 3. Follow live, skipping what the read already gave.
            loop {
                let received = tokio::select! {
                    r = rx.recv() => r,
                    // The follower went away while the run is quiet.
                    () = tx.closed() => return,
                };
                match received {
                    Ok(Live::Event(e)) if e.seq <= cursor => {}
                    Ok(Live::Event(e)) => {
                        let (seq, last) = (e.seq, e.kind == "run_finished");
                        if !hand(&tx, Live::Event(e), pace, rx).await || last {
                            return;
                        }
                        cursor = seq;
                    }
                    Ok(token) => {
                        if !hand(&tx, token, pace, rx).await {
                            return;
                        }
                    }
                    // Behind the channel: catch up from the journal again.
                    Err(broadcast::error::RecvError::Lagged(_)) => break,
                    // The run's journal is gone: whatever it wrote is in the file.
                    Err(broadcast::error::RecvError::Closed) => {
                        live = None;
                        break;
                    }
                }
            }
        }
    })
}

/// How often a follower waiting for its reader looks how far behind the live channel it is.
const LAG_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// Hands a live item to the reader as `pace` says; `false`: the stream ends here (the
/// reader is gone, or cut off: `limit` live items wait for it on `rx`).
async fn hand(
    tx: &tokio::sync::mpsc::Sender<Result<Live, StateError>>,
    item: Live,
    pace: Pace,
    rx: &broadcast::Receiver<Live>,
) -> bool {
    let limit = match pace {
        Pace::Wait => return tx.send(Ok(item)).await.is_ok(),
        Pace::CutOff(limit) => limit,
    };
    // The reader keeps up: no timer.
    let item = match tx.try_send(Ok(item)) {
        Ok(()) => return true,
        Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => return false,
        Err(tokio::sync::mpsc::error::TrySendError::Full(item)) => item,
    };
    loop {
        match tokio::time::timeout(LAG_CHECK, tx.reserve()).await {
            Ok(Ok(permit)) => {
                permit.send(item);
                return true;
            }
            Ok(Err(_)) => return false,
            Err(_) if rx.len() >= limit => return false,
            Err(_) => {}
        }
    }
}

/// A stream fed by a task through a channel of `capacity` items (the task stops when the
/// stream is dropped: its next send fails).
fn async_stream<T, F, Fut>(capacity: usize, body: F) -> impl Stream<Item = T> + Send
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(capacity);
    tokio::spawn(body(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn line(run: u64, i: u64, last: bool) -> String {
        let kind = if last { "run_finished" } else { "output" };
        format!("{{\"event\":\"{kind}\",\"run\":{run},\"line\":\"{i}\"}}")
    }

    /// Several events and another write in one commit: all of them or none (a failing
    /// `also` leaves no event behind and publishes nothing), numbered on from the events
    /// before, and published in order once committed.
    #[test]
    fn events_committed_together_with_a_write_are_all_or_nothing() {
        const OTHER: TableDefinition<u64, u64> = TableDefinition::new("other");
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Database::create(dir.path().join("j.redb")).unwrap());
        let journal = EventLog::open(db.clone(), 3).unwrap();
        let mut live = journal.subscribe();
        journal.record(&line(3, 1, false)).unwrap();
        let (two, three) = (line(3, 2, false), line(3, 3, false));
        let failed = journal.record_all_with(&[&two, &three], redb::Durability::None, |txn| {
            txn.open_table(OTHER)
                .map_err(db_err)?
                .insert(1, 1)
                .map_err(db_err)?;
            Err(StateError::Poisoned("a write that fails"))
        });
        assert!(failed.is_err());
        assert_eq!(last_seq(&db, 3).unwrap(), 1, "no event of a failed commit");
        let first = journal
            .record_all_with(&[&two, &three], redb::Durability::Immediate, |txn| {
                txn.open_table(OTHER)
                    .map_err(db_err)?
                    .insert(1, 7)
                    .map_err(db_err)?;
                Ok(())
            })
            .unwrap();
        assert_eq!(first, 2);
        let read = db.begin_read().unwrap();
        let other = read.open_table(OTHER).unwrap();
        assert_eq!(other.get(1).unwrap().map(|v| v.value()), Some(7));
        let seqs: Vec<u64> = read_after(&db, 3, 0)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3]);
        let mut published = Vec::new();
        while let Ok(Live::Event(e)) = live.try_recv() {
            published.push((e.seq, e.json.to_string()));
        }
        assert_eq!(published, [(1, line(3, 1, false)), (2, two), (3, three)]);
    }

    /// Followers that join at random moments, from random cursors, while the run writes
    /// get exactly the events after their cursor: no gap, no duplicate, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn followers_joining_mid_run_get_every_event_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Database::create(dir.path().join("j.redb")).unwrap());
        let journal = Arc::new(EventLog::open(db.clone(), 7).unwrap());
        const N: u64 = 600;
        let writer = {
            let journal = journal.clone();
            tokio::spawn(async move {
                for i in 1..=N {
                    journal.record(&line(7, i, i == N)).unwrap();
                    if i % 50 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        };
        let mut followers = Vec::new();
        for k in 0..30u64 {
            let (db, journal) = (db.clone(), journal.clone());
            followers.push(tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_micros(k * 300)).await;
                let after = (k * 37) % N;
                let got: Vec<u64> = follow(db, 7, Some(journal), after)
                    .filter_map(|i| async move {
                        match i.unwrap() {
                            Live::Event(e) => Some(e.seq),
                            Live::Token { .. } => None,
                        }
                    })
                    .collect()
                    .await;
                (after, got)
            }));
        }
        writer.await.unwrap();
        for f in followers {
            let (after, got) = f.await.unwrap();
            let expected: Vec<u64> = (after + 1..=N).collect();
            assert_eq!(got, expected, "follower from {after}");
        }
        // A run no longer live: the journal alone, then the end.
        let replay: Vec<_> = follow(db.clone(), 7, None, N - 3).collect().await;
        assert_eq!(replay.len(), 3);
        assert_eq!(last_seq(&db, 7).unwrap(), N);
        assert!(read_after(&db, 8, 0).unwrap().is_empty());
    }
}
