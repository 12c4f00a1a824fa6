//! A run's command: each CLI's own arguments (`claude`, `codex`) with what every run has
//! (a scratch `HOME`, the CLI's directories first on `PATH`, the step's environment).

use super::command::Run;
use super::driver::Cli;

impl Run<'_> {
    /// The command, with its arguments and environment, not yet started.
    pub fn command(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(self.program);
        let mut env: Vec<(String, String)> = self.step.env.clone();
        env.push(("HOME".to_owned(), self.home.display().to_string()));
        let path_dirs = match self.cli {
            Cli::Claude => super::claude::command(self, &mut cmd, &mut env),
            Cli::Codex => super::codex::command(self, &mut cmd, &mut env),
        };
        // The CLI's own directories first on `PATH`, so that its own helpers (codex's
        // `rg`) are found; a confined CLI may read its install (`confine::cli`).
        let system_path = crate::environ::var("PATH").unwrap_or_default();
        let mut path: Vec<String> = path_dirs
            .iter()
            .filter(|d| d.is_absolute())
            .map(|d| d.display().to_string())
            .collect();
        path.push(system_path);
        env.push(("PATH".to_owned(), path.join(":")));
        crate::environ::set_command_env(
            &mut cmd,
            &self.step.pass_env,
            env.iter().map(|(k, v)| (k, v)),
        );
        cmd.current_dir(&self.step.dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        cmd
    }
}
