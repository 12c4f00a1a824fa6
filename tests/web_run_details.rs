//! The run page answers what the agent saw, did and changed, and when (issue 30, item 4),
//! in a real headless Chromium against `treadle serve` and the scripted model server: each
//! model call's time, latency, time to first token and rate, and each tool call's time and
//! duration, equal to the journal's; the system prompt and the prompt, folded; the elapsed
//! time of a running step and run, ticking; the files a step added, changed and removed,
//! with diffs and downloads, and the artifacts browsable (paths that escape refused); the
//! commit a `get:` used with its message; and who approved, from a named token or the
//! operator's header.

use crate::common;
use crate::served;

use std::time::Duration;

use serde_json::{Value, json};
use served::{Page, WAIT, journal};
use treadle_scripted::Reply;

const SYSTEM: &str = "You check files. Answer in one line.";

#[test]
fn an_agent_step_shows_its_prompts_and_the_times_of_its_calls() {
    let yaml = format!(
        "agents:\n  - name: checker\n    system: {SYSTEM}\n    tools: [read_file]\njobs:\n  - name: main\n    plan:\n      - task: make\n        outputs: [notes]\n        run: echo hello > notes/a.txt\n      - agent: checker\n        inputs: [notes]\n        prompt: Read notes/a.txt and say what it holds.\n"
    );
    let Some(p) = Page::start(
        "an_agent_step_shows_its_prompts_and_the_times_of_its_calls",
        &yaml,
        vec![
            Reply::tool_call("read_file", json!({"path": "notes/a.txt"})).usage(40, 8),
            Reply::text("It holds the word hello, nothing else at all.").usage(60, 12),
        ],
        Duration::from_millis(20),
    ) else {
        return;
    };
    let id = p.start_run();
    assert_eq!(p.wait_run(id)["status"], json!("succeeded"));
    // What the journal recorded: the model calls' stamps and the tool call's two times.
    let events = journal(&p, id);
    let agent: Vec<&(String, Value)> = events.iter().filter(|(k, _)| k == "agent").collect();
    let calls: Vec<&Value> = agent
        .iter()
        .filter(|(_, e)| e["what"] == "model_call")
        .map(|(_, e)| &e["data"])
        .collect();
    assert_eq!(calls.len(), 2, "one model_call per model call: {agent:?}");
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    for c in &calls {
        let first = c["first_token_ms"].as_u64().unwrap_or(n(c, "started_ms"));
        assert!(
            n(c, "started_ms") <= first && first <= n(c, "ended_ms"),
            "{c}"
        );
    }
    // The answer streamed, so its first token has a time.
    assert!(calls[1]["first_token_ms"].is_u64(), "{}", calls[1]);
    assert_eq!(calls[1]["completion_tokens"], json!(12));
    let at = |what: &str| {
        agent
            .iter()
            .find(|(_, e)| e["what"] == what)
            .map(|(_, e)| n(e, "at_ms"))
            .unwrap_or_else(|| panic!("no {what} with at_ms"))
    };
    let (called, returned) = (at("tool_call"), at("tool_result"));

    p.open(&format!("/runs/{id}"));
    let seen = p.b.wait_for(
        "the agent's times and prompts",
        r#"(() => {
        const step = document.querySelector('#step-1');
        const calls = [...(step?.querySelectorAll('.model-call') ?? [])];
        if (calls.length < 2) return null;
        const time = step.querySelector('.call .call-time');
        const sys = step.querySelector('details.prompt-system');
        const user = step.querySelector('details.prompt-user');
        return {
            calls: calls.map((c) => ({...c.dataset, text: c.textContent})),
            tool: time && {...time.dataset, text: time.textContent},
            system: sys && {open: sys.open, summary: sys.querySelector('summary').textContent, text: sys.querySelector('pre').textContent},
            prompt: user && {open: user.open, text: user.querySelector('pre').textContent},
            order: [...step.querySelectorAll('.convo > *')].map((e) => e.className.split(' ')[0]),
        };
        })()"#,
        WAIT,
    );
    for (shown, c) in seen["calls"].as_array().expect("calls").iter().zip(&calls) {
        let latency = n(c, "ended_ms") - n(c, "started_ms");
        let ttft = c["first_token_ms"]
            .as_u64()
            .map_or_else(String::new, |f| (f - n(c, "started_ms")).to_string());
        assert_eq!(shown["latency"], json!(latency.to_string()), "{shown}");
        assert_eq!(shown["ttft"], json!(ttft), "{shown}");
        let text = shown["text"].as_str().unwrap_or_default();
        for part in ["latency", "tok/s", "tokens"] {
            assert!(text.contains(part), "{part} missing from {text}");
        }
        assert_eq!(text.contains("first token"), !ttft.is_empty(), "{text}");
    }
    assert_eq!(seen["tool"]["at"], json!(called.to_string()), "{seen}");
    assert_eq!(
        seen["tool"]["took"],
        json!((returned - called).to_string()),
        "{seen}"
    );
    assert!(
        seen["tool"]["text"]
            .as_str()
            .is_some_and(|t| t.contains(':') && t.contains(" · ")),
        "a clock time and a duration: {seen}"
    );
    // The prompts are there, folded, and the first model call heads the conversation.
    assert_eq!(seen["system"]["text"], json!(SYSTEM), "{seen}");
    assert_eq!(seen["system"]["open"], json!(false), "{seen}");
    assert!(
        seen["system"]["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with("system prompt")),
        "{seen}"
    );
    assert!(
        seen["prompt"]["text"]
            .as_str()
            .is_some_and(|t| t.starts_with("Read notes/a.txt and say what it holds.")),
        "{seen}"
    );
    assert_eq!(seen["prompt"]["open"], json!(false), "{seen}");
    assert_eq!(
        seen["order"].as_array().map(|o| o[..3].to_vec()),
        Some(vec![json!("prompt"), json!("model-call"), json!("call")]),
        "{seen}"
    );
}

#[test]
fn a_running_step_and_its_run_show_their_elapsed_time_ticking() {
    let Some(p) = Page::tasks(
        "a_running_step_and_its_run_show_their_elapsed_time_ticking",
        "jobs:\n  - name: main\n    plan:\n      - task: wait\n        run: sleep 60\n",
    ) else {
        return;
    };
    let id = p.start_run();
    p.open(&format!("/runs/{id}"));
    let read = "(() => { const s = document.querySelector('#step-0 > .row .elapsed'); const r = document.querySelector('.run-head .elapsed'); return s?.textContent && r?.textContent ? [s.textContent, r.textContent, s.dataset.since, r.dataset.since] : null; })()";
    let first = p.b.wait_for("both elapsed times", read, WAIT);
    // The step's and the run's start, as the server recorded them, are what they tick from.
    let run = p.get(&format!("/api/v1/runs/{id}"));
    assert_eq!(first[2], json!(run["steps"][0]["started_ms"].to_string()));
    assert_eq!(first[3], json!(run["started_ms"].to_string()));
    // They tick: the texts change while the step runs.
    p.b.wait_for(
        "the elapsed times to tick",
        &format!(
            "(() => {{ const now = {read}; return now && now[0] !== {a} && now[1] !== {b}; }})()",
            a = first[0],
            b = first[1]
        ),
        WAIT,
    );
    // The runs list shows the running run's elapsed time too.
    p.open("/");
    p.b.wait_for(
        "the list's elapsed time",
        "document.querySelector('table.runs tbody tr .elapsed')?.textContent",
        WAIT,
    );
    p.post(&format!("/api/v1/runs/{id}/cancel"), json!({}));
    p.wait_run(id);
    p.open(&format!("/runs/{id}"));
    p.b.wait_for(
        "no elapsed time once ended",
        "document.body.dataset.stream === 'ended' && !document.querySelector('.elapsed[data-since]')",
        WAIT,
    );
}

const EDITS: &str = "jobs:\n  - name: main\n    plan:\n      - task: make\n        outputs: [site]\n        run: printf 'a\\nb\\nc\\n' > site/page.txt && echo old > site/old.txt && mkdir site/sub && echo deep > site/sub/x.txt\n      - task: edit\n        inputs: [site]\n        outputs: [site]\n        run: printf 'a\\nB\\nc\\n' > site/page.txt && rm site/old.txt && echo new > site/new.txt\n";

#[test]
fn a_step_shows_the_files_it_changed_with_diffs_and_downloads() {
    let Some(p) = Page::tasks(
        "a_step_shows_the_files_it_changed_with_diffs_and_downloads",
        EDITS,
    ) else {
        return;
    };
    let id = p.start_run();
    assert_eq!(p.wait_run(id)["status"], json!("succeeded"));
    p.open(&format!("/runs/{id}"));
    let files = |seq: u64| {
        p.b.click(&format!("#step-{seq} > .row .name"));
        p.b.wait_for(
            "the step's files",
            &format!(
                "(() => {{ const fs = [...document.querySelectorAll('#step-{seq} .changes li.file')]; return fs.length ? fs.map((f) => [f.dataset.path, f.dataset.change]) : null; }})()"
            ),
            WAIT,
        )
    };
    assert_eq!(
        files(0),
        json!([
            ["old.txt", "added"],
            ["page.txt", "added"],
            ["sub/x.txt", "added"]
        ])
    );
    assert_eq!(
        files(1),
        json!([
            ["new.txt", "added"],
            ["old.txt", "removed"],
            ["page.txt", "changed"]
        ])
    );
    let diff = p.b.eval(
        "return document.querySelector('#step-1 li.file[data-path=\"page.txt\"] pre.diff')?.textContent",
        json!([]),
    );
    assert_eq!(diff, json!("@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"));
    // A download link gives the file as the step left it (and a removed one as it was).
    let fetched = p.b.eval_async(
        r#"const out = [];
        for (const path of ['page.txt', 'old.txt']) {
            const a = document.querySelector(`#step-1 li.file[data-path="${path}"] a.download`);
            const r = await fetch(a.href);
            out.push([r.status, r.headers.get('content-disposition'), await r.text()]);
        }
        return out;"#,
        json!([]),
    );
    assert_eq!(
        fetched,
        json!([
            [200, "attachment; filename=\"page.txt\"", "a\nB\nc\n"],
            [200, "attachment; filename=\"old.txt\"", "old\n"]
        ])
    );
    // The artifacts: each version browsable, a file viewed in place.
    p.b.click("#artifacts > summary");
    let top = p.b.wait_for(
        "the artifact versions",
        "(() => { const e = [...document.querySelectorAll('#artifacts .artifact-list > li')].map((l) => l.dataset.path); return e.length ? e : null; })()",
        WAIT,
    );
    assert_eq!(top.as_array().map(Vec::len), Some(2), "{top}");
    let first = top[0].as_str().expect("a version").to_owned();
    p.b.click(&format!(
        "#artifacts li[data-path=\"{first}\"] > span.entry"
    ));
    p.b.wait_for(
        "the version's files",
        &format!("document.querySelector('#artifacts li[data-path=\"{first}/page.txt\"] a.view')"),
        WAIT,
    );
    p.b.click(&format!(
        "#artifacts li[data-path=\"{first}/page.txt\"] a.view"
    ));
    let viewed = p.b.wait_for(
        "the file's text",
        &format!(
            "document.querySelector('#artifacts li[data-path=\"{first}/page.txt\"] .file-view pre')?.textContent"
        ),
        WAIT,
    );
    assert_eq!(viewed, json!("a\nb\nc\n"));
}

#[test]
fn artifact_paths_outside_the_run_are_refused() {
    let f = common::Fixture::new(
        "jobs:\n  - name: main\n    plan:\n      - task: make\n        outputs: [site]\n        run: echo in > site/in.txt && ln -s \"$PWD/../../../../state.redb\" site/state && ln -s /etc site/etc\n",
    );
    let server = common::server::Server::start(f.path(), &["treadle.yml"], &[]);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let status = |path: &str| {
        rt.block_on(async {
            let r = server
                .http()
                .get(server.url(path))
                .send()
                .await
                .expect("GET");
            let headers = r.headers().clone();
            (
                r.status().as_u16(),
                headers,
                r.text().await.unwrap_or_default(),
            )
        })
    };
    let (code, body) = rt.block_on(common::server::post(
        &server,
        "/api/v1/runs",
        json!({"pipeline": "treadle"}),
    ));
    assert_eq!(code, 201, "{body}");
    let id = body["id"].as_u64().expect("id");
    common::server::eventually("the run to end", || {
        status(&format!("/api/v1/runs/{id}"))
            .2
            .contains("\"succeeded\"")
    });
    let listing: Value =
        serde_json::from_str(&status(&format!("/api/v1/runs/{id}/artifacts")).2).expect("JSON");
    let dir = listing[0]["name"].as_str().expect("a version").to_owned();
    let (ok, headers, text) = status(&format!("/api/v1/runs/{id}/artifacts/{dir}/in.txt"));
    assert_eq!((ok, text.as_str()), (200, "in\n"));
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["content-security-policy"], "sandbox");
    // Up and out: refused whether spelled out or through a symlink the step left.
    for (path, want) in [
        (format!("{dir}/..%2F..%2F..%2Fstate.redb"), 400),
        (format!("..%2F{id}%2Fartifacts%2F{dir}%2Fin.txt"), 400),
        (format!("{dir}/state"), 404),
        (format!("{dir}/etc/hostname"), 404),
        (format!("{dir}/etc"), 404),
        (format!("{dir}/none.txt"), 404),
    ] {
        let (code, _, body) = status(&format!("/api/v1/runs/{id}/artifacts/{path}"));
        assert_eq!(code, want, "{path}: {body}");
        assert!(
            !body.contains("SQLite") && !body.contains("root:"),
            "{body}"
        );
    }
}

#[test]
fn a_get_shows_the_commit_it_used_with_its_message() {
    let git_dir = tempfile::tempdir().expect("temp dir");
    let (bare, work) = common::git_remote(git_dir.path());
    std::fs::write(work.join("words.txt"), "beta\n").unwrap();
    common::git(
        &work,
        &["commit", "--quiet", "-am", "Say beta instead of alpha"],
    );
    common::git(&work, &["push", "--quiet", bare.to_str().unwrap(), "main"]);
    let commit = common::git(&work, &["rev-parse", "HEAD"]);
    let yaml = format!(
        "resources:\n  - name: repo\n    type: git\n    source: {{ uri: \"file://{}\", branch: main }}\njobs:\n  - name: build\n    plan:\n      - get: repo\n      - task: show\n        inputs: [repo]\n        run: cat repo/words.txt\n",
        bare.display()
    );
    let Some(p) = Page::tasks("a_get_shows_the_commit_it_used_with_its_message", &yaml) else {
        return;
    };
    let id = p.start_run();
    assert_eq!(p.wait_run(id)["status"], json!("succeeded"));
    p.open(&format!("/runs/{id}"));
    p.b.click("#step-0 > .row .name");
    let shown = p.b.wait_for(
        "the version",
        "(() => { const v = document.querySelector('#step-0 .version'); return v && v.querySelector('.commit-message') ? [v.querySelector('code').title, v.querySelector('.commit-message').textContent] : null; })()",
        WAIT,
    );
    assert_eq!(shown[0], json!(commit));
    assert!(
        shown[1]
            .as_str()
            .is_some_and(|m| m.starts_with("Say beta instead of alpha — t")),
        "{shown}"
    );
}

#[test]
fn an_approval_is_recorded_under_a_named_token_or_the_operators_header() {
    let yaml = "jobs:\n  - name: main\n    plan:\n      - approval: ship\n        message: Ship it?\n      - approval: announce\n        message: Announce it?\n      - task: done\n        run: echo done\n";
    let Some(p) = Page::start_with(
        "an_approval_is_recorded_under_a_named_token_or_the_operators_header",
        yaml,
        Vec::new(),
        Duration::ZERO,
        &[
            "--token-env",
            "SERVER_TOKEN",
            "--user-token",
            "alice=ALICE_TOKEN",
            "--approver-header",
            "X-Forwarded-User",
        ],
        &[("SERVER_TOKEN", "server-9c1"), ("ALICE_TOKEN", "alice-77f")],
    ) else {
        return;
    };
    let rt = &p.rt;
    let call = |token: &str, user: Option<&str>, path: &str, body: Value| {
        rt.block_on(async {
            let mut r = common::http()
                .post(p.server.url(path))
                .bearer_auth(token)
                .json(&body);
            if let Some(u) = user {
                r = r.header("X-Forwarded-User", u);
            }
            let r = r.send().await.expect("POST");
            (
                r.status().as_u16(),
                r.json::<Value>().await.unwrap_or(Value::Null),
            )
        })
    };
    let (code, run) = call(
        "server-9c1",
        None,
        "/api/v1/runs",
        json!({"pipeline": "treadle"}),
    );
    assert_eq!(code, 201, "{run}");
    let id = run["id"].as_u64().expect("id");
    // Alice approves on the page, opened with her token: the page says `web`, the record says alice.
    p.b.goto(&p.server.url(&format!("/runs/{id}#token=alice-77f")));
    p.b.wait_for(
        "the approve button",
        "document.querySelector('#step-0 button.approve')",
        WAIT,
    );
    p.b.click("#step-0 button.approve");
    p.b.wait_for(
        "alice's approval on the page",
        "document.querySelector('#step-0 .approval')?.textContent.includes('approved by alice')",
        WAIT,
    );
    // The server's own token names nobody: without the header it is refused, with it the
    // header's user answers, whatever the body says.
    let path = format!("/api/v1/runs/{id}/approvals/1");
    common::server::eventually("the second approval to wait", || {
        p.b.eval(
            "return !!document.querySelector('#step-1 button.approve')",
            json!([]),
        ) == json!(true)
    });
    let (refused, why) = call(
        "server-9c1",
        None,
        &path,
        json!({"decision": "approve", "by": "mallory"}),
    );
    assert_eq!(refused, 403, "{why}");
    assert!(
        why["error"]
            .as_str()
            .is_some_and(|e| e.to_lowercase().contains("x-forwarded-user")),
        "{why}"
    );
    let (ok, answer) = call(
        "server-9c1",
        Some("bob"),
        &path,
        json!({"decision": "approve", "by": "mallory"}),
    );
    assert_eq!(ok, 200, "{answer}");
    assert_eq!(answer["by"], json!("bob"));
    p.b.wait_for(
        "bob's approval on the page",
        "document.querySelector('#step-1 .approval')?.textContent.includes('approved by bob')",
        WAIT,
    );
    let decided = rt.block_on(async {
        common::http()
            .get(p.server.url("/api/v1/approvals?state=decided"))
            .bearer_auth("alice-77f")
            .send()
            .await
            .expect("GET")
            .json::<Value>()
            .await
            .expect("JSON")
    });
    let by: Vec<&Value> = decided
        .as_array()
        .expect("list")
        .iter()
        .map(|a| &a["by"])
        .collect();
    assert_eq!(by.len(), 2, "{decided}");
    assert!(
        by.contains(&&json!("alice")) && by.contains(&&json!("bob")),
        "{decided}"
    );
}
