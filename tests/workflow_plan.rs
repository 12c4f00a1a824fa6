//! `workflow::plan` against the run it predicts, over the examples' workflows (the review
//! of examples/review.yml and the typed fan-out) on the scripted model: plan, run, plan
//! again, run again; each step the plan lists is "cached" exactly when the run replays it,
//! the steps a finished plan lists are the steps the run calls, and a plan that stops at an
//! output known only once its step runs (a verdict, a typed answer) says which.

use std::path::Path;

use serde_json::json;
use treadle::cache::plan::Planned;
use treadle::run::Store;
use treadle::workflow::{self, Agents, Options, Plan, Workflow};
use treadle_scripted::{Reply, Script, ScriptedServer};

use crate::workflow_examples::{fanout_workflow, review_workflow};

/// The reviewer of examples/review.yml on the scripted server at `url`.
fn review_agents(url: &str) -> Agents {
    let yaml =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/review.yml"))
            .expect("review.yml");
    let source =
        format!("  - name: reviewer\n    source: {{ model: scripted, endpoint: \"{url}\" }}\n");
    Agents::from_yaml(&yaml.replacen("  - name: reviewer\n", &source, 1)).expect("agents")
}

/// The fan-out's planner on the scripted server at `url`.
fn planner(url: &str) -> Agents {
    let source =
        format!("  - name: planner\n    source: {{ model: scripted, endpoint: \"{url}\" }}\n");
    Agents::from_yaml(&fanout_workflow::AGENTS.replacen("  - name: planner\n", &source, 1))
        .expect("agents")
}

fn review_replies() -> Vec<Reply> {
    vec![
        Reply::tool_call("read_file", json!({"path": "draft/notes.md"})),
        Reply::tool_call(
            "write_file",
            json!({"path": "report/summary.md", "content": "Fine notes."}),
        ),
        Reply::tool_call("verdict", json!({"verdict": "approve", "reason": "fine"})),
        Reply::text("Done."),
    ]
}

/// Plans, runs, and checks that the run did what the plan said; gives the plan.
async fn plan_then_run<W: Workflow>(
    workflow: &W,
    input: impl Fn() -> W::Input,
    options: impl Fn() -> Options,
    state: &Path,
) -> Plan {
    let plan = workflow::plan(workflow, input(), options())
        .await
        .expect("plan");
    println!("{}", plan.render());
    let report = workflow::run(workflow, input(), options())
        .await
        .expect("run");
    assert_eq!(report.exit_code(), 0, "{:?}", report.output.err());
    let store = Store::open(state).expect("state");
    let ran = store.steps(report.run).expect("steps");
    let called: Vec<&str> = ran.iter().map(|r| r.name.as_str()).collect();
    let planned: Vec<&str> = plan.steps.iter().map(|l| l.name.as_str()).collect();
    match &plan.unevaluable {
        // Stopped at an output not known yet: what it lists is what the run began with.
        Some(u) => {
            assert_eq!(called[..planned.len()], planned[..], "{}", plan.render());
            assert_eq!(planned.last(), Some(&u.step.as_str()));
        }
        None => assert_eq!(called, planned, "{}", plan.render()),
    }
    for (line, record) in plan.steps.iter().zip(&ran) {
        let cached = matches!(line.verdict, Planned::Cached(_));
        assert_eq!(
            cached,
            record.cached_from.is_some(),
            "step `{}`: plan says {:?}, the run {}",
            line.name,
            line.verdict,
            match record.cached_from {
                Some(r) => format!("replayed it from run {r}"),
                None => "ran it".to_owned(),
            }
        );
        if let Planned::Cached(from) = line.verdict {
            assert_eq!(record.cached_from, Some(from), "step `{}`", line.name);
        }
    }
    plan
}

fn cached(plan: &Plan) -> Vec<&str> {
    plan.steps
        .iter()
        .filter(|l| matches!(l.verdict, Planned::Cached(_)))
        .map(|l| l.name.as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_review_plan_stops_at_the_verdict_then_says_cached_exactly_what_the_run_replays() {
    let replies: Vec<Reply> = review_replies().into_iter().cycle().take(8).collect();
    let server = ScriptedServer::start(Script::new(replies))
        .await
        .expect("server");
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join(".treadle/state.redb");
    let options = || Options::new(&state).agents(review_agents(server.base_url()));
    let review = &review_workflow::Review;

    let first = plan_then_run(review, || (), options, &state).await;
    assert!(cached(&first).is_empty(), "{}", first.render());
    let stop = first
        .unevaluable
        .as_ref()
        .expect("the verdict is not known");
    assert_eq!(
        (stop.step.as_str(), stop.what.as_str()),
        ("reviewer", "the verdict")
    );
    assert!(first.render().contains("unevaluable"), "{}", first.render());

    let second = plan_then_run(review, || (), options, &state).await;
    assert_eq!(second.unevaluable, None, "{}", second.render());
    assert_eq!(cached(&second), ["draft", "reviewer", "publish"]);
    assert_eq!(second.to_json()["job"], "review");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fan_out_plan_follows_a_replayed_typed_answer_and_stops_at_a_new_one() {
    let chapters = r#"{"chapters": ["Starter", "Dough", "Bake"]}"#;
    let server = ScriptedServer::start(Script::new([
        Reply::text(chapters),
        Reply::text(chapters),
        Reply::text(r#"{"chapters": ["Flour", "Water"]}"#),
    ]))
    .await
    .expect("server");
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join(".treadle/state.redb");
    let options = || Options::new(&state).agents(planner(server.base_url()));
    let guide = &fanout_workflow::Guide;
    let bread = || "bread".to_owned();

    let first = plan_then_run(guide, bread, options, &state).await;
    let stop = first.unevaluable.as_ref().expect("the answer is not known");
    assert_eq!(
        (stop.step.as_str(), stop.what.as_str()),
        ("outline", "the typed answer")
    );

    // The answer would be replayed: the plan reads it and goes on, one step per chapter.
    let second = plan_then_run(guide, bread, options, &state).await;
    assert_eq!(second.unevaluable, None, "{}", second.render());
    assert_eq!(
        cached(&second),
        ["outline", "chapter0", "chapter1", "chapter2", "guide"]
    );

    // Another subject: another prompt, so the answer is not known again.
    let third = plan_then_run(guide, || "cheese".to_owned(), options, &state).await;
    let stop = third.unevaluable.as_ref().expect("a new answer");
    assert_eq!(stop.step, "outline");
    assert!(cached(&third).is_empty(), "{}", third.render());
}
