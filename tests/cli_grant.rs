//! A CLI agent held to its grant (issue 38, docs/security.md "CLI agents"), with the real
//! claude CLI against the scripted Messages endpoint (and codex against the Responses
//! endpoint): its Bash sees no model key (the CLI
//! talks to treadle's loopback proxy with a key of the step's own, and the endpoint still
//! receives the real key), the proxy refuses another key, the endpoint itself is out of
//! reach under the default `network:`, and with only `read_file` granted `/etc/passwd`
//! is unreadable (the test runs as root: Landlock denies it all the same).

use crate::cli_agents::{claude, pipeline, result_text, results, treadle};
use crate::common::Fixture;
use crate::common::cli::scripted;

use serde_json::json;
use treadle_scripted::Reply;

/// The key the tests give the step (`CliUnderTest::treadle`).
const REAL_KEY: &str = "scripted-key";

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_s_bash_sees_no_model_key_and_reaches_only_treadle() {
    let test = "the_cli_s_bash_sees_no_model_key_and_reaches_only_treadle";
    let Some(bin) = claude(test) else {
        return;
    };
    if !std::path::Path::new("/usr/bin/curl").is_file() {
        eprintln!("SKIP {test}: no /usr/bin/curl");
        return;
    }
    // A loopback port that answers any connection: under the default `network:` the
    // CLI's Bash reaches treadle's proxy and nothing else.
    let other = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let direct = format!("http://{}", other.local_addr().expect("addr"));
    std::thread::spawn(move || {
        for stream in other.incoming().flatten() {
            let mut stream = stream;
            let _ = std::io::Write::write_all(
                &mut stream,
                b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n",
            );
        }
    });
    let command = format!(
        "env; \
         curl -s -o /dev/null -w 'wrong-key:%{{http_code}}\\n' -H 'x-api-key: wrong' \
           -H 'content-type: application/json' -d '{{}}' \"$ANTHROPIC_BASE_URL/v1/messages\"; \
         curl -s -m 5 -o /dev/null -w 'direct:%{{http_code}}\\n' {direct}/"
    );
    let server = scripted([
        Reply::tool_call("Bash", json!({"command": command})),
        Reply::text("Done."),
    ])
    .await;
    let plan = "      - agent: coder\n        prompt: Show your environment.\n";
    let f = Fixture::new(&pipeline(
        &server.messages_base_url(),
        "[run_shell]",
        "",
        plan,
    ));
    let run = treadle(&f, &bin, &["run", "--json"]).await;
    run.expect_code(0);
    let requests = server.requests();
    // The wrong key's request never reached the endpoint: two model calls, both with
    // the real key, which the proxy put in.
    assert_eq!(requests.len(), 2, "{requests:#?}");
    for request in &requests {
        assert_eq!(request.header("x-api-key"), Some(REAL_KEY));
    }
    let shown: Vec<String> = results(&requests[1]).iter().map(result_text).collect();
    let shown = shown.join("\n");
    assert!(
        shown.contains("ANTHROPIC_BASE_URL=http://127.0.0.1:"),
        "{shown}"
    );
    assert!(
        !shown.contains(REAL_KEY),
        "the model key reached Bash: {shown}"
    );
    assert!(shown.contains("wrong-key:401"), "{shown}");
    assert!(shown.contains("direct:000"), "{shown}");
    assert!(!run.stdout().contains(REAL_KEY), "{}", run.stdout());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_with_only_read_file_cannot_read_etc_passwd() {
    let Some(bin) = claude("the_cli_with_only_read_file_cannot_read_etc_passwd") else {
        return;
    };
    let server = scripted([
        Reply::tool_call("Read", json!({"file_path": "/etc/passwd"})),
        Reply::text("I could not read it."),
    ])
    .await;
    let plan = "      - agent: coder\n        prompt: Read /etc/passwd.\n";
    let f = Fixture::new(&pipeline(
        &server.messages_base_url(),
        "[read_file]",
        "",
        plan,
    ));
    let run = treadle(&f, &bin, &["run", "--json"]).await;
    run.expect_code(0);
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let read = results(&requests[1]);
    assert_eq!(read.len(), 1, "{read:?}");
    let text = result_text(&read[0]);
    assert!(!text.contains("root:"), "/etc/passwd was read: {text}");
    // Refused by the kernel, not by the CLI's own permission rules.
    assert_eq!(read[0]["is_error"], json!(true), "{text}");
    assert!(text.contains("EACCES"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_s_shell_sees_no_model_key() {
    use crate::codex_agents::{codex, outputs};
    let Some(bin) = codex("codex_s_shell_sees_no_model_key") else {
        return;
    };
    let server = scripted([
        // codex leaves variables named like keys out of its shell's environment itself,
        // so the shell reads codex's own environment too, where a forwarded key was.
        Reply::tool_call(
            "exec_command",
            json!({"cmd": "env; tr '\\0' '\\n' < /proc/$PPID/environ"}),
        ),
        Reply::text("Done."),
    ])
    .await;
    let plan = "      - agent: coder\n        prompt: Show your environment.\n";
    let f = Fixture::new(&crate::codex_agents::pipeline(
        server.base_url(),
        "[run_shell]",
        "",
        plan,
    ));
    let run = crate::codex_agents::treadle(&f, &bin, &["run"]).await;
    run.expect_code(0);
    let requests = server.requests();
    assert_eq!(requests.len(), 2, "{}", run.stdout());
    for request in &requests {
        let bearer = format!("Bearer {REAL_KEY}");
        assert_eq!(request.header("authorization"), Some(bearer.as_str()));
    }
    let shown = outputs(&requests[1]).join("\n");
    assert!(shown.contains("CODEX_HOME="), "{shown}");
    assert!(
        !shown.contains(REAL_KEY),
        "the model key reached the shell: {shown}"
    );
}
