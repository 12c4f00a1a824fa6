//! Helpers shared by the command-line tests: run the `treadle` binary on a temp dir.

#![allow(dead_code)]

pub mod cli;
pub mod mcp;
pub mod nats;
pub mod server;
pub mod watch;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// An HTTP client for the tests. reqwest has no TLS provider of its own in this workspace
/// (see pkg-session/src/tls.rs), so the provider is installed before the client is built.
pub fn http() -> reqwest::Client {
    treadle_session::tls::install_crypto_provider();
    reqwest::Client::new()
}

/// A pipeline in a fresh temp dir.
pub struct Fixture {
    pub dir: tempfile::TempDir,
}

impl Fixture {
    /// Writes `treadle.yml` with this content.
    pub fn new(yaml: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("treadle.yml"), yaml).expect("write pipeline");
        Self { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn file(&self) -> PathBuf {
        self.dir.path().join("treadle.yml")
    }

    /// Runs `treadle ARGS` in the dir (no agent keys in the environment).
    pub fn treadle(&self, args: &[&str]) -> Run {
        self.treadle_env(args, &[])
    }

    /// Runs `treadle ARGS` with extra environment variables.
    pub fn treadle_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_treadle"));
        cmd.args(args).current_dir(self.path());
        for var in ["OPENAI_API_KEY", "OPENROUTER_API_KEY", "TREADLE_LOCAL_URL"] {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        Run(cmd.output().expect("run treadle"))
    }
}

impl Fixture {
    /// Runs `treadle run` with agent steps sent to `url` (a scripted server), on a
    /// blocking thread so that a server on this test's runtime keeps answering meanwhile.
    pub async fn run_at(self, url: &str) -> (Self, Run) {
        let url = url.to_owned();
        tokio::task::spawn_blocking(move || {
            let run = self.treadle_env(&["run"], &[("TREADLE_LOCAL_URL", &url)]);
            (self, run)
        })
        .await
        .expect("the treadle run's thread")
    }
}

/// Starts `treadle run` in the background: stdin is not a terminal, a headless run.
pub fn spawn_run(f: &Fixture, env: &[(&str, &str)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(f.path())
        .env_remove("TREADLE_LOCAL_URL")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn treadle run")
}

/// Waits until `treadle approvals` lists a waiting step named `name`.
pub fn wait_until_asked(f: &Fixture, name: &str) {
    let start = Instant::now();
    loop {
        let list = f.treadle(&["approvals"]);
        if list.stdout().contains(name) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never asked: {}{}",
            list.stdout(),
            list.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A model base URL on a loopback port nothing listens on.
pub fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}

/// The text of `examples/NAME`.
pub fn example(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(name),
    )
    .expect("example")
}

/// What the binary did.
pub struct Run(pub Output);

impl Run {
    pub fn code(&self) -> i32 {
        self.0.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.0.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.0.stderr).into_owned()
    }
    /// Panics with both streams unless the exit code is `code`.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code(),
            code,
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout(),
            self.stderr()
        );
        self
    }
}

/// Runs git in `dir` with a fixed identity and returns its trimmed stdout; fails the test
/// when git fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A bare repository (the remote) with one commit on `main`, and a work clone of it.
pub fn git_remote(root: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let bare = root.join("remote.git");
    let work = root.join("work");
    std::fs::create_dir_all(&bare).unwrap();
    git(
        &bare,
        &["init", "--quiet", "--bare", "--initial-branch=main"],
    );
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "--quiet", "--initial-branch=main"]);
    std::fs::write(work.join("words.txt"), "alpha\n").unwrap();
    git(&work, &["add", "."]);
    git(&work, &["commit", "--quiet", "-m", "first"]);
    git(&work, &["push", "--quiet", bare.to_str().unwrap(), "main"]);
    (bare, work)
}
