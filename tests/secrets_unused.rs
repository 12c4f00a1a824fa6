//! Every agent's key is a secret for every job: the keys of agents a job does not use (an
//! unused entry, another job's agent, a `fallback:` source, a sub-agent, an MCP server's
//! bearer token) reach none of its tasks through `pass_env:` or `env: [NAME]`, and their
//! values are in no line of the transcript and no byte of `.treadle/` or a `--record` tape.

use crate::common;

use std::path::{Path, PathBuf};

use common::Fixture;

const PIPELINE: &str = r#"
agents:
  - name: unused
    source: { model: openai/gpt-4o-mini, api_key_env: UNUSED_KEY }
    fallback:
      - source: { endpoint: "http://127.0.0.1:9/v1", model: m, api_key_env: FALLBACK_KEY }
  - name: reviewer
    source: { endpoint: "http://127.0.0.1:9/v1", model: m, api_key_env: REVIEW_KEY }
    tools: [read_file, { agent: helper }]
    mcp_servers:
      - name: docs
        endpoint: "http://127.0.0.1:9/mcp"
        bearer_env: BEARER_KEY
  - name: helper
    description: helps
    source: { endpoint: "http://127.0.0.1:9/v1", model: m, api_key_env: HELPER_KEY }
jobs:
  - name: build
    plan:
      - task: by-pass-env
        pass_env: [UNUSED_KEY, FALLBACK_KEY, REVIEW_KEY, HELPER_KEY, BEARER_KEY, PLAIN]
        run: |
          for v in UNUSED_KEY FALLBACK_KEY REVIEW_KEY HELPER_KEY BEARER_KEY; do
            [ -n "$(printenv $v)" ] && echo "got $v"
          done
          echo "plain=$PLAIN"
      - task: by-env-names
        env: [UNUSED_KEY, HELPER_KEY, LEAK]
        run: |
          [ -n "$UNUSED_KEY$HELPER_KEY" ] && echo "got a key by env"
          echo "leak=$LEAK"
  - name: review
    plan:
      - agent: reviewer
        prompt: review
"#;

const KEYS: [(&str, &str); 5] = [
    ("UNUSED_KEY", "sk-unused-Hq7vM2pLx9"),
    ("FALLBACK_KEY", "sk-fallback-Rt4nB8wQz1"),
    ("REVIEW_KEY", "sk-review-Jk3sD6fGh0"),
    ("HELPER_KEY", "sk-helper-Pw5eY1uIo7"),
    ("BEARER_KEY", "tok-bearer-Zx2cV4bNm8"),
];

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn a_job_using_no_agent_gets_no_agents_key_and_shows_none() {
    let f = Fixture::new(PIPELINE);
    let mut env: Vec<(&str, &str)> = KEYS.to_vec();
    env.push(("PLAIN", "not-a-secret-value"));
    // A task may print a key's value it got some other way: the transcript masks it.
    env.push(("LEAK", KEYS[0].1));
    let run = f.treadle_env(&["run", "--job", "build", "--record", "tape"], &env);
    let (out, err) = (run.stdout(), run.stderr());
    run.expect_code(0);
    assert!(!out.contains("got "), "a key reached a task:\n{out}");
    assert!(out.contains("plain=not-a-secret-value"), "{out}");
    assert!(out.contains("leak=***"), "{out}");

    let mut files = Vec::new();
    files_under(&f.path().join(".treadle"), &mut files);
    files_under(&f.path().join("tape"), &mut files);
    assert!(files.iter().any(|p| p.ends_with("state.redb")), "{files:?}");
    for (var, key) in KEYS {
        assert!(!out.contains(key) && !err.contains(key), "{var} printed");
        for file in &files {
            let bytes = std::fs::read(file).unwrap();
            assert!(
                !bytes.windows(key.len()).any(|w| w == key.as_bytes()),
                "{var}'s value is in {}",
                file.display()
            );
        }
    }
}
