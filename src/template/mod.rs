//! `{{ }}` templates: the subset of Go's `text/template` that pipelines written for
//! `steps` use, so they run unchanged. The one engine for every `{{ }}` of a pipeline:
//! resource type scripts, custom tools' commands, and an `across:` cell's
//! `{{ .vars.NAME }}` (`crate::pipeline::flow_keys::render`).
//!
//! An action is a pipeline of commands joined by `|`, each command's value passed as the
//! last argument of the next: `{{ .version.ref | shellquote }}`,
//! `{{ index .version "ts" | default "0" }}`. Operands are field chains (`.source.uri`,
//! `.` for the whole data), string literals (`"..."` with escapes, `` `raw` ``), numbers,
//! `true`/`false` and parenthesized pipelines. `{{-` and `-}}` trim the whitespace beside
//! them. Control actions (`if`, `range`, `with`) are not supported and say so.
//!
//! A field that is not there is an error naming it (Go's `missingkey=error`): a script
//! that reads an optional key asks with `index`, which answers nothing instead, and
//! `default` fills the gap.
//!
//! Written here rather than taken from `gtmpl` (the Go-template crate): its last release
//! is years old and it has no `missingkey=error`, which is the behaviour this needs.

use serde_json::Value;

/// Why a template could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The text is not a template this subset reads.
    #[error("cannot read the template at byte {at}: {message}")]
    Parse {
        /// Byte offset in the template.
        at: usize,
        /// What is wrong.
        message: String,
    },
    /// A field chain names a key that is not there.
    #[error(
        "`{key}` is not set (to read an optional key, write `{{{{ index {parent} \"{last}\" | default \"...\" }}}}`)"
    )]
    MissingKey {
        /// The chain up to the missing key, e.g. `.version.ts`.
        key: String,
        /// The chain before it, e.g. `.version`.
        parent: String,
        /// The missing key.
        last: String,
    },
    /// A function was called wrongly, or does not exist.
    #[error("`{name}`: {message}")]
    Function {
        /// The function.
        name: String,
        /// What is wrong.
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    Field(Vec<String>),
    Literal(Value),
    Ident(String),
    Group(Vec<Command>),
}

type Command = Vec<Operand>;

/// Renders `template` against `data` (a JSON object: `source`, `version`, `params`).
pub fn render(template: &str, data: &Value) -> Result<String, TemplateError> {
    walk(template, |pipeline| Ok(display(&eval(pipeline, data)?)))
}

/// Renders a command line that takes values nobody vetted (a model's arguments to a custom
/// tool): every action that reads a field under `.ROOT` is shell-quoted as one word, unless
/// it already ends in `shellquote`. A template written for `steps` with `| shellquote`
/// renders the same; one that forgot it cannot have a value run as shell code.
pub fn render_for_shell(template: &str, data: &Value, root: &str) -> Result<String, TemplateError> {
    walk(template, |pipeline| {
        let text = display(&eval(pipeline, data)?);
        let quoted = pipeline
            .last()
            .and_then(|c| c.first())
            .is_some_and(|head| *head == Operand::Ident("shellquote".to_owned()));
        Ok(if reads(pipeline, root) && !quoted {
            shellquote(&text)
        } else {
            text
        })
    })
}

/// The names of the fields under `.ROOT` that `template` reads (`.args.body` gives `body`),
/// each once, in the order they first appear.
pub fn fields_under(template: &str, root: &str) -> Result<Vec<String>, TemplateError> {
    let mut names: Vec<String> = Vec::new();
    walk(template, |pipeline| {
        collect(pipeline, root, &mut names);
        Ok(String::new())
    })?;
    Ok(names)
}

fn collect(pipeline: &[Command], root: &str, names: &mut Vec<String>) {
    for op in pipeline.iter().flatten() {
        match op {
            Operand::Field(chain) if chain.first().is_some_and(|r| r == root) => {
                if let Some(name) = chain.get(1)
                    && !names.contains(name)
                {
                    names.push(name.clone());
                }
            }
            Operand::Group(inner) => collect(inner, root, names),
            _ => {}
        }
    }
}

fn reads(pipeline: &[Command], root: &str) -> bool {
    let mut names = Vec::new();
    collect(pipeline, root, &mut names);
    !names.is_empty()
        || pipeline
            .iter()
            .flatten()
            .any(|op| matches!(op, Operand::Field(chain) if chain.len() == 1 && chain[0] == root))
}

/// Copies the text of `template` and replaces each action by what `action` makes of it.
fn walk(
    template: &str,
    mut action: impl FnMut(&[Command]) -> Result<String, TemplateError>,
) -> Result<String, TemplateError> {
    let mut out = String::new();
    let mut rest = template;
    let mut offset = 0;
    while let Some(open) = rest.find("{{") {
        let mut text = &rest[..open];
        let mut inner_start = open + 2;
        if rest[inner_start..].starts_with('-') {
            text = text.trim_end();
            inner_start += 1;
        }
        out.push_str(text);
        let Some(close) = rest[inner_start..].find("}}") else {
            return Err(parse_err(offset + open, "`{{` without `}}`"));
        };
        let mut inner = &rest[inner_start..inner_start + close];
        let mut after = inner_start + close + 2;
        let trim_right =
            inner.ends_with('-') && inner[..inner.len() - 1].ends_with(char::is_whitespace);
        if trim_right {
            inner = &inner[..inner.len() - 1];
        }
        let pipeline = Parser::new(inner, offset + inner_start).pipeline_all()?;
        out.push_str(&action(&pipeline)?);
        if trim_right {
            let trimmed = rest[after..].trim_start();
            after = rest.len() - trimmed.len();
        }
        offset += after;
        rest = &rest[after..];
    }
    out.push_str(rest);
    Ok(out)
}

fn parse_err(at: usize, message: impl Into<String>) -> TemplateError {
    TemplateError::Parse {
        at,
        message: message.into(),
    }
}

struct Parser<'t> {
    text: &'t str,
    pos: usize,
    base: usize,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str, base: usize) -> Self {
        Self { text, pos: 0, base }
    }

    fn err(&self, message: impl Into<String>) -> TemplateError {
        parse_err(self.base + self.pos, message)
    }

    fn skip_ws(&mut self) {
        let rest = &self.text[self.pos..];
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn pipeline_all(&mut self) -> Result<Vec<Command>, TemplateError> {
        let p = self.pipeline()?;
        self.skip_ws();
        if self.pos < self.text.len() {
            return Err(self.err(format!("unexpected `{}`", &self.text[self.pos..])));
        }
        Ok(p)
    }

    fn pipeline(&mut self) -> Result<Vec<Command>, TemplateError> {
        let mut commands = vec![self.command()?];
        loop {
            self.skip_ws();
            if self.peek() == Some('|') {
                self.pos += 1;
                commands.push(self.command()?);
            } else {
                return Ok(commands);
            }
        }
    }

    fn command(&mut self) -> Result<Command, TemplateError> {
        let mut operands = Vec::new();
        loop {
            self.skip_ws();
            match self.peek() {
                None | Some('|' | ')') => break,
                Some(_) => operands.push(self.operand()?),
            }
        }
        if operands.is_empty() {
            return Err(self.err("empty command"));
        }
        if let Some(Operand::Ident(name)) = operands.first()
            && matches!(
                name.as_str(),
                "if" | "else" | "end" | "range" | "with" | "define" | "template" | "block"
            )
        {
            return Err(self.err(format!("`{name}` actions are not supported")));
        }
        Ok(operands)
    }

    fn operand(&mut self) -> Result<Operand, TemplateError> {
        let rest = &self.text[self.pos..];
        let c = rest.chars().next().unwrap_or(' ');
        match c {
            '.' => {
                let len = rest
                    .find(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == '.'))
                    .unwrap_or(rest.len());
                let chain = &rest[..len];
                self.pos += len;
                let parts: Vec<String> = chain[1..]
                    .split('.')
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect();
                if chain.len() > 1 && (chain.ends_with('.') || chain.contains("..")) {
                    return Err(self.err(format!("bad field `{chain}`")));
                }
                Ok(Operand::Field(parts))
            }
            '"' => {
                let end = string_end(rest).ok_or_else(|| self.err("unclosed string"))?;
                let value: String = serde_json::from_str(&rest[..end])
                    .map_err(|e| self.err(format!("bad string: {e}")))?;
                self.pos += end;
                Ok(Operand::Literal(Value::String(value)))
            }
            '`' => {
                let end = rest[1..]
                    .find('`')
                    .ok_or_else(|| self.err("unclosed raw string"))?;
                self.pos += end + 2;
                Ok(Operand::Literal(Value::String(rest[1..=end].to_owned())))
            }
            '(' => {
                self.pos += 1;
                let inner = self.pipeline()?;
                self.skip_ws();
                if self.peek() != Some(')') {
                    return Err(self.err("`(` without `)`"));
                }
                self.pos += 1;
                Ok(Operand::Group(inner))
            }
            _ => {
                let len = rest
                    .find(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == '-' || ch == '+'))
                    .unwrap_or(rest.len());
                if len == 0 {
                    return Err(self.err(format!("unexpected `{c}`")));
                }
                let word = &rest[..len];
                self.pos += len;
                Ok(match word {
                    "true" => Operand::Literal(Value::Bool(true)),
                    "false" => Operand::Literal(Value::Bool(false)),
                    "nil" => Operand::Literal(Value::Null),
                    _ => match serde_json::from_str::<serde_json::Number>(word) {
                        Ok(n) => Operand::Literal(Value::Number(n)),
                        Err(_) => Operand::Ident(word.to_owned()),
                    },
                })
            }
        }
    }
}

/// The length of the `"..."` literal at the start of `s`, quotes included.
fn string_end(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices().skip(1) {
        match (escaped, c) {
            (true, _) => escaped = false,
            (false, '\\') => escaped = true,
            (false, '"') => return Some(i + 1),
            _ => {}
        }
    }
    None
}

fn eval(pipeline: &[Command], data: &Value) -> Result<Value, TemplateError> {
    let mut carried: Option<Value> = None;
    for command in pipeline {
        carried = Some(eval_command(command, data, carried)?);
    }
    Ok(carried.unwrap_or(Value::Null))
}

fn eval_command(
    command: &Command,
    data: &Value,
    carried: Option<Value>,
) -> Result<Value, TemplateError> {
    let Some((head, args)) = command.split_first() else {
        return Ok(Value::Null);
    };
    let Operand::Ident(name) = head else {
        if !args.is_empty() || carried.is_some() {
            return Err(parse_err(0, "only a function takes arguments"));
        }
        return operand(head, data);
    };
    let mut values = args
        .iter()
        .map(|a| operand(a, data))
        .collect::<Result<Vec<_>, _>>()?;
    values.extend(carried);
    call(name, &values)
}

fn operand(op: &Operand, data: &Value) -> Result<Value, TemplateError> {
    match op {
        Operand::Literal(v) => Ok(v.clone()),
        Operand::Group(p) => eval(p, data),
        Operand::Ident(name) => call(name, &[]),
        Operand::Field(chain) => {
            let mut value = data;
            for (i, key) in chain.iter().enumerate() {
                match value.get(key) {
                    Some(v) => value = v,
                    None => {
                        let parent = chain[..i]
                            .iter()
                            .map(|k| format!(".{k}"))
                            .collect::<String>();
                        return Err(TemplateError::MissingKey {
                            key: format!("{parent}.{key}"),
                            parent: if parent.is_empty() {
                                ".".to_owned()
                            } else {
                                parent
                            },
                            last: key.clone(),
                        });
                    }
                }
            }
            Ok(value.clone())
        }
    }
}

fn fn_err(name: &str, message: impl Into<String>) -> TemplateError {
    TemplateError::Function {
        name: name.to_owned(),
        message: message.into(),
    }
}

fn call(name: &str, args: &[Value]) -> Result<Value, TemplateError> {
    let arity = |n: usize| {
        if args.len() == n {
            Ok(())
        } else {
            Err(fn_err(
                name,
                format!("takes {n} argument(s), got {}", args.len()),
            ))
        }
    };
    let text = |i: usize| display(&args[i]);
    match name {
        "shellquote" => arity(1).map(|()| Value::String(shellquote(&text(0)))),
        "upper" => arity(1).map(|()| Value::String(text(0).to_uppercase())),
        "lower" => arity(1).map(|()| Value::String(text(0).to_lowercase())),
        "trim" => arity(1).map(|()| Value::String(text(0).trim().to_owned())),
        "quote" => arity(1).map(|()| Value::String(format!("{:?}", text(0)))),
        "squote" => arity(1).map(|()| Value::String(format!("'{}'", text(0)))),
        "toJson" => arity(1).map(|()| Value::String(args[0].to_string())),
        "trimPrefix" => arity(2).map(|()| {
            let (p, s) = (text(0), text(1));
            Value::String(s.strip_prefix(&p).unwrap_or(&s).to_owned())
        }),
        "trimSuffix" => arity(2).map(|()| {
            let (p, s) = (text(0), text(1));
            Value::String(s.strip_suffix(&p).unwrap_or(&s).to_owned())
        }),
        "replace" => arity(3).map(|()| Value::String(text(2).replace(&text(0), &text(1)))),
        "default" => {
            arity(2)?;
            Ok(if is_empty(&args[1]) {
                args[0].clone()
            } else {
                args[1].clone()
            })
        }
        "index" => {
            let Some((first, keys)) = args.split_first() else {
                return Err(fn_err(name, "needs a map and a key"));
            };
            let mut value = first.clone();
            for k in keys {
                value = match (&value, k) {
                    (Value::Object(m), Value::String(k)) => {
                        m.get(k).cloned().unwrap_or(Value::Null)
                    }
                    (Value::Array(a), Value::Number(n)) => n
                        .as_u64()
                        .and_then(|i| a.get(usize::try_from(i).ok()?).cloned())
                        .ok_or_else(|| fn_err(name, format!("index {n} out of range")))?,
                    (Value::Null, _) => Value::Null,
                    _ => {
                        return Err(fn_err(
                            name,
                            format!("cannot index {} with {k}", kind(&value)),
                        ));
                    }
                };
            }
            Ok(value)
        }
        other => Err(fn_err(
            other,
            "no such function (known: shellquote, default, index, upper, lower, trim, quote, squote, toJson, trimPrefix, trimSuffix, replace)",
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// Go's notion of an empty value, which `default` replaces.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

/// How a value is written into the text: strings as they are, others as JSON.
fn display(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `s` as one POSIX shell word: bare when it is made of safe characters only, else in
/// single quotes (a `'` inside written as `'\''`).
pub fn shellquote(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests;
