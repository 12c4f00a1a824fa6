//! What the harness bench measures besides treadle: the disk's sync latencies (the
//! probes a durable step is judged against) and the process's memory and the machine's
//! load from Linux's /proc.

// Each bench includes this file and uses part of it.
#![allow(dead_code)]

use std::time::Instant;

/// Median latency of a 512-byte append and its `sync_data`.
pub fn one_fsync_us(dir: &std::path::Path) -> f64 {
    use std::io::Write;
    let path = dir.join("fsync-probe");
    let mut file = std::fs::File::create(&path).expect("probe file");
    let mut samples = Vec::new();
    for _ in 0..20 {
        file.write_all(&[0u8; 512]).expect("write");
        let t = Instant::now();
        file.sync_data().expect("fsync");
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    median(samples)
}

/// Latencies of what the durable journal's write-ahead log does per batch: a 512-byte write
/// in place into a file pre-extended with written zeros, then `sync_data`; `n` samples.
pub fn wal_appends_us(dir: &std::path::Path, n: u64) -> Vec<f64> {
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::File::create(dir.join("wal-probe")).expect("probe file");
    file.write_all(&vec![0u8; (n as usize + 1) * 512])
        .expect("zeros");
    file.sync_data().expect("fsync");
    let mut samples = Vec::new();
    for i in 0..n {
        let t = Instant::now();
        file.seek(SeekFrom::Start(i * 512)).expect("seek");
        file.write_all(&[7u8; 512]).expect("write");
        file.sync_data().expect("fsync");
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    samples
}

pub fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Median latency of one durable redb commit holding one small insert: the floor of what a
/// durable journal append on redb can cost on this disk.
pub fn redb_commit_us(dir: &std::path::Path) -> f64 {
    let table: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("probe");
    let db = redb::Database::create(dir.join("redb-probe.redb")).expect("redb");
    let mut samples = Vec::new();
    for i in 0..200u64 {
        let t = Instant::now();
        let tx = db.begin_write().expect("begin");
        {
            let mut t = tx.open_table(table).expect("table");
            t.insert(i, [7u8; 300].as_slice()).expect("insert");
        }
        tx.commit().expect("commit");
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    median(samples)
}

/// A line of /proc/self/status in MB (0 where Linux's /proc is not there).
fn status_mb(key: &str) -> f64 {
    status_mb_of("self", key)
}

/// A line of /proc/PROCESS/status in MB (`process`: a pid or `self`; 0 where it is not there).
fn status_mb_of(process: &str, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{process}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// The process's peak resident set size since start or the last [`reset_peak_rss`].
pub fn peak_rss_mb() -> f64 {
    status_mb("VmHWM:")
}

/// The process's resident set size now.
pub fn rss_mb() -> f64 {
    status_mb("VmRSS:")
}

/// Another process's resident set size now, and its peak (VmHWM) since it started.
pub fn rss_and_peak_mb_of(pid: u32) -> (f64, f64) {
    let pid = pid.to_string();
    (status_mb_of(&pid, "VmRSS:"), status_mb_of(&pid, "VmHWM:"))
}

/// The anonymous part of another process's resident set (its heap and stacks; the rest is
/// its binary's and libraries' pages, which grow with the code it has run, not with data).
pub fn anon_mb_of(pid: u32) -> f64 {
    status_mb_of(&pid.to_string(), "RssAnon:")
}

/// Resets the peak to the current resident size (Linux: `5` to /proc/self/clear_refs) and
/// returns that size.
pub fn reset_peak_rss() -> f64 {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    rss_mb()
}

/// The load average over 1, 5 and 15 minutes, to judge a figure by.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// CPU time (user + system) of the children this process has waited for, and of theirs, in
/// ms (from /proc/self/stat, in clock ticks of 10 ms; 0 where it is not there).
pub fn children_cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the `(comm)`, which may hold spaces: cutime and cstime are 16 and 17.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(13) + ticks(14)) * 10.0
}
