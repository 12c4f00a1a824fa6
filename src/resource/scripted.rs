//! Resource types written as scripts (`resource_types:`): what their `check`, `in` and
//! `out` do, each rendered as a template ([`super::template`]) and run confined
//! ([`super::script`]).
//!
//! * `check` runs in a scratch directory and must print a JSON list of versions (flat
//!   maps; numbers and booleans are read as their text), oldest first;
//! * `in` runs in the artifact directory, confined to the step directory around it: a
//!   file it leaves beside the artifact, or a link in the artifact leading out of it, is
//!   an error (and where the kernel has Landlock, writing anywhere else is refused); a
//!   type without `in` writes the version to `version.json` there instead;
//! * `out` runs in the put's directory (its inputs) and may print the new version as a
//!   JSON object, last in its output.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::script::{self, Script, ScriptError};
use crate::pipeline::resource_type::Backend;
use crate::pipeline::{Resource, ResourceType, Version};
use crate::template::{self, TemplateError};

/// The file a get of a type without `in` writes: the version, as JSON.
pub const VERSION_FILE: &str = "version.json";

/// How long a script may run when its type sets no `timeout:`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Why a resource type's script failed, naming the resource and the script.
#[derive(Debug, thiserror::Error)]
pub enum ScriptedError {
    /// The type has no such script.
    #[error("resource `{resource}`: its type `{kind}` has no `{script}:` script")]
    Missing {
        /// The resource.
        resource: String,
        /// Its type.
        kind: String,
        /// `check`, `in` or `out`.
        script: &'static str,
    },
    /// The script's template could not be rendered.
    #[error("resource `{resource}`: the `{script}` template: {source}")]
    Template {
        /// The resource.
        resource: String,
        /// `check`, `in` or `out`.
        script: &'static str,
        /// Why.
        source: TemplateError,
    },
    /// The script failed.
    #[error("resource `{resource}`: `{script}` {source}")]
    Script {
        /// The resource.
        resource: String,
        /// `check`, `in` or `out`.
        script: &'static str,
        /// How.
        source: ScriptError,
    },
    /// `check` printed something that is not a list of versions.
    #[error(
        "resource `{resource}`: `check` must print a JSON list of versions like [{{\"ref\": \"abc\"}}], oldest first; {detail}; it printed: {printed}"
    )]
    NotVersions {
        /// The resource.
        resource: String,
        /// What is wrong.
        detail: String,
        /// The start of what it printed.
        printed: String,
    },
    /// `in` wrote outside the artifact directory.
    #[error(
        "resource `{resource}`: `in` wrote outside its directory ({path}); it runs in the artifact directory and must write only there"
    )]
    Escaped {
        /// The resource.
        resource: String,
        /// What it wrote.
        path: String,
    },
    /// The type is written in a backend treadle does not run.
    #[error(
        "resource `{resource}`: its type `{kind}` is written with `{backend}:`, which this treadle loads and checks but cannot run yet; write its stages as `check:`/`in:`/`out:` shell scripts to run it here"
    )]
    Backend {
        /// The resource.
        resource: String,
        /// Its type.
        kind: String,
        /// `expr` or `mcp`.
        backend: &'static str,
    },
    /// An `expr:` stage failed (does not parse, failed while it ran, or returned the wrong
    /// shape).
    #[error("resource `{resource}`: the `{script}` expression: {detail}")]
    Expr {
        /// The resource.
        resource: String,
        /// `check`, `in` or `out`.
        script: &'static str,
        /// Why.
        detail: String,
    },
    /// The type runs in a container, which treadle cannot start.
    #[error("{0}")]
    Container(String),
    /// A directory for the script could not be made or read.
    #[error("resource `{resource}`: {path}: {source}")]
    Io {
        /// The resource.
        resource: String,
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A resource of a scripted type, ready to run its scripts.
pub struct Scripted<'a> {
    /// The resource.
    pub resource: &'a Resource,
    /// Its type.
    pub kind: &'a ResourceType,
}

impl Scripted<'_> {
    fn name(&self) -> String {
        self.resource.name.value.clone()
    }

    fn timeout(&self) -> Duration {
        self.kind
            .timeout
            .as_ref()
            .map_or(DEFAULT_TIMEOUT, |t| t.value.0)
    }

    fn render(
        &self,
        script: &'static str,
        version: Option<&Version>,
        params: Option<&Value>,
    ) -> Result<String, ScriptedError> {
        if let Some(image) = &self.kind.image {
            return Err(ScriptedError::Container(format!(
                "resource `{}`: {}",
                self.name(),
                crate::pipeline::container::no_runtime(&image.value)
            )));
        }
        if self.kind.config.backend() == Backend::Mcp {
            return Err(ScriptedError::Backend {
                resource: self.name(),
                kind: self.kind.name.value.clone(),
                backend: "mcp",
            });
        }
        let text = match script {
            "check" => self.kind.config.check.as_ref(),
            "in" => self.kind.config.in_.as_ref(),
            _ => self.kind.config.out.as_ref(),
        };
        let Some(text) = text else {
            return Err(ScriptedError::Missing {
                resource: self.name(),
                kind: self.kind.name.value.clone(),
                script,
            });
        };
        let data = json!({
            "source": self.resource.source,
            "version": version.cloned().unwrap_or_default(),
            "params": params.cloned().unwrap_or_else(|| json!({})),
        });
        template::render(&text.value, &data).map_err(|source| ScriptedError::Template {
            resource: self.name(),
            script,
            source,
        })
    }

    /// The names a stage may read from treadle's environment: the type's and the
    /// resource's `env:`.
    fn pass(&self) -> Vec<String> {
        self.kind
            .env
            .iter()
            .chain(&self.resource.env)
            .map(|v| v.value.clone())
            .collect()
    }

    /// Evaluates the `expr:` stage `script` when the type is written with `expr:`; `None`
    /// for a shell type.
    async fn expr(
        &self,
        script: &'static str,
        version: Option<&Version>,
        params: Option<&Value>,
        files: Option<&Path>,
    ) -> Result<Option<Value>, ScriptedError> {
        let Some(config) = &self.kind.config.expr else {
            return Ok(None);
        };
        if self.kind.config.backend() != Backend::Expr {
            return Ok(None);
        }
        let text = match script {
            "check" => config.value.check.as_ref(),
            "in" => config.value.in_.as_ref(),
            _ => config.value.out.as_ref(),
        };
        let Some(text) = text else {
            return Err(ScriptedError::Missing {
                resource: self.name(),
                kind: self.kind.name.value.clone(),
                script,
            });
        };
        let stage = crate::resource::expr::Stage {
            name: script,
            text: &text.value,
            vars: crate::resource::expr::vars(&json!(self.resource.source), version, params),
            env: self.pass(),
            files: files.map(Path::to_path_buf),
            timeout: self.timeout(),
        };
        crate::resource::expr::run(stage)
            .await
            .map(Some)
            .map_err(|e| ScriptedError::Expr {
                resource: self.name(),
                script,
                detail: e.to_string(),
            })
    }

    async fn run(
        &self,
        script: &'static str,
        text: &str,
        cwd: &Path,
        confine_to: &Path,
        cancel: &CancellationToken,
    ) -> Result<String, ScriptedError> {
        let env = [("TREADLE_RESOURCE".to_owned(), self.name())];
        let pass = self.pass();
        let s = Script {
            text,
            cwd,
            confine_to,
            timeout: self.timeout(),
            env: &env,
            pass: &pass,
        };
        script::run(&s, cancel)
            .await
            .map_err(|source| ScriptedError::Script {
                resource: self.name(),
                script,
                source,
            })
    }

    /// Runs `check` in `scratch` (an existing directory) with `cursor` as `.version`; the
    /// versions it printed, oldest first.
    pub async fn check(
        &self,
        cursor: Option<&Version>,
        scratch: &Path,
        cancel: &CancellationToken,
    ) -> Result<Vec<Version>, ScriptedError> {
        if let Some(expr) = self.expr("check", cursor, None, None).await? {
            return parse_versions(&expr.to_string()).map_err(|detail| ScriptedError::Expr {
                resource: self.name(),
                script: "check",
                detail: format!(
                    "it must return a list of versions like [{{ref: \"abc\"}}], oldest first; {detail}"
                ),
            });
        }
        let text = self.render("check", cursor, None)?;
        let out = self.run("check", &text, scratch, scratch, cancel).await?;
        parse_versions(&out).map_err(|e| ScriptedError::NotVersions {
            resource: self.name(),
            detail: e.to_string(),
            printed: excerpt(&out),
        })
    }

    /// Runs `in` for `version` in `step_dir/artifact` (an existing, empty directory).
    pub async fn fetch(
        &self,
        version: &Version,
        params: Option<&Value>,
        step_dir: &Path,
        artifact: &str,
        cancel: &CancellationToken,
    ) -> Result<(), ScriptedError> {
        let dest = step_dir.join(artifact);
        let io = |path: &Path, source| ScriptedError::Io {
            resource: self.name(),
            path: path.to_path_buf(),
            source,
        };
        // A type that only detects change has no `in`: the get holds the version itself.
        let has_in = match (&self.kind.config.expr, self.kind.config.backend()) {
            (Some(e), Backend::Expr) => e.value.in_.is_some(),
            (_, Backend::Shell) => self.kind.config.in_.is_some(),
            _ => true,
        };
        if !has_in {
            let file = dest.join(VERSION_FILE);
            let text = serde_json::to_string_pretty(version).unwrap_or_default();
            return std::fs::write(&file, text + "\n").map_err(|e| io(&file, e));
        }
        if let Some(files) = self.expr("in", Some(version), params, None).await? {
            return crate::resource::expr::write_files(&files, &dest).map_err(|e| {
                ScriptedError::Expr {
                    resource: self.name(),
                    script: "in",
                    detail: e.to_string(),
                }
            });
        }
        let text = self.render("in", Some(version), params)?;
        let before = listing(step_dir).map_err(|e| io(step_dir, e))?;
        self.run("in", &text, &dest, step_dir, cancel).await?;
        let after = listing(step_dir).map_err(|e| io(step_dir, e))?;
        let escaped = after
            .into_iter()
            .find(|p| !before.contains(p) && p != artifact && p != crate::confine::TMP)
            .or_else(|| link_out(&dest, &dest));
        match escaped {
            Some(path) => Err(ScriptedError::Escaped {
                resource: self.name(),
                path,
            }),
            None => Ok(()),
        }
    }

    /// Runs `out` in `dir` (the put's inputs); the version it printed, if it printed one.
    pub async fn publish(
        &self,
        params: Option<&Value>,
        dir: &Path,
        cancel: &CancellationToken,
    ) -> Result<Option<Version>, ScriptedError> {
        if let Some(v) = self.expr("out", None, params, Some(dir)).await? {
            if v.is_null() {
                return Ok(None);
            }
            return version_of(v)
                .map(Some)
                .map_err(|detail| ScriptedError::Expr {
                    resource: self.name(),
                    script: "out",
                    detail: format!(
                        "it must return the version it published (a map) or nil; {detail}"
                    ),
                });
        }
        let text = self.render("out", None, params)?;
        let out = self.run("out", &text, dir, dir, cancel).await?;
        Ok(last_object(&out))
    }
}

fn listing(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        out.push(e?.file_name().to_string_lossy().into_owned());
    }
    Ok(out)
}

/// A symbolic link under `dir` whose target is outside `root`, as a path.
fn link_out(dir: &Path, root: &Path) -> Option<String> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let path = e.path();
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if meta.is_symlink() {
            let target = std::fs::read_link(&path).ok()?;
            let resolved = path.parent().unwrap_or(dir).join(&target);
            let inside = std::path::absolute(&resolved)
                .ok()
                .map(|p| normalize(&p))
                .is_some_and(|p| p.starts_with(normalize(root)));
            if !inside {
                return Some(format!("{} -> {}", path.display(), target.display()));
            }
        } else if meta.is_dir()
            && let Some(found) = link_out(&path, root)
        {
            return Some(found);
        }
    }
    None
}

/// `path` with `.` and `..` taken out lexically (links are not followed).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Why a check's output is not a list of versions.
#[derive(Debug, thiserror::Error)]
pub enum VersionsError {
    /// Not JSON.
    #[error("its output is not JSON ({0})")]
    NotJson(#[from] serde_json::Error),
    /// JSON, but not a list.
    #[error("its output is JSON but not a list")]
    NotAList,
    /// An item that is not a version.
    #[error("item {index}: {source}")]
    Item {
        /// Its place in the list.
        index: usize,
        /// Why.
        source: VersionError,
    },
}

/// Why a value is not a version.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    /// Not an object.
    #[error("a version must be an object of strings")]
    NotAnObject,
    /// A value that is not a string (nor a number or a boolean).
    #[error("the value of `{0}` must be a string")]
    NotAString(String),
}

/// Reads a check's output: a JSON list of flat objects.
pub fn parse_versions(out: &str) -> Result<Vec<Version>, VersionsError> {
    let value: Value = serde_json::from_str(out.trim())?;
    let Value::Array(items) = value else {
        return Err(VersionsError::NotAList);
    };
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            version_of(item).map_err(|source| VersionsError::Item { index, source })
        })
        .collect()
}

fn version_of(item: Value) -> Result<Version, VersionError> {
    let Value::Object(map) = item else {
        return Err(VersionError::NotAnObject);
    };
    map.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            Value::Number(n) => Ok((k, n.to_string())),
            Value::Bool(b) => Ok((k, b.to_string())),
            _ => Err(VersionError::NotAString(k)),
        })
        .collect()
}

/// The last JSON object in `out` (an `out` script may print other things first).
fn last_object(out: &str) -> Option<Version> {
    let out = out.trim_end();
    out.match_indices('{')
        .map(|(i, _)| &out[i..])
        .find_map(|tail| serde_json::from_str::<Value>(tail).ok())
        .and_then(|v| version_of(v).ok())
}

fn excerpt(out: &str) -> String {
    let t = out.trim();
    if t.is_empty() {
        return "nothing".to_owned();
    }
    let mut end = t.len().min(200);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    format!("`{}`{}", &t[..end], if end < t.len() { "..." } else { "" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_output_is_a_list_of_flat_string_maps() {
        let v = parse_versions(r#"[{"ref": "a"}, {"n": 2, "ok": true}]"#).unwrap();
        assert_eq!(v[0]["ref"], "a");
        assert_eq!(v[1]["n"], "2");
        assert!(
            parse_versions("not json")
                .unwrap_err()
                .to_string()
                .contains("not JSON")
        );
        assert!(
            parse_versions(r#"{"ref": "a"}"#)
                .unwrap_err()
                .to_string()
                .contains("not a list")
        );
        assert!(
            parse_versions(r#"[{"ref": {"x": 1}}]"#)
                .unwrap_err()
                .to_string()
                .contains("`ref`")
        );
        assert_eq!(parse_versions(" [] \n").unwrap(), Vec::<Version>::new());
    }

    #[test]
    fn out_prints_its_version_last() {
        let v = last_object("what changed\n{\"ref\": \"v1.4.2\"}\n").unwrap();
        assert_eq!(v["ref"], "v1.4.2");
        assert_eq!(last_object("no version here"), None);
        assert_eq!(last_object(""), None);
    }

    #[test]
    fn a_link_leading_out_of_the_artifact_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let art = dir.path().join("art");
        std::fs::create_dir_all(art.join("sub")).unwrap();
        std::os::unix::fs::symlink("../x", art.join("sub/inside")).unwrap();
        assert_eq!(link_out(&art, &art), None);
        std::os::unix::fs::symlink("/etc/passwd", art.join("sub/out")).unwrap();
        assert!(link_out(&art, &art).is_some_and(|p| p.contains("/etc/passwd")));
    }
}
