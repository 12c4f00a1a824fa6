//! controls-out (rule 16): a step cannot reach its controls. A real `treadle serve` (the
//! binary, with a token) runs a job whose approval gate waits while a task granted
//! `network: any` attacks it: it asks the server's API, by its port, to approve the gate
//! (each seq it could be), to cancel the run and to list the approvals, and it looks for the
//! token in the environment, command line and memory of its keeper and of treadle. Then:
//!
//! * no request of the task reached the server (each connection refused by the kernel);
//! * the token is in nothing the task could read;
//! * the gate is still pending and the run still waiting on it; the operator, with the
//!   token, approves it and the run succeeds.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use treadle_proofs::binary::treadle_binary;

const TOKEN: &str = "proof-token-3f9c2e71d4b8a605";
const TOKEN_VAR: &str = "TREADLE_PROOF_TOKEN";

/// The attacking task's script: prints `REACHED what` for every request the server
/// answered, `REFUSED what` for every one it could not make, `TOKEN in PATH` where it read
/// the token, then `attack over`.
fn attack(port: u16) -> String {
    let (head, tail) = TOKEN.split_at(TOKEN.len() / 2);
    format!(
        r#"import os, urllib.request
base = "http://127.0.0.1:{port}/api/v1"
asks = [("approve %d" % s, "/runs/1/approvals/%d" % s, {{"decision": "approve", "by": "task"}}) for s in range(4)]
asks += [("cancel", "/runs/1/cancel", {{}}), ("list", "/approvals?state=pending", None)]
for what, path, body in asks:
    data = None if body is None else __import__("json").dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={{"Content-Type": "application/json"}})
    try:
        urllib.request.urlopen(req, timeout=5)
        print("REACHED", what)
    except urllib.error.HTTPError as e:
        print("REACHED", what, e.code)
    except OSError as e:
        print("REFUSED", what, e)
def parent(pid):
    return [l.split()[1] for l in open("/proc/%s/status" % pid) if l.startswith("PPid:")][0]
# python's parent is the task's shell; the shell's, its keeper; the keeper's, the server.
keeper = parent(os.getppid())
server = parent(keeper)
# Split, so that the task's own script (in its shell's memory) does not hold it whole.
token = ("{head}" + "{tail}").encode()
for pid in (str(keeper), server):
    for name in ("environ", "cmdline", "mem"):
        try:
            with open("/proc/%s/%s" % (pid, name), "rb") as f:
                if name == "mem":
                    for line in open("/proc/%s/maps" % pid):
                        lo, hi = [int(x, 16) for x in line.split()[0].split("-")]
                        if "rw" not in line.split()[1] or hi - lo > 1 << 28:
                            continue
                        try:
                            f.seek(lo); chunk = f.read(hi - lo)
                        except OSError:
                            continue
                        if token in chunk:
                            print("TOKEN in", pid, name)
                elif token in f.read():
                    print("TOKEN in", pid, name)
        except OSError:
            pass
print("attack over")
"#
    )
}

fn pipeline(port: u16) -> String {
    let script: String = attack(port)
        .lines()
        .map(|l| format!("              {l}\n"))
        .collect();
    format!(
        "jobs:\n  - name: ship\n    plan:\n      - in_parallel:\n          - approval:\n              name: deploy\n              message: Ship it?\n          - task: attack\n            network: any\n            run: |\n              python3 - <<'PY'\n{script}              PY\n"
    )
}

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `treadle serve` in `project` with the token; returns it and its base URL.
fn serve(project: &Path) -> (Serve, String) {
    let discovery = project.join(".treadle").join("server.json");
    let child = Command::new(treadle_binary())
        .args([
            "serve",
            "treadle.yml",
            "--addr",
            "127.0.0.1:0",
            "--token-env",
            TOKEN_VAR,
        ])
        .current_dir(project)
        .env(TOKEN_VAR, TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn treadle serve");
    let mut child = Serve(child);
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(&discovery)
            && let Ok(v) = serde_json::from_str::<Value>(&text)
            && v["pid"].as_u64() == Some(u64::from(child.0.id()))
            && let Some(addr) = v["addr"].as_str()
        {
            return (child, format!("http://{addr}"));
        }
        assert!(
            child.0.try_wait().expect("try_wait").is_none(),
            "serve exited"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "serve never came up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn get(http: &reqwest::Client, url: String) -> Value {
    let r = http.get(url).bearer_auth(TOKEN).send().await.expect("GET");
    r.json().await.unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_cannot_reach_its_controls() {
    if treadle::confine::network::tcp_rules() {
        eprintln!("Landlock TCP rules: yes");
    } else {
        eprintln!("SKIP: this kernel has no Landlock TCP rules");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("treadle.yml"), pipeline(1)).expect("pipeline");
    let (_server, base) = serve(dir.path());
    let port: u16 = base
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    // The file is read when a run starts: the attack now aims at the real port.
    std::fs::write(dir.path().join("treadle.yml"), pipeline(port)).expect("pipeline");
    treadle_session::tls::install_crypto_provider();
    let http = reqwest::Client::new();
    let started = http
        .post(format!("{base}/api/v1/runs"))
        .bearer_auth(TOKEN)
        .json(&json!({"pipeline": "treadle"}))
        .send()
        .await
        .expect("POST run");
    assert_eq!(started.status().as_u16(), 201);
    let id = started.json::<Value>().await.expect("run")["id"]
        .as_u64()
        .expect("id");

    let begun = Instant::now();
    let (run, tail) = loop {
        let run = get(&http, format!("{base}/api/v1/runs/{id}")).await;
        let attack = run["steps"][0]["children"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| {
                s["name"] == "attack"
                    && s["output_tail"]
                        .as_str()
                        .is_some_and(|t| t.contains("attack over"))
            });
        if let Some(step) = attack {
            break (
                run.clone(),
                step["output_tail"].as_str().unwrap_or_default().to_owned(),
            );
        }
        let failed = run["steps"][0]["children"][1]["status"] == "failed";
        assert!(!failed, "the attack could not run: {run}");
        assert!(
            begun.elapsed() < Duration::from_secs(120),
            "the attack never ended: {run}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        !tail.contains("REACHED"),
        "the task reached the server:\n{tail}"
    );
    assert_eq!(tail.matches("REFUSED").count(), 6, "{tail}");
    assert!(
        !tail.contains("TOKEN in"),
        "the task read the token:\n{tail}"
    );
    assert_ne!(run["status"], "cancelled", "{run}");

    let pending = get(&http, format!("{base}/api/v1/approvals?state=pending")).await;
    let gate = pending
        .as_array()
        .and_then(|l| l.iter().find(|a| a["step"] == "deploy"))
        .unwrap_or_else(|| panic!("the gate is no longer pending: {pending}"))
        .clone();
    let approved = http
        .post(format!("{base}/api/v1/runs/{id}/approvals/{}", gate["seq"]))
        .bearer_auth(TOKEN)
        .json(&json!({"decision": "approve", "by": "operator"}))
        .send()
        .await
        .expect("approve");
    assert_eq!(approved.status().as_u16(), 200);
    let begun = Instant::now();
    loop {
        let run = get(&http, format!("{base}/api/v1/runs/{id}")).await;
        if run["status"] == "succeeded" {
            break;
        }
        assert!(
            begun.elapsed() < Duration::from_secs(60),
            "never succeeded: {run}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
