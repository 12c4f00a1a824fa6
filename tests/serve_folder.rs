//! `treadle serve DIR` follows the directory's files without a restart, against the real
//! binary: a pipeline file added is served and runs, an edited one runs as it is now, and
//! one removed is no longer served.

use crate::common;

use common::server::{Server, get, post};
use serde_json::{Value, json};

fn names(pipelines: &Value) -> Vec<String> {
    pipelines
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn pipeline(word: &str) -> String {
    format!("jobs:\n  - name: main\n    plan:\n      - task: say\n        run: echo {word}\n")
}

async fn run_output(s: &Server, name: &str) -> String {
    let (code, started) = post(s, "/api/v1/runs", json!({"pipeline": name})).await;
    assert_eq!(code, 201, "{started}");
    let id = started["id"].as_u64().expect("id");
    let begun = std::time::Instant::now();
    loop {
        let (_, run) = get(s, &format!("/api/v1/runs/{id}")).await;
        if run["status"] != "running" {
            assert_eq!(run["status"], "succeeded", "{run}");
            return run["steps"][0]["output_tail"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
        }
        assert!(begun.elapsed().as_secs() < 30, "run {id} never ended");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_served_directory_picks_up_new_changed_and_removed_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let served = dir.path().join("pipelines");
    std::fs::create_dir(&served).expect("mkdir");
    std::fs::write(served.join("first.yml"), pipeline("one")).expect("write");
    let s = Server::start(dir.path(), &["pipelines"], &[]);
    let (_, list) = get(&s, "/api/v1/pipelines").await;
    assert_eq!(names(&list), ["first"]);

    // New: served at once, and it runs.
    std::fs::write(served.join("second.yaml"), pipeline("two")).expect("write");
    let (_, list) = get(&s, "/api/v1/pipelines").await;
    assert_eq!(names(&list), ["first", "second"]);
    assert_eq!(run_output(&s, "second").await, "two\n");

    // Changed: the next run is of the file as it is now.
    std::fs::write(served.join("first.yml"), pipeline("uno")).expect("write");
    assert_eq!(run_output(&s, "first").await, "uno\n");

    // Removed: no longer listed, and asking for it is the 404 that lists what is served.
    std::fs::remove_file(served.join("first.yml")).expect("rm");
    let (_, list) = get(&s, "/api/v1/pipelines").await;
    assert_eq!(names(&list), ["second"]);
    let (code, answer) = post(&s, "/api/v1/runs", json!({"pipeline": "first"})).await;
    assert_eq!(code, 404, "{answer}");
    assert!(answer.to_string().contains("served: second"), "{answer}");

    // A clash (two files of one name) keeps the last listing and says why.
    std::fs::write(served.join("second.yml"), pipeline("clash")).expect("write");
    let (_, list) = get(&s, "/api/v1/pipelines").await;
    assert_eq!(names(&list), ["second"]);
    let out = s.stop();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("still serving the files listed before"),
        "{stderr}"
    );
}
