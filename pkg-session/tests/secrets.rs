//! A model that repeats the API key, plainly, reversed and in base64, leaves no trace of it
//! in the journal file, the events, the history or the arguments a tool receives.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use treadle_event::EventFilter;
use treadle_scripted::{Reply, Script, ScriptedServer};
use treadle_session::{ApiKey, FnTool, Session, ToolError, TurnOutcome};

const KEY: &str = "sk-live-7Hq2Zr9Wm4Xv";
const EXTRA: &str = "ghp_extraSecret1234";

#[derive(Deserialize, JsonSchema)]
struct Say {
    text: String,
}

/// Every form of a secret the test has the model write.
fn forms(secret: &str) -> Vec<String> {
    vec![
        secret.to_owned(),
        secret.chars().rev().collect(),
        STANDARD.encode(secret),
        URL_SAFE_NO_PAD.encode(format!("x{secret}")),
    ]
}

#[tokio::test]
async fn repeated_keys_reach_no_file_event_or_tool() {
    let reversed: String = KEY.chars().rev().collect();
    let server = ScriptedServer::builder()
        // Small chunks, so the key is split across several stream deltas.
        .chunk_delay(Duration::from_millis(1))
        .start(Script::new([
            Reply::tool_call(
                "say",
                json!({ "text": format!("{KEY} {} {EXTRA}", STANDARD.encode(KEY)) }),
            )
            .reasoning(format!("the key is {KEY}")),
            Reply::text(format!(
                "Reversed: {reversed}. Base64: {}. Other: {}",
                URL_SAFE_NO_PAD.encode(format!("x{KEY}")),
                STANDARD.encode(EXTRA)
            )),
        ]))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.redb");
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let tool_seen = seen.clone();
    let session = Session::builder()
        .endpoint(server.base_url())
        .model("scripted")
        .api_key(ApiKey::new(KEY.to_owned()))
        .secrets([EXTRA])
        .journal_path(&journal)
        .tool(FnTool::new("say", "Says a text.", move |a: Say| {
            let seen = tool_seen.clone();
            async move {
                seen.lock().unwrap().push(a.text.clone());
                Ok::<_, ToolError>(format!("said {}", a.text))
            }
        }))
        .start()
        .await
        .unwrap();
    let mut events = session.subscribe(EventFilter::all());
    let report = session.turn("repeat the key").run().await.unwrap();
    let TurnOutcome::Done { text } = &report.outcome else {
        panic!("{:?}", report.outcome);
    };
    assert!(text.starts_with("Reversed: ***. Base64: "), "{text}");
    let history = serde_json::to_string(&session.history().await.unwrap()).unwrap();
    session.shutdown().await;

    let mut published = String::new();
    while let Some(Ok(delivery)) = events.next().await {
        let event = &delivery.event;
        // Deltas are the raw stream, published as it arrives; what is kept is scrubbed.
        if !matches!(event.kind, treadle_event::EventKind::TokenDelta { .. }) {
            published.push_str(&serde_json::to_string(&**event).unwrap());
        }
    }
    let tool_inputs = seen.lock().unwrap().join("\n");
    assert!(
        tool_inputs.starts_with("*** ***") && tool_inputs.ends_with(" ***"),
        "{tool_inputs}"
    );
    let file = std::fs::read(&journal).unwrap();
    assert!(file.len() > 1000);
    for secret in [KEY, EXTRA] {
        for form in forms(secret) {
            // Base64 of a longer text keeps at most two edge characters: compare the core.
            let core = &form[2..form.len() - 2];
            assert!(!history.contains(core), "history holds {form}");
            assert!(!published.contains(core), "an event holds {form}");
            assert!(!tool_inputs.contains(core), "a tool got {form}");
            assert!(
                !file.windows(core.len()).any(|w| w == core.as_bytes()),
                "the journal file holds {form}"
            );
        }
    }
}
