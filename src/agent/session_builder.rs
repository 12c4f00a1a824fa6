//! How an agent step's settings become a session: endpoint, key, tools, hooks, limits and
//! the gate answerer ([`session_builder`]), and the secret values a step must never show.

use std::sync::Arc;

use treadle_hook::{CommandHook, Hook};
use treadle_session::{ApiKey, Journal, Session, SessionBuilder, Tool};

use super::budget::BudgetGuard;
use super::spec::AgentStep;

/// The secret values a step must never show: those of its pipeline's secret variables
/// ([`AgentStep::secret_vars`], its own key among them) and its MCP servers' bearer tokens.
pub(crate) fn secret_values(step: &AgentStep) -> Vec<String> {
    let bearers = step
        .mcp
        .iter()
        .filter_map(|server| match &server.transport {
            treadle_session::mcp::McpTransport::Http { bearer, .. } => {
                bearer.as_ref().map(|b| b.expose().to_owned())
            }
            treadle_session::mcp::McpTransport::Stdio { .. } => None,
        });
    step.secret_vars
        .iter()
        .chain(&step.model.api_key_env)
        .filter_map(|var| crate::environ::var(var))
        .chain(bearers)
        .collect()
}

/// The model limits as a pipeline sets them: their messages name these keys, not the
/// library's setters, which a pipeline's author never sees.
const PIPELINE_LIMITS: treadle_session::LimitNames = treadle_session::LimitNames {
    idle: "`limits: { model_idle: 5m }` on the agent",
    response: "`limits: { model_response: 16MiB }` on the agent",
    call: "`limits: { model_call: 30m }` on the agent",
};

/// The library's own bound on one turn's tool calls (`max_tool_calls_per_turn`).
const LIBRARY_TOOL_CALLS: u32 = 256;

/// The most tool calls the step's turn may make. A pipeline bounds an agent step by
/// `max_turns` (its model calls), as steps does; the library's bound of 256 tool calls a
/// turn must not end a step that was given more turns than that sooner: such a step may
/// make one call per turn it has (`max_turns: 0`, no limit, none).
pub(crate) fn tool_call_limit(step: &AgentStep) -> u32 {
    step.model_call_limit().max(LIBRARY_TOOL_CALLS)
}

/// The session of the step: its endpoint, model, key, tools, budget guard, command hooks
/// and limits.
pub(super) fn session_builder(
    step: &AgentStep,
    journal: &Journal,
    tools: Vec<Arc<dyn Tool>>,
    guard: Arc<BudgetGuard>,
    command_hooks: &[Arc<CommandHook>],
) -> SessionBuilder {
    let mut hooks: Vec<Arc<dyn Hook>> = vec![guard];
    if let Some(policy) = step.controls.policy() {
        hooks.push(Arc::new(policy));
    }
    // After the policy: a call it denies starts no hook process.
    hooks.extend(command_hooks.iter().map(|h| h.clone() as Arc<dyn Hook>));
    let mut builder = Session::builder()
        .endpoint(step.model.base_url.clone())
        .model(step.model.model.clone())
        .tools(tools)
        .hooks(hooks)
        .max_steps(step.model_call_limit())
        .max_tool_calls_per_turn(tool_call_limit(step))
        // Nobody watches a pipeline's agent step: a guard's question is denied
        // (approval_required), never left waiting, unless `permissions:` may ask, and
        // then the step's asker takes the question to a person. Questions (`ask_human`)
        // go to the step's answerer either way (a handler answers them headless too).
        // A restored step asks about the gates its restore opens (an effect a stop caught).
        .headless(!step.controls.may_ask() && step.controls.resume.is_none())
        .unfinished_effects(step.unfinished_effects)
        // The bearer tokens (the session adds its own key) are scrubbed from what the
        // model says.
        .secrets(secret_values(step))
        .journal(journal.clone());
    if let Some(fence) = &step.controls.fence {
        builder = builder.fence(fence.clone());
    }
    if let Some(var) = &step.model.api_key_env {
        // Read where `main` keeps it: the variable itself is gone from the environment.
        // The session scrubs its key (in plain and encoded forms) from what the model says.
        builder = match crate::environ::var(var) {
            Some(key) => builder.api_key(ApiKey::new(key.trim().to_owned())),
            None => builder.api_key_env(var.clone()),
        };
    }
    if step.controls.may_ask() || step.answerer.is_some() || step.controls.resume.is_some() {
        let controls = step.controls.clone();
        let answerer = step.answerer.clone();
        builder = builder.on_gate(move |request| {
            let (controls, answerer) = (controls.clone(), answerer.clone());
            async move { super::resumed::answer_gate(&controls, answerer.as_ref(), request).await }
        });
        if let Some(deadline) = step.answerer.as_ref().and_then(|a| a.deadline) {
            builder = builder.gate_deadline(deadline);
        }
    }
    if let Some(system) = &step.system {
        builder = builder.system_prompt(system.clone());
    }
    if let Some(link) = &step.parent {
        builder = builder.parent(link.clone());
    }
    if let Some(temperature) = step.temperature {
        builder = builder.temperature(temperature);
    }
    if let Some(top_p) = step.dials.top_p {
        builder = builder.top_p(top_p);
    }
    if let Some(tokens) = step.dials.max_tokens {
        builder = builder.max_tokens(tokens);
    }
    if let Some(effort) = &step.dials.reasoning_effort {
        builder = builder.reasoning_effort(effort.clone());
    }
    if let Some(idle) = step.model_idle {
        builder = builder.idle_timeout(idle);
    }
    if let Some(bytes) = step.model_response {
        builder = builder.max_response_bytes(bytes);
    }
    if let Some(attempts) = step.attempts {
        // steps' meaning: `attempts:` counts requests to the provider, the client's own
        // retries included, so the executor does not run the step again on top of it.
        builder = builder.retry(treadle_session::RetryPolicy {
            max_retries: attempts.saturating_sub(1),
            ..Default::default()
        });
    }
    if let Some(total) = step.model_call {
        builder = builder.call_timeout(total);
    }
    builder = builder.limit_names(PIPELINE_LIMITS);
    let conversation = &step.conversation;
    if let Some(window) = conversation.context_window {
        builder = builder.context_window(window);
    }
    if let Some(tokens) = conversation.compact_after_tokens {
        builder = builder.compact_after_tokens(tokens);
    }
    if let Some(bytes) = conversation.max_context_bytes.filter(|b| *b > 0) {
        builder = builder.max_tool_result_bytes(usize::try_from(bytes).unwrap_or(usize::MAX));
    }
    builder
}
