//! Assembles streamed chunks into one assistant [`Message`]: text and reasoning appended,
//! tool-call pieces stitched by index, usage and finish reason kept.

use std::borrow::Cow;

use treadle_event::{Block, DeltaKind, Message, Role, Usage};

use super::chunk::{Chunk, Delta, ToolCallDelta};

/// The answer of one model call.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// Role [`Role::Assistant`]: a reasoning block (if any), a text block (if any), then
    /// tool-use blocks in index order.
    pub message: Message,
    /// Tokens spent, as the server reported them (zeros if it reported none).
    pub usage: Usage,
    /// Why the model stopped, e.g. `stop`, `tool_calls`, `length`.
    pub finish_reason: String,
    /// The model as the server named it, else the configured one.
    pub model: String,
}

/// One tool call being assembled.
#[derive(Debug)]
struct Call {
    /// The index the server gave its pieces, if it gave one.
    wire: Option<u32>,
    /// Our index: the wire index, unless that was already taken by another call.
    index: u32,
    id: String,
    name: String,
    arguments: String,
}

/// A chunk that carries the server's `error` object instead of a piece of the answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct StreamError {
    /// The error's `message`, or the whole object as JSON when it has none.
    pub message: String,
}

/// Accumulates a stream; [`Stitcher::finish`] turns it into a [`Completion`].
#[derive(Debug, Default)]
pub(crate) struct Stitcher {
    text: String,
    reasoning: String,
    calls: Vec<Call>,
    usage: Option<Usage>,
    finish_reason: Option<String>,
    model: Option<String>,
}

impl Stitcher {
    /// Takes in one chunk, calling `on_delta` for each non-empty piece in arrival order.
    /// Fails with the server's error if the chunk carries an `error` object.
    pub fn push<F>(&mut self, chunk: Chunk<'_>, on_delta: &mut F) -> Result<(), StreamError>
    where
        F: FnMut(DeltaKind, Option<u32>, &str),
    {
        if let Some(error) = chunk.error.filter(|e| !e.is_null()) {
            return Err(StreamError {
                message: error_text(error),
            });
        }
        if self.model.is_none() {
            self.model = chunk.model.filter(|m| !m.is_empty()).map(Cow::into_owned);
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.to_usage());
        }
        for choice in chunk.choices {
            // We never ask for n > 1; other choices would belong to other answers.
            if choice.index != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                self.delta(delta, on_delta);
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finish_reason = Some(reason.into_owned());
            }
        }
        Ok(())
    }

    fn delta<F>(&mut self, delta: Delta<'_>, on_delta: &mut F)
    where
        F: FnMut(DeltaKind, Option<u32>, &str),
    {
        let reasoning = delta
            .reasoning_content
            .filter(|r| !r.is_empty())
            .or(delta.reasoning);
        if let Some(piece) = reasoning {
            append(
                &mut self.reasoning,
                piece,
                DeltaKind::Reasoning,
                None,
                on_delta,
            );
        }
        if let Some(piece) = delta.content {
            append(&mut self.text, piece, DeltaKind::Text, None, on_delta);
        }
        for piece in delta.tool_calls {
            self.tool_piece(piece, on_delta);
        }
    }

    fn tool_piece<F>(&mut self, piece: ToolCallDelta<'_>, on_delta: &mut F)
    where
        F: FnMut(DeltaKind, Option<u32>, &str),
    {
        let id = piece.id.filter(|id| !id.is_empty());
        let slot = self.slot(piece.index, id.as_deref());
        let Some(call) = self.calls.get_mut(slot) else {
            return;
        };
        if call.id.is_empty()
            && let Some(id) = id
        {
            call.id = id.into_owned();
        }
        let Some(function) = piece.function else {
            return;
        };
        if call.name.is_empty()
            && let Some(name) = function.name
        {
            call.name = name.into_owned();
        }
        if let Some(arguments) = function.arguments {
            append(
                &mut call.arguments,
                arguments,
                DeltaKind::ToolArguments,
                Some(call.index),
                on_delta,
            );
        }
    }

    /// Finds (or opens) the call a piece belongs to.
    fn slot(&mut self, wire: Option<u32>, id: Option<&str>) -> usize {
        let known_id = |calls: &[Call], id: &str| calls.iter().rposition(|c| c.id == id);
        match wire {
            Some(w) => match self.calls.iter().rposition(|c| c.wire == Some(w)) {
                // Some servers give every parallel call index 0; a new id under a used
                // index is a new call, not more of the old one.
                Some(at) => match id {
                    Some(id) if !self.calls[at].id.is_empty() && self.calls[at].id != id => {
                        known_id(&self.calls, id).unwrap_or_else(|| self.open(wire))
                    }
                    _ => at,
                },
                None => self.open(wire),
            },
            // Without an index: a new id opens a call, anything else continues the last.
            None => match id {
                Some(id) => known_id(&self.calls, id).unwrap_or_else(|| self.open(None)),
                None if self.calls.is_empty() => self.open(None),
                None => self.calls.len() - 1,
            },
        }
    }

    fn open(&mut self, wire: Option<u32>) -> usize {
        let next = self.calls.iter().map(|c| c.index + 1).max().unwrap_or(0);
        let index = match wire {
            Some(w) if !self.calls.iter().any(|c| c.index == w) => w,
            _ => next,
        };
        self.calls.push(Call {
            wire,
            index,
            id: String::new(),
            name: String::new(),
            arguments: String::new(),
        });
        self.calls.len() - 1
    }

    /// The completion, or `None` if no chunk carried a finish reason (a cut stream).
    pub fn finish(mut self, configured_model: &str) -> Option<Completion> {
        let finish_reason = self.finish_reason?;
        let mut content = Vec::with_capacity(2 + self.calls.len());
        if !self.reasoning.is_empty() {
            content.push(Block::Reasoning {
                text: self.reasoning,
            });
        }
        if !self.text.is_empty() {
            content.push(Block::Text { text: self.text });
        }
        self.calls.sort_by_key(|c| c.index);
        for call in self.calls {
            let id = if call.id.is_empty() {
                // The next request must pair the tool result with this call by id.
                format!("call_{}", uuid::Uuid::now_v7().simple())
            } else {
                call.id
            };
            content.push(Block::ToolUse {
                id,
                name: call.name,
                arguments: call.arguments,
            });
        }
        Some(Completion {
            message: Message {
                role: Role::Assistant,
                content,
            },
            usage: self.usage.unwrap_or_default(),
            finish_reason,
            model: self.model.unwrap_or_else(|| configured_model.to_owned()),
        })
    }
}

/// Reports a non-empty piece and appends it; a first piece the parser had to allocate
/// (it held an escape) is moved, not copied.
fn append<F>(
    acc: &mut String,
    piece: Cow<'_, str>,
    kind: DeltaKind,
    index: Option<u32>,
    on_delta: &mut F,
) where
    F: FnMut(DeltaKind, Option<u32>, &str),
{
    if piece.is_empty() {
        return;
    }
    on_delta(kind, index, &piece);
    if acc.is_empty()
        && let Cow::Owned(piece) = piece
    {
        *acc = piece;
    } else {
        acc.push_str(&piece);
    }
}

/// The `message` of an error object if it has one, else the object's JSON.
fn error_text(error: serde_json::Value) -> String {
    match error.get("message").and_then(|m| m.as_str()) {
        Some(message) => message.to_owned(),
        None => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Seen = Vec<(DeltaKind, Option<u32>, String)>;

    fn run(chunks: &[&str]) -> (Option<Completion>, Seen) {
        let mut s = Stitcher::default();
        let mut seen = Vec::new();
        for c in chunks {
            let chunk: Chunk = serde_json::from_str(c).unwrap_or_default();
            let _ = s.push(chunk, &mut |k, i, t: &str| seen.push((k, i, t.to_owned())));
        }
        (s.finish("configured"), seen)
    }

    #[test]
    fn parallel_calls_by_index() {
        let (c, seen) = run(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"{\"y"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":1}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\":2}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
        ]);
        let c = c.unwrap_or_else(|| panic!("cut"));
        let calls: Vec<_> = c
            .message
            .tool_uses()
            .map(|u| (u.id, u.name, u.arguments))
            .collect();
        assert_eq!(calls, [("a", "f", r#"{"x":1}"#), ("b", "g", r#"{"y":2}"#)]);
        assert_eq!(seen.len(), 3);
        assert_eq!(
            seen[0],
            (DeltaKind::ToolArguments, Some(1), "{\"y".to_owned())
        );
        assert_eq!(c.model, "configured");
    }

    #[test]
    fn all_index_zero_and_missing_ids() {
        let (c, _) = run(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"1"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"b","function":{"name":"g","arguments":"2"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"3"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"h","arguments":"4"}}]}}]}"#,
            r#"{"choices":[{"finish_reason":"tool_calls"}]}"#,
        ]);
        let c = c.unwrap_or_else(|| panic!("cut"));
        let calls: Vec<_> = c
            .message
            .tool_uses()
            .map(|u| (u.name, u.arguments))
            .collect();
        // The id-less, index-less piece continues the last call.
        assert_eq!(calls, [("f", "1"), ("g", "234")]);
    }

    #[test]
    fn reasoning_text_usage_and_cut() {
        let (c, seen) = run(&[
            r#"{"model":"served","choices":[{"delta":{"reasoning_content":"th"},"finish_reason":""}]}"#,
            r#"{"choices":[{"delta":{"reasoning":"ink","content":"he"},"finish_reason":null}]}"#,
            r#"{"choices":[{"delta":{"content":"llo"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
        ]);
        let c = c.unwrap_or_else(|| panic!("cut"));
        assert_eq!(
            c.message.content[0],
            Block::Reasoning {
                text: "think".into()
            }
        );
        assert_eq!(c.message.text_content(), "hello");
        assert_eq!((c.usage.prompt_tokens, c.usage.completion_tokens), (5, 2));
        assert_eq!(
            (c.finish_reason.as_str(), c.model.as_str()),
            ("stop", "served")
        );
        assert_eq!(seen.len(), 4);

        let (c, _) = run(&[r#"{"choices":[{"delta":{"content":"x"},"finish_reason":""}]}"#]);
        assert!(c.is_none());
    }

    #[test]
    fn stream_error_object() {
        let mut s = Stitcher::default();
        let chunk: Chunk = serde_json::from_str(r#"{"error":{"message":"overloaded","code":502}}"#)
            .unwrap_or_default();
        assert_eq!(
            s.push(chunk, &mut |_, _, _: &str| {}),
            Err(StreamError {
                message: "overloaded".to_owned()
            })
        );
    }
}
