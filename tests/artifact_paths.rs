//! A run never moves anything outside a step's directory: an output a task replaced with
//! a symlink is refused, not followed into the artifacts or the cache.

use crate::common;

use common::Fixture;

#[test]
fn an_output_replaced_by_a_symlink_fails_the_step_and_is_not_cached() {
    let f = Fixture::new(
        r#"
plan:
  - task: x
    outputs: [o]
    run: rmdir o && ln -s "$SECRET_DIR" o
"#,
    );
    let secret = f.path().join("private");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("key.txt"), "TOP-SECRET-CONTENT").unwrap();
    // Tasks inherit only an allow-listed environment: the path goes in through `env:`.
    let yaml = std::fs::read_to_string(f.file()).unwrap().replace(
        "    run:",
        &format!(
            "    env: {{ SECRET_DIR: \"{}\" }}\n    run:",
            secret.display()
        ),
    );
    std::fs::write(f.file(), yaml).unwrap();
    let r = f.treadle(&["run"]);
    r.expect_code(1);
    assert!(r.stdout().contains("symlink"), "{}", r.stdout());
    // The private directory is where it was, and no copy of it went anywhere.
    assert!(secret.join("key.txt").exists());
    let mut found = Vec::new();
    let mut stack = vec![f.path().join(".treadle")];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let kind = e.file_type().unwrap();
            if kind.is_dir() {
                stack.push(e.path());
            } else if kind.is_file()
                && std::fs::read(e.path())
                    .unwrap()
                    .windows(18)
                    .any(|w| w == b"TOP-SECRET-CONTENT")
            {
                found.push(e.path());
            }
        }
    }
    assert!(found.is_empty(), "secret copied to {found:?}");
}
