//! A resource's type resolved at load ([`ResolvedResource`]): the built-in `git` and
//! `time` types with their `source:` read into typed values, a type of `resource_types:`
//! with its entry, or a built-in `steps` type this treadle loads but cannot run. A bad
//! `source:` is a located load error here, so what runs a resource only matches on it.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::diagnostic::{Diagnostic, Problem};
use super::resource_def::Resource;
use super::resource_type::ResourceType;

/// A git resource's `source:`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitSource {
    /// Where the repository is: a URL, a `file://` URI or a local path.
    pub uri: String,
    /// The branch (default `main`).
    pub branch: String,
}

/// A `time` resource's `source:`.
#[derive(Debug, Clone)]
pub enum TimeSource {
    /// A version every so long.
    Interval(Duration),
    /// A version at each tick of a cron pattern (UTC).
    Schedule(Box<croner::Cron>),
}

/// What a resource's type is, resolved once at load.
#[derive(Debug, Clone)]
pub enum ResolvedResource {
    /// The built-in git type.
    Git(GitSource),
    /// The built-in time type.
    Time(TimeSource),
    /// A type of `resource_types:` (which may take a Slack type's name).
    Scripted(Arc<ResourceType>),
    /// `slack-mentions` or `slack-reply` without an entry of the file: loaded and checked,
    /// but a get or put of it fails saying this treadle cannot run it.
    Unavailable,
}

/// A resource of the file with its type resolved.
#[derive(Debug, Clone)]
pub struct TypedResource {
    /// The resource as written.
    pub spec: Resource,
    /// Its type.
    pub kind: ResolvedResource,
}

impl TypedResource {
    /// The resource's name.
    pub fn name(&self) -> &str {
        &self.spec.name.value
    }
}

/// The file's resources by name, each resolved.
#[derive(Debug, Clone, Default)]
pub struct Resources(BTreeMap<String, Arc<TypedResource>>);

impl Resources {
    /// The resource named `name` (`None`: the file has none by that name).
    pub fn get(&self, name: &str) -> Option<&Arc<TypedResource>> {
        self.0.get(name)
    }

    /// Resolves the type of each of a file's `resources` (the file `file`, its
    /// `resource_types:` `types`, relative local git paths taken from `dir`), with a
    /// located diagnostic for each bad `source:`. A type that is neither built in nor
    /// defined is left out: the checks report it (`check_resource`).
    pub fn resolve(
        file: &Path,
        (resources, types): (&[Resource], &[ResourceType]),
        dir: &Path,
    ) -> (Self, Vec<Diagnostic>) {
        let mut out = BTreeMap::new();
        let mut problems = Vec::new();
        for r in resources {
            let kind = match resolved(types, r, dir) {
                Ok(Some(kind)) => kind,
                Ok(None) => continue,
                Err(e) => {
                    problems.push(Diagnostic::new(
                        file,
                        r.name.pos,
                        Problem::InvalidValue,
                        e.to_string(),
                        e.hint(),
                    ));
                    continue;
                }
            };
            let typed = TypedResource {
                spec: r.clone(),
                kind,
            };
            out.insert(r.name.value.clone(), Arc::new(typed));
        }
        (Self(out), problems)
    }
}

/// Why a resource's `source:` is refused.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A git source without `uri`, or with a value that is not text.
    #[error("resource `{0}` needs `source: {{ uri: ..., branch: ... }}` with string values")]
    Git(String),
    /// A `time` resource's `source:` is wrong.
    #[error("resource `{name}`: {why}")]
    Time {
        /// The resource.
        name: String,
        /// What is wrong.
        why: String,
    },
}

impl SourceError {
    fn hint(&self) -> &'static str {
        match self {
            Self::Git(_) => "e.g. `source: { uri: https://example.com/repo.git, branch: main }`",
            Self::Time { .. } => "see `treadle docs resources`, the time type",
        }
    }
}

/// `r`'s type; `None` when it is neither built in nor defined.
fn resolved(
    types: &[ResourceType],
    r: &Resource,
    dir: &Path,
) -> Result<Option<ResolvedResource>, SourceError> {
    let kind = r.kind.value.as_str();
    // The built-in types first: the checks refuse a `resource_types:` entry named so.
    match kind {
        "git" => return Ok(Some(ResolvedResource::Git(GitSource::resolved(r, dir)?))),
        "time" => return Ok(Some(ResolvedResource::Time(TimeSource::of(r)?))),
        _ => {}
    }
    let own = types.iter().find(|t| t.name.value == kind);
    Ok(match (own, kind) {
        (Some(t), _) => Some(ResolvedResource::Scripted(Arc::new(t.clone()))),
        (None, "slack-mentions" | "slack-reply") => Some(ResolvedResource::Unavailable),
        (None, _) => None,
    })
}

impl GitSource {
    /// Reads a git resource's source, a relative local `uri` taken from `pipeline_dir`
    /// (the directory of the pipeline file) and made absolute: git runs in other
    /// directories (a mirror under `.treadle/git/`), where a relative path would mean
    /// something else.
    pub fn resolved(resource: &Resource, pipeline_dir: &Path) -> Result<Self, SourceError> {
        let name = &resource.name.value;
        let text = |key: &str| match resource.source.get(key) {
            None => Ok(None),
            Some(serde_json::Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            Some(_) => Err(SourceError::Git(name.clone())),
        };
        let mut uri = text("uri")?.ok_or_else(|| SourceError::Git(name.clone()))?;
        let branch = text("branch")?.unwrap_or_else(|| "main".to_owned());
        // `scp`-like `host:path` and URLs (`scheme://`) are remote; the rest is a path.
        let local = !uri.contains(':');
        if local && !uri.starts_with('/') {
            let path = pipeline_dir.join(&uri);
            let path = std::path::absolute(&path).unwrap_or(path);
            uri = path.to_string_lossy().into_owned();
        }
        Ok(Self { uri, branch })
    }
}

impl TimeSource {
    /// Reads a `time` resource's source.
    pub fn of(resource: &Resource) -> Result<Self, SourceError> {
        let bad = |why: String| SourceError::Time {
            name: resource.name.value.clone(),
            why,
        };
        let source = &resource.source;
        match (source.get("interval"), source.get("schedule")) {
            (Some(_), Some(_)) => Err(bad(
                "give `interval:` or `schedule:`, not both".to_owned(),
            )),
            (Some(i), None) => interval(i)
                .map(Self::Interval)
                .map_err(|e| bad(e.to_string())),
            (None, Some(serde_json::Value::String(pattern))) => croner::Cron::from_str(pattern)
                .map(|c| Self::Schedule(Box::new(c)))
                .map_err(|e| bad(format!("`schedule: {pattern}` is not a cron pattern ({e}); write five fields, e.g. \"0 2 * * *\""))),
            (None, Some(_)) => Err(bad("`schedule` must be a cron pattern string, e.g. \"0 2 * * *\"".to_owned())),
            (None, None) => Err(bad(
                "`source:` needs `interval:` (e.g. `interval: 1h`) or `schedule:` (e.g. `schedule: \"0 2 * * *\"`)".to_owned(),
            )),
        }
    }
}

/// Why `interval:` is refused.
#[derive(Debug, thiserror::Error)]
enum IntervalError {
    /// Text that is not a duration.
    #[error("{0}")]
    NotADuration(String),
    /// Neither text nor a number.
    #[error("`interval` must be a duration like 1h")]
    NotText,
    /// Zero.
    #[error("`interval` must be more than zero")]
    Zero,
}

fn interval(value: &serde_json::Value) -> Result<Duration, IntervalError> {
    let d = match value {
        serde_json::Value::String(text) => super::duration::parse_duration(text)
            .map_err(|e| IntervalError::NotADuration(e.to_string()))?,
        serde_json::Value::Number(n) => Duration::from_secs(n.as_u64().unwrap_or(0)),
        _ => return Err(IntervalError::NotText),
    };
    if d.is_zero() {
        return Err(IntervalError::Zero);
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::At;

    fn resource(kind: &str, source: serde_json::Value) -> Resource {
        let source = serde_json::from_value(source).unwrap_or_default();
        Resource {
            name: At::new("r".to_owned()),
            kind: At::new(kind.to_owned()),
            source,
            webhook_token_env: None,
            env: Vec::new(),
        }
    }

    #[test]
    fn each_type_is_resolved_once_and_a_bad_source_is_a_located_error() {
        let mut resources = [
            resource("git", serde_json::json!({ "uri": "repo" })),
            resource("time", serde_json::json!({ "interval": "0s" })),
            resource("slack-reply", serde_json::json!({})),
            resource("nope", serde_json::json!({})),
        ];
        for (i, r) in resources.iter_mut().enumerate() {
            r.name = At::new(format!("r{i}"));
        }
        let written = (&resources[..], &[][..]);
        let (typed, problems) = Resources::resolve(Path::new("p.yml"), written, Path::new("/d"));
        let git = typed.get("r0").map(|r| &r.kind);
        assert!(
            matches!(git, Some(ResolvedResource::Git(g)) if g.uri == "/d/repo" && g.branch == "main"),
            "{git:?}"
        );
        assert!(matches!(
            typed.get("r2").map(|r| &r.kind),
            Some(ResolvedResource::Unavailable)
        ));
        assert!(typed.get("r1").is_none() && typed.get("r3").is_none());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .to_string()
                .contains("`interval` must be more than zero"),
            "{}",
            problems[0]
        );
    }
}
