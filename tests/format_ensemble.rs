//! `ensemble:` (several agents vote, a rule decides, the block routes on the decision),
//! `fallback:` (the next source continues the conversation when the model fails), and the
//! model dials (`top_p`, `max_tokens`, `reasoning_effort`) sent with each request, all
//! against scripted model servers over loopback.

use crate::common::{Fixture, Run};
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// Runs `treadle test` on `yaml` (`{URL}` replaced by the server's base URL) against a
/// server answering each request with `answer(body)`; the run and the request bodies.
async fn test_with(
    yaml: &str,
    answer: impl FnMut(&Value) -> Reply + Send + 'static,
) -> (Run, Vec<Value>) {
    let server = ScriptedServer::start(Script::from_fn(answer))
        .await
        .expect("server");
    let url = server.base_url().to_string();
    let f = Fixture::new(&yaml.replace("{URL}", &url));
    let run = tokio::task::spawn_blocking(move || {
        f.treadle_env(&["test"], &[("TREADLE_LOCAL_URL", &url)])
    })
    .await
    .expect("treadle");
    let bodies = server.requests().iter().map(|r| r.body.clone()).collect();
    (run, bodies)
}

fn all(run: &Run) -> String {
    format!("{}{}", run.stdout(), run.stderr())
}

/// Fails the test unless the run printed `text`.
fn says(run: &Run, text: &str) {
    assert!(run.stdout().contains(text), "{}", all(run));
}

fn passed(run: &Run) {
    says(run, "1 passed, 0 failed");
}

/// Whether a request already carries a tool result (the member's second call).
fn answered(body: &Value) -> bool {
    body["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"))
}

/// A member votes `reject` when its prompt is about style, else `approve`; a judge
/// (whose prompt lists the votes) picks `judged`. After the verdict call each says a note.
fn voters(judged: &'static str) -> impl FnMut(&Value) -> Reply + Send + 'static {
    move |body| {
        if answered(body) {
            return Reply::text("noted");
        }
        let text = body["messages"].to_string();
        let verdict = if text.contains("You judge an ensemble") {
            judged
        } else if text.contains("for style") {
            "reject"
        } else {
            "approve"
        };
        Reply::tool_call(
            "verdict",
            json!({"verdict": verdict, "reason": format!("it is {verdict}")}),
        )
    }
}

const AGENTS: &str = r#"
agents:
- name: reviewer-a
- name: reviewer-b
- name: reviewer-c
- name: chief
"#;

fn gate(decide: &str, execution: &str, outcome: &str) -> String {
    format!(
        r#"{AGENTS}
jobs:
- name: gate
  plan:
  - ensemble:
      verdicts:
        - reject: revise
        - approve: publish
      decide: {decide}
      agents:
      - {{agent: reviewer-a, prompt: "Review the diff for correctness."}}
      - {{agent: reviewer-b, prompt: "Review the diff for style."}}
      - {{agent: reviewer-c, prompt: "Review the diff for security."}}
  - task: revise
    run: echo sending back
  - task: publish
    run: echo shipping
  assert:
    execution: {execution}
    outcome: {outcome}
"#
    )
}

/// Runs the gate with `decide:` (a judge picks `judged`) and checks it passed its asserts.
async fn run_gate(
    decide: &str,
    execution: &str,
    outcome: &str,
    judged: &'static str,
) -> (Run, Vec<Value>) {
    let (run, bodies) = test_with(&gate(decide, execution, outcome), voters(judged)).await;
    passed(&run);
    (run, bodies)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_majority_decides_and_the_block_routes_on_the_decision() {
    let (run, bodies) = run_gate(
        "majority",
        "[reviewer-a, reviewer-b, reviewer-c, publish]",
        "succeeded",
        "reject",
    )
    .await;
    says(
        &run,
        "ensemble decided `approve` (majority) from approve: reviewer-a, reviewer-c; reject: reviewer-b",
    );
    // Every member was offered the block's vocabulary, and nothing else.
    let offered: Vec<&Value> = bodies
        .iter()
        .filter(|b| !answered(b))
        .map(|b| &b["tools"])
        .collect();
    assert_eq!(offered.len(), 3, "{bodies:?}");
    for tools in offered {
        let verdict = tools
            .as_array()
            .and_then(|t| t.iter().find(|t| t["function"]["name"] == "verdict"))
            .expect("a verdict tool");
        assert_eq!(
            verdict["function"]["parameters"]["properties"]["choice"]["enum"],
            json!(["reject", "approve"])
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn unanimous_fails_with_the_tally_when_the_members_disagree() {
    let (run, _) = run_gate(
        "unanimous",
        "[reviewer-a, reviewer-b, reviewer-c]",
        "failed",
        "reject",
    )
    .await;
    says(
        &run,
        "the members did not agree: approve: reviewer-a, reviewer-c; reject: reviewer-b",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn any_takes_the_first_verdict_of_the_list_that_anybody_chose() {
    // `reject` is listed first: one objection is enough.
    let (run, _) = run_gate(
        "any",
        "[reviewer-a, reviewer-b, reviewer-c, revise, publish]",
        "succeeded",
        "approve",
    )
    .await;
    says(&run, "ensemble decided `reject` (any)");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_judge_decides_from_every_vote_and_note() {
    let (run, bodies) = run_gate(
        "chief",
        "[reviewer-a, reviewer-b, reviewer-c, chief, revise, publish]",
        "succeeded",
        "reject",
    )
    .await;
    let judge = bodies
        .iter()
        .map(|b| b["messages"].to_string())
        .find(|m| m.contains("You judge an ensemble"))
        .expect("the judge was asked");
    assert!(
        judge.contains("reviewer-b voted `reject`: noted"),
        "{judge}"
    );
    assert!(
        judge.contains("reviewer-a voted `approve`: noted"),
        "{judge}"
    );
    says(&run, "ensemble decided `reject` (judged by chief)");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tie_is_an_error_not_the_first_vote() {
    let yaml = format!(
        r#"{AGENTS}
jobs:
- name: gate
  plan:
  - ensemble:
      verdicts: [reject, approve]
      agents:
      - {{agent: reviewer-a, prompt: "Review the diff for correctness."}}
      - {{agent: reviewer-b, prompt: "Review the diff for style."}}
"#
    );
    let (run, _) = test_with(&yaml, voters("reject")).await;
    assert_eq!(run.code(), 1, "{}", all(&run));
    says(&run, "no majority: approve: reviewer-a; reject: reviewer-b");
}

fn with_a_dead_member(member_errors: &str, execution: &str, outcome: &str) -> String {
    format!(
        r#"
agents:
- name: reviewer-a
- name: reviewer-b
- name: reviewer-dead
  source: {{ endpoint: "http://127.0.0.1:9/v1", model: gone }}
jobs:
- name: gate
  plan:
  - ensemble:
      verdicts: [reject, approve]
      member_errors: {member_errors}
      agents:
      - {{agent: reviewer-a, prompt: "Review the diff for correctness."}}
      - {{agent: reviewer-b, prompt: "Review the diff for security."}}
      - {{agent: reviewer-dead, prompt: "Review the diff for style."}}
  assert:
    execution: {execution}
    outcome: {outcome}
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_member_that_errors_is_not_a_vote_unless_exclusion_is_asked_for() {
    let yaml = with_a_dead_member("fail", "[reviewer-a, reviewer-b, reviewer-dead]", "failed");
    let (run, _) = test_with(&yaml, voters("reject")).await;
    passed(&run);
    says(&run, "member reviewer-dead did not vote");
    let yaml = with_a_dead_member(
        "exclude",
        "[reviewer-a, reviewer-b, reviewer-dead]",
        "succeeded",
    );
    let (run, _) = test_with(&yaml, voters("reject")).await;
    passed(&run);
    says(&run, "reviewer-dead excluded (failed)");
}

#[test]
fn ensemble_mistakes_are_located_and_named() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "decide: majorty",
            ":10:15:",
            "`decide` is `majorty`, which is neither a rule nor an agent",
        ),
        (
            "decide: reviewer-a",
            ":10:15:",
            "agent `reviewer-a` both votes in the ensemble and judges it",
        ),
        (
            "member_errors: skip",
            ":10:22:",
            "`member_errors` is `skip`",
        ),
    ];
    for (line, at, message) in cases {
        let yaml = format!(
            r#"agents:
- name: reviewer-a
- name: reviewer-b
jobs:
- name: gate
  plan:
  - ensemble:
      verdicts: [reject, approve]
      agents: [{{agent: reviewer-a, prompt: p}}, {{agent: reviewer-b, prompt: p}}]
      {line}
"#
        );
        let run = Fixture::new(&yaml).treadle(&["validate"]);
        run.expect_code(2);
        let err = run.stderr();
        assert!(err.contains(&format!("treadle.yml{at} {message}")), "{err}");
    }
    let yaml = r#"agents:
- name: reviewer-a
jobs:
- name: gate
  plan:
  - ensemble:
      verdicts: [reject, approve]
      agents:
      - agent: reviewer-a
        prompt: p
        verdicts: [good, bad]
      - task: t
        run: "true"
"#;
    let run = Fixture::new(yaml).treadle(&["validate"]);
    run.expect_code(2);
    let err = run.stderr();
    assert!(
        err.contains(
            "treadle.yml:11:20: member `reviewer-a` of an `ensemble` has verdicts of its own"
        ),
        "{err}"
    );
    assert!(
        err.contains("treadle.yml:12:9: a member of an `ensemble` is not an agent step"),
        "{err}"
    );
}

/// The writer of the failover tests, its first source at `{PRIMARY}`.
const WRITER: &str = r#"
agents:
- name: writer
  tools: [list_dir]
  source: { endpoint: "{PRIMARY}", model: primary-model }
  fallback:
  - source: { endpoint: "{URL}", model: equivalent-model }
jobs:
- name: publish
  plan:
  - agent: writer
    prompt: "Write the announcement."
    assert:
      stdout: Announcement written via the fallback
  assert:
    execution: [writer]
    outcome: succeeded
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_model_hands_the_same_conversation_to_its_fallback() {
    // The primary answers one tool call, then fails with HTTP 500 on every request.
    let primary = ScriptedServer::start(Script::new([Reply::tool_call(
        "list_dir",
        json!({"path": "."}),
    )]))
    .await
    .expect("primary");
    let yaml = WRITER.replace("{PRIMARY}", primary.base_url());
    let (run, bodies) = test_with(&yaml, |_| {
        Reply::text("Announcement written via the fallback")
    })
    .await;
    passed(&run);
    says(&run, "agent.failover");
    // The fallback continued the conversation: the prompt and the primary's tool call
    // with its result were in its first request.
    let first = bodies.first().expect("the fallback was asked");
    let messages = first["messages"].to_string();
    assert!(messages.contains("Write the announcement."), "{messages}");
    assert!(answered(first), "{messages}");
    assert_eq!(first["model"], json!("equivalent-model"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_is_an_answer_and_never_switches_models() {
    let primary = ScriptedServer::start(Script::new([Reply::status(400).body("bad request")]))
        .await
        .expect("primary");
    let yaml = WRITER.replace("{PRIMARY}", primary.base_url());
    let (run, bodies) = test_with(&yaml, |_| Reply::text("unreachable")).await;
    assert_ne!(run.code(), 0, "{}", all(&run));
    assert!(bodies.is_empty(), "{bodies:?}");
    assert!(!run.stdout().contains("agent.failover"), "{}", all(&run));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_model_dials_are_sent_with_every_request() {
    let yaml = r#"
agents:
- name: titler
  top_p: 0.5
  max_tokens: 64
  reasoning_effort: low
jobs:
- name: j
  plan:
  - agent: titler
    prompt: "Title it."
"#;
    let (run, bodies) = test_with(yaml, |_| Reply::text("A title")).await;
    run.expect_code(0);
    let body = bodies.first().expect("a request");
    assert_eq!(body["top_p"], json!(0.5));
    assert_eq!(body["max_tokens"], json!(64));
    assert_eq!(body["reasoning_effort"], json!("low"));
}

#[test]
fn settings_on_a_hosted_model_is_refused_not_ignored() {
    let yaml = "agents:\n- name: a\n  source: { model: local/m }\n  settings: project\njobs:\n- name: j\n  plan:\n  - agent: a\n    prompt: p\n";
    let run = Fixture::new(yaml).treadle(&["validate"]);
    run.expect_code(2);
    assert!(
        run.stderr().contains(
            "treadle.yml:4:13: `settings` of agent `a` applies to a CLI-backed model only"
        ),
        "{}",
        run.stderr()
    );
}
