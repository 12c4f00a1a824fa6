//! Running `get:` and `put:` on resources whose versions are JSON maps: the types of
//! `resource_types:` (their `in` and `out` scripts) and the built-in `time` type. The git
//! type's steps are in `super::resource`.

use std::collections::BTreeMap;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Ctx, Done};
use crate::pipeline::outline::Entry;
use crate::pipeline::{Defaults, GetStep, PutStep, Step, Version};
use crate::pipeline::{ResolvedResource, TypedResource};
use crate::resource::history::History;
use crate::resource::scripted::Scripted;
use crate::resource::{ResourceError, time};
use crate::run::failure::FailureKind;

fn scripted<'a>(typed: &'a TypedResource, kind: &'a crate::pipeline::ResourceType) -> Scripted<'a> {
    Scripted {
        resource: &typed.spec,
        kind,
    }
}

fn params_of(params: Option<&BTreeMap<String, Value>>) -> Option<Value> {
    params.and_then(|p| serde_json::to_value(p).ok())
}

/// `get:` of a scripted or `time` resource: its version (resolved before, or now),
/// fetched into the step's artifact.
pub(crate) async fn get_versioned<'a>(
    ctx: &'a Ctx<'a>,
    get: &'a GetStep,
    entry: &'a Entry,
    attempt: u32,
    cancel: &CancellationToken,
) -> Done {
    let typed = get.typed.as_ref();
    let resource = typed.name();
    let known = ctx.state.version(entry.seq);
    let text = match known {
        Some(v) => v,
        None => match super::version::pick_version(ctx, get, entry).await {
            Ok(v) => v,
            Err(d) => return d,
        },
    };
    let version: Version = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            return Done::fail(
                FailureKind::Infrastructure,
                format!("get `{resource}`: bad version {text}: {e}"),
            );
        }
    };
    let artifact = get.name.value.clone();
    let arts = std::slice::from_ref(&artifact);
    let dir = match ctx
        .artifacts
        .prepare(entry.seq, &entry.name, attempt, &[], arts)
    {
        Ok(d) => d,
        Err(e) => return Done::fail(FailureKind::Infrastructure, e.to_string()),
    };
    let fetched = match &typed.kind {
        ResolvedResource::Scripted(kind) => scripted(typed, kind)
            .fetch(
                &version,
                params_of(get.params.as_ref()).as_ref(),
                &dir,
                &artifact,
                cancel,
            )
            .await
            .map_err(|e| e.to_string()),
        ResolvedResource::Time(_) => {
            let stamp = version.get("time").cloned().unwrap_or_default();
            std::fs::write(dir.join(&artifact).join(time::FILE), format!("{stamp}\n"))
                .map_err(|e| format!("get `{resource}`: {e}"))
        }
        ResolvedResource::Git(_) => Err(format!("get `{resource}`: git is fetched elsewhere")),
        ResolvedResource::Unavailable => Err(ResourceError::unavailable(typed).to_string()),
    };
    let collected = fetched.and_then(|()| {
        ctx.artifacts
            .collect(&dir, arts)
            .map_err(|e| format!("get `{resource}`: {e}"))
    });
    ctx.artifacts.discard(&dir);
    if let Err(e) = collected {
        return Done::failed(e);
    }
    let line = format!("fetched {resource} at {text}");
    ctx.step_line(entry, line.clone());
    ctx.state.set_version(entry.seq, text);
    super::record::update(ctx, entry.seq, |r| {
        r.produced.stdout_tail = format!("{line}\n")
    })
    .await;
    Done::ok()
}

/// A put's published version that the version history could not keep.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PutRecordError {
    #[error("put `{resource}`: cannot record the version it published: {source}")]
    History {
        resource: String,
        source: crate::resource::history::HistoryError,
    },
    #[error(transparent)]
    Stopped(#[from] crate::blocking::WorkerStopped),
}

/// Records the version a put published in the resource's version history, noted with
/// this run and step ([`crate::resource::puts`]).
pub(crate) async fn record_put<'a>(
    ctx: &Ctx<'a>,
    entry: &Entry,
    resource: &str,
    version: Version,
) -> Result<(), PutRecordError> {
    let cap = Defaults::version_history(ctx.loaded.pipeline.defaults.as_ref());
    let (db, run, seq, name) = (
        ctx.store.database(),
        ctx.run,
        u64::from(entry.seq),
        resource.to_owned(),
    );
    crate::blocking::blocking(move || {
        History::open(db)
            .and_then(|h| h.record_put(run, seq, &name, &version, cap))
            .map_err(|source| PutRecordError::History {
                resource: name,
                source,
            })
    })
    .await
}

/// `put:` to a scripted or `time` resource: its `out` script runs in a directory of
/// the step's inputs; the version it printed is shown.
pub(crate) async fn put_versioned<'a>(
    ctx: &'a Ctx<'a>,
    put: &'a PutStep,
    step: &'a Step,
    entry: &'a Entry,
    cancel: &CancellationToken,
) -> Done {
    let typed = put.typed.as_ref();
    let resource = typed.name();
    let inputs = ctx.artifacts.inputs_of(step);
    if let Some(missing) = inputs.iter().find(|i| ctx.artifacts.artifact(i).is_none()) {
        return Done::failed(format!(
            "input `{missing}` was not produced by any step that ran"
        ));
    }
    let dir = match ctx
        .artifacts
        .prepare(entry.seq, &entry.name, 0, &inputs, &[])
    {
        Ok(d) => d,
        Err(e) => return Done::fail(FailureKind::Infrastructure, e.to_string()),
    };
    let published = match &typed.kind {
        ResolvedResource::Scripted(kind) => scripted(typed, kind)
            .publish(params_of(put.params.as_ref()).as_ref(), &dir, cancel)
            .await
            .map_err(|e| e.to_string()),
        ResolvedResource::Time(_) => Ok(Some(time::stamp(std::time::SystemTime::now()))),
        ResolvedResource::Git(_) => Err(format!("put `{resource}`: git is pushed elsewhere")),
        ResolvedResource::Unavailable => Err(ResourceError::unavailable(typed).to_string()),
    };
    ctx.artifacts.discard(&dir);
    let line = match published {
        Ok(Some(v)) => {
            if let Err(e) = record_put(ctx, entry, resource, v.clone()).await {
                return Done::fail(FailureKind::Infrastructure, e.to_string());
            }
            format!(
                "put {resource}: version {}",
                crate::resource::history::canonical(&v)
            )
        }
        Ok(None) => format!("put {resource}: done (no version printed)"),
        Err(e) => return Done::failed(e),
    };
    ctx.step_line(entry, line.clone());
    super::record::update(ctx, entry.seq, |r| {
        r.produced.stdout_tail = format!("{line}\n")
    })
    .await;
    Done::ok()
}
