//! Resolving an agent's `source:` to an endpoint, a model name and an API-key variable.
//!
//! * no `model`: the local model server (`TREADLE_LOCAL_URL`, default
//!   [`DEFAULT_LOCAL_URL`]) serving [`DEFAULT_LOCAL_MODEL`], with no key;
//! * `local/NAME`: the local model server, model `NAME`, no key;
//! * `openai/NAME`: `https://api.openai.com/v1`, key in `OPENAI_API_KEY`;
//! * `openrouter/NAME`: `https://openrouter.ai/api/v1`, key in `OPENROUTER_API_KEY`;
//! * an explicit `endpoint:` wins over the provider's URL, and `api_key_env:` over its key
//!   variable. With an endpoint, any model name is accepted as written (a known provider
//!   prefix is dropped).
//!
//! The key itself is never read here: only whether its variable is set is checked. The
//! session reads it from the variable when it starts (`treadle_session`'s `ApiKey`), so
//! no value of treadle's carries it.

use super::agent_def::AgentSource;
use super::at::{At, Pos};

/// The local model server's default base URL (see scripts/local-model).
pub const DEFAULT_LOCAL_URL: &str = "http://127.0.0.1:8091/v1";
/// The model the local server serves.
pub const DEFAULT_LOCAL_MODEL: &str = "qwen2.5-coder-0.5b";
/// Environment variable that moves the local model server.
pub const LOCAL_URL_ENV: &str = "TREADLE_LOCAL_URL";

/// Where and how to reach an agent's model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// Provider label for the transcript and records (`local`, `openai`, `openrouter`,
    /// `custom`).
    pub provider: String,
    /// Model name sent in requests.
    pub model: String,
    /// OpenAI-compatible base URL (ends before `/chat/completions`).
    pub base_url: String,
    /// Variable holding the key; `None` when the server needs no key.
    pub api_key_env: Option<String>,
    /// Where the model (or the agent's source) was written, for error messages.
    pub pos: Pos,
    /// Where `api_key_env` was written, or the model's position when it is implied.
    pub key_pos: Pos,
}

/// Why a source does not resolve.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelError {
    /// `model: foo/bar` with a provider we have no URL for, and no endpoint.
    #[error("unknown model provider `{provider}` in `{model}`")]
    UnknownProvider {
        /// The prefix before the first `/`.
        provider: String,
        /// The whole name.
        model: String,
        /// Where it was written.
        pos: Pos,
    },
    /// `model: gpt-4o` with no provider and no endpoint.
    #[error("model `{model}` names no provider")]
    NoProvider {
        /// The name as written.
        model: String,
        /// Where it was written.
        pos: Pos,
    },
    /// The key variable is not set (or is empty).
    #[error("environment variable {var} is not set")]
    MissingKey {
        /// The variable.
        var: String,
        /// Where it was named (or implied).
        pos: Pos,
    },
}

impl ModelError {
    /// Where the error points in the file.
    pub fn pos(&self) -> Pos {
        match self {
            Self::UnknownProvider { pos, .. }
            | Self::NoProvider { pos, .. }
            | Self::MissingKey { pos, .. } => *pos,
        }
    }

    /// How to repair it.
    pub fn hint(&self) -> String {
        match self {
            Self::UnknownProvider { .. } | Self::NoProvider { .. } => "write the model as \
                openai/NAME, openrouter/NAME, local/NAME, lmstudio/NAME or ollama/NAME, or give `endpoint:` (an \
                OpenAI-compatible base URL) next to it"
                .to_owned(),
            Self::MissingKey { var, .. } => format!(
                "export {var}=... before running, or set `api_key_env:` to the variable that \
                 holds the key"
            ),
        }
    }
}

/// The provider of a CLI-backed model (`@claude/sonnet`, `@codex/gpt-5`): the step runs
/// the CLI (`crate::agent::cli`) rather than calling an endpoint.
pub const CLI_PROVIDER: &str = "cli";

/// Resolves a source, reading `TREADLE_LOCAL_URL` through `env`.
pub fn resolve(
    source: &AgentSource,
    agent_pos: Pos,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ResolvedModel, ModelError> {
    let local_url = || env(LOCAL_URL_ENV).unwrap_or_else(|| DEFAULT_LOCAL_URL.to_owned());
    let model_pos = source.model.as_ref().map_or(agent_pos, |m| m.pos);
    let explicit_key = source.api_key_env.as_ref().map(|k| k.value.clone());
    let key_pos = source.api_key_env.as_ref().map_or(model_pos, |k| k.pos);
    let endpoint = source
        .endpoint
        .as_ref()
        .map(|e: &At<String>| e.value.clone());

    let (provider, model, base_url, default_key) = match source.model.as_ref() {
        None => (
            "local".to_owned(),
            DEFAULT_LOCAL_MODEL.to_owned(),
            local_url(),
            None,
        ),
        Some(name) => match name.value.split_once('/') {
            Some(("local", rest)) => ("local".to_owned(), rest.to_owned(), local_url(), None),
            Some(("openai", rest)) => (
                "openai".to_owned(),
                rest.to_owned(),
                "https://api.openai.com/v1".to_owned(),
                Some("OPENAI_API_KEY"),
            ),
            Some(("openrouter", rest)) => (
                "openrouter".to_owned(),
                rest.to_owned(),
                "https://openrouter.ai/api/v1".to_owned(),
                Some("OPENROUTER_API_KEY"),
            ),
            // Local OpenAI-compatible servers at their usual ports.
            Some(("lmstudio", rest)) => (
                "lmstudio".to_owned(),
                rest.to_owned(),
                "http://127.0.0.1:1234/v1".to_owned(),
                None,
            ),
            Some(("ollama", rest)) => (
                "ollama".to_owned(),
                rest.to_owned(),
                "http://127.0.0.1:11434/v1".to_owned(),
                None,
            ),
            // `@claude/sonnet`: a coding-agent CLI. Any `@NAME` loads (the file is well
            // formed); one treadle does not drive is refused where the step is built.
            Some((cli, rest)) if cli.starts_with('@') && cli.len() > 1 => (
                CLI_PROVIDER.to_owned(),
                format!("{cli}/{rest}"),
                String::new(),
                None,
            ),
            Some((provider, _)) if endpoint.is_none() => {
                return Err(ModelError::UnknownProvider {
                    provider: provider.to_owned(),
                    model: name.value.clone(),
                    pos: name.pos,
                });
            }
            None if endpoint.is_none() => {
                return Err(ModelError::NoProvider {
                    model: name.value.clone(),
                    pos: name.pos,
                });
            }
            // With an explicit endpoint the name is the server's business.
            _ => ("custom".to_owned(), name.value.clone(), String::new(), None),
        },
    };
    let base_url = endpoint.unwrap_or(base_url);
    let api_key_env = explicit_key.or_else(|| default_key.map(str::to_owned));
    Ok(ResolvedModel {
        provider,
        model,
        base_url: base_url.trim_end_matches('/').to_owned(),
        api_key_env,
        pos: model_pos,
        key_pos,
    })
}

impl ResolvedModel {
    /// Checks that the key's variable is set (and not empty) when the server needs a key.
    pub fn check_key(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ModelError> {
        let Some(var) = &self.api_key_env else {
            return Ok(());
        };
        match env(var) {
            Some(v) if !v.is_empty() => Ok(()),
            _ => Err(ModelError::MissingKey {
                var: var.clone(),
                pos: self.key_pos,
            }),
        }
    }
}

/// Reads a variable: a key taken out of the environment at start-up, or the process
/// environment (see `crate::environ`).
pub fn process_env(name: &str) -> Option<String> {
    crate::environ::var(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(model: Option<&str>, endpoint: Option<&str>, key: Option<&str>) -> AgentSource {
        AgentSource {
            model: model.map(|m| At::new(m.to_owned())),
            endpoint: endpoint.map(|m| At::new(m.to_owned())),
            api_key_env: key.map(|m| At::new(m.to_owned())),
            string_tool_choice: None,
        }
    }

    #[test]
    fn defaults_and_providers() {
        let none = |_: &str| None;
        let r = resolve(&src(None, None, None), Pos::default(), &none).unwrap();
        assert_eq!(
            (r.base_url.as_str(), r.model.as_str()),
            (DEFAULT_LOCAL_URL, DEFAULT_LOCAL_MODEL)
        );
        assert_eq!(r.api_key_env, None);
        let r = resolve(
            &src(Some("openai/gpt-4o-mini"), None, None),
            Pos::default(),
            &none,
        )
        .unwrap();
        assert_eq!(r.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
        assert_eq!(r.model, "gpt-4o-mini");
        let r = resolve(
            &src(Some("openrouter/qwen/q3"), Some("http://x/v1/"), Some("K")),
            Pos::default(),
            &none,
        )
        .unwrap();
        assert_eq!(
            (r.base_url.as_str(), r.model.as_str()),
            ("http://x/v1", "qwen/q3")
        );
        assert_eq!(r.api_key_env.as_deref(), Some("K"));
        assert!(resolve(&src(Some("acme/x"), None, None), Pos::default(), &none).is_err());
        let local = |k: &str| (k == LOCAL_URL_ENV).then(|| "http://h:1/v1".to_owned());
        let r = resolve(&src(Some("local/tiny"), None, None), Pos::default(), &local).unwrap();
        assert_eq!(
            (r.base_url.as_str(), r.model.as_str()),
            ("http://h:1/v1", "tiny")
        );
    }

    #[test]
    fn key_never_prints() {
        let r = resolve(&src(Some("openai/m"), None, None), Pos::default(), &|_| {
            None
        })
        .unwrap();
        assert!(r.check_key(&|_| Some("sk-secret".to_owned())).is_ok());
        // Nothing resolved holds the key, so nothing can print it.
        assert!(!format!("{r:?}").contains("sk-secret"));
        let missing = r.check_key(&|_| None).unwrap_err();
        assert!(!format!("{missing:?} {missing}").contains("sk-secret"));
    }
}
