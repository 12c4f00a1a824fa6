//! Secrets out of a recorded call before it is written: the request body, and the
//! streamed answer, across whose chunks a secret the model repeats is usually split.
//!
//! The answer's text fields (content, reasoning, each tool call's arguments) are joined
//! over the stream and scrubbed whole, as the session scrubs the message it commits. A
//! field that changed is written whole into its first chunk, and emptied in the others,
//! so replaying the tape gives the session the same (already clean) message.

use std::collections::BTreeMap;

use serde_json::Value;
use treadle_session::Secrets;

/// The request body with every secret masked (it is JSON; masked inside its strings).
pub(super) fn request(secrets: &Secrets, body: Vec<u8>) -> Vec<u8> {
    if secrets.is_empty() {
        return body;
    }
    let text = String::from_utf8_lossy(&body);
    let clean = secrets.scrub_arguments(&text);
    match serde_json::from_str::<Value>(&clean) {
        Ok(v) => serde_json::to_vec_pretty(&v).unwrap_or_else(|_| clean.into_bytes()),
        Err(_) => clean.into_bytes(),
    }
}

/// Where one piece of a streamed text field sits: the line and the JSON pointer.
struct Piece {
    line: usize,
    pointer: String,
}

/// The recorded answer (server-sent events) with every secret masked.
pub(super) fn response(secrets: &Secrets, sse: &[u8]) -> Vec<u8> {
    if secrets.is_empty() {
        return sse.to_vec();
    }
    let text = String::from_utf8_lossy(sse);
    let mut lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    let mut chunks: BTreeMap<usize, Value> = BTreeMap::new();
    // Each field (choice, name) → its pieces in stream order, and the joined text.
    let mut fields: BTreeMap<String, (Vec<Piece>, String)> = BTreeMap::new();
    for (line, raw) in lines.iter().enumerate() {
        let Some(data) = raw.strip_prefix("data:") else {
            continue;
        };
        let Ok(chunk) = serde_json::from_str::<Value>(data.trim()) else {
            continue;
        };
        for (field, pointer) in text_fields(&chunk) {
            if let Some(piece) = chunk.pointer(&pointer).and_then(Value::as_str) {
                let entry = fields.entry(field).or_default();
                entry.1.push_str(piece);
                entry.0.push(Piece { line, pointer });
            }
        }
        chunks.insert(line, chunk);
    }
    let mut changed = std::collections::BTreeSet::new();
    for (field, (pieces, joined)) in &fields {
        let clean = if field.ends_with("/arguments") {
            secrets.scrub_arguments(joined)
        } else {
            secrets.scrub(joined).into_owned()
        };
        if clean == *joined {
            continue;
        }
        for (i, piece) in pieces.iter().enumerate() {
            let value = if i == 0 { clean.clone() } else { String::new() };
            if let Some(slot) = chunks
                .get_mut(&piece.line)
                .and_then(|c| c.pointer_mut(&piece.pointer))
            {
                *slot = Value::String(value);
                changed.insert(piece.line);
            }
        }
    }
    // Only changed lines are written again: the others keep their bytes.
    for (line, chunk) in chunks.into_iter().filter(|(l, _)| changed.contains(l)) {
        if let Some(slot) = lines.get_mut(line) {
            *slot = format!("data: {chunk}");
        }
    }
    // Anything else (an id, a line that is not JSON) is masked as it stands.
    secrets.scrub(&lines.join("\n")).into_owned().into_bytes()
}

/// The text fields of one chunk: (field name across the stream, JSON pointer in the chunk).
fn text_fields(chunk: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
        return out;
    };
    for (i, choice) in choices.iter().enumerate() {
        let index = choice
            .get("index")
            .and_then(Value::as_u64)
            .unwrap_or(i as u64);
        for name in ["content", "reasoning_content", "reasoning"] {
            out.push((
                format!("{index}/{name}"),
                format!("/choices/{i}/delta/{name}"),
            ));
        }
        let calls = choice
            .pointer("/delta/tool_calls")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        for c in 0..calls {
            let call = choice
                .pointer(&format!("/delta/tool_calls/{c}/index"))
                .and_then(Value::as_u64)
                .unwrap_or(c as u64);
            out.push((
                format!("{index}/call{call}/arguments"),
                format!("/choices/{i}/delta/tool_calls/{c}/function/arguments"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-tape-1234567890";

    fn chunk(delta: Value) -> String {
        format!(
            "data: {}\n\n",
            serde_json::json!({"choices": [{"index": 0, "delta": delta}]})
        )
    }

    #[test]
    fn a_key_split_across_chunks_is_masked_and_the_text_kept_whole() {
        let sse = [
            chunk(serde_json::json!({"content": "key: sk-tape-"})),
            chunk(serde_json::json!({"content": "1234567890 ok"})),
            chunk(serde_json::json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": "{\"a\":\"0987"}}]})),
            chunk(serde_json::json!({"tool_calls": [{"index": 0, "function": {"arguments": "654321-epat-ks\"}"}}]})),
            "data: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let secrets = Secrets::new([KEY]);
        let clean = String::from_utf8(response(&secrets, sse.as_bytes())).unwrap();
        assert!(
            !clean.contains("sk-tape") && !clean.contains("0987654321"),
            "{clean}"
        );
        assert!(clean.contains(r#""content":"key: *** ok""#), "{clean}");
        assert!(
            clean.contains(r#""arguments":"{\"a\":\"***\"}""#),
            "{clean}"
        );
        assert!(clean.ends_with("data: [DONE]\n\n"), "{clean}");
        // Nothing to mask: the bytes are kept as they were.
        let plain = chunk(serde_json::json!({"content": "hello"}));
        assert_eq!(response(&secrets, plain.as_bytes()), plain.as_bytes());
    }
}
