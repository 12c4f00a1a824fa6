//! The limits a run enforces, each with a default, configurable, and each ending the step
//! with an error that names the limit.

use crate::common;

use common::Fixture;

#[test]
fn a_task_printing_more_than_the_output_limit_is_stopped_with_an_error_naming_it() {
    let f = Fixture::new(
        "limits: { step_output: 100KB }\nplan:\n  - task: flood\n    run: yes 0123456789\n  - task: after\n    run: echo after\n",
    );
    let r = f.treadle(&["run"]);
    r.expect_code(1);
    let out = r.stdout();
    assert!(
        out.contains("step output limit reached")
            && out.contains("100000 bytes")
            && out.contains("limits: { step_output }"),
        "{}",
        &out[out.len().saturating_sub(2000)..]
    );
    // What was printed stays near the limit, so `yes` was stopped there (it writes
    // gigabytes a minute). No wall-clock bound: it failed at load 19, and says nothing
    // the size does not.
    assert!(out.len() < 300_000, "{} bytes printed", out.len());
    assert!(!out.contains("after\n"), "the run went on");
}

#[test]
fn the_default_output_limit_applies_without_configuration() {
    // 16 MiB by default: 20 MB of output is stopped.
    let f = Fixture::new(
        "plan:\n  - task: flood\n    run: head -c 20000000 /dev/zero | tr '\\0' 'a' | fold -w 1000\n",
    );
    let r = f.treadle(&["run"]);
    r.expect_code(1);
    assert!(
        r.stdout()
            .contains("step output limit reached (16777216 bytes"),
        "{}",
        &r.stdout()[r.stdout().len().saturating_sub(500)..]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agents_model_idle_limit_is_set_in_the_pipeline_and_named_when_reached() {
    use treadle_scripted::{Reply, Script, ScriptedServer};
    // Two pieces of the answer, then silence.
    let server = ScriptedServer::start(Script::new([Reply::text(
        "a first piece and then nothing at all",
    )
    .block_after(2)]))
    .await
    .expect("server");
    let f = Fixture::new(
        "agents:\n  - name: slow\n    limits: { model_idle: 300ms, model_response: 1MiB }\nplan:\n  - agent: slow\n    prompt: say something\n",
    );
    let url = server.base_url().to_string();
    let started = std::time::Instant::now();
    let (f, r) = tokio::task::spawn_blocking(move || {
        let r = f.treadle_env(&["run"], &[("TREADLE_LOCAL_URL", &url)]);
        (f, r)
    })
    .await
    .expect("join");
    drop(f);
    let all = format!("{}{}", r.stdout(), r.stderr());
    assert_ne!(r.code(), 0, "{all}");
    assert!(all.contains("idle timeout"), "{all}");
    // Named as the pipeline's author sets it, not as the library's API does.
    assert!(
        all.contains("`limits: { model_idle: 5m }` on the agent"),
        "{all}"
    );
    assert!(!all.contains("SessionBuilder"), "{all}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{all}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_trickles_a_token_every_half_second_is_stopped_by_the_call_limit() {
    use std::time::{Duration, Instant};
    use treadle_scripted::{Reply, Script, ScriptedServer};
    // Never silent for the idle timeout, and it would take about a minute to finish.
    let words: Vec<String> = (0..120).map(|i| format!("word{i}")).collect();
    let server = ScriptedServer::builder()
        .chunk_delay(Duration::from_millis(500))
        .start(Script::new([Reply::text(words.join(" "))]))
        .await
        .expect("server");
    let f = Fixture::new(
        "agents:\n  - name: trickle\n    limits: { model_idle: 2s, model_call: 3s }\nplan:\n  - agent: trickle\n    prompt: say something\n",
    );
    let url = server.base_url().to_string();
    let started = Instant::now();
    let r = tokio::task::spawn_blocking(move || {
        f.treadle_env(&["run"], &[("TREADLE_LOCAL_URL", &url)])
    })
    .await
    .expect("join");
    let took = started.elapsed();
    let all = format!("{}{}", r.stdout(), r.stderr());
    assert_ne!(r.code(), 0, "{all}");
    assert!(
        all.contains("took more than 3s to answer one model call"),
        "{all}"
    );
    assert!(
        all.contains("`limits: { model_call: 30m }` on the agent"),
        "{all}"
    );
    // Cut at the limit: not after the whole minute the stream would take.
    assert!(took < Duration::from_secs(20), "took {took:?}: {all}");
    assert!(server.request_count() >= 1);
}
