//! The agent and reuse keys of the pipeline format without a model: `tasks:` reused by
//! name with `input_mapping:`/`output_mapping:`, `run_file:`/`file:` includes, `defaults:`,
//! the new agent keys loading, and each bad value refused at FILE:LINE:COL naming the key.

use crate::common;

use common::Fixture;

fn validate_err(yaml: &str) -> String {
    let f = Fixture::new(yaml);
    let run = f.treadle(&["validate"]);
    run.expect_code(2);
    run.stderr()
}

#[test]
fn a_task_step_without_run_takes_the_tasks_entry_and_mappings_rename_artifacts() {
    let f = Fixture::new(
        r#"
tasks:
- name: count-lines
  inputs: [src]
  outputs: [report]
  env: [PROBE_VAR]
  run: |
    wc -l src/* > report/count.txt
    echo "probe=${PROBE_VAR-unset}"
jobs:
- name: audit
  plan:
  - task: fetch
    outputs: [handbook]
    run: printf 'a\nb\n' > handbook/pages.txt
  - task: count-lines
    input_mapping: { src: handbook }
    output_mapping: { report: audit-notes }
    assert: { stdout: probe=passed }
  - task: check
    inputs: [audit-notes]
    run: cat audit-notes/count.txt
    assert: { stdout: "2" }
  - task: inline
    run: echo my own command
    assert: { stdout: my own command }
  assert:
    execution: [fetch, count-lines, check, inline]
    outcome: succeeded
"#,
    );
    let run = f.treadle_env(&["test"], &[("PROBE_VAR", "passed")]);
    assert!(
        run.stdout().contains("1 passed, 0 failed"),
        "{}{}",
        run.stdout(),
        run.stderr()
    );
}

#[test]
fn run_file_and_whole_task_files_are_read_at_load_and_inline_keys_win() {
    let f = Fixture::new(
        r#"
tasks:
- name: unit
  file: ci/unit.yml
  timeout: 5m
jobs:
- name: build
  plan:
  - task: unit
    assert: { stdout: from the shared task }
  - task: smoke
    run_file: ci/smoke.sh
    assert: { stdout: smoke ok }
  assert:
    execution: [unit, smoke]
    outcome: succeeded
"#,
    );
    std::fs::create_dir_all(f.path().join("ci")).unwrap();
    std::fs::write(
        f.path().join("ci/unit.yml"),
        "run: echo from the shared task\ntimeout: 1s\n",
    )
    .unwrap();
    std::fs::write(f.path().join("ci/smoke.sh"), "echo smoke ok\n").unwrap();
    let run = f.treadle(&["test"]);
    assert!(
        run.stdout().contains("1 passed, 0 failed"),
        "{}{}",
        run.stdout(),
        run.stderr()
    );
    // An empty included file, and a key set twice, are load errors at the key.
    std::fs::write(f.path().join("ci/smoke.sh"), "  \n").unwrap();
    let run = f.treadle(&["validate"]);
    run.expect_code(2);
    assert!(run.stderr().contains(":12:15:"), "{}", run.stderr());
    assert!(
        run.stderr().contains("`run_file: ci/smoke.sh` is empty"),
        "{}",
        run.stderr()
    );
}

#[test]
fn the_new_agent_keys_load_and_defaults_fill_in_the_model() {
    let f = Fixture::new(
        r#"
defaults:
  model: openrouter/qwen/qwen3-coder
  delegate_budget_percent: 10
  preflight: { timeout: 30s, cache: 5m }
  run_history: 20
mcp_servers:
- name: tracker
  endpoint: http://127.0.0.1:9/mcp
  auth: { type: bearer, api_key_env: TRACKER_TOKEN }
agents:
- name: titler
  description: Writes titles.
  top_p: 0.9
  max_tokens: 2048
  reasoning_effort: low
  timeout: 20m
  attempts: 2
  tools:
  - read_file
  - builtin: list_dir
  - mcp: tracker
    tool: search
  fallback:
  - source: { model: local/backup }
- name: lm
  source: { model: lmstudio/qwen2.5-coder }
jobs:
- name: j
  plan:
  - task: repo
    outputs: [repo]
    run: mkdir -p repo/cmd
  - agent: titler
    inputs: [repo]
    dir: repo/cmd
    max_turns: 40
    context_paths: [main.go]
    max_context_bytes: 400000
    prompt: Title it.
"#,
    );
    // Without the keys, the checks of this machine name both: the model `defaults:` gave
    // the agent (at `defaults.model`), and the bearer variable `auth:` gave the server.
    let run = f.treadle(&["validate"]);
    run.expect_code(2);
    let err = run.stderr();
    assert!(
        err.contains(":3:10: environment variable OPENROUTER_API_KEY is not set"),
        "{err}"
    );
    assert!(err.contains("`TRACKER_TOKEN` is not set"), "{err}");
    assert!(!err.contains("unknown"), "{err}");
    let run = f.treadle_env(
        &["validate"],
        &[("OPENROUTER_API_KEY", "k"), ("TRACKER_TOKEN", "t")],
    );
    let all = format!("{}{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), 0, "{all}");
    // The dials are sent now, and `fallback:` acts: neither is warned about.
    assert!(!all.contains("is not sent"), "{all}");
    assert!(!all.contains("does not switch models"), "{all}");
    assert!(
        all.contains("`defaults.run_history` has no effect"),
        "{all}"
    );
}

#[test]
fn impossible_values_of_the_new_keys_are_located_and_named() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "agents:\n- name: a\n  reasoning_effort: extreme\njobs:\n- name: j\n  plan:\n  - task: t\n    run: 'true'\n",
            ":3:21:",
            "`reasoning_effort` of agent `a` is `extreme`",
        ),
        (
            "agents:\n- name: a\n  top_p: 1.5\njobs:\n- name: j\n  plan:\n  - task: t\n    run: 'true'\n",
            ":3:10:",
            "`top_p` of agent `a` is 1.5",
        ),
        (
            "defaults:\n  delegate_budget_percent: 0\njobs:\n- name: j\n  plan:\n  - task: t\n    run: 'true'\n",
            ":2:28:",
            "`delegate_budget_percent` is 0",
        ),
        (
            "agents:\n- name: a\n  settings: everything\njobs:\n- name: j\n  plan:\n  - task: t\n    run: 'true'\n",
            ":3:13:",
            "`settings` of agent `a` is `everything`",
        ),
        (
            "agents:\n- name: a\n  tools:\n  - builtin: web_fetch\n    allow: [https://x.example/]\njobs:\n- name: j\n  plan:\n  - task: t\n    run: 'true'\n",
            ":5:13:",
            "`allow:` entry `https://x.example/` is not a bare host name",
        ),
        (
            "agents:\n- name: a\n  tools:\n  - agent: ghost\njobs:\n- name: j\n  plan:\n  - task: t\n    run: 'true'\n",
            ":4:12:",
            "granted unknown agent `ghost`",
        ),
        (
            "agents:\n- name: a\n  tools:\n  - { agent: b }\n- name: b\n  tools:\n  - { agent: a }\njobs:\n- name: j\n  plan:\n  - task: t\n    run: 'true'\n",
            ":2:9:",
            "delegates in a cycle",
        ),
        (
            "agents:\n- name: a\n  tools:\n  - builtin: read_file\n    args: { x: 1 }\njobs:\n- name: j\n  plan:\n  - task: t\n    run: 'true'\n",
            ":4:5:",
            "`args:` of a tool of agent `a` belongs to custom",
        ),
        (
            "agents:\n- name: a\njobs:\n- name: j\n  plan:\n  - task: t\n    run: 'false'\n    fix: nobody\n",
            ":8:10:",
            "`fix:` of step `t` names unknown agent `nobody`",
        ),
        (
            "agents:\n- name: a\njobs:\n- name: j\n  plan:\n  - agent: a\n    dir: repo/cmd\n",
            ":7:10:",
            "`dir: repo/cmd` of step `a` is not inside one of its inputs",
        ),
        (
            "agents:\n- name: a\njobs:\n- name: j\n  plan:\n  - agent: a\n    context:\n      from: { ghost: verdict }\n",
            ":8:7:",
            "there is no step `ghost`",
        ),
        (
            "agents:\n- name: a\n  max_turns: many\njobs:\n- name: j\n  plan:\n  - task: t\n    run: 'true'\n",
            ":3:14:",
            "max_turns",
        ),
        (
            "jobs:\n- name: j\n  plan:\n  - task: t\n    max_turns: 3\n    run: 'true'\n",
            ":5:16:",
            "`max_turns:` does not apply to step `t`",
        ),
        (
            "agents:\n- name: a\njobs:\n- name: j\n  plan:\n  - task: t\n    run: 'true'\n    max_context_bytes: 10KB\n",
            ":6:5:",
            "`max_context_bytes` does not belong on a `task` step",
        ),
        (
            "agents:\n- name: a\njobs:\n- name: j\n  plan:\n  - agent: a\n    fix: a\n",
            ":7:10:",
            "`fix:` does not apply to step `a`",
        ),
        (
            "tasks:\n- run: echo\njobs:\n- name: j\n  plan:\n  - task: t\n    run: 'true'\n",
            ":2:3:",
            "a `tasks:` entry has no `name:`",
        ),
        (
            "tasks:\n- name: t\n  inputs: [src]\n  run: 'true'\njobs:\n- name: j\n  plan:\n  - task: t\n    input_mapping: { other: x }\n",
            ":9:20:",
            "`input_mapping` maps `other`, which the task does not declare",
        ),
    ];
    for (yaml, at, message) in cases {
        let err = validate_err(yaml);
        assert!(err.contains(at), "want {at} in:\n{err}\nfor:\n{yaml}");
        assert!(
            err.contains(message),
            "want {message:?} in:\n{err}\nfor:\n{yaml}"
        );
    }
}

#[test]
fn approval_as_a_mapping_is_its_message_and_timeout() {
    let f = Fixture::new(
        r#"
jobs:
- name: publish
  plan:
  - approval:
      message: "Publish?"
      timeout: 1s
    on_timeout: approve
  - task: post
    run: echo posted
    assert: { stdout: posted }
  assert:
    execution: [approval, post]
    outcome: succeeded
"#,
    );
    let run = f.treadle(&["test"]);
    assert!(
        run.stdout().contains("1 passed, 0 failed"),
        "{}{}",
        run.stdout(),
        run.stderr()
    );
    assert!(run.stdout().contains("Publish?"), "{}", run.stdout());
}

#[test]
fn a_codex_backed_agent_loads_and_its_dollar_budget_needs_a_price() {
    // claude reports dollars itself; codex reports tokens, priced like a hosted model's
    // (tests/codex_agents.rs runs it).
    let agent = r#"
agents:
- name: reviewer
  source: { model: "@codex/gpt-5" }
  settings: project
  budget: { usd: 0.50 }
jobs:
- name: review
  plan:
  - agent: reviewer
    prompt: Review this code.
"#;
    let unpriced = Fixture::new(agent);
    let run = unpriced.treadle(&["validate"]);
    assert_ne!(run.code(), 0);
    assert!(
        run.stdout().contains("has no price") || run.stderr().contains("has no price"),
        "{}{}",
        run.stdout(),
        run.stderr()
    );
    let priced = Fixture::new(&format!(
        "prices:\n  gpt-5: {{ prompt: 1.25, completion: 10.0 }}\n{agent}"
    ));
    // (validate also wants the CLI installed: any file stands in for it here.)
    priced
        .treadle_env(&["validate"], &[("TREADLE_CODEX_BIN", "/bin/sh")])
        .expect_code(0);
    // A CLI treadle does not drive still loads, and is refused when it runs.
    let other = Fixture::new(
        &agent
            .replace("@codex/gpt-5", "@gemini/pro")
            .replace("  budget: { usd: 0.50 }\n", ""),
    );
    other.treadle(&["validate"]).expect_code(0);
    let run = other.treadle(&["run"]);
    assert_ne!(run.code(), 0);
    assert!(
        run.stdout().contains("`@codex/MODEL`"),
        "{}{}",
        run.stdout(),
        run.stderr()
    );
}

#[test]
fn validate_refuses_a_cli_model_whose_cli_is_not_installed() {
    let yaml = "agents:\n- name: reviewer\n  source: { model: \"@claude/sonnet\" }\njobs:\n- name: review\n  plan:\n  - agent: reviewer\n    prompt: Review this code.\n";
    let f = Fixture::new(yaml);
    // A PATH with a shell and no claude.
    let bin = tempfile::tempdir().expect("dir");
    std::os::unix::fs::symlink("/bin/sh", bin.path().join("sh")).expect("link");
    let path = bin.path().display().to_string();
    let run = f.treadle_env(
        &["validate"],
        &[("PATH", &path), ("TREADLE_CLAUDE_BIN", "")],
    );
    assert_eq!(run.code(), 2, "{}{}", run.stdout(), run.stderr());
    let err = run.stderr();
    assert!(
        err.contains("treadle.yml:3:20: ")
            && err.contains("runs the claude CLI")
            && err.contains("TREADLE_CLAUDE_BIN")
            && err.contains("npm install -g @anthropic-ai/claude-code"),
        "{err}"
    );
    // Named by its variable, it passes; a variable naming nothing is refused.
    let ok = f.treadle_env(
        &["validate"],
        &[("PATH", &path), ("TREADLE_CLAUDE_BIN", "/bin/sh")],
    );
    assert_eq!(ok.code(), 0, "{}{}", ok.stdout(), ok.stderr());
    let gone = f.treadle_env(
        &["validate"],
        &[
            ("PATH", &path),
            ("TREADLE_CLAUDE_BIN", "/nonexistent/claude"),
        ],
    );
    assert_eq!(gone.code(), 2);
    assert!(
        gone.stderr().contains("/nonexistent/claude"),
        "{}",
        gone.stderr()
    );
}
