//! The turn benchmark driver, comparable across agent frameworks on the same server.
//!
//! ```text
//! cargo run --release -p treadle-scripted -- --echo-until 20 &       # prints its URL
//! cargo run --release -p treadle-session --example bench_turn -- --endpoint URL --steps 20 --sessions 100
//! ```
//!
//! S concurrent sessions each submit one input; the model keeps calling `echo {"i": n}`
//! until the request holds K tool results, then answers. Every session streams, journals
//! durably (one redb journal shared by all, as a real process would) and must end in
//! `TurnDone` after exactly K tool steps. Prints one JSON line.
//!
//! `--raw` runs the floor instead: the same workload by a plain reqwest + serde_json
//! streaming loop on a single-threaded runtime, no harness, nothing journaled. Both live
//! in one binary so that `benches/pinned.py` compares them with the same allocator, TLS-less
//! client and build. It lives in treadle-session (not the CLI crate) because it uses nothing
//! else: its release build then skips the whole CLI.

mod driver;

// The bench support file serves several benches; this one uses part of it.
#[allow(dead_code)]
#[path = "../../../benches/support/heap.rs"]
mod heap;
#[path = "../../../benches/support/probe.rs"]
mod probe;

#[global_allocator]
static ALLOC: heap::Counting = heap::Counting;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    driver::main(std::env::args())
}
