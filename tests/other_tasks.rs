//! A confined step cannot see another task running at the same time as the same user
//! (docs/security.md, "Other processes"): two confined tasks of one run at once, one
//! holding a secret in its environment and its command line, the other looking through
//! every `/proc/PID` it can see (`environ`, `cmdline`, `mem`) and `ps`. It finds neither
//! the secret nor the other task, nor treadle or a keeper.

use crate::common;

use std::io::Read;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use common::Fixture;

const SECRET: &str = "other-task-secret-5d1e9a";

/// The attacker: waits for `go` in its step directory (the test writes it once the holder
/// runs), then reads what every process it can see shows, and `ps`. Prints `FOUND ...` for
/// each place the secret was read, `SEEN n pids`, then `attack over`. The secret is split
/// so that the attacker's own command line does not hold it whole.
fn attacker() -> String {
    let (head, tail) = SECRET.split_at(SECRET.len() / 2);
    format!(
        r#"import os, subprocess, time
print("waiting in", os.getcwd(), flush=True)
while not os.path.exists("go"):
    time.sleep(0.02)
secret = ("{head}" + "{tail}").encode()
me = os.getpid()
pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != me]
for pid in pids:
    for name in ("environ", "cmdline"):
        try:
            if secret in open("/proc/%s/%s" % (pid, name), "rb").read():
                print("FOUND", pid, name)
        except OSError:
            pass
    try:
        with open("/proc/%s/mem" % pid, "rb") as mem:
            for line in open("/proc/%s/maps" % pid):
                lo, hi = [int(x, 16) for x in line.split()[0].split("-")]
                if "rw" not in line.split()[1] or hi - lo > 1 << 28:
                    continue
                try:
                    mem.seek(lo)
                    if secret in mem.read(hi - lo):
                        print("FOUND", pid, "mem")
                except OSError:
                    pass
    except OSError:
        pass
ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True).stdout
if secret in ps:
    print("FOUND ps")
print("SEEN", len(pids), "pids")
print("PS", ps.decode().replace(chr(10), " | "))
print("attack over")
"#
    )
}

fn pipeline() -> String {
    let script: String = attacker()
        .lines()
        .map(|l| format!("        {l}\n"))
        .collect();
    format!(
        "plan:\n  - in_parallel:\n    - task: holder\n      env: {{ HELD: {SECRET} }}\n      run: |\n        : {SECRET}\n        echo holding in $PWD\n        i=0; while [ ! -e done ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done\n    - task: attacker\n      run: |\n        python3 - <<'PY'\n{script}        PY\n"
    )
}

/// Reads `child`'s standard output until it holds a line `{prefix} DIR` for each prefix;
/// returns those directories. Everything read is kept in `seen`.
fn dirs(child: &mut Child, prefixes: &[&str], seen: &mut String) -> Vec<PathBuf> {
    let out = child.stdout.as_mut().expect("stdout");
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        let found: Vec<PathBuf> = prefixes
            .iter()
            .filter_map(|p| {
                seen.lines()
                    .find_map(|l| l.split_once(&format!("{p} ")))
                    .map(|(_, d)| PathBuf::from(d.trim()))
            })
            .collect();
        if found.len() == prefixes.len() {
            return found;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the tasks never started:\n{seen}"
        );
        let n = out.read(&mut buf).expect("read");
        assert!(n > 0, "the run ended early:\n{seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

#[test]
fn a_confined_task_cannot_see_another_task_running_beside_it() {
    if treadle::confine::abi().is_none() || treadle::environ::find_program("python3").is_none() {
        eprintln!("SKIP: needs Landlock and python3");
        return;
    }
    let f = Fixture::new(&pipeline());
    let mut run = common::spawn_run(&f, &[]);
    let mut seen = String::new();
    let found = dirs(&mut run, &["holding in", "waiting in"], &mut seen);
    // The holder runs (its `while` loop): now the attacker looks.
    std::fs::write(found[1].join("go"), "").expect("go");
    let mut rest = String::new();
    let started = Instant::now();
    while !rest.contains("attack over") {
        let mut buf = [0u8; 4096];
        let n = run
            .stdout
            .as_mut()
            .expect("stdout")
            .read(&mut buf)
            .expect("read");
        assert!(n > 0, "the run ended early:\n{seen}{rest}");
        rest.push_str(&String::from_utf8_lossy(&buf[..n]));
        assert!(started.elapsed() < Duration::from_secs(60), "{seen}{rest}");
    }
    std::fs::write(found[0].join("done"), "").expect("done");
    let status = run.wait().expect("wait");
    let mut tail = String::new();
    let _ = run.stdout.take().expect("stdout").read_to_string(&mut tail);
    let all = format!("{seen}{rest}{tail}");
    eprintln!("{all}");
    assert!(status.success(), "{all}");
    // Lines the attacker printed (`attacker │ ...`); its `PS` line quotes its own script.
    let printed: Vec<&str> = all
        .lines()
        .filter_map(|l| l.split_once("attacker │ ").map(|(_, rest)| rest))
        .collect();
    assert!(
        printed.iter().any(|l| l.starts_with("SEEN ")),
        "the attack did not run:\n{all}"
    );
    assert!(
        !printed.iter().any(|l| l.starts_with("FOUND")),
        "the attacker read the secret:\n{all}"
    );
    // Its own shell, python and ps, nothing of the holder's, its keeper's or treadle's.
    let ps = all.lines().find(|l| l.contains("PS ")).unwrap_or_default();
    assert!(!ps.contains("holding in"), "ps shows the holder: {ps}");
    assert!(!ps.contains("treadle"), "ps shows treadle: {ps}");
}

/// The user the unprivileged test runs as when the tests run as root (`nobody`).
const NOBODY: u32 = 65_534;

/// As a user other than root, the keeper makes a user namespace with the PID namespace
/// (and `network: loopback` one with its network namespace), and the command writes its
/// maps: run as `nobody` (through `setpriv` when the tests run as root), a confined task
/// is the first process of its own PID namespace, and the files it writes keep its user;
/// a `network: loopback` task runs the same way. Fails before the maps were written by
/// the command (treadle's forks are not dumpable, so their `/proc/self` maps belong to
/// root): every confined task then ended with status 137 before it started.
#[test]
fn as_a_user_other_than_root_a_task_still_gets_its_own_pids() {
    if treadle::confine::abi().is_none() {
        eprintln!("SKIP: needs Landlock");
        return;
    }
    let root = rustix::process::geteuid().is_root();
    if root && treadle::environ::find_program("setpriv").is_none() {
        eprintln!("SKIP: needs setpriv to run treadle as a user other than root");
        return;
    }
    let f = Fixture::new(
        "plan:\n  - task: own\n    run: |\n      echo \"pid $$ ppid $PPID\"\n      touch made\n      [ \"$(stat -c %u made)\" = \"$(id -u)\" ] && echo \"owner kept\"\n  - task: loop\n    network: loopback\n    run: echo \"loop pid $$\"\n",
    );
    let bin = env!("CARGO_BIN_EXE_treadle");
    let mut cmd = if root {
        let chowned = std::process::Command::new("chown")
            .args(["-R", &format!("{NOBODY}:{NOBODY}")])
            .arg(f.path())
            .status()
            .expect("chown");
        assert!(chowned.success());
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args([
            format!("--reuid={NOBODY}"),
            format!("--regid={NOBODY}"),
            "--clear-groups".to_owned(),
        ])
        .arg(bin);
        cmd
    } else {
        std::process::Command::new(bin)
    };
    let out = cmd
        .arg("run")
        .current_dir(f.path())
        .env("HOME", f.path())
        .env_remove("TREADLE_LOCAL_URL")
        .output()
        .expect("run treadle");
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    for line in ["│ pid 1 ppid 0", "│ owner kept", "│ loop pid 1"] {
        assert!(all.contains(line), "no `{line}`:\n{all}");
    }
}
