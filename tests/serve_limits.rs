//! Bounded server resources, against a real `treadle serve` over raw TCP: slow-header
//! ("slowloris") connections are closed after `--header-timeout`, and an event-stream
//! follower that stops reading is cut off (its connection closed after
//! `--write-timeout`), then resumes with `Last-Event-ID` and loses no event.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Fixture;
use common::server::{Server, get, post};

const HELLO: &str =
    "jobs:\n  - name: main\n    plan:\n      - task: hello\n        run: echo hello\n";

fn addr(s: &Server) -> String {
    s.base.trim_start_matches("http://").to_owned()
}

/// Whether the server closed `tcp` (EOF or reset) within `wait`.
fn closed_within(tcp: &mut TcpStream, wait: Duration) -> bool {
    tcp.set_read_timeout(Some(wait)).expect("timeout");
    let mut buf = [0u8; 4096];
    loop {
        match tcp.read(&mut buf) {
            Ok(0) => return true,
            // A 408 before closing is a close as well; read on to the end.
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn slow_header_connections_are_closed() {
    let f = Fixture::new(HELLO);
    let s = Server::start(f.path(), &["--header-timeout", "1s"], &[]);
    let mut slow: Vec<TcpStream> = (0..50)
        .map(|i| {
            let mut tcp = TcpStream::connect(addr(&s)).expect("connect");
            if i % 2 == 0 {
                // Half a request head, never finished.
                tcp.write_all(b"GET /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                    .expect("write");
            }
            tcp
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    for (i, tcp) in slow.iter_mut().enumerate() {
        assert!(
            closed_within(tcp, Duration::from_secs(5)),
            "connection {i} still open"
        );
    }
    // A whole request is still answered.
    let mut tcp = TcpStream::connect(addr(&s)).expect("connect");
    tcp.write_all(b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .expect("write");
    let mut out = String::new();
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let _ = tcp.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
}

/// A connection whose receive buffer is 4 KiB, so that what it does not read backs up
/// into the server soon.
fn small_window(addr: &str) -> TcpStream {
    use std::os::fd::FromRawFd;
    let sa: std::net::SocketAddrV4 = addr.parse().expect("IPv4 address");
    let size: libc::c_int = 4096;
    // SAFETY: plain socket calls on a descriptor this function owns until it is handed to
    // `TcpStream`; every pointer is to a local that outlives the call.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket");
        let set = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw const size).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        assert_eq!(set, 0, "SO_RCVBUF");
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: sa.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*sa.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let r = libc::connect(
            fd,
            (&raw const sin).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(r, 0, "connect");
        TcpStream::from_raw_fd(fd)
    }
}

/// The `id:` fields of an SSE text, in order, and whether it ended with `end`.
fn ids(text: &str) -> (Vec<u64>, bool) {
    let ids = text
        .lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    (ids, text.contains("event: end"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_follower_that_stops_reading_is_cut_off_and_resumes_losing_nothing() {
    // Enough events that the unread ones overflow the socket buffers and the queue.
    let f = Fixture::new(
        "jobs:\n  - name: main\n    plan:\n      - task: loud\n        run: seq 1 4000 | awk '{ printf \"%s \", $0; for (i = 0; i < 400; i++) printf \"0123456789\"; print \"\" }'\n",
    );
    let s = Server::start(f.path(), &["--write-timeout", "2s"], &[]);
    let (code, started) = post(
        &s,
        "/api/v1/runs",
        serde_json::json!({"pipeline": "treadle"}),
    )
    .await;
    assert_eq!(code, 201, "{started}");
    let id = started["id"].as_u64().expect("id");
    let address = addr(&s);
    // Connects, reads the response head, then reads nothing until the run has ended.
    let mut tcp = small_window(&address);
    let token = s.token.clone().expect("the server's token");
    let head = format!(
        "GET /api/v1/runs/{id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).expect("write");
    let began = Instant::now();
    loop {
        let (_, run) = get(&s, &format!("/api/v1/runs/{id}")).await;
        if run["status"] != "running" {
            assert_eq!(run["status"], "succeeded", "{run}");
            break;
        }
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "the run never ended"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    // What reached the socket before the cut, then the close (no `end`: it was cut off).
    let first = tokio::task::spawn_blocking(move || {
        tcp.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut out = Vec::new();
        let _ = tcp.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .expect("read");
    let (got, finished) = ids(&first);
    assert!(!finished, "the stalled follower was not cut off");
    let last = *got.last().expect("some events before the cut");
    assert_eq!(got, (1..=last).collect::<Vec<_>>(), "a gap before the cut");
    // Resumes from the last event it has: everything after, once, then `end`.
    let r = s
        .http()
        .get(s.url(&format!("/api/v1/runs/{id}/events")))
        .header("Last-Event-ID", last.to_string())
        .send()
        .await
        .expect("resume");
    let rest = r.text().await.expect("rest");
    let (more, finished) = ids(&rest);
    assert!(finished, "the resumed stream did not end with `end`");
    let end = *more.last().expect("events after the cut");
    assert_eq!(
        more,
        ((last + 1)..=end).collect::<Vec<_>>(),
        "a gap after the cut"
    );
    assert!(rest.contains("run_finished"));
}
