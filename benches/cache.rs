//! Cache benchmarks, printed as JSON lines (`cargo bench --bench cache`).
//!
//! * `cached_rerun_100`: wall time of `treadle run` on a 100-step pipeline whose every step
//!   is replayed from the cache (the binary, state file and all), median of 7 runs.
//! * `hash_tree_1gib`: blake3 tree digest of a 1 GiB input tree (256 files × 4 MiB, and
//!   16 384 files × 64 KiB) once it is in the page cache, best of 3, in GB/s.
//!
//! Pass a name to run one: `cargo bench --bench cache -- hash_tree_1gib`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::json;

fn treadle(dir: &Path) -> f64 {
    let t0 = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_treadle"))
        .arg("run")
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .status()
        .expect("run treadle");
    assert!(status.success(), "treadle run failed");
    t0.elapsed().as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn cached_rerun_100() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut yaml = String::from("plan:\n");
    for i in 0..100 {
        yaml.push_str(&format!("  - task: step-{i}\n    run: \"true\"\n"));
    }
    std::fs::write(dir.path().join("treadle.yml"), yaml).expect("write pipeline");
    let first = treadle(dir.path());
    let cached: Vec<f64> = (0..7).map(|_| treadle(dir.path())).collect();
    println!(
        "{}",
        json!({
            "bench": "cached_rerun_100",
            "steps": 100,
            "first_run_ms": first,
            "cached_rerun_ms_median": median(cached.clone()),
            "cached_rerun_ms_min": cached.iter().copied().fold(f64::MAX, f64::min),
            "target_ms": 150,
        })
    );
}

// A fast, dependency-free filler: content must differ per file (so no two share a
// digest) but its randomness does not matter.
fn fill(buf: &mut [u8], mut seed: u64) {
    for chunk in buf.chunks_mut(8) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let bytes = seed.to_le_bytes();
        chunk.copy_from_slice(&bytes[..chunk.len()]);
    }
}

fn hash_tree(files: usize, size: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut buf = vec![0u8; size];
    for i in 0..files {
        let sub = dir.path().join(format!("d{:03}", i % 64));
        std::fs::create_dir_all(&sub).expect("mkdir");
        fill(&mut buf, i as u64 + 1);
        std::fs::write(sub.join(format!("f{i:05}.bin")), &buf).expect("write");
    }
    let total = (files * size) as f64;
    // The first pass brings the tree into the page cache.
    let _ = treadle::cache::manifest(dir.path()).expect("hash");
    let mut best = f64::MAX;
    for _ in 0..3 {
        let t0 = Instant::now();
        let m = treadle::cache::manifest(dir.path()).expect("hash");
        let _ = m.digest();
        best = best.min(t0.elapsed().as_secs_f64());
    }
    println!(
        "{}",
        json!({
            "bench": "hash_tree_1gib",
            "files": files,
            "file_bytes": size,
            "total_bytes": files * size,
            "best_s": best,
            "gb_per_s": total / best / 1e9,
            "threads": rayon::current_num_threads(),
            "target_gb_per_s": 1.0,
        })
    );
}

fn main() {
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let want = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    if want("cached_rerun_100") {
        cached_rerun_100();
    }
    if want("hash_tree_1gib") {
        hash_tree(256, 4 << 20);
        hash_tree(16 << 10, 64 << 10);
    }
}
