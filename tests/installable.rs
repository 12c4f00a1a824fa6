//! The workspace can be installed and published: every crate that may be published has a
//! version, a description and a license, and every path dependency among them also names a
//! version (`cargo install --path .` and `cargo publish` need it; a bare path is `*`).

use serde_json::Value;

fn metadata() -> Value {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

#[test]
fn every_publishable_crate_and_path_dependency_carries_a_version() {
    let meta = metadata();
    let packages = meta["packages"].as_array().expect("packages");
    let publishable: Vec<&Value> = packages
        .iter()
        // `publish = false` is `[]` in the metadata.
        .filter(|p| p["publish"].as_array().is_none_or(|r| !r.is_empty()))
        .collect();
    let names: Vec<&str> = publishable
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(names.contains(&"treadle"), "{names:?}");
    assert!(names.contains(&"treadle-session"), "{names:?}");
    for p in &publishable {
        let name = p["name"].as_str().unwrap_or_default();
        assert_eq!(p["version"], env!("CARGO_PKG_VERSION"), "{name}: version");
        assert!(
            p["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{name}: no description"
        );
        assert!(p["license"].as_str().is_some(), "{name}: no license");
        for dep in p["dependencies"].as_array().into_iter().flatten() {
            // Dev-dependencies are not published; the others must name a version.
            if dep["path"].is_string() && dep["kind"] != "dev" {
                assert_ne!(
                    dep["req"], "*",
                    "{name}: path dependency {} has no version",
                    dep["name"]
                );
            }
        }
    }
}
