//! Every ```yaml block in docs/*.md and README.md is a complete pipeline: each one is run
//! (`treadle run`, or `treadle test` for a file of several jobs) and must exit 0. Agent
//! steps talk to a scripted server (through `TREADLE_LOCAL_URL`) that plays a simple,
//! obedient agent, and a git resource at `./repo` finds a repository there with one
//! commit, so the docs themselves stay free of test setup.

use crate::common;

use std::path::{Path, PathBuf};

use common::Fixture;
use serde_json::{Value, json};
use treadle_scripted::{Reply, Script, ScriptedServer};

/// `(file, line, yaml)` for every yaml block.
pub(crate) fn yaml_blocks() -> Vec<(PathBuf, usize, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files.push(root.join("README.md"));
    let mut blocks = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let mut current: Option<(usize, String)> = None;
        for (n, line) in text.lines().enumerate() {
            match &mut current {
                // ```yaml cli / codex: a CLI-backed agent's example, run with the real
                // CLI by tests/cli_agents.rs / tests/codex_agents.rs; ```yaml escalation:
                // an approval people answer, run by tests/approval_policy.rs; ```yaml
                // http: requests to a server, run by tests/http_step.rs.
                None if line.trim_start().starts_with("```yaml")
                    && ![
                        "```yaml cli",
                        "```yaml codex",
                        "```yaml escalation",
                        "```yaml http",
                    ]
                    .contains(&line.trim()) =>
                {
                    current = Some((n + 1, String::new()))
                }
                Some((start, body)) if line.trim_start().starts_with("```") => {
                    blocks.push((file.clone(), *start, std::mem::take(body)));
                    current = None;
                }
                Some((_, body)) => {
                    body.push_str(line);
                    body.push('\n');
                }
                None => {}
            }
        }
    }
    blocks
}

/// The scripted agent: reads each file its prompt asks for (`read_file with path "P"`),
/// writes a file to every `dir/name.ext` path its prompt names after "to" or "into" or
/// as `write_file with path "P"` (when it may write), picks the first verdict (when
/// asked), then answers.
pub(crate) fn obedient_agent(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let prompt = messages
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_owned();
    let tools: Vec<Value> = body["tools"].as_array().cloned().unwrap_or_default();
    let has = |name: &str| tools.iter().any(|t| t["function"]["name"] == name);
    let mut actions = Vec::new();
    for (tool, path) in quoted_paths(&prompt) {
        if has(tool) && tool == "read_file" {
            actions.push(Reply::tool_call(tool, json!({ "path": path })));
        } else if has(tool) {
            actions.push(Reply::tool_call(
                tool,
                json!({"path": path, "content": "written by the scripted agent\n"}),
            ));
        }
    }
    if has("write_file") {
        let words: Vec<&str> = prompt.split_whitespace().collect();
        for pair in words.windows(2) {
            let path = pair[1].trim_matches(|c: char| !(c.is_alphanumeric() || "/._-".contains(c)));
            if matches!(pair[0], "to" | "into") && path.contains('/') && path.contains('.') {
                actions.push(Reply::tool_call(
                    "write_file",
                    json!({"path": path, "content": "written by the scripted agent\n"}),
                ));
            }
        }
    }
    if let Some(verdict) = tools.iter().find(|t| t["function"]["name"] == "verdict") {
        let first = verdict["function"]["parameters"]["properties"]["choice"]["enum"][0].clone();
        let mut arguments = json!({"verdict": first, "reason": "scripted"});
        // `min_confidence:` asks for a confidence; a sure agent escalates nothing.
        if verdict["function"]["parameters"]["properties"]["confidence"].is_object() {
            arguments["confidence"] = json!(0.9);
        }
        actions.push(Reply::tool_call("verdict", arguments));
    }
    let done = messages.iter().filter(|m| m["role"] == "tool").count();
    actions.into_iter().nth(done).unwrap_or_else(|| {
        // `output_schema:` puts the schema in the prompt; the docs' schemas ask for this.
        if prompt.contains("JSON Schema") {
            Reply::text(r#"{"summary": "done"}"#).usage(10, 2)
        } else {
            Reply::text("done").usage(10, 2)
        }
    })
}

/// `(tool, path)` for each `read_file with path "P"` or `write_file with path "P"`.
fn quoted_paths(prompt: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for tool in ["read_file", "write_file"] {
        let marker = format!("{tool} with path \"");
        for (at, _) in prompt.match_indices(&marker) {
            let rest = &prompt[at + marker.len()..];
            if let Some(end) = rest.find('"') {
                out.push((tool, rest[..end].to_owned()));
            }
        }
    }
    out
}

/// A git repository at `dir` with one commit on `main`.
pub(crate) fn git_repo(dir: &Path) {
    std::fs::create_dir_all(dir).expect("repo dir");
    std::fs::write(dir.join("README"), "a repository for the docs\n").expect("README");
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "README"],
        &[
            "-c",
            "user.name=docs",
            "-c",
            "user.email=docs@example.com",
            "commit",
            "-q",
            "-m",
            "first",
        ],
    ] {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "git {args:?} in {}", dir.display());
    }
}

/// How many jobs the fixture's pipeline has (0 when it does not load: `run` says why).
pub(crate) fn jobs_in(f: &Fixture) -> usize {
    job_names(f).len()
}

/// The names of the fixture's jobs, in file order (none when it does not load).
pub(crate) fn job_names(f: &Fixture) -> Vec<String> {
    let scope = treadle::pipeline::CheckScope {
        job: None,
        env: &|k| std::env::var(k).ok(),
        machine: false,
    };
    treadle::pipeline::load(&f.file(), &scope)
        .map(|l| {
            l.pipeline
                .jobs
                .iter()
                .map(|j| j.name.value.clone())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_yaml_block_in_the_docs_runs() {
    let blocks = yaml_blocks();
    assert!(
        blocks.len() >= 5,
        "expected the docs to hold pipelines, found {}",
        blocks.len()
    );
    let server = ScriptedServer::start(Script::from_fn(obedient_agent))
        .await
        .expect("server");
    let url = server.base_url().to_string();
    let failures = tokio::task::spawn_blocking(move || {
        let mut failures = Vec::new();
        for (file, line, yaml) in blocks {
            let f = Fixture::new(&yaml);
            if yaml.contains("uri: ./repo") {
                git_repo(&f.path().join("repo"));
            }
            let command = if jobs_in(&f) > 1 { "test" } else { "run" };
            let run = f.treadle_env(&[command], &[("TREADLE_LOCAL_URL", &url)]);
            if run.code() != 0 {
                failures.push(format!(
                    "{}:{line}: exit {}\n{}{}",
                    file.display(),
                    run.code(),
                    run.stdout(),
                    run.stderr()
                ));
            }
        }
        failures
    })
    .await
    .unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n----\n"));
}
