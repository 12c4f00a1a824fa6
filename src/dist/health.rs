//! The NATS side of a server's health, for `/health` and `/metrics`: whether the
//! connection is up, whether JetStream answers for the steps stream, and the queue as
//! JetStream counts it (steps waiting for a worker, steps delivered and not yet
//! acknowledged, redeliveries).

use std::time::Duration;

use async_nats::connection::State;
use serde::Serialize;

use super::bus::{Bus, STEPS_STREAM, WORKERS};

/// How long a health check waits for JetStream.
const ASK_FOR: Duration = Duration::from_secs(2);

/// What NATS looks like from this server.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NatsHealth {
    /// The client is connected.
    pub connected: bool,
    /// JetStream answered for the steps stream.
    pub jetstream: bool,
    /// Steps no worker took yet.
    pub queued: u64,
    /// Steps delivered to a worker, not yet acknowledged.
    pub in_flight: u64,
    /// Steps delivered more than once since the workers' consumer was made.
    pub redelivered: u64,
    /// Why JetStream did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl NatsHealth {
    /// Both the connection and JetStream are up.
    pub fn ok(&self) -> bool {
        self.connected && self.jetstream
    }
}

/// Asks NATS.
pub async fn check(bus: &Bus) -> NatsHealth {
    let connected = bus.client.connection_state() == State::Connected;
    let mut health = NatsHealth {
        connected,
        ..NatsHealth::default()
    };
    if !connected {
        health.error = Some("not connected to NATS".to_owned());
        return health;
    }
    let asked = tokio::time::timeout(ASK_FOR, async {
        let mut stream = bus
            .js
            .get_stream(STEPS_STREAM)
            .await
            .map_err(|e| e.to_string())?;
        let messages = stream
            .info()
            .await
            .map_err(|e| e.to_string())?
            .state
            .messages;
        // No consumer yet (no worker ever joined): everything in the stream waits.
        let consumer = stream.consumer_info(WORKERS).await.ok();
        Ok::<_, String>((messages, consumer))
    })
    .await;
    match asked {
        Ok(Ok((messages, consumer))) => {
            health.jetstream = true;
            match consumer {
                Some(c) => {
                    health.queued = c.num_pending;
                    health.in_flight = c.num_ack_pending as u64;
                    health.redelivered = c.num_redelivered as u64;
                }
                None => health.queued = messages,
            }
        }
        Ok(Err(e)) => health.error = Some(format!("JetStream: {e}")),
        Err(_) => health.error = Some("JetStream did not answer within 2s".to_owned()),
    }
    health
}

/// The scale-out's families in the Prometheus text format, appended to `/metrics`.
pub async fn metrics(dispatcher: &super::Dispatcher) -> String {
    use std::fmt::Write as _;
    let health = check(dispatcher.bus()).await;
    let workers = dispatcher.workers();
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        name.to_owned()
    };
    let up = family(
        "treadle_nats_up",
        "gauge",
        "1 when connected to NATS and JetStream answers.",
    );
    let queued = family(
        "treadle_nats_steps_queued",
        "gauge",
        "Steps on the queue no worker took yet.",
    );
    let flight = family(
        "treadle_nats_steps_in_flight",
        "gauge",
        "Steps delivered to a worker and not yet acknowledged.",
    );
    let redelivered = family(
        "treadle_nats_steps_redelivered",
        "gauge",
        "Steps delivered more than once (JetStream's count since the workers' consumer was made).",
    );
    let seen = family(
        "treadle_nats_workers",
        "gauge",
        "Workers heard from in the last 15 s.",
    );
    let slots = family(
        "treadle_nats_worker_slots",
        "gauge",
        "Slots of each worker heard from, and how many run a step.",
    );
    let took = family(
        "treadle_nats_step_duration_seconds",
        "histogram",
        "Steps run on workers, from queueing to result.",
    );
    let _ = writeln!(out, "{up} {}", u8::from(health.ok()));
    let _ = writeln!(out, "{queued} {}", health.queued);
    let _ = writeln!(out, "{flight} {}", health.in_flight);
    let _ = writeln!(out, "{redelivered} {}", health.redelivered);
    let _ = writeln!(out, "{seen} {}", workers.len());
    for w in &workers {
        let _ = writeln!(
            out,
            "{slots}{{worker=\"{}\",state=\"total\"}} {}",
            w.name, w.slots
        );
        let _ = writeln!(
            out,
            "{slots}{{worker=\"{}\",state=\"busy\"}} {}",
            w.name, w.running
        );
    }
    let h = dispatcher.stats().histogram();
    let mut cumulative = 0;
    for (bound, n) in super::stats::BOUNDS.iter().zip(h.buckets.iter()) {
        cumulative += n;
        let _ = writeln!(out, "{took}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{took}_bucket{{le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{took}_sum {}", h.sum);
    let _ = writeln!(out, "{took}_count {}", h.count);
    out
}
