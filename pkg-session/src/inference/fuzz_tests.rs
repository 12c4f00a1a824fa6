//! Fuzz target (proptest, stable Rust) for the stream chunk parser and stitcher: whatever
//! chunks a server sends, parsing and stitching never panic, and a finished completion
//! holds exactly the pieces that were reported as deltas. `scripts/fuzz` runs it longer.

use proptest::prelude::*;
use serde_json::json;
use treadle_event::{Block, DeltaKind};

use super::chunk::Chunk;
use super::stitch::Stitcher;

fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 0..12).prop_map(String::from_iter)
}

/// One SSE `data:` payload: well-formed chunks of every kind a server sends, odd shapes,
/// and arbitrary text.
fn chunk_json() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        text().prop_map(|t| json!({"choices":[{"index":0,"delta":{"content":t}}]}).to_string()),
        text().prop_map(|t| json!({"choices":[{"delta":{"reasoning_content":t}}]}).to_string()),
        (
            0u32..4,
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::option::of(text()),
        )
            .prop_map(|(index, id, name, arguments)| {
                json!({"choices":[{"delta":{"tool_calls":[
                    {"index":index,"id":id,"function":{"name":name,"arguments":arguments}}
                ]}}]})
                .to_string()
            }),
        proptest::sample::select(vec!["stop", "", "tool_calls", "length"]).prop_map(|reason| {
            json!({"choices":[{"delta":{},"finish_reason":reason}]}).to_string()
        }),
        (0u64..1000, 0u64..1000).prop_map(|(p, c)| {
            json!({"choices":[],"usage":{"prompt_tokens":p,"completion_tokens":c}}).to_string()
        }),
        Just(r#"{"error":{"message":"boom"}}"#.to_owned()),
        Just(r#"{"choices":"nope"}"#.to_owned()),
        Just(r#"{"choices":[null],"usage":null}"#.to_owned()),
    ]
}

proptest! {
    #[test]
    fn fuzz_chunks_never_panic_and_completions_hold_what_was_reported(
        chunks in proptest::collection::vec(chunk_json(), 0..24)
    ) {
        let mut stitcher = Stitcher::default();
        let mut text_seen = String::new();
        let mut argument_bytes = 0usize;
        for raw in &chunks {
            let Ok(chunk) = serde_json::from_str::<Chunk>(raw) else { continue };
            let pushed = stitcher.push(chunk, &mut |kind, _index, piece: &str| match kind {
                DeltaKind::Text => text_seen.push_str(piece),
                DeltaKind::ToolArguments => argument_bytes += piece.len(),
                _ => {}
            });
            if pushed.is_err() {
                return Ok(());
            }
        }
        if let Some(completion) = stitcher.finish("configured") {
            prop_assert_eq!(completion.message.text_content(), text_seen);
            let arguments: usize = completion
                .message
                .content
                .iter()
                .map(|block| match block {
                    Block::ToolUse { arguments, .. } => arguments.len(),
                    _ => 0,
                })
                .sum();
            prop_assert_eq!(arguments, argument_bytes);
        }
    }
}
