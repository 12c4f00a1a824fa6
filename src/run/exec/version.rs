//! Which version a `get` fetches: a triggered build's pinned version, the version an
//! `every` input set decided, a git resource's latest commit, or what the resource's check
//! reported under the step's `version:`.

use super::{Ctx, Done};
use crate::blocking::blocking;
use crate::pipeline::GetStep;
use crate::pipeline::outline::Entry;
use crate::pipeline::{ResolvedResource, VersionSpec};
use crate::resource::check::Checker;
use crate::resource::{ResourceError, ops};
use crate::run::failure::FailureKind;

/// The version a `get` of `resource` fetches (a git commit, or a version as canonical
/// JSON); remembered for the step.
pub(crate) async fn resolve_version<'a>(
    ctx: &Ctx<'a>,
    get: &GetStep,
    entry: &Entry,
) -> Result<String, Done> {
    let version = match ctx.versions.get(get.typed.name()) {
        // A triggered build fetches the version it was queued with, not the latest.
        Some(pinned) => pinned.clone(),
        None => pick_version(ctx, get, entry).await?,
    };
    ctx.state.set_version(entry.seq, version.clone());
    Ok(version)
}

/// Works out the version a `get` fetches under its `version:`: a git resource's
/// latest commit asks the remote; everything else checks the resource, records what
/// it reported in the version history and takes the version from there.
pub(crate) async fn pick_version<'a>(
    ctx: &Ctx<'a>,
    get: &GetStep,
    entry: &Entry,
) -> Result<String, Done> {
    let typed = get.typed.as_ref();
    let resource = typed.name();
    let mode = get
        .version
        .as_ref()
        .map(|v| v.value.clone())
        .unwrap_or_default();
    // An `every` get of an input set: the set decided its version.
    if mode == VersionSpec::Every
        && let Some(v) = every_version(ctx, entry.seq)
    {
        return Ok(v);
    }
    if let (ResolvedResource::Git(src), VersionSpec::Latest) = (&typed.kind, &mode) {
        let src = src.clone();
        return blocking::<_, ResourceError>(move || ops::latest(&src))
            .await
            .map_err(|e| Done::fail(FailureKind::Infrastructure, e.to_string()));
    }
    let checker = Checker::new(
        ctx.loaded,
        ctx.store.database(),
        ctx.artifacts.root().join("checks"),
    )
    .map_err(|e| Done::fail(FailureKind::Infrastructure, e.to_string()))?;
    checker
        .check_without_cursor(typed, &ctx.root)
        .await
        .map_err(|e| Done::fail(FailureKind::Infrastructure, e.to_string()))?;
    let job = &ctx.job.name.value;
    // `latest` in a run is what the check reported, not what this run's puts published.
    let picked = match mode {
        VersionSpec::Latest => checker
            .history()
            .latest_in_run(resource, ctx.run)
            .map_err(|e| e.to_string()),
        _ => checker
            .next_version(job, resource, &mode)
            .map_err(|e| e.to_string()),
    }
    .map_err(|e| Done::fail(FailureKind::Infrastructure, e))?;
    let Some(version) = picked else {
        return Err(Done::failed(match mode {
            VersionSpec::Every => format!(
                "get `{resource}`: no new versions; every version its check reported was already taken by job `{job}`"
            ),
            _ => format!("get `{resource}`: no versions available (its check reported none)"),
        }));
    };
    Ok(typed.version_text(&version))
}

/// The version an `every` get at outline `seq` takes in the current set, if a set is
/// running.
pub(crate) fn every_version<'a>(ctx: &Ctx<'a>, seq: u32) -> Option<String> {
    ctx.state.with(|s| s.every_versions.get(&seq).cloned())
}
