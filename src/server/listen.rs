//! Accepting connections: HTTP/1 by hyper, with the time limits `axum::serve` does not
//! set. A client gets [`Limits::header`] to send a request's head (slow-header
//! "slowloris" connections are closed, idle keep-alive ones as well), and a write the
//! client does not take for [`Limits::stall`] closes the connection (a follower that
//! stopped reading its event stream holds no memory for ever).
//!
//! Memory: hyper buffers at most [`WRITE_BUFFER`] per connection, and after connections
//! end the allocator is asked to give freed memory back to the system (glibc's
//! `malloc_trim`, at most once a second): with 200 followers that never read, glibc kept
//! the peak resident after they left (docs/benchmarks.md, `scripts/sse-memory`).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;

/// The most a connection buffers for writing (hyper's default is about 400 KiB; the kernel's
/// socket buffer comes on top).
pub const WRITE_BUFFER: usize = 64 * 1024;

/// The connection time limits.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The most time to receive a request's head (its line and headers).
    pub header: Duration,
    /// The most time a write may wait for the client to read.
    pub stall: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header: Duration::from_secs(10),
            stall: Duration::from_secs(30),
        }
    }
}

/// Serves `routes` on `listener` until `stop` is cancelled, then lets the open
/// connections finish (graceful shutdown) and returns.
pub async fn serve(listener: TcpListener, routes: Router, limits: Limits, stop: CancellationToken) {
    // Each connection holds a receiver; when all are gone, every connection has ended.
    let (open_tx, open_rx) = tokio::sync::watch::channel(());
    let trim = give_back_memory();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stop.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                tracing::warn!("treadle serve: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(Stalling::new(stream, limits.stall));
        let service = TowerToHyperService::new(routes.clone());
        let (stop, open, trim) = (stop.clone(), open_rx.clone(), trim.clone());
        tokio::spawn(async move {
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header)
                .max_buf_size(WRITE_BUFFER);
            let conn = builder.serve_connection(io, service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                () = stop.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(open);
            trim.notify_one();
        });
    }
    drop(open_rx);
    open_tx.closed().await;
}

/// A task that gives freed memory back to the system a second after it is woken (so a
/// burst of ended connections costs one trim).
fn give_back_memory() -> std::sync::Arc<tokio::sync::Notify> {
    let woken = std::sync::Arc::new(tokio::sync::Notify::new());
    let wake = woken.clone();
    tokio::spawn(async move {
        loop {
            wake.notified().await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            trim();
        }
    });
    woken
}

/// Returns the allocator's free memory to the system, where the allocator can.
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only releases free heap pages; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A stream whose writes fail with `TimedOut` once one has waited `limit` for the peer.
pub struct Stalling<S> {
    inner: S,
    limit: Duration,
    /// Set while a write is pending: when it gives up.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<S> Stalling<S> {
    /// `inner`, with writes limited to `limit` of waiting.
    pub fn new(inner: S, limit: Duration) -> Self {
        Self {
            inner,
            limit,
            deadline: None,
        }
    }

    /// After the inner write said `Pending`: `Pending` still, or the timeout.
    fn waiting<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.limit;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(deadline.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the client read nothing for too long",
        )))
    }

    fn written<T>(
        &mut self,
        poll: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match poll {
            Poll::Pending => self.waiting(cx),
            done => {
                self.deadline = None;
                done
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Stalling<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Stalling<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.written(poll, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.written(poll, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.written(poll, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// A peer that never reads: the writer's buffers fill, then the write times out.
    #[tokio::test]
    async fn a_write_nobody_reads_times_out() {
        let (a, _b) = tokio::io::duplex(64);
        let mut w = Stalling::new(a, Duration::from_millis(100));
        let started = std::time::Instant::now();
        let mut result = Ok(());
        for _ in 0..100 {
            result = w.write_all(&[0u8; 64]).await;
            if result.is_err() {
                break;
            }
        }
        let e = result.expect_err("timed out");
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
