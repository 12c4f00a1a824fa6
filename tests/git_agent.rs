//! An agent's work on a git input, against the scripted server and a real repository:
//! without `commit:` it is wiped and only declared outputs survive; with `commit:` it is
//! committed and pushed to the run's branch (`treadle/run-1`), the input's branch untouched.

use crate::common;

use common::{Fixture, git};
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer};

fn pipeline(uri: &str) -> String {
    format!(
        r#"
resources:
  - name: repo
    type: git
    source: {{ uri: "{uri}", branch: main }}
agents:
  - name: editor
    tools: [read_file, write_file]
jobs:
  - name: work
    plan:
      - get: repo
      - agent: editor
        name: investigator
        inputs: [repo]
        outputs: [repo, notes]
        prompt: Look around and write notes.
      - task: after-wipe
        inputs: [repo, notes]
        run: |
          test "$(cat repo/words.txt)" = alpha
          test ! -e repo/new.txt
          cat notes/n.txt
      - agent: editor
        name: builder
        inputs: [repo]
        outputs: [repo]
        prompt: Change the words.
        commit: "builder: kept words"
      - task: after-commit
        inputs: [repo]
        run: cat repo/words.txt
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_work_is_wiped_without_commit_and_pushed_with_it() {
    let server = ScriptedServer::start(Script::new([
        // investigator: edits a tracked file, adds one, writes its notes.
        Reply::tool_call(
            "write_file",
            json!({"path": "repo/words.txt", "content": "scribbled\n"}),
        ),
        Reply::tool_call(
            "write_file",
            json!({"path": "repo/new.txt", "content": "stray\n"}),
        ),
        Reply::tool_call(
            "write_file",
            json!({"path": "notes/n.txt", "content": "noted\n"}),
        ),
        Reply::text("Done."),
        // builder: its change is kept.
        Reply::tool_call(
            "write_file",
            json!({"path": "repo/words.txt", "content": "kept\n"}),
        ),
        Reply::text("Changed."),
    ]))
    .await
    .expect("server");
    let f = Fixture::new("plan: []\n");
    let (bare, _) = common::git_remote(f.path());
    std::fs::write(f.file(), pipeline(bare.to_str().unwrap())).unwrap();

    let (f, run) = f.run_at(server.base_url()).await;
    run.expect_code(0);
    let out = run.stdout();
    assert!(out.contains("wiped the agent's changes to `repo`"), "{out}");
    assert!(out.contains("noted"), "declared outputs survive:\n{out}");
    assert!(out.contains("│ kept"), "later steps see the commit:\n{out}");
    assert_eq!(git(&bare, &["show", "treadle/run-1:words.txt"]), "kept");
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%s", "treadle/run-1"]),
        "builder: kept words"
    );
    assert_eq!(git(&bare, &["rev-list", "--count", "treadle/run-1"]), "2");
    assert_eq!(git(&bare, &["rev-list", "--count", "main"]), "1");
    let tree = git(&bare, &["ls-tree", "--name-only", "treadle/run-1"]);
    assert!(
        !tree.contains("new.txt"),
        "the wiped file never reached the branch"
    );
    drop(f);
}
