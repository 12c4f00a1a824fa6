//! Wall-clock time as the state file records it: milliseconds since the Unix epoch.

/// Now, in milliseconds since the Unix epoch (0 when the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
