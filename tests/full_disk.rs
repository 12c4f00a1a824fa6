//! A run that fills the disk ends as `errored` in the state file once the disk has room
//! again (issue 25 item 7): the run says so when it ends, and the next `treadle runs`
//! records and shows it.
//!
//! The disk is a real one: a small tmpfs mounted in a mount namespace of its own
//! (`unshare -rm`), so that nothing outside the test sees it. Without `unshare` or the right
//! to mount, the test fails and says why (CI runs as root), unless
//! `TREADLE_ALLOW_NO_UNSHARE=1` makes it a visible skip.

use crate::common::Fixture;

use std::process::Command;

/// The pipeline: its first task says where it runs and waits there for a file `go`, then
/// prints 20,000 lines (the run's journal must grow to keep them); the second prints. A
/// task may write only in its step directory, which is removed after the step, so the disk
/// is filled from outside while the task waits.
const WAITS: &str = "plan:
  - task: wait
    run: 'echo \"waiting in $PWD\"; while [ ! -e go ]; do sleep 0.05; done; seq 1 20000'
  - task: after
    run: echo after
";

/// Inside the namespace: mount the tmpfs over `proj`, start the run there, fill the disk
/// once its task waits, let the task go on, then free the space and list the runs twice.
/// Outputs go beside `proj`, off the full disk.
const SCRIPT: &str = r#"set -u
out="$1"; bin="$2"
mkdir -p "$out/proj"
mount -t tmpfs -o size=4m tmpfs "$out/proj" || { echo "cannot mount a tmpfs" >&2; exit 97; }
cp "$out/treadle.yml" "$out/proj/"
cd "$out/proj"
"$bin" run > "$out/run.out" 2> "$out/run.err" &
run=$!
tries=0
until grep -q 'waiting in /' "$out/run.out"; do
  tries=$((tries + 1))
  if [ "$tries" -gt 1200 ]; then echo "the task never started" >&2; kill "$run"; exit 98; fi
  sleep 0.05
done
step=$(sed -n 's/.*waiting in \(\/.*\)$/\1/p' "$out/run.out" | head -n 1)
dd if=/dev/zero of=fill bs=64k 2>/dev/null
df -k . | tail -n 1 > "$out/df"
: > "$step/go"
wait "$run"; echo $? > "$out/run.code"
rm -f fill
"$bin" runs > "$out/runs1.out" 2> "$out/runs1.err"; echo $? > "$out/runs1.code"
"$bin" runs > "$out/runs2.out" 2> "$out/runs2.err"; echo $? > "$out/runs2.code"
"$bin" runs --steps 1 > "$out/steps.out" 2>&1
"#;

fn read(f: &Fixture, name: &str) -> String {
    std::fs::read_to_string(f.path().join(name)).unwrap_or_default()
}

#[test]
fn a_run_that_fills_the_disk_is_recorded_errored_once_there_is_room() {
    let f = Fixture::new(WAITS);
    let ran = Command::new("unshare")
        .args(["-rm", "sh", "-c", SCRIPT, "sh"])
        .arg(f.path())
        .arg(env!("CARGO_BIN_EXE_treadle"))
        .output();
    let ok = ran.as_ref().is_ok_and(|o| o.status.success());
    if !ok {
        let why = match &ran {
            Ok(o) => String::from_utf8_lossy(&o.stderr).into_owned(),
            Err(e) => format!("unshare: {e}"),
        };
        if std::env::var("TREADLE_ALLOW_NO_UNSHARE").as_deref() == Ok("1") {
            eprintln!("SKIP a_run_that_fills_the_disk...: no mount namespace: {why}");
            return;
        }
        panic!(
            "this test needs `unshare -rm` and a tmpfs mount (root, or user namespaces): {why}\n\
             (TREADLE_ALLOW_NO_UNSHARE=1 skips it)"
        );
    }
    let (run_err, df) = (read(&f, "run.err"), read(&f, "df"));
    let context = format!(
        "--- run stdout\n{}\n--- run stderr\n{run_err}\n--- df\n{df}",
        read(&f, "run.out")
    );
    // The disk was full when the run ended (the test's own premise).
    let avail: Vec<&str> = df.split_whitespace().collect();
    assert_eq!(avail.get(3).copied(), Some("0"), "{context}");
    assert_eq!(read(&f, "run.code").trim(), "2", "{context}");
    assert!(read(&f, "run.out").contains("errored"), "{context}");
    assert!(
        run_err.contains("run 1 errored, but the state file could not record it")
            && run_err.contains("is the disk full?")
            && run_err.contains("it is recorded as errored the next time treadle opens"),
        "the run says its end is not recorded yet, and when it will be\n{context}"
    );

    let (first, first_err) = (read(&f, "runs1.out"), read(&f, "runs1.err"));
    assert_eq!(read(&f, "runs1.code").trim(), "0", "{first}{first_err}");
    let row = first.lines().find(|l| l.trim_start().starts_with("1 "));
    assert!(
        row.is_some_and(|r| r.contains("errored") && !r.contains("interrupted")),
        "run 1 is errored in the state once there is room:\n{first}{first_err}"
    );
    assert!(
        first_err.contains("recorded run 1 as errored"),
        "the runs that records it says so: {first_err}"
    );
    // Recorded once: the note is gone, the state file keeps the end.
    let (second, second_err) = (read(&f, "runs2.out"), read(&f, "runs2.err"));
    assert_eq!(read(&f, "runs2.code").trim(), "0", "{second}{second_err}");
    assert!(second.contains("errored"), "{second}");
    assert!(!second_err.contains("recorded run"), "{second_err}");
    let steps = read(&f, "steps.out");
    assert!(
        !steps.contains("running") && !steps.contains("pending"),
        "no step is left open: {steps}"
    );
    assert!(
        steps.contains("not recorded: the state file could not be written"),
        "the steps say why they have no record: {steps}"
    );
}
