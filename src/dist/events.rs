//! A run's enduring events on the `TREADLE_EVENTS` stream, and following a run from there.
//!
//! The server stays the one writer of a run's events: each is numbered and committed to
//! the local journal first (`run::event_log`), then [`mirror`] publishes it to
//! `treadle.events.<server>.<run>` with `Nats-Msg-Id: <server>.<run>.<seq>`, so a publish
//! retried after an outage is stored once. [`follow`] reads a run back from the stream
//! with an ordered consumer from its first message: catch-up, then follow, skipping what
//! the cursor has seen, like the local follower. Token deltas go over the plain subject
//! `treadle.live.<server>.<run>`, live only.

use std::sync::Arc;

use futures::{Stream, StreamExt};

use super::bus::{Bus, EVENTS_STREAM, retrying};
use crate::run::StateError;
use crate::run::event_log::{EventLog, Journaled, Live};

/// The header carrying an event's seq in the run.
const SEQ_HEADER: &str = "Treadle-Seq";

fn subject(server: &str, run: u64) -> String {
    format!("treadle.events.{server}.{run}")
}

fn live_subject(server: &str, run: u64) -> String {
    format!("treadle.live.{server}.{run}")
}

/// Publishes every event of the running run `journal` (from its first) to the stream, and
/// its token deltas to the live subject, until its `run_finished`.
pub fn mirror(bus: Bus, server: String, db: Arc<redb::Database>, journal: Arc<EventLog>) {
    let run = journal.run();
    tokio::spawn(async move {
        let mut events = Box::pin(crate::run::event_log::follow(db, run, Some(journal), 0));
        while let Some(item) = events.next().await {
            match item {
                Ok(Live::Event(e)) => {
                    let id = format!("{server}.{run}.{}", e.seq);
                    retrying("publishing a run event", || async {
                        let publish = async_nats::jetstream::message::PublishMessage::build()
                            .payload(bytes::Bytes::from(e.json.to_string()))
                            .message_id(&id)
                            .header(SEQ_HEADER, e.seq.to_string().as_str());
                        bus.js
                            .send_publish(subject(&server, run), publish)
                            .await
                            .map_err(|e| e.to_string())?
                            .await
                            .map_err(|e| e.to_string())
                    })
                    .await;
                }
                Ok(Live::Token { step, text }) => {
                    let body = serde_json::json!({ "seq": step, "text": &*text }).to_string();
                    let _ = bus
                        .client
                        .publish(live_subject(&server, run), body.into())
                        .await;
                }
                Err(e) => {
                    tracing::warn!("cannot mirror run {run}'s events: {e}");
                    return;
                }
            }
        }
    });
}

/// One stream message as a journaled event.
fn journaled(m: &async_nats::jetstream::Message) -> Option<Journaled> {
    let seq = m.headers.as_ref()?.get(SEQ_HEADER)?.as_str().parse().ok()?;
    let json = String::from_utf8_lossy(&m.payload).into_owned();
    let kind = serde_json::from_str::<serde_json::Value>(&json)
        .ok()
        .and_then(|v| v.get("event").and_then(|k| k.as_str()).map(str::to_owned))
        .unwrap_or_default();
    Some(Journaled {
        seq,
        kind,
        json: Arc::from(json),
    })
}

/// Follows run `run` of `server` from the stream after `after`: every enduring event once,
/// in order, and token deltas while following; ends after `run_finished`.
pub fn follow(
    bus: Bus,
    server: String,
    run: u64,
    after: u64,
) -> impl Stream<Item = Result<Live, StateError>> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tokio::spawn(async move {
        // Tokens first, so none sent after the catch-up starts is missed.
        let tokens = bus.client.subscribe(live_subject(&server, run)).await;
        let stream = match bus.js.get_stream(EVENTS_STREAM).await {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(Err(StateError::Nats(Box::new(e)))).await;
                return;
            }
        };
        let consumer = stream
            .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
                filter_subject: subject(&server, run),
                deliver_policy: async_nats::jetstream::consumer::DeliverPolicy::All,
                ..Default::default()
            })
            .await;
        let messages = match consumer {
            Ok(c) => c.messages().await,
            Err(e) => {
                let _ = tx.send(Err(StateError::Nats(Box::new(e)))).await;
                return;
            }
        };
        let mut messages = match messages {
            Ok(m) => m,
            Err(e) => {
                let _ = tx.send(Err(StateError::Nats(Box::new(e)))).await;
                return;
            }
        };
        let mut tokens = tokens.ok();
        let mut cursor = after;
        loop {
            let next_token = async {
                match tokens.as_mut() {
                    Some(t) => t.next().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                m = messages.next() => {
                    let m = match m {
                        Some(Ok(m)) => m,
                        // The ordered consumer makes itself again after an outage.
                        Some(Err(_)) => continue,
                        None => {
                            let ended = "the events stream ended".into();
                            let _ = tx.send(Err(StateError::Nats(ended))).await;
                            return;
                        }
                    };
                    let Some(e) = journaled(&m) else { continue };
                    if e.seq <= cursor {
                        continue;
                    }
                    cursor = e.seq;
                    let last = e.kind == "run_finished";
                    if tx.send(Ok(Live::Event(e))).await.is_err() || last {
                        return;
                    }
                }
                t = next_token => {
                    let Some(t) = t else { tokens = None; continue };
                    let v: serde_json::Value = serde_json::from_slice(&t.payload).unwrap_or_default();
                    let step = v.get("seq").and_then(serde_json::Value::as_u64).and_then(|s| u32::try_from(s).ok());
                    let text = v.get("text").and_then(|t| t.as_str());
                    if let (Some(step), Some(text)) = (step, text)
                        && tx.send(Ok(Live::Token { step, text: Arc::from(text) })).await.is_err() {
                        return;
                    }
                }
                () = tx.closed() => return,
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
