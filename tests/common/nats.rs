//! A `nats-server -js` on a free loopback port for the scale-out tests, with its store in a
//! temp dir; stopped when dropped. Where Debian's `nats-server` is not installed the tests
//! that need it say they skip, unless `TREADLE_REQUIRE_NATS=1` (scripts/test) makes that a
//! failure.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running NATS server.
pub struct Nats {
    child: Option<Child>,
    pub port: u16,
    pub url: String,
    store: tempfile::TempDir,
    /// Extra arguments (a config file, cluster routes).
    args: Vec<String>,
}

fn binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("nats-server"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let debian = Path::new("/usr/sbin/nats-server");
        debian.is_file().then(|| debian.to_path_buf())
    })
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    l.local_addr().expect("its address").port()
}

impl Nats {
    /// Starts one, or says why `test` skips (`None`).
    pub fn start(test: &str) -> Option<Self> {
        let mut nats = Self::reserve(test)?;
        nats.up();
        Some(nats)
    }

    /// Starts one reading the nats-server config `conf` (authorization and the like; the
    /// port, address, store and JetStream come from the command line).
    pub fn with_config(test: &str, conf: &str) -> Option<Self> {
        let mut nats = Self::reserve(test)?;
        let file = nats.store.path().join("nats.conf");
        std::fs::write(&file, conf).expect("write nats.conf");
        nats.args = vec!["-c".to_owned(), file.display().to_string()];
        nats.up();
        Some(nats)
    }

    /// A port and store for one, not started yet (`up` starts it).
    pub fn reserve(test: &str) -> Option<Self> {
        let Some(_) = binary() else {
            assert!(
                std::env::var("TREADLE_REQUIRE_NATS").as_deref() != Ok("1"),
                "TREADLE_REQUIRE_NATS=1 but nats-server is not installed (apt-get install nats-server)"
            );
            eprintln!("SKIPPED {test}: nats-server is not installed (apt-get install nats-server)");
            return None;
        };
        let port = free_port();
        Some(Self {
            child: None,
            port,
            url: format!("nats://127.0.0.1:{port}"),
            store: tempfile::tempdir().expect("temp dir"),
            args: Vec::new(),
        })
    }

    /// Starts the server process (again, on the same port and store).
    pub fn up(&mut self) {
        let bin = binary().expect("nats-server");
        let child = Command::new(bin)
            .args(&self.args)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.store.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nats-server");
        self.child = Some(child);
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "nats-server never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server process (SIGKILL: an outage, not a shutdown).
    pub fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.down();
    }
}

/// A `treadle worker` process, killed when dropped; its stderr goes to `worker.log` in its
/// directory.
pub struct Worker {
    pub child: Child,
    log: PathBuf,
}

impl Worker {
    /// `treadle worker --nats URL --slots N` keeping its files in `dir`, with `env`.
    pub fn start(url: &str, slots: usize, dir: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_with(&["--nats", url, "--slots", &slots.to_string()], dir, env)
    }

    /// `treadle worker ARGS --dir DIR`, with `env`.
    pub fn start_with(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_treadle"));
        cmd.arg("worker")
            .args(args)
            .arg("--dir")
            .arg(dir)
            .current_dir(dir.parent().unwrap_or(dir))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        std::fs::create_dir_all(dir).expect("the worker's directory");
        let log = dir.join("worker.log");
        cmd.stderr(std::fs::File::create(&log).expect("the worker's log"));
        for var in ["OPENAI_API_KEY", "OPENROUTER_API_KEY", "TREADLE_LOCAL_URL"] {
            cmd.env_remove(var);
        }
        cmd.envs(env.iter().copied());
        Self {
            child: cmd.spawn().expect("spawn treadle worker"),
            log,
        }
    }

    /// What the worker wrote to stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends `signal` (`STOP`, `CONT`) to the worker.
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill");
        assert!(sent.success(), "kill -{signal} {}", self.pid());
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` for the worker to exit; its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            if started.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: the worker dies mid-step without a word (a stopped one too).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The lines of the file at `path` (none when it does not exist yet).
pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits up to `limit` for run `run` of the server to end; its view then.
pub async fn wait_status(
    s: &super::server::Server,
    run: u64,
    limit: Duration,
) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let (_, v) = super::server::get(s, &format!("/api/v1/runs/{run}")).await;
        if v["status"] != "running" && !v["status"].is_null() {
            return v;
        }
        assert!(started.elapsed() < limit, "run {run} never ended: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A scripted model that calls `tool` (no arguments), then says `done` once it has read
/// the result.
pub async fn calling(tool: &'static str, done: &'static str) -> treadle_scripted::ScriptedServer {
    use treadle_scripted::{Reply, Script, ScriptedServer, ToolCall};
    ScriptedServer::start(Script::from_fn(move |body| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        if messages.iter().any(|m| m["role"] == "tool") {
            Reply::text(done)
        } else {
            Reply::tool_calls([ToolCall::new(tool, serde_json::json!({}))])
        }
    }))
    .await
    .expect("scripted server")
}

/// Three `nats-server -js` processes on loopback joined by cluster routes (a JetStream
/// cluster of 3); each stops when dropped.
pub struct Cluster {
    pub nodes: Vec<Nats>,
    /// The client URLs of the three, comma-separated.
    pub url: String,
}

impl Cluster {
    /// Starts the three and waits until JetStream answers, or says why `test` skips.
    pub fn start(test: &str) -> Option<Self> {
        let mut nodes: Vec<Nats> = Vec::new();
        for _ in 0..3 {
            nodes.push(Nats::reserve(test)?);
        }
        let routes: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let all = routes
            .iter()
            .map(|p| format!("nats://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        for (i, node) in nodes.iter_mut().enumerate() {
            node.args = [
                "--server_name",
                &format!("n{i}"),
                "--cluster_name",
                "treadle",
                "--cluster",
                &format!("nats://127.0.0.1:{}", routes[i]),
                "--routes",
                &all,
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        }
        for node in &mut nodes {
            node.up();
        }
        let url = nodes
            .iter()
            .map(|n| n.url.clone())
            .collect::<Vec<_>>()
            .join(",");
        Some(Self { nodes, url })
    }

    /// Waits until the first node says the cluster has its three members (what a process
    /// connecting sees in `connect_urls`).
    pub async fn formed(&self) {
        let started = Instant::now();
        loop {
            if let Ok(c) = async_nats::connect(&self.nodes[0].url).await
                && c.server_info().connect_urls.len() >= 3
            {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the cluster never formed"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The node whose server is named `name` (`n0`, `n1`, `n2`).
    pub fn named(&mut self, name: &str) -> &mut Nats {
        let i: usize = name.trim_start_matches('n').parse().expect("a node name");
        &mut self.nodes[i]
    }
}

impl Nats {
    /// Empties the store (a node whose disk was lost); only while it is down.
    pub fn wipe(&mut self) {
        assert!(self.child.is_none(), "wipe a stopped node");
        for entry in std::fs::read_dir(self.store.path()).expect("the store") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path).expect("wipe");
            }
        }
    }
}

/// Follows the run's SSE stream from its start to `end`: the events as the web view gets them.
pub async fn follow(client: reqwest::Client, base: String, run: u64) -> Vec<String> {
    let r = client
        .get(format!("{base}/api/v1/runs/{run}/events"))
        .send()
        .await
        .expect("GET events");
    assert_eq!(r.status().as_u16(), 200);
    let mut parser = treadle::server::client::SseParser::default();
    let mut out = Vec::new();
    let mut body = r.bytes_stream();
    while let Some(chunk) = futures::StreamExt::next(&mut body).await {
        for e in parser.feed(&chunk.expect("chunk")) {
            if e.event == "end" {
                return out;
            }
            if e.id.is_some() {
                out.push(e.data);
            }
        }
    }
    panic!("the stream closed without `end`");
}
