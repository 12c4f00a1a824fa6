//! The proofs, one module per rule of docs/rules.md, as one test binary (one link instead
//! of one per rule; see the workspace's tests/main.rs). Run one rule's proof with
//! `cargo test -p treadle-proofs --test proofs RULE::`; `proofs/break_rules.py` does.

mod break_patterns;
mod commit_before_publish;
mod controls_out;
mod deltas_before_done;
mod discarded_step;
mod exactly_once_effects;
mod fail_closed;
mod fork_exact;
mod gate_survival;
mod hook_fail_closed;
mod hook_order;
mod idempotent_append;
mod journal_wal;
mod mcp;
mod no_silent_loss;
mod one_start_one_end;
mod restore_exact;
mod run_survives_restart;
mod single_writer;
mod two_writers;
mod workflow_agent_resume;
mod workflow_resume;
mod workflow_serve;
