//! What the tests of CLI-backed agents (claude, codex) share: finding the CLI (skipped
//! visibly, or a failure when `TREADLE_REQUIRE_*` says it is required), running `treadle`
//! with the CLI and the scripted endpoint's key, and the scripted server.

use treadle_scripted::{Reply, Script, ScriptedServer};

use super::{Fixture, Run};

/// One coding-agent CLI as the tests run it.
pub struct CliUnderTest {
    /// Its name, for messages.
    pub name: &'static str,
    /// The variable naming its program (`scripts/test` sets it after installing the CLI).
    pub bin_env: &'static str,
    /// The variable that makes its absence a failure.
    pub require_env: &'static str,
    /// The variable holding the scripted endpoint's (meaningless) key.
    pub key_env: &'static str,
    /// Variables of the developer's own set-up that must not reach the CLI.
    pub unset: &'static [&'static str],
}

/// The claude CLI.
pub const CLAUDE: CliUnderTest = CliUnderTest {
    name: "claude",
    bin_env: "TREADLE_CLAUDE_BIN",
    require_env: "TREADLE_REQUIRE_CLAUDE",
    key_env: "CLI_TEST_KEY",
    unset: &["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"],
};

/// The codex CLI.
pub const CODEX: CliUnderTest = CliUnderTest {
    name: "codex",
    bin_env: "TREADLE_CODEX_BIN",
    require_env: "TREADLE_REQUIRE_CODEX",
    key_env: "CODEX_TEST_KEY",
    unset: &["OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_HOME"],
};

impl CliUnderTest {
    /// The CLI to run, or `None` (said on stderr) when it is not installed.
    pub fn find(&self, test: &str) -> Option<String> {
        match std::env::var(self.bin_env) {
            Ok(bin) if !bin.is_empty() => Some(bin),
            _ if std::env::var_os(self.require_env).is_some() => {
                panic!(
                    "{test}: {} is set but {} is not",
                    self.require_env, self.bin_env
                )
            }
            _ => {
                eprintln!(
                    "SKIP {test}: {} is not set (scripts/test installs the {} CLI and sets it)",
                    self.bin_env, self.name
                );
                None
            }
        }
    }

    /// `treadle ARGS` in the fixture with the CLI and the key, on a blocking thread so
    /// that the scripted server on the test's runtime keeps answering.
    pub async fn treadle(&self, f: &Fixture, bin: &str, args: &[&str]) -> Run {
        let (dir, bin) = (f.path().to_path_buf(), bin.to_owned());
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let (bin_env, key_env, unset) = (self.bin_env, self.key_env, self.unset);
        tokio::task::spawn_blocking(move || {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_treadle"));
            cmd.args(&args)
                .current_dir(dir)
                .env(bin_env, bin)
                .env(key_env, "scripted-key");
            for var in unset {
                cmd.env_remove(var);
            }
            Run(cmd.output().expect("run treadle"))
        })
        .await
        .expect("treadle's thread")
    }
}

/// The scripted server answering `replies` in order.
pub async fn scripted(replies: impl IntoIterator<Item = Reply>) -> ScriptedServer {
    ScriptedServer::start(Script::new(replies))
        .await
        .expect("scripted server")
}
