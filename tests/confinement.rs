//! Tasks are confined to their step directory with Landlock: another step's artifacts,
//! the run's directories and the project are out of reach. Where the kernel has no
//! Landlock (made so here with a seccomp filter on the real binary), the run says so once
//! and its tasks run unconfined.

use crate::common;

use std::os::unix::process::CommandExt;
use std::process::Command;

use common::Fixture;

const PIPELINE: &str = r#"
plan:
  - task: produce
    outputs: [secret]
    run: echo classified > secret/data.txt
  - task: snoop
    run: |
      find ../.. -name data.txt 2>&1 | head -n 5
      cat ../../../../treadle.yml 2>&1 | head -n 1
      echo snooped
  - task: again
    run: echo second task ran
"#;

#[test]
fn a_task_cannot_reach_other_steps_or_the_project() {
    let Some(abi) = treadle::confine::abi() else {
        let why = treadle::confine::unavailable().map_or("no Landlock".into(), |w| w.to_string());
        eprintln!("SKIP: {why}");
        return;
    };
    eprintln!("Landlock ABI {abi}");
    let f = Fixture::new(PIPELINE);
    let run = f.treadle(&["run"]);
    run.expect_code(0);
    let out = run.stdout();
    assert!(out.contains("snooped"), "{out}");
    assert!(
        !out.contains("data.txt") || out.contains("Permission denied"),
        "{out}"
    );
    assert!(!out.contains("artifacts/secret"), "{out}");
    assert!(!out.contains("plan:"), "the project file was read:\n{out}");
    assert!(!out.contains("unconfined"), "{out}");
}

/// Makes the `landlock_create_ruleset` system call fail with ENOSYS, as on a kernel
/// without Landlock, for the process about to exec.
fn without_landlock(cmd: &mut Command) {
    // Classic BPF: load the syscall number; if it is landlock_create_ruleset (444 on
    // every architecture), return ENOSYS, else allow.
    let filter = [
        libc::sock_filter {
            code: 0x20,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: 0x15,
            jt: 0,
            jf: 1,
            k: 444,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0x0005_0000 | libc::ENOSYS as u32,
        },
        libc::sock_filter {
            code: 0x06,
            jt: 0,
            jf: 0,
            k: 0x7fff_0000,
        },
    ];
    // SAFETY: the closure runs between fork and exec and makes two prctl calls on a
    // filter that lives on its own stack frame; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr().cast_mut(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[test]
fn without_landlock_the_run_says_so_once_and_carries_on() {
    let f = Fixture::new(PIPELINE);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_treadle"));
    cmd.arg("run").current_dir(f.path());
    without_landlock(&mut cmd);
    let run = common::Run(cmd.output().expect("run treadle"));
    run.expect_code(0);
    let out = run.stdout();
    assert_eq!(
        out.matches("note: tasks run unconfined: this kernel has no Landlock")
            .count(),
        1,
        "{out}"
    );
    // Unconfined, the snooping task does see the other step's artifact.
    assert!(out.contains("data.txt"), "{out}");
    assert!(out.contains("second task ran"), "{out}");
}
