//! The claude CLI's side of a run: its command line (`--print --output-format
//! stream-json`, the grant as `--tools`, the bridge as the only MCP server), its
//! environment (the model proxy and its key, quiet), and the bridge's `--mcp-config` file.

use std::path::{Path, PathBuf};

use super::bridge::Bridge;
use super::command::{Join, Run, write_private};
use super::driver::{Cli, CliError};
use super::tools::BRIDGE;

/// Anthropic's API, where the model proxy forwards without `source.endpoint:`.
pub const ANTHROPIC: &str = "https://api.anthropic.com";

/// Adds claude's arguments and environment to `cmd` / `env`; returns the directories to
/// put first on `PATH` (the program's own).
pub fn command(
    run: &Run<'_>,
    cmd: &mut tokio::process::Command,
    env: &mut Vec<(String, String)>,
) -> Vec<PathBuf> {
    let step = run.step;
    let natives: Vec<&str> = step
        .tools
        .iter()
        .filter_map(|t| Cli::Claude.native(t))
        .collect();
    cmd.args(["--print", "--output-format", "stream-json", "--verbose"])
        .args(["--model", run.model])
        // The grant is the whole built-in surface, each granted tool pre-approved and
        // anything else denied without a question nobody could answer.
        .arg("--tools")
        .arg(natives.join(","))
        .args(["--permission-mode", "dontAsk"])
        .arg("--strict-mcp-config")
        .arg("--mcp-config")
        .arg(run.config)
        .arg("--setting-sources")
        .arg(if step.cli.settings_project {
            "project"
        } else {
            ""
        });
    let mut allowed: Vec<String> = natives.iter().map(|t| (*t).to_owned()).collect();
    if run.bridged {
        allowed.push(format!("mcp__{BRIDGE}"));
    }
    if !allowed.is_empty() {
        cmd.arg("--allowedTools").arg(allowed.join(","));
    }
    if let Some(system) = &step.system {
        cmd.arg("--system-prompt").arg(system);
    }
    if let Some(usd) = run.usd_left {
        cmd.arg("--max-budget-usd")
            .arg(format!("{:.6}", usd.max(0.0)));
    }
    match run.join {
        Join::Start(id) => cmd.arg("--session-id").arg(id),
        Join::Resume(id) => cmd.arg("--resume").arg(id),
    };
    // Its updater, telemetry and other non-essential traffic off.
    for (k, v) in [
        ("DISABLE_AUTOUPDATER", "1"),
        ("DISABLE_TELEMETRY", "1"),
        ("DISABLE_ERROR_REPORTING", "1"),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
    ] {
        env.push((k.to_owned(), v.to_owned()));
    }
    // The model proxy, with the step's key: the real key stays in treadle.
    env.push(("ANTHROPIC_BASE_URL".to_owned(), run.proxy.url().to_owned()));
    env.push(("ANTHROPIC_API_KEY".to_owned(), run.proxy.key().to_owned()));
    run.program
        .parent()
        .map(Path::to_path_buf)
        .into_iter()
        .collect()
}

/// Writes the `--mcp-config` (the bridge's URL and token, nothing else; no server without
/// a bridge) into the scratch home; returns its path.
pub fn write_config(home: &Path, bridge: Option<&Bridge>) -> Result<PathBuf, CliError> {
    let servers = match bridge {
        Some(bridge) => serde_json::json!({BRIDGE: {
            "type": "http",
            "url": bridge.url(),
            "headers": {"Authorization": format!("Bearer {}", bridge.token())},
        }}),
        None => serde_json::json!({}),
    };
    let config = serde_json::json!({ "mcpServers": servers });
    let path = home.join("treadle-mcp.json");
    write_private(&path, &config.to_string())?;
    Ok(path)
}
