//! The model limits end a turn instead of hanging it or flooding it: a server that accepts
//! and never answers, one that sends two chunks and stalls, and a 50 MB reply, each over
//! real loopback HTTP.

use crate::common;

use std::time::{Duration, Instant};

use treadle_event::{EventKind, FailureCause};
use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::{Session, SessionBuilder, TurnOutcome, TurnReport};

/// A session that gives up on silence after `idle`, with a journal in `dir`.
fn session(endpoint: &str, dir: &tempfile::TempDir, idle: Duration) -> SessionBuilder {
    common::session(endpoint, dir).idle_timeout(idle)
}

/// Runs one turn, which must end (fail) well within `bound`.
async fn run_failing(session: &Session, bound: Duration) -> (String, TurnReport) {
    let started = Instant::now();
    let report = tokio::time::timeout(bound, session.turn("hello").run())
        .await
        .expect("the turn ends instead of hanging")
        .expect("a report");
    assert!(started.elapsed() < bound);
    let TurnOutcome::Failed { error, failure, .. } = &report.outcome else {
        panic!("the turn must fail: {report:?}");
    };
    assert_eq!(*failure, FailureCause::Model, "{error}");
    (error.clone(), report)
}

/// Rule 4: the failed step left no `StepDone` behind.
fn assert_no_step_done(session: &Session) {
    let events = session.journal().read(session.id(), 0, None).expect("read");
    assert!(
        !events
            .iter()
            .any(|(_, e)| matches!(e.kind, EventKind::StepDone { .. })),
        "a discarded step has no StepDone"
    );
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_fails_the_turn_at_the_idle_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    // Accepts every connection and holds it open without a byte of answer.
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let dir = tempfile::tempdir().expect("dir");
    let endpoint = format!("http://{address}/v1");
    let session = session(&endpoint, &dir, Duration::from_millis(300))
        .start()
        .await
        .expect("start");
    let (error, _) = run_failing(&session, Duration::from_secs(10)).await;
    assert!(error.contains("idle timeout"), "{error}");
    assert!(error.contains("response head"), "{error}");
    assert_no_step_done(&session);
    session.shutdown().await;
    silent.abort();
}

#[tokio::test]
async fn two_chunks_then_a_stall_fails_the_turn_at_the_idle_timeout() {
    let server = ScriptedServer::start(Script::new([Reply::text(
        "first piece and then nothing at all",
    )
    .block_after(2)]))
    .await
    .expect("server");
    let dir = tempfile::tempdir().expect("dir");
    let session = session(server.base_url(), &dir, Duration::from_millis(300))
        .start()
        .await
        .expect("start");
    let (error, report) = run_failing(&session, Duration::from_secs(10)).await;
    assert!(error.contains("idle timeout"), "{error}");
    assert!(error.contains("next piece of the stream"), "{error}");
    assert_eq!(report.steps, 0);
    assert_no_step_done(&session);
    session.shutdown().await;
}

/// A server that answers every request with one SSE event whose text is `size` bytes,
/// written in 64 KiB pieces as fast as the client reads; it stops when the client hangs up.
async fn huge_event_server(size: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = vec![0u8; 64 << 10];
                let _ = socket.read(&mut request).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                            connection: close\r\n\r\n";
                let open = r#"data: {"choices":[{"index":0,"delta":{"content":""#;
                if socket.write_all(head.as_bytes()).await.is_err()
                    || socket.write_all(open.as_bytes()).await.is_err()
                {
                    return;
                }
                let piece = vec![b'x'; 64 << 10];
                let mut sent = 0;
                while sent < size {
                    if socket.write_all(&piece).await.is_err() {
                        return;
                    }
                    sent += piece.len();
                }
                let close = "\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
                let _ = socket.write_all(close.as_bytes()).await;
            });
        }
    });
    format!("http://{address}/v1")
}

#[tokio::test]
async fn a_50_mb_reply_is_refused_at_the_size_limit_without_being_held_whole() {
    let endpoint = huge_event_server(50 << 20).await;
    let dir = tempfile::tempdir().expect("dir");
    let session = session(&endpoint, &dir, Duration::from_secs(30))
        .max_response_bytes(1 << 20)
        .start()
        .await
        .expect("start");
    let (error, _) = run_failing(&session, Duration::from_secs(30)).await;
    assert!(error.contains("1048576 bytes"), "{error}");
    assert!(error.contains("response size limit"), "{error}");
    assert_no_step_done(&session);
    // Nothing of the reply reached the journal.
    let journal = std::fs::metadata(dir.path().join("j.redb")).expect("journal");
    assert!(
        journal.len() < 8 << 20,
        "journal is {} bytes",
        journal.len()
    );
    session.shutdown().await;
}
