//! The step cache shared through NATS (`treadle serve --nats`): a step's cache record in
//! the key-value bucket `treadle-cache` under its step key (the same blake3 digest the
//! state file's cache uses), its output trees in the object store, so a step cached by
//! one server (or one run) is found by any other server sharing the NATS.
//!
//! A record larger than [`INLINE_MAX`] (a NATS message is 1 MB by default; a large output
//! manifest) goes to the object store too, named by its blake3 digest, and the bucket holds
//! that name.
//!
//! The state file's cache stays the first place looked in, and the only one without
//! `--nats`. A hit here brings the trees into the local object store, after which it is
//! replayed exactly like a local hit (every object checked against its digest).

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::bus::Bus;
use super::carry;
use super::wire::Carried;
use crate::cache::StepCache;
use crate::cache::digest::Digest;
use crate::cache::records::SuccessRecord;

/// The largest record kept in the bucket itself.
pub const INLINE_MAX: usize = 256 * 1024;

/// What the bucket holds under a step key: the record, or the object holding it.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Stored {
    Inline(Box<Shared>),
    Object {
        /// The object's name: the blake3 digest of the record's JSON.
        record_object: String,
    },
}

/// A shared record.
#[derive(Serialize, Deserialize)]
struct Shared {
    /// The record.
    outcome: SuccessRecord,
    /// Each output tree, packed in the object store.
    trees: Vec<Carried>,
}

/// The record another server (or run) stored under `key`, its trees brought into the
/// local object store; `None` when there is none or it cannot be brought (then the step
/// runs).
pub async fn fetch(
    bus: &Bus,
    cache: &Arc<StepCache>,
    key: &Digest,
    scratch: PathBuf,
) -> Option<SuccessRecord> {
    let value = bus.cache.get(key.hex()).await.ok()??;
    let shared = match serde_json::from_slice(&value).ok()? {
        Stored::Inline(shared) => *shared,
        Stored::Object { record_object } => match carry::get(bus, &record_object).await {
            Ok(bytes) => serde_json::from_slice(&bytes).ok()?,
            Err(e) => {
                tracing::warn!("cannot fetch a shared cache record: {e}");
                return None;
            }
        },
    };
    if shared.outcome.key != *key {
        return None;
    }
    for carried in &shared.trees {
        let tree = shared
            .outcome
            .outputs
            .iter()
            .find(|t| t.name == carried.name)?;
        let dir = scratch.join(format!("cache-{}", carried.digest));
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = carry::receive(bus, &carried.digest, &dir).await {
            tracing::warn!("cannot fetch a shared cache entry's tree: {e}");
            return None;
        }
        let (cache, manifest, from) = (cache.clone(), tree.manifest.clone(), dir.clone());
        let stored = tokio::task::spawn_blocking(move || cache.cas.store(&from, &manifest)).await;
        let _ = std::fs::remove_dir_all(&dir);
        match stored {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!("cannot store a shared cache entry's tree: {e}");
                return None;
            }
            Err(e) => {
                tracing::warn!("cannot store a shared cache entry's tree: {e}");
                return None;
            }
        }
    }
    Some(shared.outcome)
}

/// Shares a replayable step's record: its output trees (`dirs`, by name) to the object
/// store, then the record. Best effort: a step not shared is only not found elsewhere.
pub async fn share(bus: &Bus, outcome: &SuccessRecord, dirs: Vec<(String, PathBuf)>) {
    let mut trees = Vec::new();
    for (name, dir) in dirs {
        match carry::send(bus, &dir).await {
            Ok(digest) => trees.push(Carried { name, digest }),
            Err(e) => {
                tracing::warn!("step not shared through NATS: {e}");
                return;
            }
        }
    }
    let shared = Shared {
        outcome: outcome.clone(),
        trees,
    };
    let Ok(mut value) = serde_json::to_vec(&shared) else {
        return;
    };
    if value.len() > INLINE_MAX {
        let record_object = carry::put(bus, &value).await;
        let Ok(pointer) = serde_json::to_vec(&Stored::Object { record_object }) else {
            return;
        };
        value = pointer;
    }
    if let Err(e) = bus.cache.put(outcome.key.hex(), value.into()).await {
        tracing::warn!("step not shared through NATS: {e}");
    }
}
