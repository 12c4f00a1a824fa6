//! The server reads what steps made as untrusted: a 1 GiB (sparse) artifact downloaded
//! three times at once, with the step's changes asked for meanwhile, keeps the server's
//! peak memory small (streamed, never read whole), and a FIFO among the outputs is refused
//! at once instead of hanging the request.

use crate::common;

use std::time::{Duration, Instant};

use common::Fixture;
use common::server::{Server, get, post};
use futures::StreamExt;
use serde_json::json;

const OUTPUTS: &str = "jobs:\n  - name: main\n    plan:\n      - task: make\n        outputs: [big]\n        run: truncate -s 1G big/zero && mkfifo big/pipe && echo hi > big/small.txt\n";

/// The server's peak resident memory (`VmHWM`), in MB.
fn peak_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM");
    kb / 1024.0
}

async fn finished_run(s: &Server) -> u64 {
    let (code, started) = post(s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{started}");
    let id = started["id"].as_u64().expect("id");
    let t0 = Instant::now();
    loop {
        let (_, run) = get(s, &format!("/api/v1/runs/{id}")).await;
        if run["status"] != "running" {
            assert_eq!(run["status"], "succeeded", "{run}");
            return id;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the run never ended"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Downloads `url` to its end, counting its bytes without keeping them.
async fn download(client: reqwest::Client, url: String) -> u64 {
    let r = client.get(url).send().await.expect("GET");
    assert_eq!(r.status().as_u16(), 200);
    let mut body = r.bytes_stream();
    let mut n = 0u64;
    while let Some(chunk) = body.next().await {
        n += chunk.expect("chunk").len() as u64;
    }
    n
}

#[tokio::test(flavor = "multi_thread")]
async fn three_downloads_of_a_1_gib_artifact_keep_the_server_small() {
    let f = Fixture::new(OUTPUTS);
    let s = Server::start(f.path(), &[], &[]);
    let id = finished_run(&s).await;
    let before = peak_mb(s.child.id());
    let url = s.url(&format!(
        "/api/v1/runs/{id}/artifacts/big.1/zero?download=1"
    ));
    let downloads: Vec<_> = (0..3)
        .map(|_| tokio::spawn(download(s.http(), url.clone())))
        .collect();
    let (_, run) = get(&s, &format!("/api/v1/runs/{id}")).await;
    let seq = run["steps"][0]["seq"]
        .as_u64()
        .unwrap_or_else(|| panic!("{run}"));
    let (code, changes) = get(&s, &format!("/api/v1/runs/{id}/steps/{seq}/changes")).await;
    assert_eq!(code, 200, "{changes}");
    let files = changes[0]["files"]
        .as_array()
        .unwrap_or_else(|| panic!("{changes}"));
    let zero = files
        .iter()
        .find(|f| f["path"] == "zero")
        .expect("zero listed");
    assert_eq!(zero["size"], json!(1u64 << 30));
    assert!(zero["diff"].is_null(), "{zero}");
    for d in downloads {
        assert_eq!(d.await.expect("download"), 1 << 30);
    }
    let peak = peak_mb(s.child.id());
    println!("server peak RSS: {before:.1} MB before, {peak:.1} MB after");
    assert!(peak < 150.0, "the server's peak RSS reached {peak:.1} MB");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fifo_among_the_outputs_is_refused_at_once() {
    let f = Fixture::new(OUTPUTS);
    let s = Server::start(f.path(), &[], &[]);
    let id = finished_run(&s).await;
    let asked = Instant::now();
    let (code, answer) = tokio::time::timeout(
        Duration::from_secs(10),
        get(&s, &format!("/api/v1/runs/{id}/artifacts/big.1/pipe")),
    )
    .await
    .expect("the FIFO's GET hung");
    assert_eq!(code, 422, "{answer}");
    assert!(
        answer["error"]
            .as_str()
            .unwrap_or_default()
            .contains("a FIFO"),
        "{answer}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    // The files beside it are still served.
    let (code, _) = get(&s, &format!("/api/v1/runs/{id}/artifacts/big.1/small.txt")).await;
    assert_eq!(code, 200);
}
