//! What an agent step is handed before its first turn, read when it runs: the decisions
//! it reads (`context: { from }`), its `context_paths:` files and the prompt of
//! `prompt_file: { artifact, path }`. A hosted model finds the first two as `read_step` and
//! `read_file` calls and results after its prompt (steps' turn zero); a CLI-backed agent
//! gets them as text before its prompt.

use std::path::Path;

use crate::agent::AgentStep;
use crate::agent::context_files::ReadError;
use crate::pipeline::AgentCall;

/// Why an agent step could not be handed what it reads before its first turn (the step
/// fails).
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandingError {
    #[error("context_paths: {0}")]
    PathTemplate(#[from] crate::template::TemplateError),
    #[error("context_paths: {0}")]
    Context(#[source] ReadError),
    #[error(
        "context_paths: the files are handed over as `read_file` results, and this agent is not granted `read_file`; add it to its `tools:`"
    )]
    NoReadFile,
    #[error("prompt_file: {0}")]
    PromptFile(#[from] ReadError),
}

/// Hands `agent_step` the decisions it reads (`context: { from }`) and its `context_paths:`
/// files: a hosted model finds them as `read_step` and `read_file` calls and results after
/// its prompt (steps' turn zero); a CLI runs its own conversation, so it gets them as text
/// before its prompt, which is returned.
pub(super) fn hand_over(
    agent_step: &mut AgentStep,
    delivered: &[super::upstream::Delivered],
    context: Vec<crate::agent::context_files::ContextFile>,
) -> Result<String, HandingError> {
    use crate::agent::context_files::{Handed, prompt_block};
    if agent_step.model.provider == crate::pipeline::model::CLI_PROVIDER {
        return Ok(format!(
            "{}{}",
            super::upstream::prompt_block(delivered),
            prompt_block(&context)
        ));
    }
    if !context.is_empty() && !agent_step.tools.iter().any(|t| t == "read_file") {
        return Err(HandingError::NoReadFile);
    }
    // What happened before this step first, then what it was handed to work on.
    agent_step.handed = delivered
        .iter()
        .map(|d| Handed::decision(&d.step, super::upstream::decision_text(d)))
        .chain(context.into_iter().map(Handed::file))
        .collect();
    Ok(String::new())
}

/// What an agent step is handed before its first turn: its `context_paths:` files
/// (rendered per `across:` cell) and the prompt of `prompt_file: { artifact, path }`, read
/// from the step directory `dir` (`work`: its `dir:`).
pub(super) fn handed_files(
    call: &AgentCall,
    dir: &Path,
    work: &Path,
    vars: Option<&crate::pipeline::vars::Vars>,
    limit: u64,
) -> Result<(Vec<crate::agent::context_files::ContextFile>, String), HandingError> {
    use crate::agent::context_files::{read_confined, read_context};
    let mut context = Vec::new();
    if let Some(paths) = &call.context_paths {
        let paths: Vec<String> = paths
            .iter()
            .map(|p| match vars {
                Some(v) => crate::pipeline::flow_keys::render(&p.value, v),
                None => Ok(p.value.clone()),
            })
            .collect::<Result<_, _>>()?;
        context = read_context(work, &paths, limit).map_err(HandingError::Context)?;
    }
    let mut prompt = String::new();
    if let Some(f) = call.prompt.file() {
        let path = format!("{}/{}", f.artifact.value, f.path.value);
        prompt = read_confined(dir, &path)?;
        prompt.push_str("\n\n");
    }
    Ok((context, prompt))
}
