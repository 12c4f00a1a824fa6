//! Checking one resource for the watcher, through the resources' own
//! [`Checker`](crate::resource::check::Checker): it runs the type's check (git, time or a
//! `resource_types:` script), records what it reported in the version history, and the
//! watcher takes the newest recorded version, written as a `get` fetches it (a git commit,
//! or a version's canonical JSON).

use crate::pipeline::Loaded;
use crate::resource::Kind;
use crate::resource::check::{CheckError, Checker};
use crate::resource::history::{HistoryError, canonical};

/// The newest version of `resource` after checking it now, as a build of it is pinned
/// to; `None` when its check has reported none yet.
pub async fn latest(
    checker: &Checker,
    loaded: &Loaded,
    resource: &str,
) -> Result<Option<String>, CheckError> {
    checker.check(resource).await?;
    let (history, name) = (checker.history().clone(), resource.to_owned());
    let newest = tokio::task::spawn_blocking(move || history.latest(&name))
        .await
        .map_err(|e| HistoryError::Db(e.to_string()))??;
    let Some(version) = newest else {
        return Ok(None);
    };
    let git = matches!(Kind::of(loaded, resource)?, Kind::Git(_));
    Ok(Some(if git {
        version
            .get("ref")
            .cloned()
            .ok_or_else(|| HistoryError::Format {
                resource: resource.to_owned(),
                detail: "a git version without `ref`".to_owned(),
            })?
    } else {
        canonical(&version)
    }))
}
