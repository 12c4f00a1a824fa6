//! The integration tests of `treadle-session`, as one test binary (one link instead of one
//! per file; see the workspace's tests/main.rs). Shared helpers are `crate::common`. Run
//! one file's tests with `cargo test -p treadle-session --test session FILE::`.

mod ask_human;
mod batches;
mod common;
mod compaction;
mod effect_commit;
mod fork;
mod hooks_and_marks;
mod journal_import;
mod model_limits;
mod public_api;
mod real_model;
mod restore_bad_journal;
mod robustness;
mod secrets;
mod session_basics;
mod subagents_typed;
mod tolerance;
mod turn_request;
mod turn_stream;
mod write_fence;
