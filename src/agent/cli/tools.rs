//! A step's grant said in a coding-agent CLI's terms: which granted built-ins become the
//! CLI's own native tools (`--tools`), and the names the bridge's tools have inside the
//! CLI, read back to treadle's names for the transcript and `assert: tool_calls:`.

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

/// The claude CLI's tool for a granted built-in, when it has one.
pub fn native(granted: &str) -> Option<&'static str> {
    CLAUDE_NATIVE
        .iter()
        .find(|(ours, _)| *ours == granted)
        .map(|(_, theirs)| *theirs)
}

/// The name a bridged tool has inside the CLI (`mcp__treadle__verdict`).
pub fn bridged(name: &str) -> String {
    format!("mcp__{BRIDGE}__{name}")
}

/// treadle's name for a tool the CLI called: a native tool's built-in, a bridged tool's
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
        for (ours, theirs) in CLAUDE_NATIVE {
            assert_eq!(native(ours), Some(theirs));
            assert_eq!(treadle_name(theirs), ours);
        }
        assert_eq!(native("ask_human"), None);
        assert_eq!(treadle_name(&bridged("verdict")), "verdict");
        assert_eq!(treadle_name("Task"), "Task");
    }
}
