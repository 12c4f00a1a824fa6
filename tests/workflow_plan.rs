//! `workflow::plan` against the run it predicts, over the examples' workflows (the review
//! of examples/review.yml and the typed fan-out) on the scripted model: plan, run, plan
//! again, run again; each step the plan lists is "cached" exactly when the run replays it,
//! the steps a finished plan lists are the steps the run calls, and a plan that stops at an
//! output known only once its step runs (a verdict, a typed answer) says which.

use std::path::Path;

use serde_json::json;
use treadle::cache::plan::Planned;
use treadle::run::Store;
use treadle::workflow::{self, Agents, Flow, FlowError, Http, Options, Plan, Shell, Workflow};
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
            assert!(called.contains(&u.step.as_str()), "{called:?}: {u:?}");
        }
        None => assert_eq!(called, planned, "{}", plan.render()),
    }
    for (line, record) in plan.steps.iter().zip(&ran) {
        let did = match record.cached_from {
            Some(r) => format!("replayed it from run {r}"),
            None => "ran it".to_owned(),
        };
        let agrees = match &line.verdict {
            Planned::Cached(from) => record.cached_from == Some(*from),
            // Cached only if what the steps before it do comes out as then: one of its
            // cases is what the run did.
            Planned::Depends(cases) => cases.iter().any(|c| match (&*c.then, record.cached_from) {
                (Planned::Cached(from), Some(r)) => *from == r,
                (Planned::Run(_), None) => true,
                _ => false,
            }),
            _ => record.cached_from.is_none(),
        };
        assert!(
            agrees,
            "step `{}`: plan says {:?}, the run {did}",
            line.name, line.verdict
        );
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

/// A branch on a shell step's output, recorded with `when_dynamic`.
struct Gate;

impl Workflow for Gate {
    type Input = ();
    type Output = bool;
    const NAME: &'static str = "gate";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<bool, FlowError> {
        let probe = flow.shell("probe", Shell::new("echo go")).await?;
        let go = flow.when_dynamic("go", probe.stdout.trim() == "go").await?;
        if go {
            flow.shell("act", Shell::new("echo acted")).await?;
        }
        Ok(go)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dynamic_branch_is_unevaluable_until_the_output_it_reads_is_recorded() {
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join(".treadle/state.redb");
    let options = || Options::new(&state);
    let first = plan_then_run(&Gate, || (), options, &state).await;
    let stop = first.unevaluable.as_ref().expect("the probe has not run");
    assert_eq!(
        (stop.step.as_str(), stop.what.as_str()),
        ("go", "the outcome")
    );
    let names: Vec<&str> = first.steps.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["probe"]);

    // The probe would be replayed: its recorded output decides the branch in the plan.
    let second = plan_then_run(&Gate, || (), options, &state).await;
    assert_eq!(second.unevaluable, None, "{}", second.render());
    let names: Vec<&str> = second.steps.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["probe", "go", "act"], "{}", second.render());
    assert!(cached(&second).contains(&"probe"), "{}", second.render());
}

/// An HTTP step whose body the next step is given.
struct Fetch(String);

impl Workflow for Fetch {
    type Input = ();
    type Output = String;
    const NAME: &'static str = "fetch";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<String, FlowError> {
        let url = format!("{}/greeting", self.0);
        let got = flow.http("fetch", Http::get(url)).await?;
        let say = Shell::new("echo \"$BODY\"").env("BODY", got.body);
        Ok(flow.shell("say", say).await?.stdout)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_steps_response_is_unevaluable_until_the_cache_would_replay_it() {
    let seen = std::sync::Arc::new(crate::http_step::Seen::default());
    let fetch = Fetch(crate::http_step::server(seen).await);
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join(".treadle/state.redb");
    let options = || Options::new(&state);

    let first = plan_then_run(&fetch, || (), options, &state).await;
    assert_eq!(first.error, None, "{}", first.render());
    let stop = first.unevaluable.as_ref().expect("no response yet");
    assert_eq!(
        (stop.step.as_str(), stop.what.as_str()),
        ("fetch", "the response")
    );

    // The request would be replayed: the plan reads its recorded response and goes on.
    let second = plan_then_run(&fetch, || (), options, &state).await;
    assert_eq!(second.unevaluable, None, "{}", second.render());
    assert_eq!(cached(&second), ["fetch", "say"], "{}", second.render());
}

/// A step's artifact read by the workflow's own code.
struct Logs;

impl Workflow for Logs {
    type Input = ();
    type Output = String;
    const NAME: &'static str = "logs";

    async fn run(&self, flow: &mut Flow, (): ()) -> Result<String, FlowError> {
        let make = Shell::new("echo built > logs/build.log").outputs(["logs"]);
        let build = flow.shell("build", make).await?;
        Ok(build.artifact("logs")?.read_to_string("build.log").await?)
    }
}

/// In a plan no step leaves files: reading an artifact (an `ArtifactError` made a
/// `FlowError` by `?`) is where the plan stops, as at a verdict, not a plan error.
#[tokio::test(flavor = "multi_thread")]
async fn an_artifacts_files_are_unevaluable_in_a_plan() {
    let dir = tempfile::tempdir().expect("dir");
    let state = dir.path().join(".treadle/state.redb");
    let plan = plan_then_run(&Logs, || (), || Options::new(&state), &state).await;
    let stop = plan.unevaluable.as_ref().expect("the files are not there");
    assert_eq!(
        (stop.step.as_str(), stop.what.as_str()),
        ("build", "its artifact `logs`")
    );
    let names: Vec<&str> = plan.steps.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["build"]);
}
