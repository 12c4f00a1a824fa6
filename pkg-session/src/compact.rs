//! Long conversations: compaction of a loop's history, and the cap on how much of one tool
//! result goes inline.
//!
//! Before each model call, a turn estimates its history's size (text bytes / 4: a size
//! heuristic, not token accounting). Past the loop's budget, the older messages are
//! summarised by the loop's own model and replaced by that summary, while the newest
//! messages (about [`KEEP_SHARE_PERCENT`] of the budget) stay verbatim. The cut never falls
//! between an assistant message and the results of its tool calls, so no pending call loses
//! its answer. The actor journals the replacement (`Compacted`) before applying it, and
//! restore applies it the same way ([`apply`] is the one rule), so a restored session sees
//! the compacted history.

use std::sync::PoisonError;

use ractor::ActorRef;
use ractor::rpc::CallResult;
use tokio_util::sync::CancellationToken;
use treadle_event::{Block, Message, Role, StepId};
use treadle_hook::{HookCall, OperationOutcome, Payload};

use crate::context::LoopContext;
use crate::error::{CommitError, CompactError};
use crate::inference::{InferenceRequest, PreparedRequest};
use crate::protocol::{Compacted, LoopMsg, TurnCoords};

/// Where a turn compacts: its loop, its actor and coordinates, and the step about to run.
pub(crate) struct CompactScope<'a> {
    pub ctx: &'a LoopContext,
    pub actor: &'a ActorRef<LoopMsg>,
    pub coords: TurnCoords,
    pub step: StepId,
    pub cancel: &'a CancellationToken,
}

/// Compacts `messages` (the turn's view of its loop's history) if they are past the loop's
/// budget: summarises the older ones with the loop's model, has the actor journal and apply
/// the replacement, and applies it to `messages` too. The summary's tokens are charged to
/// the step about to run. Any failure (the model, the journal, an interrupt) leaves the
/// history as it was: compaction is an optimisation, never a reason for a turn to fail.
pub(crate) async fn compact_if_due(scope: &CompactScope<'_>, request: &mut PreparedRequest) {
    if !due(scope.ctx, request) {
        return;
    }
    let budget = scope.ctx.compaction.budget;
    let tokens = estimate(request.messages().iter());
    // Boxed: a compaction (a model call, hooks, the actor's commit) is rare, and its
    // future inline would size every step's future, held for the whole turn.
    Box::pin(compact(scope, request, budget, tokens)).await;
}

/// Whether the next model call of `request` compacts the history first.
pub(crate) fn due(ctx: &LoopContext, request: &PreparedRequest) -> bool {
    let budget = ctx.compaction.budget;
    budget != 0 && estimate(request.messages().iter()) > budget
}

/// [`compact_if_due`] once it is due: `tokens` of the history are past `budget`.
async fn compact(
    scope: &CompactScope<'_>,
    request: &mut PreparedRequest,
    budget: u64,
    tokens: u64,
) {
    let ctx = scope.ctx;
    // A copy: the compaction rewrites the history, which is rare (once per budget).
    let messages = request.messages().to_vec();
    let keep = budget.saturating_mul(KEEP_SHARE_PERCENT) / 100;
    let Some(at) = split_point(&messages, keep) else {
        return;
    };
    let payload = Payload::Compaction {
        messages: u32::try_from(messages.len()).unwrap_or(u32::MAX),
        replaced: u32::try_from(at).unwrap_or(u32::MAX),
        tokens,
        budget,
    };
    let hook = if ctx.hooks.is_empty() {
        None
    } else {
        let call = HookCall::new(ctx.session, ctx.loop_id, payload)
            .with_turn(scope.coords.turn)
            .with_step(scope.step);
        // Observed, not guarded: the runner ignores a deny here.
        ctx.hooks.begin(call).await.ok()
    };
    let result = match summarise_and_commit(scope, &messages, at, tokens).await {
        Ok((compacted, summary)) => {
            request.replace_messages(compacted);
            Ok(summary)
        }
        Err(error) => Err(error),
    };
    if let Some(active) = hook {
        let outcome = match &result {
            Ok(_) => OperationOutcome::Completed,
            Err(error) => OperationOutcome::Failed {
                error: error.to_string(),
            },
        };
        active.finish(outcome, result.ok()).await;
    }
}

/// Summarises `messages[..at]` and has the actor journal and apply the replacement; returns
/// the compacted history and what the hook is told.
async fn summarise_and_commit(
    scope: &CompactScope<'_>,
    messages: &[Message],
    at: usize,
    tokens_before: u64,
) -> Result<(Vec<Message>, serde_json::Value), CompactError> {
    let ctx = scope.ctx;
    let request = PreparedRequest::new(summary_request(&messages[..at]));
    let completion = tokio::select! {
        biased;
        _ = scope.cancel.cancelled() => return Err(CompactError::Interrupted),
        result = ctx.client.complete(&request, |_, _, _| {}) => result,
    }?;
    let mut answer = completion.message;
    ctx.secrets.scrub_message(&mut answer);
    let text = answer.text_content();
    if text.trim().is_empty() {
        return Err(CompactError::EmptySummary);
    }
    *ctx.delegated.lock().unwrap_or_else(PoisonError::into_inner) += completion.usage;
    let summary = summary_message(&text);
    let mut compacted = messages.to_vec();
    apply(&mut compacted, at, summary.clone());
    let tokens_after = estimate(&compacted);
    let request = Compacted {
        replaced: at,
        summary,
        tokens_before,
        tokens_after,
    };
    let coords = scope.coords;
    let reply = scope
        .actor
        .call(
            |reply| LoopMsg::Compact {
                coords,
                compacted: request,
                reply,
            },
            None,
        )
        .await;
    match reply {
        Ok(CallResult::Success(Ok(()))) => {}
        Ok(CallResult::Success(Err(error))) => return Err(error.into()),
        _ => return Err(CommitError::ActorGone.into()),
    }
    let report = serde_json::json!({
        "replaced": at,
        "tokens_before": tokens_before,
        "tokens_after": tokens_after,
    });
    Ok((compacted, report))
}

/// The share of the budget kept verbatim, newest messages first.
pub const KEEP_SHARE_PERCENT: u64 = 30;

/// The most bytes of one tool result shown to the summariser.
const SUMMARY_RESULT_BYTES: usize = 4000;

/// The estimated tokens of `messages`: the bytes of their text, tool arguments and results,
/// divided by four.
pub(crate) fn estimate<'m>(messages: impl IntoIterator<Item = &'m Message>) -> u64 {
    let bytes: usize = messages
        .into_iter()
        .flat_map(|m| &m.content)
        .map(|block| match block {
            Block::Text { text } | Block::Reasoning { text } => text.len(),
            Block::ToolUse {
                name, arguments, ..
            } => name.len() + arguments.len(),
            Block::ToolResult { content, .. } => content.len(),
        })
        .sum();
    u64::try_from(bytes / 4).unwrap_or(u64::MAX)
}

/// Where the verbatim part of `messages` begins when the newest `keep` estimated tokens
/// stay: never at a tool-result message (its call stays with it), and with at least two
/// older messages to summarise. `None` when there is nothing worth summarising.
pub(crate) fn split_point(messages: &[Message], keep: u64) -> Option<usize> {
    let mut start = messages.len();
    let mut kept = 0;
    while start > 0 {
        let size = estimate(&messages[start - 1..start]);
        if kept + size > keep && start < messages.len() {
            break;
        }
        kept += size;
        start -= 1;
    }
    // Back to the message that made the calls whose results would start the kept part.
    while start > 0 && messages.get(start).is_some_and(|m| m.role == Role::Tool) {
        start -= 1;
    }
    (start >= 2).then_some(start)
}

/// Replaces the first `replaced` messages of `history` with `summary`, merging it into the
/// first kept message when that one is the user's too (two user messages in a row confuse
/// some chat templates). The one rule the actor, the turn and restore all apply.
pub(crate) fn apply(history: &mut Vec<Message>, replaced: usize, summary: Message) {
    let replaced = replaced.min(history.len());
    history.drain(..replaced);
    match history.first_mut() {
        Some(first) if first.role == Role::User && summary.role == Role::User => {
            let mut content = summary.content;
            content.append(&mut first.content);
            first.content = content;
        }
        _ => history.insert(0, summary),
    }
}

/// The request that asks the model to summarise `older`.
pub(crate) fn summary_request(older: &[Message]) -> InferenceRequest {
    let mut transcript = String::new();
    for message in older {
        for block in &message.content {
            let line = match block {
                Block::Text { text } => format!("{}: {text}", role_name(message.role)),
                Block::Reasoning { .. } => continue,
                Block::ToolUse {
                    name, arguments, ..
                } => format!("assistant called {name} {arguments}"),
                Block::ToolResult { content, .. } => format!(
                    "tool result: {}",
                    cut(content, SUMMARY_RESULT_BYTES, " [cut]")
                ),
            };
            transcript.push_str(&line);
            transcript.push('\n');
        }
    }
    InferenceRequest {
        system: Some(
            "You summarise the earlier part of a conversation between a user, an assistant \
             and its tools, so the assistant can continue its work without it. Keep every \
             fact, decision, file name, value and open question the rest of the work may \
             need; drop pleasantries and repetition. Answer with the summary only."
                .to_owned(),
        ),
        messages: vec![Message::user(format!(
            "Summarise this conversation:\n\n{transcript}"
        ))],
        tools: Vec::new(),
        tool_choice: None,
        response_format: None,
    }
}

/// The message that stands for the summarised messages.
pub(crate) fn summary_message(summary: &str) -> Message {
    Message::user(format!(
        "[The earlier part of this conversation, summarised to save space:]\n{}",
        summary.trim()
    ))
}

/// Cuts every tool result in `results` to `max` bytes, saying how much was left out.
pub(crate) fn cap_results(results: &mut Message, max: Option<usize>) {
    let Some(max) = max else { return };
    for block in &mut results.content {
        if let Block::ToolResult { content, .. } = block
            && content.len() > max
        {
            let total = content.len();
            let note = format!(
                "\n[… {} more bytes of this result were cut; ask for a narrower part if you need it]",
                total - floor(content, max)
            );
            *content = cut(content, max, &note);
        }
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// The largest char boundary of `text` at or below `max`.
fn floor(text: &str, max: usize) -> usize {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

fn cut(text: &str, max: usize, note: &str) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!("{}{note}", &text[..floor(text, max)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: id.into(),
                name: "read".into(),
                arguments: "{}".into(),
            }],
        }
    }

    fn result(id: &str, bytes: usize) -> Message {
        Message {
            role: Role::Tool,
            content: vec![Block::ToolResult {
                call_id: id.into(),
                content: "x".repeat(bytes),
                is_error: false,
            }],
        }
    }

    #[test]
    fn the_cut_keeps_calls_with_their_results() {
        let history = vec![
            Message::user("go"),
            call("1"),
            result("1", 4000),
            call("2"),
            result("2", 4000),
            call("3"),
            result("3", 400),
        ];
        // Room for the last result only: the cut moves back to the call that made it.
        let at = split_point(&history, 100).unwrap();
        assert_eq!(at, 5);
        assert_eq!(history[at].role, Role::Assistant);
        // Nothing worth summarising.
        assert_eq!(split_point(&history[..2], 0), None);
        assert_eq!(estimate(&[result("1", 400)]), 100);
    }

    #[test]
    fn applying_a_summary_merges_with_a_leading_user_message() {
        let mut history = vec![
            Message::user("a"),
            call("1"),
            result("1", 1),
            Message::user("b"),
        ];
        apply(&mut history, 3, summary_message("it read a file"));
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].role, Role::User);
        assert!(history[0].text_content().contains("it read a file"));
        assert!(history[0].text_content().ends_with('b'));

        let mut history = vec![
            Message::user("a"),
            Message::user("b"),
            call("1"),
            result("1", 1),
        ];
        apply(&mut history, 2, summary_message("s"));
        assert_eq!(history.len(), 3);
        assert_eq!(history[1].role, Role::Assistant);
    }

    #[test]
    fn long_results_are_cut_with_a_note() {
        let mut message = result("1", 100);
        cap_results(&mut message, Some(10));
        let Block::ToolResult { content, .. } = &message.content[0] else {
            panic!("a result")
        };
        assert!(
            content.starts_with("xxxxxxxxxx\n[… 90 more bytes"),
            "{content}"
        );
        let mut whole = result("1", 100);
        cap_results(&mut whole, None);
        assert_eq!(whole, result("1", 100));
    }
}
