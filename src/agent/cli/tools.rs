//! A step's grant said in a coding-agent CLI's terms: which granted built-ins become the
//! CLI's own native tools, and the names the bridge's tools have inside the CLI, read
//! back to treadle's names for the transcript and `assert: tool_calls:`.

/// The MCP server name the step's bridge has in the CLI's configuration.
pub const BRIDGE: &str = "treadle";

/// Granted built-in → the claude CLI's native tool. The CLI is best at the tools its
/// model was trained against, so these are not bridged. (`web_fetch` differs in
/// contract: the CLI's `WebFetch` answers with a summary, not the raw body.)
pub const CLAUDE_NATIVE: [(&str, &str); 7] = [
    ("read_file", "Read"),
    ("list_dir", "Glob"),
    ("run_shell", "Bash"),
    ("write_file", "Write"),
    ("edit_file", "Edit"),
    ("search_files", "Grep"),
    ("web_fetch", "WebFetch"),
];

/// Granted built-in → the codex CLI's native tool. codex has one tool of its own that
/// matters here, its shell (`exec_command`, with `write_stdin` for a running command, and
/// `apply_patch` run through it); its file reads and writes are shell commands. So only
/// `run_shell` is native, and every other granted built-in is bridged: the CLI reads and
/// writes with treadle's `read_file`, `write_file`... (`mcp__treadle__read_file`), which
/// keeps a step without `run_shell` from running anything.
pub const CODEX_NATIVE: [(&str, &str); 1] = [("run_shell", "exec_command")];

/// The name a bridged tool has inside the CLI (`mcp__treadle__verdict`).
pub fn bridged(name: &str) -> String {
    format!("mcp__{BRIDGE}__{name}")
}

/// treadle's name for a tool the claude CLI called: a native tool's built-in, a bridged tool's
/// own name; anything else (a tool of the CLI's that treadle never granted) as the CLI
/// named it.
pub fn treadle_name(cli: &str) -> String {
    if let Some((ours, _)) = CLAUDE_NATIVE.iter().find(|(_, theirs)| *theirs == cli) {
        return (*ours).to_owned();
    }
    cli.strip_prefix(&format!("mcp__{BRIDGE}__"))
        .unwrap_or(cli)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_go_there_and_back() {
        use super::super::driver::Cli;
        for (ours, theirs) in CLAUDE_NATIVE {
            assert_eq!(Cli::Claude.native(ours), Some(theirs));
            assert_eq!(treadle_name(theirs), ours);
        }
        assert_eq!(Cli::Claude.native("ask_human"), None);
        assert_eq!(Cli::Codex.native("run_shell"), Some("exec_command"));
        assert_eq!(Cli::Codex.native("read_file"), None);
        assert_eq!(treadle_name(&bridged("verdict")), "verdict");
        assert_eq!(treadle_name("Task"), "Task");
    }
}
