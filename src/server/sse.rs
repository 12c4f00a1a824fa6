//! `GET /api/v1/runs/{id}/events`: a run's events as server-sent events. The SSE `id` is
//! the run journal's seq, so a client reconnecting with `Last-Event-ID: N` (or `?after=N`)
//! gets exactly the events after N (`crate::run::event_log::follow`). Token deltas have no
//! `id` and are never replayed. Once the run has ended and the client has caught up, an
//! `end` event closes the stream.
//!
//! A client that stops reading is cut off once [`QUEUE`] live items wait for it: the
//! stream ends without `end`, and the client resumes with `Last-Event-ID`, losing no
//! enduring event (the page and the commands do). Its connection is closed by the
//! listener's write timeout (`listen.rs`) if it never reads again.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::Deserialize;

use super::api::{blocking, run_id};
use super::error::ApiError;
use super::shared::App;
use crate::run::event_log::{Live, Pace, follow_paced};

/// How many live items may wait for one client before it is cut off.
pub const QUEUE: usize = 1024;

/// Where to resume.
#[derive(Debug, Deserialize)]
pub(super) struct After {
    after: Option<String>,
}

/// The cursor: `Last-Event-ID` (what a reconnecting browser sends) or else `?after=`.
fn cursor(headers: &HeaderMap, query: &After) -> Result<u64, ApiError> {
    let given = match headers.get("last-event-id") {
        Some(v) => Some(("Last-Event-ID", v.to_str().unwrap_or("\u{fffd}").to_owned())),
        None => query.after.clone().map(|a| ("after", a)),
    };
    let Some((name, text)) = given else {
        return Ok(0);
    };
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ApiError::BadRequest(format!(
            "{name}: `{text}` is not an event id; it must be the `id:` of an event this stream sent (a whole number), or 0 for the start"
        )));
    }
    text.parse().map_err(|_| {
        ApiError::BadRequest(format!("{name}: `{text}` is too large to be an event id"))
    })
}

/// One follower item as an SSE event.
fn sse_event(item: Result<Live, crate::run::StateError>) -> Event {
    match item {
        Ok(Live::Event(e)) => Event::default()
            .id(e.seq.to_string())
            .event(e.kind)
            .data(&*e.json),
        Ok(Live::Token { step, text }) => Event::default()
            .event("token")
            .data(token_data(step, &text)),
        Err(e) => Event::default()
            .event("error")
            .data(serde_json::json!({ "error": e.to_string() }).to_string()),
    }
}

/// A token event's data, `{"seq":N,"text":"..."}`: written straight from the fields, since
/// token deltas are the stream's bulk (no `Value` map per delta).
fn token_data(seq: u32, text: &str) -> String {
    #[derive(serde::Serialize)]
    struct Token<'a> {
        seq: u32,
        text: &'a str,
    }
    // Serializing a number and a string into memory cannot fail.
    serde_json::to_string(&Token { seq, text }).unwrap_or_default()
}

pub(super) async fn events(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(query): Query<After>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let id = run_id(&id)?;
    let after = cursor(&headers, &query)?;
    blocking(&app, move |store| Ok(store.run(id)?)).await?;
    let live = app.live_run(id).map(|l| l.journal);
    let shutdown = app.shutdown.clone();
    // A run going on under `--nats` is followed from its events stream; the others (and
    // every run without NATS) from the local journal, which holds the same events.
    let followed = match (&app.dispatcher, &live) {
        (Some(d), Some(_)) => {
            crate::dist::events::follow(d.bus().clone(), d.server().to_owned(), id, after).boxed()
        }
        _ => follow_paced(
            app.store.database(),
            id,
            live.clone(),
            after,
            Pace::CutOff(QUEUE),
        )
        .boxed(),
    };
    // `end` only when the run ended and all was sent: a stream that was cut off just ends.
    let was_live = live.is_some();
    let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = finished.clone();
    let stream = followed
        .inspect(move |item| {
            if matches!(item, Ok(Live::Event(e)) if e.kind == "run_finished") {
                seen.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        })
        .map(sse_event)
        .chain(
            futures::stream::once(async move {
                let ended = !was_live || finished.load(std::sync::atomic::Ordering::Relaxed);
                ended.then(|| Event::default().event("end").data("{}"))
            })
            .filter_map(futures::future::ready),
        )
        .take_until(shutdown.cancelled_owned())
        .map(Ok);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
