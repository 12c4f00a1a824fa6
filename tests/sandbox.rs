//! One sandbox policy for a step's commands (docs/security.md, "The sandbox policy"), as
//! real `treadle` processes: the user's toolchains run confined (rustup's cargo and rustc,
//! node, a pyenv shim in a home of its own); credential places stay out, with the hint; a
//! declared cache keeps a `cargo test`'s build for the next run; TCP is off unless
//! `network:` grants it, and the serving server's port is off whatever the grant; treadle's
//! and its keepers' environment and memory are unreadable.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::Fixture;
use common::server::{Server, get, post};
use serde_json::{Value, json};

/// The Landlock ABI, or `None` after printing why the test is skipped.
fn landlock(tcp: bool) -> Option<i32> {
    let Some(abi) = treadle::confine::abi() else {
        let why = treadle::confine::unavailable().map_or("no Landlock".into(), |w| w.to_string());
        eprintln!("SKIP: {why}");
        return None;
    };
    if tcp && abi < 4 {
        eprintln!("SKIP: Landlock ABI {abi} has no TCP rules");
        return None;
    }
    Some(abi)
}

fn on_path(program: &str) -> bool {
    treadle::environ::find_program(program).is_some()
}

#[test]
fn the_users_toolchains_run_in_a_confined_task() {
    if landlock(false).is_none() {
        return;
    }
    if !on_path("cargo") || !on_path("rustc") {
        eprintln!("SKIP: no cargo/rustc on PATH");
        return;
    }
    let node = if on_path("node") {
        "\n  - task: node\n    run: node --version\n"
    } else {
        eprintln!("SKIP (node part): no node on PATH");
        ""
    };
    let f = Fixture::new(&format!(
        "plan:\n  - task: cargo\n    run: cargo --version\n  - task: rustc\n    run: rustc --version\n{node}"
    ));
    let run = f.treadle(&["run"]);
    let out = run.stdout();
    assert_eq!(run.code(), 0, "{out}\n{}", run.stderr());
    assert!(
        out.contains("cargo 1.") && out.contains("rustc 1."),
        "{out}"
    );
    if !node.is_empty() {
        assert!(out.contains("│ v"), "{out}");
    }
}

/// Makes the layout pyenv makes under `home`: a shim on PATH that runs pyenv's own
/// program, which reads the chosen version and runs that version's `python3` (here a link
/// to the system's).
fn fake_pyenv(home: &Path) {
    let root = home.join(".pyenv");
    for d in ["shims", "libexec", "versions/3.12.0/bin"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let shim = format!(
        "#!/bin/sh\nset -e\nprogram=\"${{0##*/}}\"\nexport PYENV_ROOT=\"{root}\"\nexec \"{root}/libexec/pyenv\" exec \"$program\" \"$@\"\n",
        root = root.display()
    );
    let pyenv = "#!/bin/sh\n[ \"$1\" = exec ] || exit 2\nshift\nprogram=\"$1\"; shift\nversion=$(cat \"$PYENV_ROOT/version\")\nexec \"$PYENV_ROOT/versions/$version/bin/$program\" \"$@\"\n";
    std::fs::write(root.join("shims/python3"), shim).unwrap();
    std::fs::write(root.join("libexec/pyenv"), pyenv).unwrap();
    std::fs::write(root.join("version"), "3.12.0\n").unwrap();
    let python = treadle::environ::find_program("python3").unwrap();
    std::os::unix::fs::symlink(python, root.join("versions/3.12.0/bin/python3")).unwrap();
    for f in ["shims/python3", "libexec/pyenv"] {
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(root.join(f), mode).unwrap();
    }
}

/// `PATH` with `first` in front of the system's directories.
fn path_with(first: &Path) -> String {
    format!("{}:/usr/local/bin:/usr/bin:/bin", first.display())
}

#[test]
fn python_runs_through_a_pyenv_shim_in_a_home_of_its_own() {
    if landlock(false).is_none() {
        return;
    }
    if !on_path("python3") {
        eprintln!("SKIP: no python3 on PATH");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    fake_pyenv(home.path());
    let f = Fixture::new("plan:\n  - task: py\n    run: python3 --version\n");
    let path = path_with(&home.path().join(".pyenv/shims"));
    let home_str = home.path().to_string_lossy().into_owned();
    let run = f.treadle_env(&["run"], &[("HOME", &home_str), ("PATH", &path)]);
    let out = run.stdout();
    assert_eq!(run.code(), 0, "{out}\n{}", run.stderr());
    assert!(out.contains("Python 3."), "{out}");
}

#[test]
fn credentials_and_toolchain_programs_are_refused_with_the_hint() {
    if landlock(false).is_none() {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    std::fs::create_dir_all(h.join(".ssh")).unwrap();
    std::fs::create_dir_all(h.join(".cargo/bin")).unwrap();
    std::fs::write(h.join(".ssh/id_rsa"), "PRIVATE KEY").unwrap();
    std::fs::write(h.join(".cargo/credentials.toml"), "token = \"SECRET\"").unwrap();
    let f = Fixture::new(
        "plan:\n  - in_parallel:\n      fail_fast: false\n      steps:\n        - task: key\n          run: cat ~/.ssh/id_rsa\n        - task: token\n          run: cat ~/.cargo/credentials.toml\n        - task: plant\n          run: echo evil > ~/.cargo/bin/cargo\n",
    );
    let path = path_with(&h.join(".cargo/bin"));
    let home_str = h.to_string_lossy().into_owned();
    let run = f.treadle_env(&["run"], &[("HOME", &home_str), ("PATH", &path)]);
    let out = format!("{}{}", run.stdout(), run.stderr());
    assert_ne!(run.code(), 0, "{out}");
    assert!(
        !out.contains("PRIVATE KEY") && !out.contains("SECRET"),
        "{out}"
    );
    assert!(!h.join(".cargo/bin/cargo").exists(), "{out}");
    for refused in [".ssh/id_rsa", ".cargo/credentials.toml", ".cargo/bin/cargo"] {
        assert!(
            out.contains(&format!("{refused}` is outside")),
            "{refused}: {out}"
        );
    }
}

const CRATE: &str = r#"mkdir -p src
printf '[package]\nname = "tiny"\nversion = "0.1.0"\nedition = "2021"\n' > Cargo.toml
printf '#[test]\nfn adds() { assert_eq!(1 + 1, 2); }\n' > src/lib.rs
# The same sources every run: old times, so that the kept build is up to date.
touch -d 2020-01-01 Cargo.toml src/lib.rs
cargo test --offline 2>&1
"#;

#[test]
fn a_declared_cache_keeps_a_cargo_build_for_the_next_run() {
    if landlock(false).is_none() {
        return;
    }
    if !on_path("cargo") {
        eprintln!("SKIP: no cargo on PATH");
        return;
    }
    let indented: String = CRATE.lines().map(|l| format!("      {l}\n")).collect();
    let f = Fixture::new(&format!(
        "plan:\n  - task: test\n    volatile: true\n    caches: [{{path: target}}]\n    run: |\n{indented}"
    ));
    let timed = || {
        let started = Instant::now();
        let run = f.treadle(&["run"]);
        (run, started.elapsed())
    };
    let (first, cold) = timed();
    assert_eq!(first.code(), 0, "{}\n{}", first.stdout(), first.stderr());
    assert!(
        first.stdout().contains("Compiling tiny"),
        "{}",
        first.stdout()
    );
    let (second, warm) = timed();
    assert_eq!(second.code(), 0, "{}", second.stdout());
    assert!(
        second.stdout().contains("test adds ... ok"),
        "{}",
        second.stdout()
    );
    assert!(
        !second.stdout().contains("Compiling tiny"),
        "the kept build was not used:\n{}",
        second.stdout()
    );
    eprintln!("cargo test: {cold:?} cold, {warm:?} with the cache");
    assert!(warm < cold, "{warm:?} >= {cold:?}");
}

/// A loopback listener answering every connection with one line, on its own thread.
fn listener() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            use std::io::Write;
            let _ = (&s).write_all(b"hello\n");
        }
    });
    port
}

/// A task line that tries a TCP connection to `port` and prints `REACHED PORT` or
/// `REFUSED PORT ERRNO` (13, EACCES, when the sandbox refused it).
fn probe(port: u16) -> String {
    format!(
        "python3 -c 'import socket; s = socket.socket(); s.settimeout(5); r = s.connect_ex((\"127.0.0.1\", {port})); print(\"REACHED\" if r == 0 else \"REFUSED\", {port}, r)'"
    )
}

#[test]
fn tcp_is_off_unless_network_grants_the_port() {
    if landlock(true).is_none() || !on_path("python3") {
        return;
    }
    let (granted, other) = (listener(), listener());
    let yaml = format!(
        "plan:\n  - task: default\n    run: |\n      {p1}\n  - task: granted\n    network: [localhost:{granted}]\n    run: |\n      {p1}; {p2}\n  - task: any\n    network: any\n    run: |\n      {p2}\n  - task: loop\n    network: loopback\n    run: |\n      {p2}\n",
        p1 = probe(granted),
        p2 = probe(other)
    );
    let f = Fixture::new(&yaml);
    let out = f.treadle(&["run"]).stdout();
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(" REACHED ") || l.contains(" REFUSED "))
        .collect();
    let expected = [
        format!("REFUSED {granted}"),
        format!("REACHED {granted}"),
        format!("REFUSED {other}"),
        format!("REACHED {other}"),
        format!("REFUSED {other}"),
    ];
    assert_eq!(lines.len(), expected.len(), "{out}");
    for (line, want) in lines.iter().zip(&expected) {
        assert!(line.contains(want.as_str()), "{want} in {line}:\n{out}");
    }
}

#[test]
fn a_failed_connection_gets_the_network_hint() {
    if landlock(true).is_none() || !on_path("python3") {
        return;
    }
    let port = listener();
    let f = Fixture::new(&format!(
        "plan:\n  - task: fetch\n    run: |\n      python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))'\n"
    ));
    let out = f.treadle(&["run"]).stdout();
    assert!(out.contains("`network:` grants it"), "{out}");
}

#[test]
fn a_step_cannot_read_the_environment_or_memory_of_treadle_or_its_keeper() {
    if landlock(false).is_none() {
        return;
    }
    let f = Fixture::new(
        r#"plan:
  - task: snoop
    run: |
      # Its keeper and treadle; in a PID namespace of its own (its parent is 0 there),
      # every other process it can see.
      if [ "$PPID" != 0 ]; then
        keeper=$PPID
        others="$keeper $(awk '/^PPid/{print $2}' /proc/$keeper/status)"
      else
        others=$(ls /proc | grep -E '^[0-9]+$' | grep -vx "$$")
        echo "sees $(echo $others | wc -w) other processes"
      fi
      for p in $others; do
        # Open it may, on some kernels; nothing may be in it.
        if [ -n "$(tr -d '\0' < /proc/$p/environ 2>/dev/null)" ]; then echo "READ environ of $p"; fi
        python3 -c 'import sys
      p = sys.argv[1]
      at = int(open("/proc/%s/maps" % p).readline().split("-")[0], 16)
      with open("/proc/%s/mem" % p, "rb") as f:
          f.seek(at); f.read(1)
      print("READ mem of", p)' $p 2>/dev/null
        if grep -q CANARY /proc/$p/environ 2>/dev/null; then echo "CANARY of $p"; fi
      done
      echo snooped
"#,
    );
    let run = f.treadle_env(&["run"], &[("TREADLE_TEST_CANARY", "CANARY")]);
    let out = run.stdout();
    assert!(out.contains("snooped"), "{out}");
    assert!(
        !out.contains("READ ") && !out.contains("CANARY of"),
        "{out}"
    );
}

async fn until(s: &Server, what: &str, path: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let (_, v) = get(s, path).await;
        if ok(&v) {
            return v;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never {what}: {v}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_granted_any_network_cannot_reach_its_own_server() {
    if landlock(true).is_none() || !on_path("python3") {
        return;
    }
    let f = Fixture::new("plan:\n  - task: placeholder\n    run: 'true'\n");
    let s = Server::start(f.path(), &[], &[]);
    let port: u16 = s
        .base
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap();
    let elsewhere = listener();
    std::fs::write(
        f.file(),
        format!(
            "plan:\n  - task: attack\n    network: any\n    run: |\n      {}; {}\n",
            probe(port),
            probe(elsewhere)
        ),
    )
    .unwrap();
    let (code, v) = post(&s, "/api/v1/runs", json!({"pipeline": "treadle"})).await;
    assert_eq!(code, 201, "{v}");
    let id = v["id"].as_u64().unwrap();
    let run = until(&s, "finished", &format!("/api/v1/runs/{id}"), |r| {
        r["status"] == "succeeded" || r["status"] == "failed"
    })
    .await;
    let tail = run["steps"][0]["output_tail"].as_str().unwrap_or_default();
    assert!(tail.contains(&format!("REFUSED {port}")), "{run}");
    assert!(tail.contains(&format!("REACHED {elsewhere}")), "{run}");
}
