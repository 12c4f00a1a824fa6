//! Which workers are alive, for the operator's view: each worker says every
//! [`BEAT_EVERY`] on the plain subject `treadle.workers` who it is, its slots and how many
//! of them run a step; a server counts the workers heard from within [`SEEN_FOR`].
//! Nothing depends on it for correctness (leases and acknowledgements do that).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

/// The subject of the beats.
pub const SUBJECT: &str = "treadle.workers";
/// How often a worker says it is alive.
pub const BEAT_EVERY: Duration = Duration::from_secs(5);
/// How long a worker counts as seen after its last beat.
pub const SEEN_FOR: Duration = Duration::from_secs(15);

/// One worker's beat.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Beat {
    /// The worker's name.
    pub name: String,
    /// Its slots.
    pub slots: usize,
    /// How many of them run a step.
    pub running: usize,
}

/// Says every [`BEAT_EVERY`] that this worker is alive (until aborted).
pub async fn beat(client: async_nats::Client, name: String, slots: usize, free: Arc<Semaphore>) {
    loop {
        let beat = Beat {
            name: name.clone(),
            slots,
            running: slots.saturating_sub(free.available_permits()),
        };
        if let Ok(body) = serde_json::to_vec(&beat) {
            let _ = client.publish(SUBJECT, body.into()).await;
        }
        tokio::time::sleep(BEAT_EVERY).await;
    }
}

/// The workers a server heard from.
#[derive(Default)]
pub struct Seen {
    workers: Mutex<HashMap<String, (Beat, Instant)>>,
}

impl Seen {
    /// Listens to the beats (for the process's life).
    pub fn listen(client: async_nats::Client) -> Arc<Self> {
        let seen = Arc::new(Self::default());
        let keep = seen.clone();
        tokio::spawn(async move {
            // The client resubscribes after a reconnect; a failed subscribe only means no
            // workers are shown.
            let Ok(mut sub) = client.subscribe(SUBJECT).await else {
                return;
            };
            while let Some(m) = sub.next().await {
                if let Ok(beat) = serde_json::from_slice::<Beat>(&m.payload)
                    && let Ok(mut w) = keep.workers.lock()
                {
                    w.insert(beat.name.clone(), (beat, Instant::now()));
                }
            }
        });
        seen
    }

    /// The workers heard from within [`SEEN_FOR`], by name.
    pub fn alive(&self) -> Vec<Beat> {
        let Ok(mut w) = self.workers.lock() else {
            return Vec::new();
        };
        w.retain(|_, (_, at)| at.elapsed() < SEEN_FOR);
        let mut out: Vec<Beat> = w.values().map(|(b, _)| b.clone()).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}
