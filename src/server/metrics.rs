//! `GET /metrics`: the server in the Prometheus text format (0.0.4). Runs by status, steps
//! by kind and outcome, tokens and cost by model come from the state file at each scrape,
//! so they survive a restart and agree with `treadle runs --cost`; the runs in progress
//! are this process's (the server starts a run at once, so that is its queue depth).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use serde_json::Value;

use super::api::blocking;
use super::error::ApiError;
use super::shared::App;
use crate::run::Store;

/// `GET /metrics` (behind the token, as the API: see `routes.rs`).
pub(super) async fn metrics(State(app): State<Arc<App>>) -> Result<impl IntoResponse, ApiError> {
    let active = app.live.lock().map(|l| l.len()).unwrap_or(0);
    let mut text = blocking(&app, move |store| Ok(render(&Counts::read(store)?, active))).await?;
    if let Some(d) = &app.dispatcher {
        text.push_str(&crate::dist::health::metrics(d).await);
    }
    Ok((
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    ))
}

/// What the state file holds, counted.
#[derive(Debug, Default)]
pub struct Counts {
    /// Runs by status.
    pub runs: BTreeMap<&'static str, u64>,
    /// Steps by (kind, status).
    pub steps: BTreeMap<(String, &'static str), u64>,
    /// Tokens by (model, prompt|completion|cached).
    pub tokens: BTreeMap<(String, &'static str), u64>,
    /// Cost in US dollars by model, of the priced steps.
    pub cost_usd: BTreeMap<String, f64>,
}

impl Counts {
    /// Counts every run and step of the state file. A step replayed from the cache spent
    /// nothing in its run, so its tokens are not counted again.
    pub fn read(store: &Store) -> Result<Self, crate::run::StateError> {
        let mut counts = Self::default();
        for run in store.runs()? {
            *counts.runs.entry(run.status.as_str()).or_default() += 1;
            for step in store.steps(run.id)? {
                let key = (step.kind.clone(), step.status.as_str());
                *counts.steps.entry(key).or_default() += 1;
                if let (Some(usage), None) = (&step.produced.usage, step.cached_from) {
                    counts.add_usage(usage);
                }
            }
        }
        Ok(counts)
    }

    fn add_usage(&mut self, usage: &Value) {
        let model = usage["model"].as_str().unwrap_or("unknown").to_owned();
        for (field, kind) in [
            ("prompt_tokens", "prompt"),
            ("completion_tokens", "completion"),
            ("cached_tokens", "cached"),
        ] {
            let n = usage[field].as_u64().unwrap_or(0);
            *self.tokens.entry((model.clone(), kind)).or_default() += n;
        }
        if let Some(usd) = usage["cost"]["usd"].as_f64() {
            *self.cost_usd.entry(model).or_default() += usd;
        }
    }
}

/// The exposition text.
pub fn render(counts: &Counts, active: usize) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "treadle_runs_total",
        "counter",
        "Runs in the state file, by status.",
    );
    for (status, n) in &counts.runs {
        let _ = writeln!(out, "treadle_runs_total{{status=\"{status}\"}} {n}");
    }
    family(
        &mut out,
        "treadle_steps_total",
        "counter",
        "Steps of those runs, by kind and outcome.",
    );
    for ((kind, status), n) in &counts.steps {
        let _ = writeln!(
            out,
            "treadle_steps_total{{kind=\"{}\",status=\"{status}\"}} {n}",
            escape(kind)
        );
    }
    family(
        &mut out,
        "treadle_tokens_total",
        "counter",
        "Tokens spent by agent steps, by model and type.",
    );
    for ((model, kind), n) in &counts.tokens {
        let _ = writeln!(
            out,
            "treadle_tokens_total{{model=\"{}\",type=\"{kind}\"}} {n}",
            escape(model)
        );
    }
    family(
        &mut out,
        "treadle_cost_usd_total",
        "counter",
        "Cost of the priced agent steps in US dollars, by model.",
    );
    for (model, usd) in &counts.cost_usd {
        let _ = writeln!(
            out,
            "treadle_cost_usd_total{{model=\"{}\"}} {usd}",
            escape(model)
        );
    }
    family(
        &mut out,
        "treadle_queue_depth",
        "gauge",
        "Runs in progress in this server.",
    );
    let _ = writeln!(out, "treadle_queue_depth {active}");
    out
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
