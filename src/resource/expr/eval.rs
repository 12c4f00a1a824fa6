//! Evaluating an expression tree ([`super::syntax`]) over JSON values: names, `let`,
//! operators, member access, and the builtins that take a predicate (`map`, `filter`,
//! `reduce`...), whose predicate sees the element as `#` (and `#index`, `#acc`). The
//! builtins without a predicate are in [`super::builtins`]; the stage's own functions
//! (`env`, `file`, `fail`, `http`) come from its [`Host`].

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::builtins::{self, num, show_type, text};
use super::syntax::{Kind, Node, Pos};

/// The functions a stage adds to the language (`env`, `file`, `fail`, `http`).
pub trait Host {
    /// Calls `name`; `None` when the stage has no function of that name.
    fn call(&self, name: &str, args: &[Value]) -> Option<Result<Value, String>>;
}

/// An expression that failed while it ran.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{pos}: {message}")]
pub struct EvalError {
    /// Where.
    pub pos: Pos,
    /// What went wrong.
    pub message: String,
    /// A key was read from nil (forgiven on the left of `??`).
    nil_access: bool,
    /// `fail(message)` was called: the message is the whole error.
    pub failed: bool,
}

/// The most elements a range (`a..b`) may have.
const MAX_RANGE: i64 = 1_000_000;

/// Evaluates `node` with the stage's variables (`source`, `version`, `params`) in `vars`.
pub fn eval(node: &Node, vars: Vec<(String, Value)>, host: &dyn Host) -> Result<Value, EvalError> {
    let mut e = Evaluator { vars, host };
    e.eval(node)
}

struct Evaluator<'h> {
    vars: Vec<(String, Value)>,
    host: &'h dyn Host,
}

fn err(pos: Pos, message: impl Into<String>) -> EvalError {
    EvalError {
        pos,
        message: message.into(),
        nil_access: false,
        failed: false,
    }
}

impl Evaluator<'_> {
    fn eval(&mut self, node: &Node) -> Result<Value, EvalError> {
        let pos = node.pos;
        match &node.kind {
            Kind::Lit(v) => Ok(v.clone()),
            Kind::Name(n) => self
                .vars
                .iter()
                .rev()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| err(pos, unknown_name(n))),
            Kind::Array(items) => items
                .iter()
                .map(|i| self.eval(i))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            Kind::Map(entries) => {
                let mut out = Map::new();
                for (k, v) in entries {
                    let key = match self.eval(k)? {
                        Value::String(s) => s,
                        other => text(&other),
                    };
                    out.insert(key, self.eval(v)?);
                }
                Ok(Value::Object(out))
            }
            Kind::Member { of, key, optional } => {
                let of = self.eval(of)?;
                let key = self.eval(key)?;
                member(&of, &key, *optional).map_err(|(message, nil_access)| EvalError {
                    nil_access,
                    ..err(pos, message)
                })
            }
            Kind::Slice(of, from, to) => {
                let of = self.eval(of)?;
                let from = from.as_ref().map(|f| self.eval(f)).transpose()?;
                let to = to.as_ref().map(|t| self.eval(t)).transpose()?;
                builtins::slice(&of, from.as_ref(), to.as_ref()).map_err(|m| err(pos, m))
            }
            Kind::Call(name, args) => self.call(name, args, pos),
            Kind::Unary(op, operand) => {
                let v = self.eval(operand)?;
                match (*op, &v) {
                    ("!", Value::Bool(b)) => Ok(Value::Bool(!b)),
                    ("-", Value::Number(_)) => builtins::arith("-", &Value::from(0), &v),
                    ("+", Value::Number(_)) => Ok(v),
                    _ => Err(format!("`{op}` cannot apply to {}", show_type(&v))),
                }
                .map_err(|m| err(pos, m))
            }
            Kind::Binary(op, l, r) => self.binary(op, l, r, pos),
            Kind::Cond(c, yes, no) => {
                if self.truth(c)? {
                    self.eval(yes)
                } else {
                    self.eval(no)
                }
            }
            Kind::Let(name, value, body) => {
                let v = self.eval(value)?;
                self.vars.push((name.clone(), v));
                let out = self.eval(body);
                self.vars.pop();
                out
            }
        }
    }

    fn truth(&mut self, node: &Node) -> Result<bool, EvalError> {
        match self.eval(node)? {
            Value::Bool(b) => Ok(b),
            other => Err(err(
                node.pos,
                format!(
                    "a condition must be true or false, not {}",
                    show_type(&other)
                ),
            )),
        }
    }

    fn binary(&mut self, op: &str, l: &Node, r: &Node, pos: Pos) -> Result<Value, EvalError> {
        match op {
            "&&" => return Ok(Value::Bool(self.truth(l)? && self.truth(r)?)),
            "||" => return Ok(Value::Bool(self.truth(l)? || self.truth(r)?)),
            "??" => {
                return match self.eval(l) {
                    Ok(Value::Null) => self.eval(r),
                    Err(e) if e.nil_access => self.eval(r),
                    other => other,
                };
            }
            _ => {}
        }
        let (a, b) = (self.eval(l)?, self.eval(r)?);
        builtins::operate(op, &a, &b, MAX_RANGE).map_err(|m| err(pos, m))
    }

    fn call(&mut self, name: &str, args: &[Node], pos: Pos) -> Result<Value, EvalError> {
        if PREDICATED.contains(&name) {
            return self.predicated(name, args, pos);
        }
        let values = args
            .iter()
            .map(|a| self.eval(a))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(out) = self.host.call(name, &values) {
            return out.map_err(|message| EvalError {
                failed: name == "fail",
                ..err(pos, message)
            });
        }
        builtins::call(name, &values)
            .unwrap_or_else(|| Err(format!("there is no function `{name}`")))
            .map_err(|m| err(pos, format!("{name}(): {m}")))
    }

    /// Runs `pred` with `#` bound to `item` (and `#index`, and `#acc` when given).
    fn with_item(
        &mut self,
        pred: &Node,
        item: &Value,
        index: usize,
        acc: Option<Value>,
    ) -> Result<Value, EvalError> {
        let depth = self.vars.len();
        self.vars.push(("#".to_owned(), item.clone()));
        self.vars.push(("#index".to_owned(), Value::from(index)));
        if let Some(acc) = acc {
            self.vars.push(("#acc".to_owned(), acc));
        }
        let out = self.eval(pred);
        self.vars.truncate(depth);
        out
    }

    fn test(&mut self, pred: &Node, item: &Value, index: usize) -> Result<bool, EvalError> {
        match self.with_item(pred, item, index, None)? {
            Value::Bool(b) => Ok(b),
            other => Err(err(
                pred.pos,
                format!(
                    "the predicate must give true or false, not {}",
                    show_type(&other)
                ),
            )),
        }
    }

    fn predicated(&mut self, name: &str, args: &[Node], pos: Pos) -> Result<Value, EvalError> {
        let usage = || {
            err(
                pos,
                format!("{name}() takes a list and a predicate, like {name}(list, #.x)"),
            )
        };
        let (Some(list), Some(pred)) = (args.first(), args.get(1)) else {
            return Err(usage());
        };
        let items = match self.eval(list)? {
            Value::Array(a) => a,
            Value::Null => Vec::new(),
            other => {
                return Err(err(
                    pos,
                    format!("{name}() needs a list, not {}", show_type(&other)),
                ));
            }
        };
        let mut out = Vec::new();
        match name {
            "map" => {
                for (i, it) in items.iter().enumerate() {
                    out.push(self.with_item(pred, it, i, None)?);
                }
                Ok(Value::Array(out))
            }
            "filter" => {
                for (i, it) in items.into_iter().enumerate() {
                    if self.test(pred, &it, i)? {
                        out.push(it);
                    }
                }
                Ok(Value::Array(out))
            }
            "find" | "findIndex" | "findLast" | "findLastIndex" => {
                let last = name.starts_with("findLast");
                let mut order: Vec<usize> = (0..items.len()).collect();
                if last {
                    order.reverse();
                }
                for i in order {
                    if self.test(pred, &items[i], i)? {
                        return Ok(if name.ends_with("Index") {
                            Value::from(i)
                        } else {
                            items[i].clone()
                        });
                    }
                }
                Ok(if name.ends_with("Index") {
                    Value::from(-1)
                } else {
                    Value::Null
                })
            }
            "all" | "any" | "none" | "one" | "count" => {
                let mut n = 0usize;
                for (i, it) in items.iter().enumerate() {
                    if self.test(pred, it, i)? {
                        n += 1;
                    }
                }
                Ok(match name {
                    "all" => Value::Bool(n == items.len()),
                    "any" => Value::Bool(n > 0),
                    "none" => Value::Bool(n == 0),
                    "one" => Value::Bool(n == 1),
                    _ => Value::from(n),
                })
            }
            "sortBy" => self.sort_by(items, pred, args.get(2), pos),
            "groupBy" => {
                let mut groups = Map::new();
                for (i, it) in items.into_iter().enumerate() {
                    let key = text(&self.with_item(pred, &it, i, None)?);
                    if let Value::Array(g) =
                        groups.entry(key).or_insert_with(|| Value::Array(vec![]))
                    {
                        g.push(it);
                    }
                }
                Ok(Value::Object(groups))
            }
            "sum" => {
                let mut total = Value::from(0);
                for (i, it) in items.iter().enumerate() {
                    let v = self.with_item(pred, it, i, None)?;
                    total = builtins::arith("+", &total, &v).map_err(|m| err(pos, m))?;
                }
                Ok(total)
            }
            _ => self.reduce(items, pred, args.get(2), pos),
        }
    }
    /// `sortBy(list, key, order?)`.
    fn sort_by(
        &mut self,
        items: Vec<Value>,
        pred: &Node,
        order: Option<&Node>,
        pos: Pos,
    ) -> Result<Value, EvalError> {
        let mut keyed = Vec::with_capacity(items.len());
        for (i, it) in items.into_iter().enumerate() {
            keyed.push((self.with_item(pred, &it, i, None)?, it));
        }
        let desc = match order.map(|a| self.eval(a)).transpose()? {
            Some(Value::String(o)) if o == "desc" => true,
            Some(Value::String(o)) if o == "asc" => false,
            None => false,
            Some(other) => {
                return Err(err(
                    pos,
                    format!("sortBy(): the order is \"asc\" or \"desc\", not {other}"),
                ));
            }
        };
        let mut bad = None;
        keyed.sort_by(|(a, _), (b, _)| {
            builtins::compare(a, b).unwrap_or_else(|m| {
                bad.get_or_insert(m);
                Ordering::Equal
            })
        });
        if let Some(m) = bad {
            return Err(err(pos, format!("sortBy(): {m}")));
        }
        if desc {
            keyed.reverse();
        }
        Ok(Value::Array(keyed.into_iter().map(|(_, v)| v).collect()))
    }

    /// `reduce(list, pred, initial?)`.
    fn reduce(
        &mut self,
        items: Vec<Value>,
        pred: &Node,
        initial: Option<&Node>,
        pos: Pos,
    ) -> Result<Value, EvalError> {
        let mut iter = items.into_iter().enumerate();
        let mut acc = match initial {
            Some(init) => self.eval(init)?,
            None => match iter.next() {
                Some((_, first)) => first,
                None => {
                    return Err(err(pos, "reduce() of an empty list needs an initial value"));
                }
            },
        };
        for (i, it) in iter {
            acc = self.with_item(pred, &it, i, Some(acc))?;
        }
        Ok(acc)
    }
}

/// Builtins whose second argument is a predicate, evaluated per element.
const PREDICATED: &[&str] = &[
    "map",
    "filter",
    "find",
    "findIndex",
    "findLast",
    "findLastIndex",
    "all",
    "any",
    "none",
    "one",
    "count",
    "sortBy",
    "groupBy",
    "reduce",
];

fn unknown_name(n: &str) -> String {
    match n {
        "#" | "#index" | "#acc" => {
            format!(
                "`{n}` is only defined inside a predicate (the second argument of map, filter, reduce...)"
            )
        }
        _ => format!(
            "unknown name `{n}` (a stage sees `source`, `version`, `params` and its `let`s)"
        ),
    }
}

/// `of[key]`; on failure the message and whether it was a read from nil.
fn member(of: &Value, key: &Value, optional: bool) -> Result<Value, (String, bool)> {
    match (of, key) {
        (Value::Null, _) if optional => Ok(Value::Null),
        (Value::Null, k) => Err((
            format!(
                "cannot read {} of nil (write `?.` to get nil instead)",
                text(k)
            ),
            true,
        )),
        (Value::Object(m), k) => Ok(m.get(&text(k)).cloned().unwrap_or(Value::Null)),
        (Value::Array(a), Value::Number(n)) => {
            index(a.len(), n).map(|i| a[i].clone()).ok_or_else(|| {
                (
                    format!("index {n} is out of range (the list has {})", a.len()),
                    false,
                )
            })
        }
        (Value::String(s), Value::Number(n)) => {
            let chars: Vec<char> = s.chars().collect();
            index(chars.len(), n)
                .map(|i| Value::String(chars[i].to_string()))
                .ok_or_else(|| (format!("index {n} is out of range"), false))
        }
        (other, k) => Err((
            format!("cannot read {} of {}", text(k), show_type(other)),
            false,
        )),
    }
}

/// A list index (negative counts from the end) within `len`.
fn index(len: usize, n: &serde_json::Number) -> Option<usize> {
    let i = num(&Value::Number(n.clone())).ok()?.as_i64()?;
    let len = i64::try_from(len).ok()?;
    let i = if i < 0 { len + i } else { i };
    (0..len)
        .contains(&i)
        .then(|| usize::try_from(i).ok())
        .flatten()
}
