//! The codex CLI's side of a run: `codex exec --json` (one turn, JSONL events on stdout),
//! and its whole configuration in a scratch `CODEX_HOME/config.toml` that treadle writes
//! for the step: the endpoint as a model provider speaking the Responses API, the bridge
//! as its only MCP server, its shell only when `run_shell` is granted, and its other
//! tools, plugins, analytics and update checks off.
//!
//! Everything is in the file rather than in `-c` options: values there are TOML, which a
//! system prompt or a URL would have to be quoted into anyway, and the file is checked
//! whole when codex loads it.

use std::path::{Path, PathBuf};

use super::bridge::Bridge;
use super::command::{Join, Run, write_private};
use super::driver::CliError;
use super::proxy::Proxy;
use super::tools::BRIDGE;
use crate::agent::spec::AgentStep;

/// The model provider's name in the configuration.
const PROVIDER: &str = "treadle";

/// The endpoint when the step names none: OpenAI's API.
pub(super) const OPENAI: &str = "https://api.openai.com/v1";

/// codex features that reach past the step (plugins, connectors, hosted image
/// generation, memories kept across sessions, suggested tools) or would fetch something to
/// install, and its image viewer, which reads any image file by path where the step's
/// grant decides what may be read. A step has none of them: its tools are exactly its
/// grant (a small model offered a tool it was not given calls it over and over instead of
/// answering). Sub-agents are off in `[agents]`.
const OFF: &[&str] = &[
    "goals",
    "plugins",
    "remote_plugin",
    "apps",
    "tool_suggest",
    "skill_mcp_dependency_install",
    "image_generation",
    "memories",
    "view_image",
];

/// codex's configuration home inside the scratch `HOME`.
pub fn codex_home(home: &Path) -> PathBuf {
    home.join(".codex")
}

/// Adds codex's arguments and environment to `cmd` / `env`; returns the directories to
/// put first on `PATH`: the program's own and its `codex-path` beside it (its `rg`), as
/// the npm entry script does.
pub fn command(
    run: &Run<'_>,
    cmd: &mut tokio::process::Command,
    env: &mut Vec<(String, String)>,
) -> Vec<PathBuf> {
    cmd.arg("exec")
        .arg("--json")
        // treadle confines the CLI itself (Landlock, as a task); codex's own sandbox
        // would nest a second one (bubblewrap, seccomp) that may not start there.
        .arg("--dangerously-bypass-approvals-and-sandbox")
        .arg("--skip-git-repo-check")
        .args(["--model", run.model]);
    if let Join::Resume(id) = run.join {
        cmd.args(["resume", id]);
    }
    // The prompt on stdin.
    cmd.arg("-");
    env.push((
        "CODEX_HOME".to_owned(),
        codex_home(run.home).display().to_string(),
    ));
    // The model proxy's key for the step: the real key stays in treadle.
    env.push(("OPENAI_API_KEY".to_owned(), run.proxy.key().to_owned()));
    let mut dirs = Vec::new();
    if let Some(bin) = run.program.parent() {
        dirs.push(bin.to_path_buf());
        if let Some(vendor) = bin.parent() {
            dirs.push(vendor.join("codex-path"));
        }
    }
    dirs
}

/// Writes `CODEX_HOME/config.toml` (and the system prompt beside it) for `step`; returns
/// the configuration's path.
pub fn write_config(
    home: &Path,
    step: &AgentStep,
    bridge: Option<&Bridge>,
    proxy: &Proxy,
) -> Result<PathBuf, CliError> {
    let dir = codex_home(home);
    let path = dir.join("config.toml");
    let mut toml = format!("model_provider = {}\n", quoted(PROVIDER));
    toml.push_str("web_search = \"disabled\"\ncheck_for_update_on_startup = false\n");
    if !step.cli.settings_project {
        // AGENTS.md files are the project's scope: read only with `settings: project`.
        toml.push_str("project_doc_max_bytes = 0\n");
    }
    if let Some(system) = &step.system {
        let file = dir.join("treadle-system.md");
        write_private(&file, system)?;
        toml.push_str(&format!(
            "model_instructions_file = {}\n",
            quoted(&file.display().to_string())
        ));
    }
    toml.push_str("\n[analytics]\nenabled = false\n\n[agents]\nenabled = false\n\n[features]\n");
    for feature in OFF {
        toml.push_str(&format!("{feature} = false\n"));
    }
    let shell = step.tools.iter().any(|t| t == "run_shell");
    toml.push_str(&format!("shell_tool = {shell}\n"));
    // Hooks are configuration scope too.
    toml.push_str(&format!("hooks = {}\n", step.cli.settings_project));
    // codex's question tool waits for a terminal `codex exec` has not got; a person is
    // asked through the bridged `ask_human` when the step grants it.
    toml.push_str("\n[tools.experimental_request_user_input]\nenabled = false\n");
    // The model proxy, which forwards to the step's endpoint (or OpenAI's) with the key.
    toml.push_str(&format!(
        "\n[model_providers.{PROVIDER}]\nname = {}\nbase_url = {}\nwire_api = \"responses\"\nenv_key = \"OPENAI_API_KEY\"\n",
        quoted(PROVIDER),
        quoted(proxy.url())
    ));
    if let Some(bridge) = bridge {
        toml.push_str(&format!(
            "\n[mcp_servers.{BRIDGE}]\nurl = {}\nhttp_headers = {{ Authorization = {} }}\n",
            quoted(bridge.url()),
            quoted(&format!("Bearer {}", bridge.token()))
        ));
    }
    write_private(&path, &toml)?;
    Ok(path)
}

/// `text` as a TOML basic string: JSON's string escapes are all TOML's too.
fn quoted(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_with_quotes_and_newlines_is_one_toml_string() {
        assert_eq!(quoted("say \"hi\"\n\\"), r#""say \"hi\"\n\\""#);
    }
}
