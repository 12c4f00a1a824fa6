//! Sub-agents (`tools: - agent: NAME`) in pipelines, end to end against the scripted model
//! server, with the parent and the child both scripted: the child runs as a session of its
//! own with its own persona and tools, its answer is the parent's tool result, its events
//! are shown nested under the parent step, and its tokens come out of the parent's budget.

use crate::common;

use common::Fixture;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// A lead agent that delegates to a summarizer (also the run page test's pipeline).
pub(crate) const DIGEST: &str = r#"
agents:
  - name: summarizer
    description: Condenses a file to a paragraph.
    system: You summarize files.
    tools: [read_file]
  - name: lead
    system: You lead.
    tools:
      - read_file
      - agent: summarizer
        description: Summarize a file; pass the path in `request`.
jobs:
  - name: digest
    plan:
      - task: fetch
        outputs: [notes]
        run: echo 'a very long account of the outage' > notes/log.txt
      - agent: lead
        inputs: [notes]
        prompt: Have your summarizer condense notes/log.txt, then report.
        assert:
          tool_calls:
            - name: summarizer
          stdout: there was an outage
"#;

/// Parent call, child read, child answer, parent answer.
fn digest_script() -> Script {
    Script::new([
        Reply::tool_call("summarizer", json!({"request": "Condense notes/log.txt."}))
            .usage(100, 10),
        Reply::tool_call("read_file", json!({"path": "notes/log.txt"})).usage(50, 5),
        Reply::text("The log says there was an outage.").usage(60, 8),
        Reply::text("Report: there was an outage.").usage(120, 6),
    ])
}

fn system_of(body: &Value) -> String {
    body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_parent_delegates_to_a_sub_agent_that_runs_its_own_session() {
    let server = ScriptedServer::start(digest_script())
        .await
        .expect("server");
    let f = Fixture::new(DIGEST);
    let url = server.base_url().to_owned();
    let (f, run) = tokio::task::spawn_blocking(move || {
        let run = f.treadle_env(&["run", "--json"], &[("TREADLE_LOCAL_URL", &url)]);
        (f, run)
    })
    .await
    .expect("thread");
    run.expect_code(0);
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    // The parent was offered the sub-agent as a tool taking `request`.
    let parent = &requests[0].body;
    assert!(system_of(parent).contains("You lead."), "{parent}");
    assert_eq!(tool_names(parent), ["read_file", "summarizer"]);
    // The child ran its own conversation: its persona, its grant, the request as prompt.
    let child = &requests[1].body;
    assert!(system_of(child).contains("You summarize files."), "{child}");
    assert_eq!(tool_names(child), ["read_file"]);
    assert!(
        child.to_string().contains("Condense notes/log.txt."),
        "{child}"
    );
    // ...and read the file from the parent's directory.
    assert!(
        requests[2]
            .body
            .to_string()
            .contains("a very long account of the outage"),
        "{}",
        requests[2].body
    );
    // Its final answer is the parent's tool result.
    let back = requests[3].body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap_or_default();
    assert_eq!(back["content"], "The log says there was an outage.");
    // The transcript shows the child's work under the parent step, named.
    let events: Vec<Value> = run
        .stdout()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let nested: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "agent" && e["data"]["agent"] == "summarizer")
        .collect();
    assert!(
        nested
            .iter()
            .any(|e| e["what"] == "tool_call" && e["data"]["name"] == "read_file"),
        "{nested:?}"
    );
    assert!(
        nested.iter().any(
            |e| e["what"] == "text" && e["data"]["text"] == "The log says there was an outage."
        ),
        "{nested:?}"
    );
    let lead_seq = events
        .iter()
        .find(|e| e["event"] == "step_started" && e["name"] == "lead")
        .map(|e| e["seq"].clone())
        .expect("lead started");
    assert!(nested.iter().all(|e| e["seq"] == lead_seq), "{nested:?}");
    // The child records no step of its own, and its tokens are the parent step's.
    let steps = f.treadle(&["runs", "--steps", "1", "--json"]).stdout();
    assert!(!steps.contains("\"summarizer\""), "{steps}");
    let usage = events
        .iter()
        .rev()
        .find(|e| e["event"] == "agent" && e["what"] == "usage" && e["data"]["agent"].is_null())
        .expect("the step's usage");
    let total = usage["data"]["prompt_tokens"].as_u64().unwrap_or(0)
        + usage["data"]["completion_tokens"].as_u64().unwrap_or(0);
    assert_eq!(total, 100 + 10 + 50 + 5 + 60 + 8 + 120 + 6, "{usage}");
    // In the journal, the child is a session of its own whose start names the parent
    // session and the tool it answered.
    let journal =
        treadle_session::Journal::open(f.path().join(".treadle/state.redb")).expect("journal");
    let mut links = Vec::new();
    let sessions = journal.sessions().expect("sessions");
    for session in &sessions {
        let first = journal.read(*session, 0, Some(1)).expect("read");
        if let Some((_, event)) = first.first()
            && let treadle_session::event::EventKind::SessionStarted { parent, .. } = &event.kind
        {
            links.push((*session, parent.clone()));
        }
    }
    assert_eq!(links.len(), 2, "{links:?}");
    let (child, link) = links
        .iter()
        .find(|(_, p)| p.is_some())
        .cloned()
        .expect("a child session");
    let link = link.expect("link");
    assert_eq!(link.tool, "summarizer");
    assert!(
        links
            .iter()
            .any(|(s, p)| *s == link.session && p.is_none() && *s != child),
        "{links:?}"
    );
    assert!(
        nested.iter().any(|e| e["what"] == "notice"
            && e["data"]["text"]
                .as_str()
                .is_some_and(|t| t.contains(&child.to_string()))),
        "the transcript names the child session: {nested:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sub_agent_runs_on_a_share_of_the_parent_budget() {
    // 1,000 tokens for the lead, none counted yet when it delegates (its first call is
    // counted when its step commits, after its tool calls), so the delegation may spend 10%
    // of 1,000: 100. The child's first call spends 150, so its second is refused, the
    // delegation fails, and the parent reads why and finishes without it.
    let yaml = DIGEST
        .replace(
            "    system: You lead.\n",
            "    system: You lead.\n    budget: { tokens: 1000 }\n",
        )
        .replace("          stdout: there was an outage\n", "");
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("summarizer", json!({"request": "Condense notes/log.txt."}))
            .usage(100, 10),
        Reply::tool_call("read_file", json!({"path": "notes/log.txt"})).usage(140, 10),
        Reply::text("I could not get a summary.").usage(100, 5),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(&yaml).run_at(server.base_url()).await;
    run.expect_code(0);
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "the child made a second model call");
    let last = requests[2].body.to_string();
    assert!(
        last.contains("sub-agent `summarizer` failed")
            && last.contains("token budget spent (150 of 100 tokens)"),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delegation_the_parent_cannot_fund_is_refused_as_a_result() {
    let yaml = DIGEST
        .replace(
            "    system: You lead.\n",
            "    system: You lead.\n    budget: { tokens: 50 }\n    delegate_budget_percent: 1\n",
        )
        .replace("          stdout: there was an outage\n", "");
    let server = ScriptedServer::start(Script::new([
        Reply::tool_call("summarizer", json!({"request": "Condense it."})).usage(10, 5),
        Reply::text("Finished alone.").usage(5, 1),
    ]))
    .await
    .expect("server");
    let (_f, run) = Fixture::new(&yaml).run_at(server.base_url()).await;
    run.expect_code(0);
    // 1% of the 50 tokens left is 0: no child request was made.
    assert_eq!(server.request_count(), 2);
    let last = server.requests()[1].body.to_string();
    assert!(last.contains("cannot delegate to `summarizer`"), "{last}");
}
