//! Checking the resources of one pipeline for the watcher, through the resources' own
//! [`Checker`](crate::resource::check::Checker): it runs each type's check (git, time or
//! a `resource_types:` script), all of a round's findings are recorded in the version
//! history together, and the watcher takes each resource's newest recorded version,
//! written as a `get` fetches it (a git commit, or a version's canonical JSON).

use crate::pipeline::{Loaded, ResolvedResource, Version};
use crate::resource::check::{CheckError, Checker};
use crate::resource::history::{HistoryError, canonical};

/// Records what a round's checks of `loaded`'s resources found (by resource, as
/// [`Checker::find`] gave it) in one transaction; then each resource's newest version as
/// a build of it is pinned to (`None` when its check has reported none yet), in the
/// order given.
pub async fn record(
    checker: &Checker,
    loaded: &Loaded,
    found: Vec<(String, Vec<Version>)>,
) -> Result<Vec<(String, Result<Option<String>, CheckError>)>, CheckError> {
    let names: Vec<String> = found.iter().map(|(r, _)| r.clone()).collect();
    let newest = checker.record_round(found).await?;
    Ok(names
        .into_iter()
        .zip(newest)
        .map(|(resource, version)| {
            let pinned = version.map(|v| pinned(loaded, &resource, &v)).transpose();
            (resource, pinned)
        })
        .collect())
}

/// `version` of `resource` as a build is pinned to: a git resource's commit, any other
/// type's version as canonical JSON.
fn pinned(loaded: &Loaded, resource: &str, version: &Version) -> Result<String, CheckError> {
    let typed = crate::resource::typed(loaded, resource)?;
    if !matches!(typed.kind, ResolvedResource::Git(_)) {
        return Ok(canonical(version));
    }
    version.get("ref").cloned().ok_or_else(|| {
        HistoryError::Format {
            resource: resource.to_owned(),
            detail: "a git version without `ref`".to_owned(),
        }
        .into()
    })
}
