//! The cache around a leaf step, on the executor's side: before it runs, its key and the
//! cache's answer (`crate::cache::StepCache::lookup`); on a hit, the recorded outcome is
//! shown again, marked `cached` in the transcript and recorded as this run's; after the
//! step succeeded, its outputs and record are stored. Under `treadle serve --nats` a miss
//! here is looked for in the cache shared through NATS, and a stored record is shared
//! there too (through `RemoteSteps`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::stored::{Shared, Stored};
use super::{Ctx, Done, now_ms};
use crate::agent::commit::GitInput;
use crate::blocking::{WorkerStopped, blocking};
use crate::cache::digest::Digest;
use crate::cache::key::{self, ConfigError, KeyFacts, KeyParts};
use crate::cache::records::SuccessRecord;
use crate::cache::{
    CacheError, Lookup, Miss, Slot, StepCache, cell_replayable, is_leaf, produced, replayable,
};
use crate::pipeline::outline::Entry;
use crate::pipeline::{AgentCall, At, ResolvedResource, Step, StepKind};
use crate::run::artifacts::ArtifactError;
use crate::run::cell::{Cell, CellAt, is_cell};
use crate::run::failure::FailureKind;
use crate::run::state::{StateError, StepStatus};
use crate::run::transcript::Event;

/// Why a recorded outcome could not be brought back, or a step not stored. None of these
/// fails a step: it runs again, or is only not cached.
#[derive(Debug, thiserror::Error)]
enum CachedError {
    /// The cache (its tables or its object store).
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// An object of the entry does not match its digest.
    #[error("corrupt: {0}")]
    Corrupt(CacheError),
    /// The run's artifacts.
    #[error(transparent)]
    Artifacts(#[from] ArtifactError),
    /// The state file.
    #[error(transparent)]
    State(#[from] StateError),
    /// The blocking task doing the work did not finish.
    #[error("the worker stopped: {}", .0.0)]
    Worker(#[from] WorkerStopped),
}

fn step_cache<'a>(ctx: &Ctx<'a>) -> Option<Arc<StepCache>> {
    ctx.cache.clone()
}

/// Works out a leaf step's key (or one `across:` cell's) and replays it when a record
/// allows; `None` means run it.
pub(crate) async fn cache_before<'a>(
    ctx: &Ctx<'a>,
    step: &At<Step>,
    entry: &Entry,
    cell: Option<&Cell>,
) -> Option<Done> {
    let cache = step_cache(ctx)?;
    if !is_leaf(step) {
        return None;
    }
    let seq = entry.seq;
    let first_visit = cache.first_visit(&entry.path);
    // A run's record is kept per step, which a block's cells share: a resumed or
    // replayed run finds its cells by key in the cache instead.
    let from_record = cell.is_none();
    // `--replay` brings the steps before STEP back on their recorded inputs, whatever
    // they are now; `--resume` only a step whose key is unchanged (below).
    if first_visit
        && from_record
        && !ctx.mode.resuming()
        && let Some(of) = ctx.mode.recorded_from(seq)
        && let Some(outcome) = recorded(&cache, of, entry)
        && let Some(done) = reuse(ctx, &cache, step, entry, outcome, of).await
    {
        return Some(done);
    }
    let parts = match key_parts(ctx, &cache, step, entry, cell).await {
        Ok(Some(p)) => p,
        Ok(None) => return None,
        Err(done) => return Some(done),
    };
    let key = parts.key();
    cache.set_key(slot(entry, cell.is_some()), parts);
    if first_visit
        && from_record
        && ctx.mode.resuming()
        && let Some(of) = ctx.mode.recorded_from(seq)
        && let Some(outcome) = recorded(&cache, of, entry)
    {
        // The same rule as `plan`: a record is reused only for the same key, so an
        // edited step, what depends on it and another file's steps run again.
        if outcome.key == key {
            if let Some(done) = reuse(ctx, &cache, step, entry, outcome, of).await {
                return Some(done);
            }
        } else {
            say_changed(entry, of);
        }
    }
    let replayable = match cell {
        Some(_) => cell_replayable(step),
        None => replayable(step),
    };
    match cache.lookup(ctx.mode.forced_at(seq), &key, first_visit, replayable) {
        Ok(Lookup::Hit(outcome)) => {
            let from = outcome.run;
            reuse(ctx, &cache, step, entry, *outcome, from).await
        }
        Ok(Lookup::Miss(why)) => {
            tracing::debug!(step = %entry.name, ?why, "cache miss");
            // Under `--nats`, another server (or run) may have shared it.
            if why == Miss::NoEntry
                && let Some(outcome) = shared_hit(ctx, &cache, &key).await
            {
                let from = outcome.run;
                return reuse(ctx, &cache, step, entry, outcome, from).await;
            }
            None
        }
        Err(e) => {
            crate::console::tell!("treadle: cannot read the cache: {e}");
            None
        }
    }
}

/// The record of `key` shared through NATS, its trees now in the local object store.
async fn shared_hit<'a>(
    ctx: &Ctx<'a>,
    cache: &Arc<StepCache>,
    key: &Digest,
) -> Option<SuccessRecord> {
    let remote = ctx.remote.as_ref()?;
    let scratch = ctx.artifacts.root().join("incoming");
    remote.shared_hit(cache, key, scratch).await
}

/// Run `of`'s record of a step that succeeded in it, if any.
fn recorded(cache: &StepCache, of: u64, entry: &Entry) -> Option<SuccessRecord> {
    cache.recorded(of, entry.seq).unwrap_or_else(|e| {
        crate::console::tell!(
            "treadle: cannot read run {of}'s record of `{}`: {e}",
            entry.name
        );
        None
    })
}

fn say_changed(entry: &Entry, of: u64) {
    crate::console::tell!(
        "treadle: `{}` changed since run {of} (configuration or inputs); running it again",
        entry.name
    );
}

/// The parts of a step's key; `Ok(None)` when it cannot have one (an input nobody
/// produced: the step then fails as usual), `Err` when the step cannot run at all.
async fn key_parts<'a>(
    ctx: &Ctx<'a>,
    cache: &Arc<StepCache>,
    step: &At<Step>,
    entry: &Entry,
    cell: Option<&Cell>,
) -> Result<Option<KeyParts>, Done> {
    let mut inputs = BTreeMap::new();
    let mut before = std::collections::HashMap::new();
    for name in ctx.artifacts.inputs_of(step) {
        let Some(path) = ctx.artifacts.artifact(&name) else {
            return Ok(None);
        };
        match cache.tree(path.clone()).await {
            Ok(d) => inputs.insert(name.clone(), d),
            Err(e) => {
                return Err(Done::fail(
                    FailureKind::Infrastructure,
                    format!("cannot hash input `{name}`: {e}"),
                ));
            }
        };
        before.insert(name, path);
    }
    ctx.state.set_inputs_before(entry.seq, before);
    let version = match &step.kind {
        StepKind::Get(get) => Some(super::version::resolve_version(ctx, get, entry).await?),
        _ => None,
    };
    // An agent step is built once (kept in the run's state) and keyed on what runs.
    let agent = |call: &AgentCall| super::leaf::agent_step(ctx, (step, call), entry);
    let delivered = super::leaf::delivered(ctx, step);
    let facts = KeyFacts {
        inputs,
        version: version.as_deref(),
        agent: &agent,
        cell: cell.map(Cell::vars),
        delivered: &delivered,
        prev: cache.prev_key(entry.seq),
    };
    key::step_key(step, &facts)
        .map(Some)
        // The one way a key fails: the agent step cannot be built (its model, say).
        .map_err(|e: ConfigError| Done::fail(FailureKind::Configuration, e.to_string()))
}

/// Brings a recorded outcome back instead of running the step (a cache hit, or a
/// step of the resumed or replayed run); `None` when its objects are gone or corrupt.
async fn reuse<'a>(
    ctx: &Ctx<'a>,
    cache: &Arc<StepCache>,
    step: &At<Step>,
    entry: &Entry,
    outcome: SuccessRecord,
    from_run: u64,
) -> Option<Done> {
    let started = std::time::Instant::now();
    if let Err(e) = restore(ctx, cache, entry, &outcome).await {
        crate::console::tell!(
            "treadle: cannot replay `{}` from the cache ({e}); running it again",
            entry.name
        );
        // A corrupt entry must not be offered again.
        cache.forget(&outcome.key);
        return None;
    }
    // A committed agent step's commit goes back on this run's branch with its files.
    let mut outcome = outcome;
    match super::resource::restore_commits(ctx, entry, &outcome).await {
        Ok(commits) => outcome.commits = commits,
        Err(e) => {
            crate::console::tell!(
                "treadle: cannot bring back the commit of `{}` ({e}); running it again",
                entry.name
            );
            return None;
        }
    }
    note_reused(ctx, cache, step, entry, &outcome, from_run);
    if from_run == ctx.run {
        // A run going on under its own id (adopted after its process stopped): the step
        // finished in it, its events are in its transcript and its record says so.
        return Some(Done {
            route: route_of(step, &outcome),
            ..Done::ok()
        });
    }
    let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    record_reused(ctx, cache, entry, &outcome, from_run, took).await;
    Some(Done {
        route: route_of(step, &outcome),
        ..Done::ok()
    })
}

/// Records a step brought back from run `from_run`'s `outcome` in `took` ms: its record
/// succeeded with the outcome's facts, its transcript (`step_cached`, what it showed,
/// `step_finished`) and the outcome kept as this run's, in one commit.
async fn record_reused(
    ctx: &Ctx<'_>,
    cache: &Arc<StepCache>,
    entry: &Entry,
    outcome: &SuccessRecord,
    from_run: u64,
    took: u64,
) {
    let o = outcome.clone();
    let record = ctx.state.with(|s| {
        let r = s.records.get_mut(entry.seq as usize)?;
        r.status = StepStatus::Succeeded;
        r.started_ms = Some(now_ms());
        r.duration_ms = Some(took);
        r.produced = o.produced;
        r.cached_from = Some(from_run);
        r.set_failure(None);
        Some(r.clone())
    });
    let mut events = reused_events(ctx, entry, outcome, from_run);
    // The record now holds the outcome's exit code and verdict, which the line shows.
    events.push(super::record::finished_event(
        ctx,
        entry,
        &Done::ok(),
        std::time::Duration::from_millis(took),
    ));
    let mine = SuccessRecord {
        run: ctx.run,
        seq: entry.seq,
        last_used_ms: now_ms(),
        ..outcome.clone()
    };
    let run = ctx.run;
    let stored = Stored {
        cache: cache.clone(),
        path: entry.path.clone(),
        outcome: mine,
        replay: false,
        dirs: None,
    };
    // A cache hit is written without an fsync of its own (the run's end persists it; a
    // crash before only means it is replayed again); a step brought back from a resumed
    // run's record is durable, since only that record could bring it back again.
    let durable = ctx.mode.recorded_from(entry.seq).is_some() && !is_cell(entry);
    super::record::commit_with(ctx, events, durable, move |txn| {
        if let Some(r) = &record {
            crate::run::state::put_step_in(txn, run, r)?;
        }
        stored.put_in(txn)
    })
    .await;
}

/// Where a reused outcome's verdict sends the run (`None`: on in order).
fn route_of(step: &At<Step>, outcome: &SuccessRecord) -> Option<String> {
    outcome.produced.verdict.as_ref().and_then(|v| {
        step.routes()
            .into_iter()
            .find(|(name, _)| name == v)
            .map(|(_, t)| t.value.clone())
            .filter(|t| t != "next")
    })
}

/// Tells the run's cache what a reused outcome brought back: its trees, a `get`'s
/// version, its key (for the steps chained to it) and that the entry was used.
fn note_reused<'a>(
    ctx: &Ctx<'a>,
    cache: &StepCache,
    step: &At<Step>,
    entry: &Entry,
    outcome: &SuccessRecord,
    from_run: u64,
) {
    for t in &outcome.outputs {
        if let Some(path) = ctx.artifacts.artifact(&t.name) {
            cache.know_tree(path, t.digest, t.manifest.clone());
        }
    }
    if let (Some(v), StepKind::Get(crate::pipeline::GetStep { name, typed, .. })) =
        (&outcome.version, &step.kind)
    {
        ctx.state.set_version(entry.seq, v.clone());
        // Only a git resource's version is a commit its artifact holds (a `time` or
        // `resource_types:` get's is a version as JSON, on no repository).
        if let ResolvedResource::Git(source) = &typed.kind {
            let input = GitInput {
                source: source.clone(),
                commit: v.clone(),
            };
            ctx.state.set_git_input(name.value.clone(), input);
        }
    }
    let touched = outcome.run == from_run && ctx.mode.recorded_from(entry.seq).is_none();
    cache.reused(slot(entry, is_cell(entry)), outcome.key, touched);
}

/// Restores a recorded outcome's outputs as this run's artifacts.
async fn restore<'a>(
    ctx: &Ctx<'a>,
    cache: &Arc<StepCache>,
    entry: &Entry,
    outcome: &SuccessRecord,
) -> Result<(), CachedError> {
    if outcome.outputs.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = outcome.outputs.iter().map(|o| o.name.clone()).collect();
    let (ws, cache, outcome) = (ctx.artifacts.clone(), cache.clone(), outcome.clone());
    let (seq, name) = (entry.seq, entry.name.clone());
    blocking::<_, CachedError>(move || {
        let dir = ws.prepare(seq, &name, 0, &[], &[])?;
        let result = match cache.restore(&outcome, &dir) {
            Ok(()) => ws.collect(&dir, &names).map_err(CachedError::from),
            Err(e @ CacheError::Objects(crate::cache::cas::CasError::Corrupt(_))) => {
                Err(CachedError::Corrupt(e))
            }
            Err(e) => Err(e.into()),
        };
        ws.discard(&dir);
        result
    })
    .await
}

/// What a reused step shows: `step_cached`, an agent's recorded calls, then the tail of
/// what it printed.
fn reused_events<'a>(
    ctx: &Ctx<'a>,
    entry: &Entry,
    outcome: &SuccessRecord,
    from_run: u64,
) -> Vec<Event> {
    let mut events = vec![Event::StepCached {
        run: ctx.run,
        seq: entry.seq,
        name: entry.name.clone(),
        kind: entry.kind,
        depth: entry.depth,
        key: outcome.key.hex(),
        from_run,
    }];
    // An agent step's calls came before its answer: replayed in that order.
    for e in &outcome.events {
        let what = e.get("what").and_then(|w| w.as_str()).unwrap_or("event");
        if what == "text" {
            // The final text is the tail shown above.
            continue;
        }
        let data = e.get("data").cloned().unwrap_or_default();
        let summary = match what {
            "tool_call" => replayed_call(&data),
            other => other.to_owned(),
        };
        events.push(Event::Agent {
            run: ctx.run,
            seq: entry.seq,
            what: what.to_owned(),
            data,
            summary,
            at_ms: None,
        });
    }
    for line in outcome.produced.stdout_tail.lines() {
        events.push(ctx.step_line_event(entry, line.to_owned()));
    }
    events
}

/// A succeeded leaf step's outputs stored, and its outcome made ready for the commit of
/// its end; `None` when it is not cached.
pub(crate) async fn cache_after<'a>(
    ctx: &Ctx<'a>,
    step: &At<Step>,
    entry: &Entry,
) -> Option<Stored> {
    let cache = step_cache(ctx)?;
    let parts = cache.take_parts(&entry.path)?;
    match record_success(ctx, &cache, step, entry, parts).await {
        Ok(stored) => Some(stored),
        Err(e) => {
            crate::console::tell!("treadle: step `{}` was not cached: {e}", entry.name);
            None
        }
    }
}

/// Under `--nats`, shares a stored outcome for every server, once it is in the state file.
pub(crate) async fn share<'a>(ctx: &Ctx<'a>, shared: Option<Shared>) {
    if let (Some(remote), Some(shared)) = (&ctx.remote, shared) {
        remote.share(&shared.outcome, shared.dirs).await;
    }
}

async fn record_success<'a>(
    ctx: &Ctx<'a>,
    cache: &Arc<StepCache>,
    step: &At<Step>,
    entry: &Entry,
    parts: KeyParts,
) -> Result<Stored, CachedError> {
    let (mut outputs, mut dirs) = (Vec::new(), Vec::new());
    for name in produced(step) {
        let Some(path) = ctx.artifacts.artifact(&name) else {
            continue;
        };
        dirs.push((name.clone(), path.clone()));
        let tree = cache.store_tree(name, path).await?;
        outputs.push(tree);
    }
    // A cell's own view of the record its siblings share; its agent events are kept
    // under the step with theirs, so a replayed cell shows its text, not its calls.
    let (record, events) = if let Some(at) = CellAt::of(entry) {
        let record = ctx.state.with(|s| s.cell_records.get(&at).cloned());
        (record, Vec::new())
    } else {
        let record = ctx
            .state
            .with(|s| s.records.get(entry.seq as usize).cloned());
        let (store, run, seq) = (ctx.store.clone(), ctx.run, entry.seq);
        let events = blocking::<_, CachedError>(move || {
            Ok(store.agent_events(run, seq).unwrap_or_default())
        })
        .await?;
        (record, events)
    };
    let outcome = SuccessRecord {
        key: parts.key(),
        parts,
        run: ctx.run,
        seq: entry.seq,
        outputs,
        produced: record.map(|r| r.produced).unwrap_or_default(),
        events,
        version: ctx.state.version(entry.seq),
        commits: ctx.state.commits(entry.seq),
        last_used_ms: now_ms(),
    };
    let replay = if is_cell(entry) {
        cell_replayable(step)
    } else {
        replayable(step)
    };
    Ok(Stored {
        cache: cache.clone(),
        path: entry.path.clone(),
        outcome,
        replay,
        dirs: (replay && ctx.remote.is_some()).then_some(dirs),
    })
}

/// Where the key of `entry` belongs in the run's cache.
fn slot(entry: &Entry, cell: bool) -> Slot<'_> {
    if cell {
        Slot::Cell(&entry.path)
    } else {
        Slot::Step(entry.seq, &entry.path)
    }
}

/// A recorded tool call as a replayed transcript shows it: as the live view did, the call
/// with its arguments, then its result (the live view's own lines, so they cannot differ).
fn replayed_call(data: &serde_json::Value) -> String {
    use crate::agent::AgentEvent;
    let name = data.get("name").and_then(|n| n.as_str()).unwrap_or("tool");
    let call = AgentEvent::ToolCall {
        name: name.to_owned(),
        arguments: data.get("arguments").cloned().unwrap_or_default(),
    };
    let result = AgentEvent::ToolResult {
        name: name.to_owned(),
        content: data
            .get("result")
            .and_then(|r| r.as_str())
            .unwrap_or_default()
            .to_owned(),
        is_error: data.get("is_error").and_then(serde_json::Value::as_bool) == Some(true),
    };
    format!("{}\n{}", call.summary(), result.summary())
}
