// The confinement's own tests: a confined `sh` reads, writes and connects only where its
// policy says, by both ways of applying it.
use super::*;

/// Runs `script` with `sh -c`, confined to `dir` between fork and exec ([`confine`])
/// or by a confined thread ([`spawn`]); returns (exit code, stdout+stderr).
async fn confined(dir: &Path, script: &str, by_thread: bool) -> (i32, String) {
    let mut cmd = tokio::process::Command::new(crate::environ::sh());
    cmd.arg("-c").arg(script).current_dir(dir);
    crate::environ::set_command_env(&mut cmd, &[], std::iter::empty());
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = if by_thread {
        spawn(cmd, dir).await.unwrap()
    } else {
        let policy = Policy {
            dir,
            files: true,
            network: &Network::Any,
            writable: &[],
            readable: &[],
        };
        confine(&mut cmd, &policy).unwrap();
        cmd.spawn().unwrap()
    };
    let out = child.wait_with_output().await.unwrap();
    (out.status.code().unwrap_or(-1), text(&out))
}

fn text(out: &std::process::Output) -> String {
    let (o, e) = (&out.stdout, &out.stderr);
    format!(
        "{}{}",
        String::from_utf8_lossy(o),
        String::from_utf8_lossy(e)
    )
}

#[tokio::test]
async fn a_confined_command_stays_in_its_directory() {
    stays_in_its_directory(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_started_by_a_confined_thread_stays_in_its_directory() {
    stays_in_its_directory(true).await;
    // The domain was the starting thread's alone: the caller (and every other thread
    // of treadle) still reaches outside the step directory.
    let outside = tempfile::tempdir().unwrap();
    let file = outside.path().join("still.txt");
    std::fs::write(&file, "unconfined").unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "unconfined");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_directory_given_relative_still_gets_its_own_tmpdir() {
    if abi().is_none() {
        crate::console::tell!("SKIP: no Landlock");
        return;
    }
    // The step directory as treadle names it, relative to the process's directory;
    // the command runs inside it, where that relative path leads elsewhere.
    let cwd = std::env::current_dir().unwrap();
    let root = tempfile::tempdir_in(&cwd).unwrap();
    let relative = root.path().strip_prefix(&cwd).unwrap().to_path_buf();
    let (code, text) = confined(
        &relative,
        "test -d \"$TMPDIR\" && echo x > \"$TMPDIR/t\" && echo ok",
        true,
    )
    .await;
    assert_eq!((code, text.trim()), (0, "ok"), "{text}");
    assert!(root.path().join(TMP).join("t").is_file());
}

async fn stays_in_its_directory(by_thread: bool) {
    let Some(version) = abi() else {
        let why = unavailable().map_or("no Landlock".to_owned(), ToString::to_string);
        crate::console::tell!("SKIP: {why}");
        return;
    };
    crate::console::tell!("Landlock ABI {version}");
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("steps/1-build-1");
    let other = root.path().join("artifacts/secret");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("data.txt"), "other step's output").unwrap();
    std::fs::write(dir.join("in.txt"), "mine\n").unwrap();

    let (code, text) = confined(
        &dir,
        "cat in.txt && echo out > out.txt && ls /usr/bin >/dev/null && echo ok",
        by_thread,
    )
    .await;
    assert_eq!((code, text.trim()), (0, "mine\nok"), "{text}");
    assert_eq!(
        std::fs::read_to_string(dir.join("out.txt")).unwrap(),
        "out\n"
    );

    for escape in [
        "find ../.. -name data.txt",
        "cat ../../artifacts/secret/data.txt",
        "echo x > ../escaped.txt",
        "echo x > /tmp/treadle-escaped-$$.txt",
        "ls /proc/$PPID/cwd/",
    ] {
        let (code, text) = confined(&dir, escape, by_thread).await;
        assert!(
            !text.contains("data.txt") || text.contains("Permission denied"),
            "{escape}: {text}"
        );
        assert!(!text.contains("other step's output"), "{escape}: {text}");
        assert!(code != 0 || text.is_empty(), "{escape} succeeded: {text}");
    }
    assert!(!root.path().join("steps/escaped.txt").exists());
}
