//! Weak-model tolerance a pipeline chooses (issue 40): `verdict_from_text: true` takes a
//! final answer that is exactly one of the step's verdicts, as a small model often gives
//! instead of calling `verdict`; off by default, and only on a step with `verdicts:`.

use crate::common;

use common::Fixture;
use treadle_scripted::{Reply, Script, ScriptedServer};

fn pipeline(extra: &str) -> String {
    format!(
        "agents:\n  - name: fixer\njobs:\n  - name: j\n    plan:\n      - agent: fixer\n        prompt: Fix the test, then say fixed or stuck.\n        verdicts:\n          - fixed: done\n          - stuck: gave_up\n{extra}      - task: gave_up\n        run: exit 7\n      - task: done\n        run: echo all good\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_text_verdict_word_is_taken_when_the_step_says_so() {
    let server = ScriptedServer::start(Script::new([Reply::text(" Fixed.\n")]))
        .await
        .expect("server");
    let (_f, run) = Fixture::new(&pipeline("        verdict_from_text: true\n"))
        .run_at(server.base_url())
        .await;
    run.expect_code(0);
    let out = run.stdout();
    assert!(out.contains("taken from the answer's text"), "{out}");
    assert!(out.contains("all good"), "the verdict did not route: {out}");
    assert_eq!(server.requests().len(), 1, "a reminder was sent: {out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_key_a_text_answer_is_no_verdict() {
    let server = ScriptedServer::start(Script::new([Reply::text("fixed"), Reply::text("fixed")]))
        .await
        .expect("server");
    let (_f, run) = Fixture::new(&pipeline("")).run_at(server.base_url()).await;
    assert_eq!(run.code(), 1, "{}", run.stdout());
    assert!(!run.stdout().contains("all good"), "{}", run.stdout());
    // A sentence that mentions a verdict is not one, even with the key.
    let server = ScriptedServer::start(Script::new([
        Reply::text("I think it is fixed now"),
        Reply::text("It is fixed, I believe"),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(&pipeline("        verdict_from_text: true\n"))
        .run_at(server.base_url())
        .await;
    assert_eq!(run.code(), 1, "{}", run.stdout());
}

#[test]
fn verdict_from_text_needs_verdicts() {
    let f = Fixture::new(
        "agents:\n  - name: a\njobs:\n  - name: j\n    plan:\n      - agent: a\n        prompt: hi\n        verdict_from_text: true\n",
    );
    let run = f.treadle(&["validate"]);
    assert_eq!(run.code(), 2, "{}", run.stderr());
    assert!(
        run.stderr().contains("treadle.yml:8:28: ")
            && run
                .stderr()
                .contains("`verdict_from_text:` on a step without `verdicts:`"),
        "{}",
        run.stderr()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn turning_verdict_from_text_off_runs_the_step_again_instead_of_replaying_it() {
    let server = ScriptedServer::start(Script::new([
        Reply::text("fixed"),
        Reply::text("fixed"),
        Reply::text("fixed"),
    ]))
    .await
    .expect("server");
    let (f, run) = Fixture::new(&pipeline("        verdict_from_text: true\n"))
        .run_at(server.base_url())
        .await;
    run.expect_code(0);
    assert_eq!(server.requests().len(), 1);
    // Without the key the same answer is no verdict: a replay of the step would route as
    // if it were one.
    std::fs::write(f.file(), pipeline("")).expect("edit the pipeline");
    let url = server.base_url().to_owned();
    let plan = f.treadle_env(&["plan"], &[("TREADLE_LOCAL_URL", &url)]);
    assert!(
        plan.stdout()
            .contains("fixer [agent] would run: configuration changed"),
        "{}{}",
        plan.stdout(),
        plan.stderr()
    );
    let (_f, run) = f.run_at(server.base_url()).await;
    let out = run.stdout();
    assert!(!out.contains("↺ fixer"), "replayed from the cache: {out}");
    assert_eq!(run.code(), 1, "{out}");
    assert!(
        server.requests().len() > 1,
        "the model was not asked: {out}"
    );
}
