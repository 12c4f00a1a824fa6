//! Response pacing: per-request seeded delays, and the body stream that sends frames
//! with delays, cuts the connection, or blocks until the client leaves.

use std::io;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use tokio::sync::watch;

use crate::render::Frames;
use crate::reply::Ending;

/// Per-request delay source: fixed delay plus seeded jitter (splitmix64).
pub(crate) struct Delays {
    /// Before the first streamed frame (after the response's headers).
    first: Duration,
    fixed: Duration,
    jitter: Option<(Duration, Duration)>,
    rng: u64,
}

impl Delays {
    /// Delays for request number `index`: `fixed`, plus `(min, max, seed)` jitter.
    pub(crate) fn new(
        (first, fixed): (Duration, Duration),
        jitter: Option<(Duration, Duration, u64)>,
        index: usize,
    ) -> Self {
        let (jitter, seed) = match jitter {
            Some((min, max, seed)) => (Some((min, max)), seed),
            None => (None, 0),
        };
        Self {
            first,
            fixed,
            jitter,
            rng: seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        }
    }

    pub(crate) fn is_zero(&self) -> bool {
        self.first.is_zero()
            && self.fixed.is_zero()
            && self.jitter.is_none_or(|(_, max)| max.is_zero())
    }

    /// The wait before the first frame, once (`None` after, or when there is none).
    pub(crate) fn take_first(&mut self) -> Option<Duration> {
        let first = std::mem::take(&mut self.first);
        (!first.is_zero()).then_some(first)
    }

    fn next_u64(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn next(&mut self) -> Option<Duration> {
        let extra = match self.jitter {
            Some((min, max)) => {
                let span = u64::try_from((max - min).as_nanos()).unwrap_or(u64::MAX);
                let r = if span == u64::MAX {
                    self.next_u64()
                } else {
                    self.next_u64() % (span + 1)
                };
                min + Duration::from_nanos(r)
            }
            None => Duration::ZERO,
        };
        let total = self.fixed + extra;
        (!total.is_zero()).then_some(total)
    }
}

/// Counts a disconnect if the body is dropped before it finished on purpose.
struct DisconnectGuard {
    disconnects: watch::Sender<usize>,
    finished: bool,
}

impl Drop for DisconnectGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.disconnects.send_modify(|n| *n += 1);
            tracing::debug!("scripted server: client went away mid-response");
        }
    }
}

struct Paced {
    frames: Frames,
    next: usize,
    ending: Ending,
    delays: Delays,
    shutdown: watch::Receiver<bool>,
    guard: DisconnectGuard,
}

/// A body that sends `frames` with `delays` between them, then ends as `ending` says.
/// A drop before the end bumps `disconnects`; `shutdown` turning true ends a block.
pub(crate) fn paced_body(
    frames: Frames,
    ending: Ending,
    delays: Delays,
    disconnects: watch::Sender<usize>,
    shutdown: watch::Receiver<bool>,
) -> Body {
    let state = Paced {
        frames,
        next: 0,
        ending,
        delays,
        shutdown,
        guard: DisconnectGuard {
            disconnects,
            finished: false,
        },
    };
    Body::from_stream(futures::stream::unfold(state, paced_step))
}

async fn paced_step(mut s: Paced) -> Option<(Result<Bytes, io::Error>, Paced)> {
    if s.guard.finished {
        return None;
    }
    if let Some(frame) = s.frames.get(s.next) {
        if s.next == 0
            && let Some(d) = s.delays.take_first()
        {
            tokio::time::sleep(d).await;
        }
        if s.next > 0
            && let Some(d) = s.delays.next()
        {
            tokio::time::sleep(d).await;
        }
        s.next += 1;
        return Some((Ok(frame), s));
    }
    s.guard.finished = true;
    match s.ending {
        Ending::Complete => None,
        Ending::CutAfter(_) => {
            // Let hyper flush what was sent (it flushes when the body is pending); an
            // error right away would discard its write buffer along with the connection.
            tokio::time::sleep(Duration::from_millis(2)).await;
            Some((Err(io::Error::other("scripted cut")), s))
        }
        Ending::BlockAfter(_) => {
            s.guard.finished = false;
            // Hold the response open. Hyper drops this stream (and the guard counts a
            // disconnect) when the client goes away; server shutdown ends it too.
            let _ = s.shutdown.wait_for(|stop| *stop).await;
            s.guard.finished = true;
            Some((Err(io::Error::other("scripted server shut down")), s))
        }
    }
}
