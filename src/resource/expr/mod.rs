//! `expr:` resource types: each stage an expression instead of a shell script, evaluated
//! in this process (docs/resources.md, "Expression types"):
//!
//! * `check` sees `source` and `version` (the cursor) and returns the versions, oldest
//!   first;
//! * `in` sees `source`, `version`, `params` and returns a map of artifact-relative path
//!   to file contents (without `in`, a get writes `version.json`);
//! * `out` sees `source`, `params` and `file()` and returns the version it published, or
//!   nil.
//!
//! Every stage has `env(name[, default])` (only the names the type's and resource's
//! `env:` list), `fail(message)` and `http(...)` ([`http`]); `out` also has
//! `file(path[, default])`. `now()`, `date()` and `duration()` are refused in `check` and
//! `in`, whose results must be the same for the same input, and are not provided in `out`.
//!
//! # Why an evaluator of our own
//!
//! The one Rust implementation of the expr language, `expr-lang` (2.1, MIT, maintained for
//! mise), was tried first: it reads a map literal's values as constants only (`{n: 1 + 2}`
//! gives `{n: 1}`, and `{n: string(#)}` or `{n: source.count}` panic while compiling), and
//! takes `let` only at the start of a program, not inside `map(( let x = ...; ... ))`.
//! Both are the everyday shape of these types' expressions, so treadle has its own small
//! evaluator over JSON values: [`syntax`] (tokens and tree), [`eval`] (names, operators,
//! predicated builtins) and [`builtins`] (the rest of the standard library that these types
//! use).
//!
//! # Layout
//!
//! * `lex`: its tokens;
//! * `syntax`: reading an expression into a tree;
//! * `eval`: evaluating one, with the stage's functions from an [`eval::Host`];
//! * `builtins`: operators and builtins without a predicate;
//! * `http`: `http()`.

pub mod builtins;
pub mod eval;
pub mod http;
pub mod lex;
pub mod syntax;

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::pipeline::Version;

/// Why an expression stage failed.
#[derive(Debug, thiserror::Error)]
pub enum ExprError {
    /// The expression does not parse.
    #[error("the expression does not parse: {0}")]
    Syntax(#[from] syntax::SyntaxError),
    /// It failed while it ran.
    #[error("{0}")]
    Eval(#[from] eval::EvalError),
    /// It ran past the type's `timeout:`.
    #[error("did not finish within {} (raise the type's `timeout:` if it needs longer)", humantime::format_duration(*.0))]
    TimedOut(Duration),
    /// Its thread ended without an answer.
    #[error("stopped: {0}")]
    Stopped(String),
}

/// One stage to evaluate.
pub struct Stage<'a> {
    /// `check`, `in` or `out`.
    pub name: &'static str,
    /// The expression.
    pub text: &'a str,
    /// `source`, `version`, `params` as the stage sees them.
    pub vars: Vec<(String, Value)>,
    /// The names `env()` may read.
    pub env: Vec<String>,
    /// `out`'s directory, which `file()` reads from.
    pub files: Option<PathBuf>,
    /// Give up after this long.
    pub timeout: Duration,
}

/// Evaluates `stage` on a blocking thread (its `http()` calls wait there).
pub async fn run(stage: Stage<'_>) -> Result<Value, ExprError> {
    let tree = syntax::parse(stage.text)?;
    let runtime = tokio::runtime::Handle::current();
    let host = StageHost {
        stage: stage.name,
        env: stage.env,
        files: stage.files,
        runtime,
    };
    let vars = stage.vars;
    let job = tokio::task::spawn_blocking(move || eval::eval(&tree, vars, &host));
    match tokio::time::timeout(stage.timeout, job).await {
        Err(_) => Err(ExprError::TimedOut(stage.timeout)),
        Ok(Err(e)) => Err(ExprError::Stopped(e.to_string())),
        Ok(Ok(out)) => Ok(out?),
    }
}

struct StageHost {
    stage: &'static str,
    env: Vec<String>,
    files: Option<PathBuf>,
    runtime: tokio::runtime::Handle,
}

impl eval::Host for StageHost {
    fn call(&self, name: &str, args: &[Value]) -> Option<Result<Value, String>> {
        Some(match name {
            "env" => self.env(args),
            "file" => self.file(args),
            "fail" => Err(match args {
                [Value::String(m)] => m.clone(),
                [other] => builtins::text(other),
                _ => "fail() takes one message".to_owned(),
            }),
            "http" => http::call(args, &self.runtime),
            "now" | "date" | "duration" if self.stage != "out" => Err(format!(
                "{name}() is not available in `{}`: its result must be the same for the same input (a check's versions are compared across polls, an `in`'s files are cached)",
                self.stage
            )),
            "now" | "date" | "duration" => Err(format!(
                "{name}() is not available in this treadle's expressions"
            )),
            _ => return None,
        })
    }
}

/// `(name)` or `(name, default)`.
fn name_and_default<'a>(
    what: &str,
    args: &'a [Value],
) -> Result<(&'a str, Option<&'a Value>), String> {
    match args {
        [Value::String(n)] => Ok((n, None)),
        [Value::String(n), d] => Ok((n, Some(d))),
        _ => Err(format!("{what}() takes a name and, optionally, a default")),
    }
}

impl StageHost {
    fn env(&self, args: &[Value]) -> Result<Value, String> {
        let (name, default) = name_and_default("env", args)?;
        if !self.env.iter().any(|n| n == name) {
            return Err(format!(
                "env({name:?}): not in this resource type's env: (list it under the type's or the resource's `env:`)"
            ));
        }
        match (crate::environ::var(name), default) {
            (Some(v), _) => Ok(Value::String(v)),
            (None, Some(d)) => Ok(d.clone()),
            (None, None) => Err(format!(
                "env({name:?}): the variable is not set (give a default to allow that: env({name:?}, \"\"))"
            )),
        }
    }

    fn file(&self, args: &[Value]) -> Result<Value, String> {
        let Some(root) = &self.files else {
            return Err(format!(
                "file() is only available in `out` (this is `{}`)",
                self.stage
            ));
        };
        let (path, default) = name_and_default("file", args)?;
        let rel = inside(path).ok_or_else(|| {
            format!("file({path:?}): the path must be relative and stay inside the put's inputs")
        })?;
        match (std::fs::read_to_string(root.join(rel)), default) {
            (Ok(text), _) => Ok(Value::String(text)),
            (Err(e), None) => Err(format!("file({path:?}): {e}")),
            (Err(_), Some(d)) => Ok(d.clone()),
        }
    }
}

/// `path` when it is relative and has no `..` (so it stays under where it is joined).
pub fn inside(path: &str) -> Option<&Path> {
    let p = Path::new(path);
    let ok = !path.is_empty()
        && p.components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    ok.then_some(p)
}

/// The variables of a stage: `source`, `version` (an empty map when there is none) and
/// `params`.
pub fn vars(
    source: &Value,
    version: Option<&Version>,
    params: Option<&Value>,
) -> Vec<(String, Value)> {
    vec![
        ("source".to_owned(), source.clone()),
        (
            "version".to_owned(),
            json!(version.cloned().unwrap_or_default()),
        ),
        (
            "params".to_owned(),
            params.cloned().unwrap_or_else(|| json!({})),
        ),
    ]
}

/// Writes what an `in` returned (path → contents) under `dest`; the error names the path.
pub fn write_files(value: &Value, dest: &Path) -> Result<(), String> {
    let Value::Object(files) = value else {
        return Err(format!(
            "`in` must return a map of artifact-relative path to file contents, not {}",
            builtins::show_type(value)
        ));
    };
    for (path, contents) in files {
        let rel = inside(path).ok_or_else(|| {
            format!("`in` returned the path {path:?}, which is not relative or leaves the artifact directory")
        })?;
        let text = match contents {
            Value::String(s) => s.clone(),
            other => builtins::text(other),
        };
        let file = dest.join(rel);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoHost;
    impl eval::Host for NoHost {
        fn call(&self, _: &str, _: &[Value]) -> Option<Result<Value, String>> {
            None
        }
    }

    fn ev(text: &str) -> Result<Value, String> {
        let tree = syntax::parse(text).map_err(|e| e.to_string())?;
        let vars = vars(&json!({"count": 3, "url": "u"}), None, None);
        eval::eval(&tree, vars, &NoHost).map_err(|e| e.to_string())
    }

    #[test]
    fn the_language_of_the_reference_examples() {
        let cases = [
            (
                "1..source.count | map(({n: string(#)}))",
                json!([{"n": "1"}, {"n": "2"}, {"n": "3"}]),
            ),
            ("{n: 1 + 2, \"k\": source.url}", json!({"n": 3, "k": "u"})),
            ("version.ts ?? \"0\"", json!("0")),
            ("[1, 2] | map(( let d = # * 2; d + #index ))", json!([2, 5])),
            (
                "!(\"subtype\" in {a: 1}) && \"abc\" contains \"b\"",
                json!(true),
            ),
            (
                "sortBy([{t: \"10\"}, {t: \"9\"}], float(#.t)) | map(#.t)",
                json!(["9", "10"]),
            ),
            ("[[1], [2, [3]]] | flatten()", json!([1, 2, 3])),
            ("concat([1], [2], [3])", json!([1, 2, 3])),
            (
                "reduce(1..10, #acc.done ? #acc : {items: concat(#acc.items, [#]), done: # == 3}, {items: [], done: false}).items",
                json!([1, 2, 3]),
            ),
            ("let page = {}; page.meta.next ?? \"end\"", json!("end")),
            ("source?.missing?.deeper", Value::Null),
            ("[1, 2, 3][-1] + [1, 2, 3][0:2][1]", json!(5)),
            ("len(\"héllo\") == 5 ? upper(\"a\") : \"no\"", json!("A")),
            (
                "fromJSON(\"{\\\"a\\\": [1]}\").a // a comment\n",
                json!([1]),
            ),
            ("/* block */ 7 / 2", json!(3.5)),
            ("2 ** 3 ** 2 == 512 and 10 % 4 == 2 or false", json!(true)),
            ("uniq([1, 1.0, 2]) | len()", json!(2)),
            ("keys({b: 1, a: 2}) | sort()", json!(["a", "b"])),
            (
                "filter([{e: nil}, {e: \"x\"}], #.e == nil) | len()",
                json!(1),
            ),
            ("int(\"42\") + int(2.9)", json!(44)),
            ("-3 + abs(-3)", json!(0)),
            ("toJSON({a: 1})", json!("{\n  \"a\": 1\n}")),
        ];
        for (text, want) in cases {
            assert_eq!(ev(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn errors_say_where_and_what() {
        for (text, says) in [
            ("map([1], {a: #}", "line 1"),
            ("[1] + [2]", "concat"),
            ("nothing + 1", "unknown name `nothing`"),
            ("source.count.deeper.x", "cannot read"),
            ("# + 1", "only defined inside a predicate"),
            ("filter([1], #)", "true or false"),
            ("1..10000000", "more than"),
            ("\"abc", "not closed"),
            ("1 +\n  * 2", "line 2, column 3"),
            ("nope(1)", "no function `nope`"),
        ] {
            let e = ev(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn paths_must_stay_inside() {
        assert!(inside("a/b.txt").is_some());
        for bad in ["/etc/passwd", "../x", "a/../../x", ""] {
            assert!(inside(bad).is_none(), "{bad}");
        }
    }
}
