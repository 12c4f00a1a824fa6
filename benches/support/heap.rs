//! A counting global allocator for benches: live heap bytes now and at their peak.
//!
//! The process's resident set (VmRSS/VmHWM) also holds thread stacks, code and memory the
//! allocator keeps after a free, so it cannot say what sessions hold between turns. This
//! counts what is allocated and not yet freed, exactly, at the cost of two atomic operations
//! per allocation. Counting is off unless [`count`] switches it on (the harness bench's
//! `--count-heap`), so timing figures never carry that cost: one bench loop allocates far
//! more per step than another (the raw loop rebuilds its conversation as a `Value` tree each
//! step), and a cost per allocation would tilt their comparison.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// The system allocator with a count of live bytes and their high-water mark.
pub struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
// Signed: a block allocated before counting began may be freed after it.
static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn added(size: usize) {
    if ON.load(Ordering::Relaxed) {
        let size = size as isize;
        let now = LIVE.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

fn removed(size: usize) {
    if ON.load(Ordering::Relaxed) {
        LIVE.fetch_sub(size as isize, Ordering::Relaxed);
    }
}

/// Starts counting: call it first thing in `main`, before any thread, so that almost
/// every live block is counted.
pub fn count() {
    ON.store(true, Ordering::Relaxed);
}

/// Whether allocations are counted in this run.
pub fn counting() -> bool {
    ON.load(Ordering::Relaxed)
}

// SAFETY: every call is passed to `System` unchanged; only the counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc` is passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            added(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            added(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `alloc`; `ptr` came from `System` through this allocator.
        unsafe { System.dealloc(ptr, layout) };
        removed(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            removed(layout.size());
            added(new_size);
        }
        p
    }
}

/// Live heap bytes now.
pub fn live_bytes() -> usize {
    usize::try_from(LIVE.load(Ordering::Relaxed)).unwrap_or(0)
}

/// The most live heap bytes since start or the last [`reset_peak`].
pub fn peak_bytes() -> usize {
    usize::try_from(PEAK.load(Ordering::Relaxed)).unwrap_or(0)
}

/// Starts a new high-water mark from the live bytes now.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// Bytes as MB (2^20), for the printed figures.
pub fn mb(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
