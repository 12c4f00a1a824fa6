//! Work kept only when committed (`commit:`), against the scripted server, a real bare
//! repository and the real git binary: the agent edits a tracked file, adds one and makes
//! commits of its own with `run_shell`; with `commit:` that is one commit on the run's
//! branch (`treadle/run-N`), brought back by a replaying run; without it, it is wiped; a
//! failing step commits nothing; a push the remote refuses errors the step and caches
//! nothing; a blank message is refused before any model call.

use crate::common;

use common::{Fixture, git};
use serde_json::json;
use treadle_scripted::{Reply, Script, ScriptedServer};

/// A pipeline whose agent step `builder` works on the git input `repo`, with `extra`
/// (e.g. its `commit:`) added to the step, and a task after it printing what it sees.
fn pipeline(uri: &str, extra: &str) -> String {
    format!(
        r#"
resources:
  - name: repo
    type: git
    source: {{ uri: "{uri}", branch: main }}
agents:
  - name: coder
    tools: [read_file, write_file, run_shell]
jobs:
  - name: work
    plan:
      - get: repo
      - agent: coder
        name: builder
        inputs: [repo]
        outputs: [repo, notes]
        prompt: Change the words.
{extra}
      - task: after
        inputs: [repo, notes]
        run: |
          echo "words: $(cat repo/words.txt)"
          test -e repo/new.txt && echo has-new
          test -e repo/.git || echo no-dot-git
          cat notes/own.txt
"#
    )
}

/// The agent: a tracked edit, a new file, and a repository of its own with a commit (its
/// log kept in `notes/own.txt`, a plain output, which shows the commit was made).
fn agent_replies() -> Vec<Reply> {
    // HOME is the step directory: a confined command cannot read the real one.
    let own = "export HOME=\"$PWD\" && cd repo && git init -q && git add -A && git -c user.name=agent -c user.email=agent@example.com commit -q -m 'the agent own commit' && git log --format=%s > ../notes/own.txt";
    vec![
        Reply::tool_call(
            "write_file",
            json!({"path": "repo/words.txt", "content": "changed\n"}),
        ),
        Reply::tool_call(
            "write_file",
            json!({"path": "repo/new.txt", "content": "new\n"}),
        ),
        Reply::tool_call("run_shell", json!({ "command": own })),
        Reply::text("Done."),
    ]
}

/// A fixture with a bare remote (`main` holding `words.txt` = alpha) and the pipeline.
fn fixture(extra: &str) -> (Fixture, std::path::PathBuf) {
    let f = Fixture::new("plan: []\n");
    let (bare, _) = common::git_remote(f.path());
    let uri = bare.to_str().expect("utf-8 path").to_owned();
    std::fs::write(f.file(), pipeline(&uri, extra)).expect("pipeline");
    (f, bare)
}

fn branches(bare: &std::path::Path) -> String {
    git(bare, &["branch", "--list", "--format=%(refname:short)"])
}

#[tokio::test(flavor = "multi_thread")]
async fn committed_work_is_one_commit_on_the_runs_branch_and_a_replay_brings_it_back() {
    let server = ScriptedServer::start(Script::new(agent_replies()))
        .await
        .expect("server");
    let (f, bare) = fixture("        commit: \"builder: change the words\"");
    let base = git(&bare, &["rev-parse", "main"]);

    let (f, run) = f.run_at(server.base_url()).await;
    run.expect_code(0);
    let out = run.stdout();
    assert!(
        out.contains("words: changed"),
        "later steps see the commit:\n{out}"
    );
    assert!(
        out.contains("has-new") && out.contains("no-dot-git"),
        "{out}"
    );
    assert!(
        out.contains("the agent own commit"),
        "the agent did commit:\n{out}"
    );
    assert!(
        out.contains("treadle/run-1: builder: change the words"),
        "{out}"
    );

    let tip = git(&bare, &["rev-parse", "treadle/run-1"]);
    assert_eq!(git(&bare, &["rev-parse", "treadle/run-1^"]), base);
    assert_eq!(git(&bare, &["rev-list", "--count", "treadle/run-1"]), "2");
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%s", &tip]),
        "builder: change the words"
    );
    let body = git(&bare, &["log", "-1", "--format=%B", &tip]);
    assert!(
        body.contains("Treadle-Run: 1\nTreadle-Step: builder"),
        "{body}"
    );
    let author = format!(
        "{} <{}>",
        std::env::var("GIT_AUTHOR_NAME").unwrap_or_else(|_| "treadle".into()),
        std::env::var("GIT_AUTHOR_EMAIL").unwrap_or_else(|_| "treadle@localhost".into())
    );
    assert_eq!(
        git(&bare, &["log", "-1", "--format=%an <%ae>", &tip]),
        author
    );
    // The agent's own repository and commit are not in it: one commit of the files.
    assert_eq!(
        git(
            &bare,
            &["ls-tree", "-r", "--format=%(objectmode) %(path)", &tip]
        ),
        "100644 new.txt\n100644 words.txt"
    );
    assert_eq!(
        git(&bare, &["show", &format!("{tip}:words.txt")]),
        "changed"
    );
    assert_eq!(
        git(&bare, &["show", "main:words.txt"]),
        "alpha",
        "main is untouched"
    );
    let asked = server.request_count();

    // Run 2 replays the step: no model call, its commit on run 2's branch.
    let (f, run) = f.run_at(server.base_url()).await;
    run.expect_code(0);
    let out = run.stdout();
    assert_eq!(
        server.request_count(),
        asked,
        "the step was replayed:\n{out}"
    );
    assert!(out.contains("restored commit"), "{out}");
    assert!(out.contains("words: changed"), "{out}");
    assert_eq!(git(&bare, &["rev-parse", "treadle/run-2"]), tip);

    // Run 3 with the local mirror gone: the commit is fetched from run 1's branch.
    std::fs::remove_dir_all(f.path().join(".treadle/git")).expect("remove the mirror");
    let (f, run) = f.run_at(server.base_url()).await;
    run.expect_code(0);
    assert_eq!(server.request_count(), asked, "{}", run.stdout());
    assert_eq!(git(&bare, &["rev-parse", "treadle/run-3"]), tip);
    drop(f);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_commit_the_work_is_wiped_and_plain_outputs_survive() {
    let server = ScriptedServer::start(Script::new(agent_replies()))
        .await
        .expect("server");
    let (f, bare) = fixture("");
    let (f, run) = f.run_at(server.base_url()).await;
    run.expect_code(0);
    let out = run.stdout();
    assert!(
        out.contains("wiped the agent's changes to `repo` (no `commit:`)"),
        "{out}"
    );
    assert!(
        out.contains("words: alpha"),
        "the tracked edit is reverted:\n{out}"
    );
    assert!(!out.contains("has-new"), "the new file is deleted:\n{out}");
    assert!(
        out.contains("no-dot-git"),
        "its own commits are dropped:\n{out}"
    );
    assert!(
        out.contains("the agent own commit"),
        "a plain output survives:\n{out}"
    );
    assert_eq!(branches(&bare), "main", "nothing was pushed");
    drop(f);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_that_fails_commits_nothing() {
    let server = ScriptedServer::start(Script::new(agent_replies()))
        .await
        .expect("server");
    let extra = "        commit: \"builder: never kept\"\n        assert:\n          stdout: something the agent never says";
    let (f, bare) = fixture(extra);
    let (f, run) = f.run_at(server.base_url()).await;
    assert_ne!(run.code(), 0, "{}", run.stdout());
    let out = run.stdout();
    assert!(server.request_count() > 0, "the agent ran");
    assert!(!out.contains("committed"), "{out}");
    assert!(
        !out.contains("words:"),
        "no step after the failed one ran:\n{out}"
    );
    assert_eq!(branches(&bare), "main", "no run branch was pushed");
    assert_eq!(git(&bare, &["rev-list", "--count", "main"]), "1");
    drop(f);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_blank_message_is_refused_before_the_agent_starts() {
    let server = ScriptedServer::start(Script::new(agent_replies()))
        .await
        .expect("server");
    let (f, bare) = fixture("        commit: \"   \"");
    let (f, run) = f.run_at(server.base_url()).await;
    assert_ne!(run.code(), 0);
    let err = run.stderr();
    assert!(err.contains("`commit:` is empty"), "{err}");
    assert_eq!(server.request_count(), 0, "no model call was made");
    assert_eq!(branches(&bare), "main");
    drop(f);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_push_errors_the_step_wipes_its_work_and_caches_nothing() {
    let replies = agent_replies().into_iter().chain(agent_replies());
    let server = ScriptedServer::start(Script::new(replies))
        .await
        .expect("server");
    let (f, bare) = fixture("        commit: \"builder: refused\"");
    let hook = bare.join("hooks/pre-receive");
    std::fs::write(&hook, "#!/bin/sh\necho no run branches here >&2\nexit 1\n").expect("hook");
    let mut perms = std::fs::metadata(&hook).expect("hook").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&hook, perms).expect("chmod");

    let (f, run) = f.run_at(server.base_url()).await;
    run.expect_code(2);
    let out = run.stdout();
    assert!(
        out.contains("cannot commit the agent's work on `repo`"),
        "{out}"
    );
    assert!(
        out.contains("no run branches here"),
        "git's reason is shown:\n{out}"
    );
    assert!(
        out.contains("wiped the agent's changes to `repo` (its commit failed)"),
        "{out}"
    );
    assert!(!out.contains("words:"), "no step after it ran:\n{out}");
    assert_eq!(branches(&bare), "main");
    let asked = server.request_count();

    // The errored step was not cached: with the remote accepting, it runs and commits.
    std::fs::remove_file(&hook).expect("remove the hook");
    let (f, run) = f.run_at(server.base_url()).await;
    run.expect_code(0);
    assert!(server.request_count() > asked, "the agent ran again");
    assert!(run.stdout().contains("words: changed"), "{}", run.stdout());
    assert_eq!(branches(&bare), "main\ntreadle/run-2");
    drop(f);
}

/// A `time` get replayed from the cache holds no git input: an agent step that runs again
/// after it (its prompt changed) keeps its work on the artifact, as it does when the get
/// ran, and nothing is wiped or committed. The replay once recorded every replayed get's
/// version as a git commit, so the agent's work was wiped as if it were on a git checkout.
#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_time_get_is_not_taken_for_a_git_input() {
    let stamp = |v: &str| {
        [
            Reply::tool_call(
                "write_file",
                json!({"path": "tick/stamped.txt", "content": format!("stamped {v}\n")}),
            ),
            Reply::text("Done."),
        ]
    };
    let replies = stamp("v1").into_iter().chain(stamp("v2"));
    let server = ScriptedServer::start(Script::new(replies))
        .await
        .expect("server");
    let yaml = |prompt: &str| {
        format!(
            r#"
resources:
  - name: tick
    type: time
    source: {{ interval: 1h }}
agents:
  - name: stamper
    tools: [write_file]
jobs:
  - name: stamp
    plan:
      - get: tick
      - agent: stamper
        name: stamp
        inputs: [tick]
        outputs: [tick]
        prompt: {prompt}
      - task: after
        inputs: [tick]
        run: cat tick/stamped.txt
"#
        )
    };
    let f = Fixture::new(&yaml("Stamp it."));
    let (f, run) = f.run_at(server.base_url()).await;
    run.expect_code(0);
    assert!(run.stdout().contains("stamped v1"), "{}", run.stdout());

    // Run 2: the get is replayed, the edited agent step runs again.
    std::fs::write(f.file(), yaml("Stamp it again.")).expect("pipeline");
    let (f, run) = f.run_at(server.base_url()).await;
    let out = run.stdout();
    assert_eq!(server.request_count(), 4, "the agent ran twice:\n{out}");
    assert!(out.contains("[get] cached"), "the get was replayed:\n{out}");
    assert!(!out.contains("wiped"), "{out}");
    assert!(!out.contains("commit"), "{out}");
    run.expect_code(0);
    assert!(
        out.contains("stamped v2"),
        "the agent's work is kept:\n{out}"
    );
    drop(f);
}
