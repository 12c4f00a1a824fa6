//! Vars given over the API (`POST /api/v1/runs`) are data, never pipeline text.
//!
//! On the command line a `((name))` is replaced in the file's text before it is parsed
//! (steps' rule: the operator types the value). Whoever can reach the API is not the
//! operator, so the server never splices an API value into the text. It loads the file
//! with those `((name))` left as written, then fills them in the parsed steps:
//!
//! * in a task's shell `run:`, `((name))` becomes `"${TREADLE_VAR_name}"` and the value is
//!   put in the task's environment under that name (`-` and `.` become `_`), so the shell
//!   expands it as one word and never parses it (GitHub Actions' advice for untrusted
//!   input);
//! * in the `args:` of `run: { path, args }` the value is one argument, as given;
//! * in a value of a task's `env:` map, the value is the variable's value.
//!
//! Anywhere else (a program's `path:`, a prompt, a URI, a resource's `source:`, a `when:`
//! command) an API var is refused (400) with where it stands: the rule is an allow-list,
//! so a field added to the format later is refused until someone decides it is safe.
//! A var the file does not use is refused too, so a typo is not silently dropped.

use std::collections::{BTreeMap, BTreeSet};

use crate::pipeline::container::Env;
use crate::pipeline::format::{Job, Pipeline, RunSpec, Step};
use crate::pipeline::vars::{Vars, substitute, uses};
use crate::pipeline::{At, InParallel, StepKind};

/// The environment variables API vars reach a shell command through start with this.
pub const ENV_PREFIX: &str = "TREADLE_VAR_";

/// The names of the `((vars))` the file at `path` uses, sorted, each once (none when it
/// cannot be read): the fields of the page's start form.
pub fn used_in(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let names: BTreeSet<String> = uses(&text).into_iter().map(|(name, _)| name).collect();
    names.into_iter().collect()
}

/// The file at `path` loaded with its `names` vars left as written, as a run started over
/// the API loads it before filling them (`None`: it does not load even so).
pub fn load_leaving(path: &std::path::Path, names: &[String]) -> Option<crate::pipeline::Loaded> {
    let scope = crate::pipeline::CheckScope {
        job: None,
        env: &crate::pipeline::model::process_env,
        machine: false,
    };
    let text = crate::pipeline::load::read_source(path).ok()?;
    let names = names.iter().cloned().collect();
    crate::pipeline::load_text_leaving(path, &text, &scope, &names).ok()
}

/// Why API vars cannot fill a pipeline.
#[derive(Debug, thiserror::Error)]
pub enum ApiVarsError {
    /// The file has no `((name))` of this var.
    #[error(
        "var `{0}`: the pipeline uses no `(({0}))`\nhint: send only the vars the file uses (names are case-sensitive)"
    )]
    Unused(String),
    /// The var stands where a value given over the API may not go.
    #[error(
        "var `{name}` stands at {places} of the file, outside a task's `run:` and `env:` values: a var given over the API may only stand there, where it reaches the command as data\nhint: give it on the command line (`treadle run --var {name}=VALUE`), or move `(({name}))` into a task's `run:`"
    )]
    Outside {
        /// The var.
        name: String,
        /// Where it is written (`line L, column C`, joined).
        places: String,
    },
    /// The var names the program a task runs.
    #[error(
        "var `{0}` stands in a task's `path:` (the program it runs): a var given over the API cannot choose a program\nhint: put it in `args:`"
    )]
    Program(String),
    /// Two var names map to one environment variable.
    #[error(
        "vars `{0}` and `{1}` would both reach commands as ${2}\nhint: rename one in the pipeline"
    )]
    Collide(String, String, String),
}

/// The environment variable var `name` reaches a shell command through.
pub fn env_name(name: &str) -> String {
    let tail: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{ENV_PREFIX}{tail}")
}

/// What the fill needs per var, and how many `((name))` it replaced.
struct Filler<'v> {
    values: &'v Vars,
    /// `((name))` → `"${TREADLE_VAR_name}"`, for shell lines.
    refs: Vars,
    replaced: BTreeMap<String, usize>,
    error: Option<ApiVarsError>,
}

impl Filler<'_> {
    /// Counts the API vars' `((name))` in `text`.
    fn count(&mut self, text: &str) -> Vec<String> {
        let mut found = Vec::new();
        for (name, _) in uses(text) {
            if self.values.contains_key(&name) {
                *self.replaced.entry(name.clone()).or_default() += 1;
                found.push(name);
            }
        }
        found
    }

    fn step(&mut self, step: &mut Step) {
        let mut env_of_shell = Vec::new();
        if let StepKind::Task { run, .. } = &mut step.kind {
            match &mut run.value {
                RunSpec::Shell(line) => {
                    env_of_shell = self.count(line);
                    *line = substitute(line, &self.refs);
                }
                RunSpec::Exec(cfg) => {
                    if let Some(name) = self.count(&cfg.path).into_iter().next() {
                        self.error.get_or_insert(ApiVarsError::Program(name));
                    }
                    for arg in &mut cfg.args {
                        self.count(arg);
                        *arg = substitute(arg, self.values);
                    }
                }
            }
        }
        let mut env = match std::mem::take(&mut step.env) {
            Env::Map(map) => map,
            Env::Names(names) => {
                // The loader moves names to `pass_env`; keep them if it has not.
                step.pass_env.extend(names);
                BTreeMap::new()
            }
        };
        for value in env.values_mut() {
            self.count(value);
            *value = substitute(value, self.values);
        }
        for name in env_of_shell {
            if let Some(value) = self.values.get(&name) {
                env.insert(env_name(&name), value.clone());
            }
        }
        step.env = Env::Map(env);
        for child in children_mut(step) {
            self.step(&mut child.value);
        }
    }

    fn job(&mut self, job: &mut Job) {
        for s in &mut job.plan {
            self.step(&mut s.value);
        }
        for hook in [
            &mut job.on_success,
            &mut job.on_failure,
            &mut job.on_error,
            &mut job.on_abort,
            &mut job.ensure,
        ]
        .into_iter()
        .flatten()
        {
            self.step(&mut hook.value);
        }
    }
}

/// The steps nested in `step`, hooks included, as [`Step::children`] and
/// [`Step::hooks`] see them.
fn children_mut(step: &mut Step) -> Vec<&mut At<Step>> {
    let mut out: Vec<&mut At<Step>> = Vec::new();
    match &mut step.kind {
        StepKind::Do(steps) => out.extend(steps.iter_mut()),
        StepKind::InParallel(InParallel::Steps(steps)) => out.extend(steps.iter_mut()),
        StepKind::InParallel(InParallel::Config(c)) => out.extend(c.steps.iter_mut()),
        StepKind::Race(race) => out.extend(race.steps.iter_mut()),
        StepKind::Try(inner) => out.push(inner),
        _ => {}
    }
    for hook in step.outcomes.slots_mut().into_iter().flatten() {
        out.push(hook);
    }
    out
}

/// Fills the API vars `values` into `pipeline`, parsed from `text` with their `((name))`
/// left as written.
pub fn fill(pipeline: &mut Pipeline, text: &str, values: &Vars) -> Result<(), ApiVarsError> {
    let written = uses(text);
    let mut envs: BTreeMap<String, &str> = BTreeMap::new();
    for name in values.keys() {
        if !written.iter().any(|(n, _)| n == name) {
            return Err(ApiVarsError::Unused(name.clone()));
        }
        if let Some(other) = envs.insert(env_name(name), name) {
            return Err(ApiVarsError::Collide(
                other.to_owned(),
                name.clone(),
                env_name(name),
            ));
        }
    }
    let refs = values
        .keys()
        .map(|n| (n.clone(), format!("\"${{{}}}\"", env_name(n))))
        .collect();
    let mut filler = Filler {
        values,
        refs,
        replaced: BTreeMap::new(),
        error: None,
    };
    for job in &mut pipeline.jobs {
        filler.job(job);
    }
    for s in pipeline.plan.iter_mut().flatten() {
        filler.step(&mut s.value);
    }
    if let Some(e) = filler.error {
        return Err(e);
    }
    let names: BTreeSet<&String> = values.keys().collect();
    for name in names {
        let places: Vec<String> = written
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, p)| format!("line {}, column {}", p.line, p.column))
            .collect();
        if filler.replaced.get(name).copied().unwrap_or(0) < places.len() {
            return Err(ApiVarsError::Outside {
                name: name.clone(),
                places: places.join("; "),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_shell_names() {
        assert_eq!(env_name("who"), "TREADLE_VAR_who");
        assert_eq!(env_name("a-b.c"), "TREADLE_VAR_a_b_c");
    }
}
