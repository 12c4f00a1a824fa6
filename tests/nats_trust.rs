//! Who may talk to the workers, and how a worker leaves, against the real binaries
//! (`treadle serve --nats`, `treadle worker`, `nats-server` on loopback):
//!
//! * `user_password_token_and_nkey_authenticate`: a `nats-server` configured for a user
//!   and password, one for a token and one for an nkey; a server and a worker given the
//!   credentials in each conventional form (`nats://user:pass@`, `NATS_TOKEN`,
//!   `--nats-nkey FILE`) run a step; no secret appears in their output.
//! * `a_creds_file_authenticates_against_an_operator_mode_server`: an operator-mode
//!   `nats-server` (operator, system account and an account with JetStream, as JWTs made
//!   here with `nkeys`, preloaded in a memory resolver); a server and a worker given a user's
//!   creds file (`--nats-creds`) run a step; without it they are refused.
//! * `a_client_certificate_is_verified`: a CA, a server certificate and a client certificate
//!   made with the `openssl` CLI, a `nats-server` with `tls { verify: true }`; a server and a
//!   worker with the client certificate run a step; a worker without one is refused at once
//!   (exit 2) saying the TLS handshake failed and which options give a certificate.
//! * `a_forged_step_message_is_refused`: with a signing key shared by the server and the
//!   worker, a run goes through; a step message published by someone else, unsigned or
//!   signed with another key, is refused and logged, and its command never runs.
//! * `a_sigtermed_worker_finishes_its_step_and_exits_0`: SIGTERM while a worker runs a
//!   step: the step finishes there, its result is stored, the worker exits 0, and the step
//!   is not run again by the other worker; meanwhile `/metrics` shows the step in flight
//!   and the workers seen with their slots.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::Fixture;
use common::nats::{Nats, Worker, lines, wait_status};
use common::server::{Server, post};
use serde_json::{Value, json};

/// Runs a one-task pipeline through a server and a worker given `args` and `env`; the
/// output of both.
async fn one_step(nats_args: &[&str], env: &[(&str, &str)]) -> String {
    let f = Fixture::new(
        "jobs:\n  - name: main\n    plan:\n      - task: hello\n        run: echo hello\n",
    );
    let mut serve_args = vec!["treadle.yml"];
    serve_args.extend_from_slice(nats_args);
    let server = Server::start(f.path(), &serve_args, env);
    let mut worker_args = nats_args.to_vec();
    worker_args.extend(["--slots", "1"]);
    let worker = Worker::start_with(&worker_args, &f.path().join("w"), env);
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    let done = wait_status(&server, run, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}\n{}", worker.log());
    let out = server.stop();
    format!(
        "{}{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        worker.log()
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn user_password_token_and_nkey_authenticate() {
    let test = "user_password_token_and_nkey_authenticate";
    let Some(users) = Nats::with_config(
        test,
        "jetstream {}\nauthorization { user: ann, password: s3cret-pw }\n",
    ) else {
        return;
    };
    let url = format!("nats://ann:s3cret-pw@127.0.0.1:{}", users.port);
    let said = one_step(&["--nats", &url], &[]).await;
    assert!(
        !said.contains("s3cret-pw"),
        "the password was shown: {said}"
    );
    drop(users);

    let token = Nats::with_config(test, "jetstream {}\nauthorization { token: t0ken-xyz }\n")
        .expect("nats-server");
    let said = one_step(&["--nats", &token.url], &[("NATS_TOKEN", "t0ken-xyz")]).await;
    assert!(!said.contains("t0ken-xyz"), "the token was shown: {said}");
    drop(token);

    let pair = nkeys::KeyPair::new_user();
    let seed = pair.seed().expect("seed");
    let conf = format!(
        "jetstream {{}}\nauthorization {{ users: [ {{ nkey: {} }} ] }}\n",
        pair.public_key()
    );
    let nkey = Nats::with_config(test, &conf).expect("nats-server");
    let dir = tempfile::tempdir().expect("temp dir");
    let seed_file = dir.path().join("user.nk");
    std::fs::write(&seed_file, &seed).expect("seed file");
    let seed_arg = seed_file.display().to_string();
    let said = one_step(&["--nats", &nkey.url, "--nats-nkey", &seed_arg], &[]).await;
    assert!(!said.contains(&seed), "the seed was shown: {said}");
    // Without the seed the server refuses, and says how to fix it.
    let f =
        Fixture::new("jobs:\n  - name: main\n    plan:\n      - task: t\n        run: 'true'\n");
    let refused = f.treadle(&["worker", "--nats", &nkey.url, "--dir", "w"]);
    refused.expect_code(2);
    assert!(
        refused.stderr().contains("--nats-nkey"),
        "{}",
        refused.stderr()
    );
}

/// A JWT as NATS reads them: `base64url(header).base64url(claims).base64url(signature)`,
/// the signature ed25519 over the first two parts by the issuer's nkey.
fn jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: Value) -> String {
    use base64::Engine as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = b64(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let claims = json!({
        "jti": format!("{name}-{subject}"), "iat": 1_700_000_000u64,
        "iss": issuer.public_key(), "sub": subject, "name": name, "nats": nats,
    });
    let claims = b64(claims.to_string().as_bytes());
    let signed = format!("{header}.{claims}");
    let signature = issuer.sign(signed.as_bytes()).expect("sign");
    format!("{signed}.{}", b64(&signature))
}

/// An operator-mode nats-server's config (an operator, its system account, and an account
/// with JetStream, preloaded in a memory resolver) and a creds file of a user of that
/// account, as `nsc` would make them.
fn operator_mode() -> (String, String) {
    let (operator, system, account, user) = (
        nkeys::KeyPair::new_operator(),
        nkeys::KeyPair::new_account(),
        nkeys::KeyPair::new_account(),
        nkeys::KeyPair::new_user(),
    );
    let limits = json!({"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1});
    let mut with_js = limits.clone();
    for key in ["mem_storage", "disk_storage", "streams", "consumer"] {
        with_js[key] = json!(-1);
    }
    let account_claims = |limits: Value| {
        json!({"limits": limits, "default_permissions": {"pub": {}, "sub": {}},
            "type": "account", "version": 2})
    };
    let op = jwt(
        &operator,
        &operator.public_key(),
        "op",
        json!({"type": "operator", "version": 2, "system_account": system.public_key()}),
    );
    let sys = jwt(
        &operator,
        &system.public_key(),
        "SYS",
        account_claims(limits),
    );
    let acc = jwt(
        &operator,
        &account.public_key(),
        "acc",
        account_claims(with_js),
    );
    let usr = jwt(
        &account,
        &user.public_key(),
        "worker",
        json!({"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1,
            "type": "user", "version": 2}),
    );
    let conf = format!(
        "operator: \"{op}\"\nsystem_account: {s}\nresolver: MEMORY\nresolver_preload: {{\n  {s}: \"{sys}\"\n  {a}: \"{acc}\"\n}}\njetstream {{}}\n",
        s = system.public_key(),
        a = account.public_key()
    );
    let creds = format!(
        "-----BEGIN NATS USER JWT-----\n{usr}\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
        user.seed().expect("seed")
    );
    (conf, creds)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_creds_file_authenticates_against_an_operator_mode_server() {
    let test = "a_creds_file_authenticates_against_an_operator_mode_server";
    let (conf, creds) = operator_mode();
    let Some(nats) = Nats::with_config(test, &conf) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("worker.creds");
    std::fs::write(&file, &creds).expect("creds file");
    let file = file.display().to_string();
    let said = one_step(&["--nats", &nats.url, "--nats-creds", &file], &[]).await;
    let seed = creds
        .lines()
        .find(|l| l.starts_with("SU"))
        .expect("the seed");
    assert!(!said.contains(seed), "the seed was shown: {said}");
    let f =
        Fixture::new("jobs:\n  - name: main\n    plan:\n      - task: t\n        run: 'true'\n");
    let refused = f.treadle(&["worker", "--nats", &nats.url, "--dir", "w"]);
    refused.expect_code(2);
    assert!(
        refused.stderr().contains("authorization violation"),
        "{}",
        refused.stderr()
    );
}

/// Runs `openssl ARGS` in `dir`; `false` when it is not installed.
fn openssl(dir: &Path, args: &[&str]) -> bool {
    let Ok(out) = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
    else {
        return false;
    };
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    true
}

/// A CA (`ca.pem`), and `NAME.pem`/`NAME.key` signed by it for each of `server` (for
/// 127.0.0.1) and `client`, in `dir`; `false` without the `openssl` CLI.
fn certificates(dir: &Path) -> bool {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
    ]);
    if !openssl(dir, &ca) {
        return false;
    }
    let uses = [
        (
            "server",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        ),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ];
    for (who, ext) in uses {
        std::fs::write(dir.join(format!("{who}.ext")), ext).expect("extensions");
        let (key, csr, pem) = (
            format!("{who}.key"),
            format!("{who}.csr"),
            format!("{who}.pem"),
        );
        let subject = format!("/CN=treadle-{who}");
        let mut req = vec!["req"];
        req.extend(ec);
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
        openssl(dir, &req);
        let ext = format!("{who}.ext");
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
    }
    true
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_certificate_is_verified() {
    let test = "a_client_certificate_is_verified";
    let dir = tempfile::tempdir().expect("temp dir");
    if !certificates(dir.path()) {
        eprintln!("SKIP {test}: the openssl CLI is not installed (apt-get install openssl)");
        return;
    }
    let at = |name: &str| dir.path().join(name).display().to_string();
    let conf = format!(
        "jetstream {{}}\ntls {{\n  cert_file: \"{}\"\n  key_file: \"{}\"\n  ca_file: \"{}\"\n  verify: true\n}}\n",
        at("server.pem"),
        at("server.key"),
        at("ca.pem")
    );
    let Some(nats) = Nats::with_config(test, &conf) else {
        return;
    };
    let (ca, cert, key) = (at("ca.pem"), at("client.pem"), at("client.key"));
    let with_cert = [
        "--nats",
        &nats.url,
        "--nats-ca",
        &ca,
        "--nats-tls-cert",
        &cert,
        "--nats-tls-key",
        &key,
    ];
    one_step(&with_cert, &[]).await;
    // Without a certificate: refused at once, not waited on as if NATS were away.
    let f =
        Fixture::new("jobs:\n  - name: main\n    plan:\n      - task: t\n        run: 'true'\n");
    let mut refused = Worker::start_with(
        &["--nats", &nats.url, "--nats-ca", &ca],
        &f.path().join("w"),
        &[],
    );
    let code = refused.wait_exit(Duration::from_secs(30));
    let log = refused.log();
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("the TLS handshake failed"), "{log}");
    assert!(log.contains("--nats-tls-cert"), "{log}");
}

/// A step message as a server would send it, running `command`.
fn forged_job(command: &str, key: &str) -> Vec<u8> {
    let source = format!(
        "jobs:\n  - name: main\n    plan:\n      - task: evil\n        confined: false\n        run: {command}\n"
    );
    serde_json::to_vec(&json!({
        "key": key, "run": 1, "seq": 1, "attempt": 1, "file": "treadle.yml",
        "source": source, "job": "main", "vars": {}, "inputs": [], "tokens_spent": 0,
    }))
    .expect("json")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_step_message_is_refused() {
    let Some(nats) = Nats::start("a_forged_step_message_is_refused") else {
        return;
    };
    let env = [("TREADLE_NATS_SIGNING_KEY", "the shared secret")];
    let f = Fixture::new(
        "jobs:\n  - name: main\n    plan:\n      - task: hello\n        run: echo hello\n",
    );
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &env);
    let worker = Worker::start(&nats.url, 1, &f.path().join("w"), &env);
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    let done = wait_status(&server, run, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "signed steps run: {done}");
    let outside = tempfile::tempdir().expect("temp dir");
    let marker = outside.path().join("pwned");
    let client = async_nats::connect(&nats.url).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let unsigned = forged_job(&format!("touch {}", marker.display()), "x.1.1.1");
    js.publish("treadle.steps", unsigned.into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Treadle-Signature", "00".repeat(32).as_str());
    let wrong = forged_job(&format!("touch {}", marker.display()), "x.1.1.2");
    js.publish_with_headers("treadle.steps", headers, wrong.into())
        .await
        .expect("publish")
        .await
        .expect("stored");
    common::server::eventually("both refused", || {
        worker.log().matches("refusing a step message").count() >= 2
    });
    let log = worker.log();
    assert!(log.contains("it is not signed"), "{log}");
    assert!(log.contains("signature does not match"), "{log}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!marker.exists(), "a forged step ran");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigtermed_worker_finishes_its_step_and_exits_0() {
    let Some(nats) = Nats::start("a_sigtermed_worker_finishes_its_step_and_exits_0") else {
        return;
    };
    let outside = tempfile::tempdir().expect("temp dir");
    let (started, counter) = (
        outside.path().join("started"),
        outside.path().join("counter"),
    );
    let f = Fixture::new(&format!(
        "jobs:\n  - name: main\n    plan:\n      - task: long\n        confined: false\n        run: echo long >> {s}; sleep 4; echo long >> {c}\n",
        s = started.display(),
        c = counter.display()
    ));
    let server = Server::start(f.path(), &["treadle.yml", "--nats", &nats.url], &[]);
    let mut first = Worker::start(&nats.url, 2, &f.path().join("w0"), &[]);
    let (code, body) = post(&server, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{body}");
    let run = body["id"].as_u64().expect("id");
    common::server::eventually("the step started", || !lines(&started).is_empty());
    let metrics = server
        .http()
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("treadle_nats_steps_in_flight 1"),
        "{metrics}"
    );
    assert!(metrics.contains("treadle_nats_up 1"), "{metrics}");
    assert!(metrics.contains("state=\"total\"} 2"), "{metrics}");
    first.signal("TERM");
    // Another worker is free to take the step, were it handed back.
    let _second = Worker::start(&nats.url, 2, &f.path().join("w1"), &[]);
    let code = tokio::task::spawn_blocking(move || {
        let code = first.wait_exit(Duration::from_secs(30));
        (code, first.log())
    })
    .await
    .expect("join");
    assert_eq!(code.0, Some(0), "drained and exited 0: {}", code.1);
    assert!(code.1.contains("draining"), "{}", code.1);
    let done = wait_status(&server, run, Duration::from_secs(60)).await;
    assert_eq!(done["status"], "succeeded", "{done}");
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(lines(&started), ["long"], "run once");
    assert_eq!(lines(&counter), ["long"], "finished once");
}
