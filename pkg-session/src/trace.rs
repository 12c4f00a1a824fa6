//! The runtime's tracing spans, named and shaped in one place: session, turn, model call
//! (`chat`), tool call (`execute_tool`) and gate wait, with OpenTelemetry's GenAI semantic
//! convention names for their fields (`gen_ai.request.model`, `gen_ai.usage.input_tokens`,
//! ...) so an OpenTelemetry layer exports them as they are.
//!
//! No field ever holds a prompt, an argument, an output or a key: only names, ids, counts
//! and outcomes. `otel.name` gives the span the name the conventions ask for
//! (`chat {model}`); tracing's own span name stays a fixed word to filter on.

use tracing::Span;
use tracing::field::Empty;
use treadle_event::{LoopId, SessionId, Usage};

/// The span of a session (`invoke_agent` in GenAI terms), child of the caller's span when
/// the session starts; every loop's turns are its children.
pub(crate) fn session(id: SessionId, model: &str) -> Span {
    tracing::info_span!(
        "session",
        otel.name = "invoke_agent",
        session.id = %id,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.request.model = model,
    )
}

/// The span of one turn of `loop_id`, child of the session's span.
pub(crate) fn turn(session: &Span, loop_id: LoopId, index: u32) -> Span {
    tracing::info_span!(
        parent: session,
        "turn",
        loop.id = %loop_id,
        turn.index = index,
        turn.outcome = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
    )
}

/// The span of one model call; [`record_usage`] fills in what the server answered.
pub(crate) fn chat(model: &str) -> Span {
    tracing::info_span!(
        "chat",
        otel.name = %format_args!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.request.model = model,
        gen_ai.response.model = Empty,
        gen_ai.response.finish_reasons = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        error.type = Empty,
    )
}

/// Records the tokens (and the model that answered) on a model call's or turn's span.
pub(crate) fn record_usage(span: &Span, usage: &Usage) {
    span.record("gen_ai.usage.input_tokens", usage.prompt_tokens);
    span.record("gen_ai.usage.output_tokens", usage.completion_tokens);
}

/// Records a failure on a span: its kind (a fixed word, never the message, which may
/// quote what the server sent).
pub(crate) fn record_error(span: &Span, kind: &'static str) {
    span.record("otel.status_code", "ERROR");
    span.record("error.type", kind);
}

/// The span of one tool call.
pub(crate) fn tool(name: &str, call_id: &str) -> Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = %format_args!("execute_tool {name}"),
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        gen_ai.tool.call.id = call_id,
        error.type = Empty,
    )
}

/// The span of the wait for a permission gate's answer.
pub(crate) fn gate_wait(gate: impl std::fmt::Display, tool: &str) -> Span {
    tracing::info_span!(
        "gate_wait",
        gate.id = %gate,
        gen_ai.tool.name = tool,
        gate.answer = Empty,
    )
}
