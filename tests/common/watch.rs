//! Helpers of the `treadle watch` tests: a git repository to commit to, files counted by
//! line, waiting with the watcher's output on failure, and a running watcher.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Fixture;

pub fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// A repository at `dir` with `version.txt` = `v` on `main`.
pub fn init_repo(dir: &Path, v: &str) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    commit(dir, v);
}

pub fn commit(dir: &Path, v: &str) {
    std::fs::write(dir.join("version.txt"), format!("{v}\n")).unwrap();
    git(dir, &["add", "version.txt"]);
    git(dir, &["commit", "-q", "-m", v]);
}

/// The lines of `file` (none when it is not there).
pub fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits until `ok()`, failing with `what` (and the watcher's output) after `limit`.
pub fn wait_for(what: &str, limit: Duration, log: &Path, ok: impl Fn() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < limit,
            "timed out waiting for {what}; watcher said:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A running `treadle watch`, its stderr in a file.
pub struct Watcher {
    pub child: Child,
    pub log: PathBuf,
}

impl Watcher {
    pub fn start(f: &Fixture, args: &[&str], env: &[(&str, &str)], log_name: &str) -> Self {
        let log = f.path().join(log_name);
        let err = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_treadle"))
            .arg("watch")
            .args(args)
            .current_dir(f.path())
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .expect("start treadle watch");
        Self { child, log }
    }

    pub fn said(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&mut self, sig: &str) {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(ok.success());
    }

    /// Waits for the process to end; its exit code (or the signal that killed it).
    pub fn wait(&mut self, limit: Duration) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                start.elapsed() < limit,
                "the watcher did not stop; it said:\n{}",
                self.said()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn pipeline(counts: &Path) -> String {
    let c = counts.display();
    format!(
        r#"
resources:
  - name: repo
    type: git
    source: {{ uri: ./repo, branch: main }}
jobs:
  - name: build
    plan:
      - get: repo
        trigger: true
      - task: compile
        inputs: [repo]
        confined: false
        run: |
          v=$(cat repo/version.txt)
          touch "{c}/started-$v"
          case "$v" in *slow*) sleep 3 ;; esac
          echo "$v" >> "{c}/built"
  - name: deploy
    plan:
      - get: repo
        trigger: true
        passed: [build]
      - task: ship
        inputs: [repo]
        confined: false
        run: echo "$(cat repo/version.txt)" >> "{c}/deployed"
"#
    )
}

/// The address `treadle watch --addr 127.0.0.1:0` bound, from what it said.
pub fn hook_url(w: &Watcher) -> String {
    let start = Instant::now();
    loop {
        let text = w.said();
        if let Some(line) = text.lines().find(|l| l.contains("webhooks on http://")) {
            let url = line.split("webhooks on ").nth(1).unwrap();
            return url.trim_end_matches("/hooks/check/RESOURCE").to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no address:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn post(url: &str, token: Option<&str>) -> u16 {
    let mut args = vec!["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST"];
    let header;
    if let Some(t) = token {
        header = format!("Authorization: Bearer {t}");
        args.extend(["-H", &header]);
    }
    args.push(url);
    let out = Command::new("curl").args(&args).output().expect("curl");
    String::from_utf8_lossy(&out.stdout).parse().unwrap_or(0)
}
