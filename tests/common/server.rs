//! A `treadle serve` process for the server tests: started on a free loopback port in a
//! fixture's directory, found through its discovery file, stopped (SIGTERM) when dropped.
//! A server always has a token: the one it made is read from its token file, and
//! [`Server::http`] sends it (a test that gives `--token-env` sends its own).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server.
pub struct Server {
    pub child: Child,
    pub base: String,
    pub dir: PathBuf,
    /// The token the server made (`.treadle/server.token`); `None` when the test
    /// configured one (`--token-env`, `--user-token`).
    pub token: Option<String>,
}

impl Server {
    /// `treadle serve ARGS --addr ADDR` in `dir`, with extra environment; waits until its
    /// discovery file names it.
    pub fn start_at(dir: &Path, args: &[&str], addr: &str, env: &[(&str, &str)]) -> Self {
        Self::launch(dir, args, addr, env, Stdio::piped())
    }

    /// `treadle serve ARGS` on a free loopback port, its stderr written to the file `log`
    /// (read while it runs; [`Server::stop`] then gives no stderr).
    pub fn start_logged(dir: &Path, args: &[&str], env: &[(&str, &str)], log: &Path) -> Self {
        let file = std::fs::File::create(log).expect("the server's log");
        Self::launch(dir, args, "127.0.0.1:0", env, Stdio::from(file))
    }

    fn launch(dir: &Path, args: &[&str], addr: &str, env: &[(&str, &str)], stderr: Stdio) -> Self {
        // Beside the served files: in a served directory, or the first file's.
        let served = args.first().map(|a| dir.join(a));
        let home = match served {
            Some(p) if p.is_dir() => p,
            Some(p) if p.is_file() => p.parent().map_or(dir.to_path_buf(), Path::to_path_buf),
            _ => dir.to_path_buf(),
        };
        let discovery = home.join(".treadle").join("server.json");
        let _ = std::fs::remove_file(&discovery);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_treadle"));
        cmd.arg("serve")
            .args(args)
            .args(["--addr", addr])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        for var in ["OPENAI_API_KEY", "OPENROUTER_API_KEY", "TREADLE_LOCAL_URL"] {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().expect("spawn treadle serve");
        let started = Instant::now();
        loop {
            if let Ok(text) = std::fs::read_to_string(&discovery)
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
                && v["pid"].as_u64() == Some(u64::from(child.id()))
            {
                let addr = v["addr"]
                    .as_str()
                    .expect("addr")
                    .replace("0.0.0.0", "127.0.0.1");
                let token = std::fs::read_to_string(discovery.with_file_name("server.token"))
                    .ok()
                    .map(|t| t.trim().to_owned());
                return Self {
                    child,
                    base: format!("http://{addr}"),
                    dir: dir.to_path_buf(),
                    token,
                };
            }
            if let Ok(Some(status)) = child.try_wait() {
                let out = child.wait_with_output().expect("output");
                panic!(
                    "treadle serve exited ({status}):\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "serve never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `treadle serve ARGS` on a free loopback port.
    pub fn start(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_at(dir, args, "127.0.0.1:0", env)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The page's address as the server prints it: with `?token=` when it made its token
    /// (the server sets the page's cookie and redirects to `path`).
    pub fn page(&self, path: &str) -> String {
        let Some(t) = &self.token else {
            return self.url(path);
        };
        let (path, fragment) = path
            .split_once('#')
            .map_or((path, String::new()), |(p, f)| (p, format!("#{f}")));
        let joint = if path.contains('?') { '&' } else { '?' };
        format!("{}{path}{joint}token={t}{fragment}", self.base)
    }

    /// An HTTP client that sends the server's made token (if any) with every request.
    pub fn http(&self) -> reqwest::Client {
        treadle_session::tls::install_crypto_provider();
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(t) = &self.token {
            headers.insert(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {t}").parse().expect("a header value"),
            );
        }
        reqwest::Client::builder()
            .default_headers(headers)
            .build()
            .expect("client")
    }

    /// Stops it with SIGTERM and returns its output.
    pub fn stop(mut self) -> std::process::Output {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let child = std::mem::replace(&mut self.child, Command::new("true").spawn().expect("true"));
        child.wait_with_output().expect("serve output")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits until `check` holds, polling.
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < Duration::from_secs(30), "never: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// GET `path` on the server: the status and the JSON body (`Null` when it is not JSON).
pub async fn get(s: &Server, path: &str) -> (u16, serde_json::Value) {
    let r = s.http().get(s.url(path)).send().await.expect("GET");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

/// POST a JSON `body` to `path` on the server: the status and the JSON body.
pub async fn post(s: &Server, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let r = s
        .http()
        .post(s.url(path))
        .json(&body)
        .send()
        .await
        .expect("POST");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}
