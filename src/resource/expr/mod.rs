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
//! * `value_error`: why one of them refused its values;
//! * `host`: why a stage's own function failed;
//! * `http`: `http()`.

pub mod builtins;
pub mod eval;
pub mod host;
pub mod http;
pub mod lex;
pub mod syntax;
pub mod value_error;

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::pipeline::Version;
use host::HostError;

/// Why an expression stage failed.
#[derive(Debug, thiserror::Error)]
pub enum ExprError {
    /// The expression does not parse.
    #[error("the expression does not parse: {source}{}", near(.text, .source.pos))]
    Syntax {
        /// Where and why.
        source: syntax::SyntaxError,
        /// The expression.
        text: String,
    },
    /// It failed while it ran.
    #[error("{source}{}", near(.text, .source.pos))]
    Eval {
        /// Where and what (boxed: a host's error, an HTTP one, is large).
        source: Box<eval::EvalError>,
        /// The expression.
        text: String,
    },
    /// It ran past the type's `timeout:`.
    #[error("did not finish within {} (raise the type's `timeout:` if it needs longer)", humantime::format_duration(*.0))]
    TimedOut(Duration),
    /// Its thread ended without an answer (it panicked, or the runtime shut down).
    #[error("stopped: {0}")]
    Stopped(#[source] tokio::task::JoinError),
}

/// ` (at `...`)`: the expression's text from `pos` to the end of its line (at most 40
/// characters), so that the place is seen without counting columns; nothing at the end.
fn near(text: &str, pos: syntax::Pos) -> String {
    let rest: String = text
        .chars()
        .skip(pos.offset)
        .take_while(|c| *c != '\n')
        .take(40)
        .collect();
    let rest = rest.trim_end();
    if rest.is_empty() {
        String::new()
    } else {
        format!(" (at `{rest}`)")
    }
}

/// Why what an `in` returned could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// It is not a map.
    #[error("`in` must return a map of artifact-relative path to file contents, not {0}")]
    NotAMap(String),
    /// A path that leaves the artifact directory.
    #[error("`in` returned the path {0:?}, which is not relative or leaves the artifact directory")]
    Outside(String),
    /// A file or directory could not be written.
    #[error("{}: {source}", .path.display())]
    Io {
        /// Which.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
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
    let text = stage.text;
    let tree = syntax::parse(text).map_err(|source| ExprError::Syntax {
        source,
        text: text.to_owned(),
    })?;
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
        Ok(Err(e)) => Err(ExprError::Stopped(e)),
        Ok(Ok(out)) => out.map_err(|source| ExprError::Eval {
            source: Box::new(source),
            text: text.to_owned(),
        }),
    }
}

struct StageHost {
    stage: &'static str,
    env: Vec<String>,
    files: Option<PathBuf>,
    runtime: tokio::runtime::Handle,
}

impl eval::Host for StageHost {
    fn call(&self, name: &str, args: &[Value]) -> Option<Result<Value, HostError>> {
        Some(match name {
            "env" => self.env(args),
            "file" => self.file(args),
            "fail" => Err(match args {
                [Value::String(m)] => HostError::Fail(m.clone()),
                [other] => HostError::Fail(builtins::text(other)),
                _ => HostError::FailUsage,
            }),
            "http" => http::call(args, &self.runtime).map_err(HostError::from),
            "now" | "date" | "duration" if self.stage != "out" => Err(HostError::NotRepeatable {
                name: name.to_owned(),
                stage: self.stage,
            }),
            "now" | "date" | "duration" => Err(HostError::Unavailable(name.to_owned())),
            _ => return None,
        })
    }
}

/// `(name)` or `(name, default)`.
fn name_and_default<'a>(
    what: &'static str,
    args: &'a [Value],
) -> Result<(&'a str, Option<&'a Value>), HostError> {
    match args {
        [Value::String(n)] => Ok((n, None)),
        [Value::String(n), d] => Ok((n, Some(d))),
        _ => Err(HostError::NameAndDefault(what)),
    }
}

impl StageHost {
    fn env(&self, args: &[Value]) -> Result<Value, HostError> {
        let (name, default) = name_and_default("env", args)?;
        if !self.env.iter().any(|n| n == name) {
            return Err(HostError::EnvNotListed(name.to_owned()));
        }
        match (crate::environ::var(name), default) {
            (Some(v), _) => Ok(Value::String(v)),
            (None, Some(d)) => Ok(d.clone()),
            (None, None) => Err(HostError::EnvUnset(name.to_owned())),
        }
    }

    fn file(&self, args: &[Value]) -> Result<Value, HostError> {
        let Some(root) = &self.files else {
            return Err(HostError::FileOutsideOut(self.stage));
        };
        let (path, default) = name_and_default("file", args)?;
        let rel = inside(path).ok_or_else(|| HostError::FileOutside(path.to_owned()))?;
        match (std::fs::read_to_string(root.join(rel)), default) {
            (Ok(text), _) => Ok(Value::String(text)),
            (Err(source), None) => Err(HostError::FileRead {
                path: path.to_owned(),
                source,
            }),
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
pub fn write_files(value: &Value, dest: &Path) -> Result<(), WriteError> {
    let Value::Object(files) = value else {
        return Err(WriteError::NotAMap(builtins::show_type(value)));
    };
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| WriteError::Io { path, source }
    };
    for (path, contents) in files {
        let rel = inside(path).ok_or_else(|| WriteError::Outside(path.clone()))?;
        let text = match contents {
            Value::String(s) => s.clone(),
            other => builtins::text(other),
        };
        let file = dest.join(rel);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        std::fs::write(&file, text).map_err(io(&file))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct NoHost;
    impl eval::Host for NoHost {
        fn call(&self, _: &str, _: &[Value]) -> Option<Result<Value, HostError>> {
            None
        }
    }

    fn ev(text: &str) -> Result<Value, ExprError> {
        let tree = syntax::parse(text).map_err(|source| ExprError::Syntax {
            source,
            text: text.to_owned(),
        })?;
        let vars = vars(&json!({"count": 3, "url": "u"}), None, None);
        eval::eval(&tree, vars, &NoHost).map_err(|source| ExprError::Eval {
            source: Box::new(source),
            text: text.to_owned(),
        })
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
            match ev(text) {
                Ok(got) => assert_eq!(got, want, "{text}"),
                Err(e) => panic!("{text}: {e}"),
            }
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
            let e = ev(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn an_error_carries_its_place_and_shows_the_text_there() {
        let text = "let n = source.count;\nn + nothing";
        let Err(ExprError::Eval { source, .. }) = ev(text) else {
            panic!("{text}: expected an evaluation error");
        };
        assert!(
            matches!(&source.kind, eval::EvalErrorKind::UnknownName(n) if n == "nothing"),
            "{source}"
        );
        assert_eq!((source.pos.line, source.pos.column), (2, 5));
        assert_eq!(text.chars().nth(source.pos.offset), Some('n'));
        let shown = ev(text).unwrap_err().to_string();
        assert!(
            shown.starts_with("line 2, column 5: unknown name `nothing`")
                && shown.ends_with("(at `nothing`)"),
            "{shown}"
        );
    }

    #[test]
    fn paths_must_stay_inside() {
        assert!(inside("a/b.txt").is_some());
        for bad in ["/etc/passwd", "../x", "a/../../x", ""] {
            assert!(inside(bad).is_none(), "{bad}");
        }
    }
}
