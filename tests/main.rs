//! The integration tests of the `treadle` crate, as one test binary.
//!
//! Every file beside this one is a module here rather than a test binary of its own: each
//! binary links all of treadle and its dependencies, and 60 of them filled CI's disk (and
//! cost a minute of linking each). Shared helpers are `crate::common` (and
//! `crate::browser` for the page's tests). Run one file's tests with
//! `cargo test --test integration FILE::`.

mod agent_context;
mod agent_controls;
mod agent_decisions;
mod agent_delegation;
mod agent_keys;
mod agent_owed_files;
mod agent_pipelines;
mod agent_resume;
mod agent_step;
mod agent_tools;
mod approvals;
mod artifact_paths;
mod batch_order;
mod browser;
mod budget_cost;
mod cache;
mod cli_agents;
mod cli_extras;
mod cli_output;
mod codex_agents;
mod command_hooks;
mod common;
mod confinement;
mod conversation;
mod crash_resume;
mod docs_hooks;
mod docs_server;
mod docs_yaml;
mod examples;
mod expr_resources;
mod fork_run;
mod format_across;
mod format_agent_keys;
mod format_containers;
mod format_control_flow;
mod format_ensemble;
mod format_fallback;
mod format_jobs;
mod format_load_errors;
mod format_subagents;
mod format_vars;
mod full_disk;
mod fuzz_loader;
mod fuzz_server;
mod git_agent;
mod git_resource;
mod human_input;
mod installable;
mod library_examples;
mod limits;
mod load_errors;
mod logging;
mod mcp_pipeline;
mod model_tape;
mod nats_across;
mod nats_sessions;
mod nats_takeover;
mod nats_workers;
mod needs;
mod otlp;
mod plan_vs_run;
mod preflight;
mod processes;
mod real_model_pipeline;
mod rerun;
mod resource_load_errors;
mod resource_puts;
mod resource_type_keys;
mod resource_types;
mod resume_keys;
mod run_steps;
mod runs_show;
mod secrets;
mod secrets_unused;
mod serve_adopt;
mod serve_api;
mod serve_approvals;
mod serve_cli;
mod serve_events;
mod serve_folder;
mod serve_fork;
mod serve_hosts;
mod serve_limits;
mod serve_metrics;
mod serve_routes;
mod serve_security;
mod serve_shadow;
mod serve_vars;
mod serve_watch;
// The served pipeline of the page's browser tests; beside `browser` because
// benches/web_paint.rs includes that module alone.
#[path = "browser/served.rs"]
mod served;
mod shadow_runs;
mod signals;
mod state_lock;
mod test_command;
mod watch;
mod watch_checks;
mod watch_resume;
mod web_assets;
mod web_controls;
mod web_delegation;
mod web_fork;
mod web_questions;
mod web_rerun;
mod web_run_details;
mod web_run_page;
mod web_runs_chart;
mod web_shadow;
