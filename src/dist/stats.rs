//! A server's figures of the steps it sent to workers, for `/metrics`: how many finished
//! and how long each took from queueing to result (a histogram in the Prometheus manner).

use std::sync::Mutex;
use std::time::Duration;

/// The upper bounds of the duration buckets, in seconds.
pub const BOUNDS: [f64; 10] = [0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0];

/// Durations of the steps finished on workers.
#[derive(Default)]
pub struct Stats {
    inner: Mutex<Histogram>,
}

/// Counts per bucket (not cumulative), the sum and the count.
#[derive(Default, Clone)]
pub struct Histogram {
    /// Steps per bucket of [`BOUNDS`], the last for longer ones.
    pub buckets: [u64; BOUNDS.len() + 1],
    /// Seconds, summed.
    pub sum: f64,
    /// Steps.
    pub count: u64,
}

impl Stats {
    /// Counts a step that took `took` from queueing to result.
    pub fn finished(&self, took: Duration) {
        let secs = took.as_secs_f64();
        let at = BOUNDS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BOUNDS.len());
        if let Ok(mut h) = self.inner.lock() {
            h.buckets[at] += 1;
            h.sum += secs;
            h.count += 1;
        }
    }

    /// The figures so far.
    pub fn histogram(&self) -> Histogram {
        self.inner.lock().map(|h| h.clone()).unwrap_or_default()
    }
}
