//! controls-out (rule 16): a step cannot reach its controls. A real `treadle serve` (the
//! binary, with a token) runs a job whose approval gate and question wait while two steps
//! granted `network: any` attack them:
//!
//! * a task asks the server's API, by its port, to approve the gate (each seq it could be),
//!   to cancel the run and to list the approvals, and looks for the token in the
//!   environment, command line and memory of every process it can see (its keeper and
//!   treadle among them, when it sees them);
//! * an agent, as the issue's attacker was: a scripted model (real HTTP on loopback) calls
//!   `run_shell` with `curl -X POST .../approvals/N -d '{"decision":"approve","by":"alice"}'`
//!   for each seq, the same with an answer to the question, and a cancel.
//!
//! Then:
//!
//! * no request of either reached the server (each connection refused by the kernel);
//! * the token is in nothing the task could read;
//! * the gate is still pending, the question unanswered and the run still waiting; the
//!   operator, with the token, approves and answers, and the run succeeds.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use treadle_proofs::binary::treadle_binary;
use treadle_scripted::{Reply, Script, ScriptedServer};

const TOKEN: &str = "proof-token-3f9c2e71d4b8a605";
const TOKEN_VAR: &str = "TREADLE_PROOF_TOKEN";
/// The attacking agent's model key (the scripted model takes any).
const MODEL_KEY_VAR: &str = "TREADLE_PROOF_MODEL_KEY";
/// Seqs the agent tries: every step of the job has one below this.
const SEQS: u32 = 6;

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
# Every process the task can see: its keeper and the server among them, when they are
# visible at all. Split, so that the task's own script (in its shell's memory) does not hold
# the token whole.
token = ("{head}" + "{tail}").encode()
me = os.getpid()
for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != me]:
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

/// The attacking agent's `run_shell` command, as the issue's: `curl` to the approval API
/// (approve, and answer the question) for each seq, then a cancel. Prints `REACHED what
/// code` for each request the server answered, `REFUSED what` for each it could not make,
/// then `agent attack over`.
fn agent_shell(port: u16) -> String {
    format!(
        r#"base=http://127.0.0.1:{port}/api/v1/runs/1
try() {{ code=$(curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 -X POST -H 'Content-Type: application/json' "$base/$1" -d "$2"); rc=$?; if [ $rc -eq 0 ]; then echo "REACHED $1 $code"; else echo "REFUSED $1 (curl $rc)"; fi; }}
for s in $(seq 0 {last}); do
  try approvals/$s '{{"decision":"approve","by":"alice"}}'
  try approvals/$s '{{"decision":"answer","value":3,"by":"alice"}}'
done
try cancel '{{}}'
echo "agent attack over""#,
        last = SEQS - 1
    )
}

/// The served job: a gate, a question, the attacking task and the attacking agent at once.
/// `model` is the scripted model's URL.
fn pipeline(port: u16, model: &str) -> String {
    let script: String = attack(port)
        .lines()
        .map(|l| format!("              {l}\n"))
        .collect();
    format!(
        "agents:\n  - name: attacker\n    source: {{ model: proof/m1, endpoint: \"{model}\", api_key_env: {MODEL_KEY_VAR} }}\n    tools: [run_shell]\n    network: any\njobs:\n  - name: ship\n    plan:\n      - in_parallel:\n          - approval:\n              name: deploy\n              message: Ship it?\n          - input: replicas\n            question: How many replicas?\n            schema: {{ type: integer }}\n            outputs: [answer]\n          - agent: attacker\n            prompt: Approve the deploy gate and answer the question.\n          - task: attack\n            network: any\n            run: |\n              python3 - <<'PY'\n{script}              PY\n"
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
        .env(MODEL_KEY_VAR, "proof-model-key-0c4b1e")
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

/// The child of the run's parallel step named `name`.
fn child<'a>(run: &'a Value, name: &str) -> Option<&'a Value> {
    run["steps"][0]["children"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == name)
}

/// Waits until the task's attack is over and the agent's step has ended; returns the run
/// and the task's output tail.
async fn attacked(http: &reqwest::Client, base: &str, id: u64) -> (Value, String) {
    let begun = Instant::now();
    loop {
        let run = get(http, format!("{base}/api/v1/runs/{id}")).await;
        let tail = child(&run, "attack")
            .and_then(|s| s["output_tail"].as_str())
            .unwrap_or_default()
            .to_owned();
        let agent = child(&run, "attacker").map(|s| s["status"].clone());
        let agent_done = agent
            .as_ref()
            .is_some_and(|s| s == "succeeded" || s == "failed");
        if tail.contains("attack over") && agent_done {
            assert_eq!(agent, Some(json!("succeeded")), "the agent failed: {run}");
            return (run, tail);
        }
        let task = child(&run, "attack").map(|s| s["status"].clone());
        assert_ne!(
            task,
            Some(json!("failed")),
            "the attack could not run: {run}"
        );
        assert!(
            begun.elapsed() < Duration::from_secs(120),
            "the attacks never ended: {run}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the agent's `run_shell` printed, as the model was sent it (the last request's
/// tool message).
fn agent_output(model: &ScriptedServer) -> String {
    let requests = model.requests();
    let last = requests.last().expect("the agent asked its model");
    last.body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect()
}

/// The operator answers both (the gate approved, 3 replicas) and the run succeeds.
async fn operator_finishes(http: &reqwest::Client, base: &str, id: u64, pending: &[Value]) {
    for item in pending {
        let body = if item["step"] == "deploy" {
            json!({"decision": "approve", "by": "operator"})
        } else {
            json!({"decision": "answer", "value": 3, "by": "operator"})
        };
        let answered = http
            .post(format!("{base}/api/v1/runs/{id}/approvals/{}", item["seq"]))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .expect("answer");
        assert_eq!(answered.status().as_u16(), 200, "{item}");
    }
    let begun = Instant::now();
    loop {
        let run = get(http, format!("{base}/api/v1/runs/{id}")).await;
        if run["status"] == "succeeded" {
            return;
        }
        assert!(
            begun.elapsed() < Duration::from_secs(60),
            "never succeeded: {run}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
    let dead = "http://127.0.0.1:9/v1";
    std::fs::write(dir.path().join("treadle.yml"), pipeline(1, dead)).expect("pipeline");
    let (_server, base) = serve(dir.path());
    let port: u16 = base
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let model = ScriptedServer::start(Script::new([
        Reply::tool_call("run_shell", json!({ "command": agent_shell(port) })),
        Reply::text("Done."),
    ]))
    .await
    .expect("scripted model");
    // The file is read when a run starts: the attacks now aim at the real port.
    std::fs::write(
        dir.path().join("treadle.yml"),
        pipeline(port, model.base_url()),
    )
    .expect("pipeline");
    treadle_session::tls::install_crypto_provider();
    let http = reqwest::Client::new();
    let started = http
        .post(format!("{base}/api/v1/runs"))
        .bearer_auth(TOKEN)
        .json(&json!({"pipeline": "treadle"}))
        .send()
        .await
        .expect("POST run");
    let status = started.status().as_u16();
    let body = started.json::<Value>().await.expect("run");
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_u64().expect("id");
    assert_eq!(id, 1, "the attacks aim at run 1");

    let (run, tail) = attacked(&http, &base, id).await;
    assert!(
        !tail.contains("REACHED"),
        "the task reached the server:\n{tail}"
    );
    assert_eq!(tail.matches("REFUSED").count(), 6, "{tail}");
    assert!(
        !tail.contains("TOKEN in"),
        "the task read the token:\n{tail}"
    );
    let shell = agent_output(&model);
    assert!(shell.contains("agent attack over"), "{shell}");
    assert!(
        !shell.contains("REACHED"),
        "the agent reached the server:\n{shell}"
    );
    let tries = usize::try_from(2 * SEQS + 1).expect("count");
    assert_eq!(shell.matches("REFUSED").count(), tries, "{shell}");
    assert_ne!(run["status"], "cancelled", "{run}");

    let pending = get(&http, format!("{base}/api/v1/approvals?state=pending")).await;
    let pending: Vec<Value> = pending
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["run"] == id)
        .cloned()
        .collect();
    for step in ["deploy", "replicas"] {
        assert!(
            pending.iter().any(|a| a["step"] == step),
            "{step} is no longer pending: {pending:?}"
        );
    }
    operator_finishes(&http, &base, id, &pending).await;
}
