//! The process's HTTP clients for model endpoints, shared by every session, so sessions
//! share one connection pool and one TLS configuration.
//!
//! Building a reqwest client builds a rustls configuration with its root certificates; per
//! session that was most of the memory an idle session held and a measurable part of its
//! start. Clients are kept per connect timeout (the only per-session setting that lives in
//! the client) and per tokio runtime: a pooled connection is driven by a task of the runtime
//! that opened it, and is dead once that runtime is gone (a program with several runtimes,
//! such as a test binary, must not reuse it). A program has one runtime and, in practice,
//! one timeout: one client.

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::runtime::{Handle, Id};

/// The runtime a client's connections run on (`None` outside one), and its connect timeout.
type Key = (Option<Id>, Duration);

/// How many clients are kept. Only a program with many runtimes (a test binary) has more
/// keys than this; the least recently used client then goes, with its pool.
const KEPT: usize = 16;

/// The clients, least recently used first.
static CLIENTS: OnceLock<Mutex<Vec<(Key, reqwest::Client)>>> = OnceLock::new();

/// The shared client with `connect_timeout` for the current runtime, built on first use.
/// Cheap after that: a clone of a handle.
pub(super) fn shared_client(connect_timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    let key = (Handle::try_current().ok().map(|h| h.id()), connect_timeout);
    let clients = CLIENTS.get_or_init(Mutex::default);
    // A panic while the list is held cannot leave it half-updated, so a poisoned lock is fine.
    let mut clients = clients.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(at) = clients.iter().position(|(k, _)| *k == key) {
        let entry = clients.remove(at);
        let client = entry.1.clone();
        clients.push(entry);
        return Ok(client);
    }
    crate::tls::install_crypto_provider();
    // reqwest's own retry layer is off: `retry.rs` is the one retry policy. (Its default
    // retries only HTTP/2 protocol refusals, which an HTTP/1 client never sees, yet it
    // copied every request's headers and extensions in case it would.)
    let client = reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .retry(reqwest::retry::never().max_retries_per_request(0))
        .build()?;
    if clients.len() >= KEPT {
        clients.remove(0);
    }
    clients.push((key, client.clone()));
    Ok(client)
}
