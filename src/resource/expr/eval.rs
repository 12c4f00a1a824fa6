//! Evaluating an expression tree ([`super::syntax`]) over JSON values: names, `let`,
//! operators, member access, and the builtins that take a predicate (`map`, `filter`,
//! `reduce`...), whose predicate sees the element as `#` (and `#index`, `#acc`). The
//! builtins without a predicate are in [`super::builtins`]; the stage's own functions
//! (`env`, `file`, `fail`, `http`) come from its [`Host`].

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::builtins::{self, ValueError, num, show_type, text};
use super::host::HostError;
use super::syntax::{Kind, Node, Pos};

/// The functions a stage adds to the language (`env`, `file`, `fail`, `http`).
pub trait Host {
    /// Calls `name`; `None` when the stage has no function of that name.
    fn call(&self, name: &str, args: &[Value]) -> Option<Result<Value, HostError>>;
}

/// An expression that failed while it ran: where, and what.
#[derive(Debug, thiserror::Error)]
#[error("{pos}: {kind}")]
pub struct EvalError {
    /// Where in the expression.
    pub pos: Pos,
    /// What went wrong.
    pub kind: EvalErrorKind,
}

impl EvalError {
    /// `fail(message)` was called.
    pub fn failed(&self) -> bool {
        matches!(self.kind, EvalErrorKind::Host(HostError::Fail(_)))
    }
}

/// What went wrong while an expression ran.
#[derive(Debug, thiserror::Error)]
pub enum EvalErrorKind {
    /// A name neither a variable nor a `let`.
    #[error("unknown name `{0}` (a stage sees `source`, `version`, `params` and its `let`s)")]
    UnknownName(String),
    /// `#`, `#index` or `#acc` outside a predicate.
    #[error(
        "`{0}` is only defined inside a predicate (the second argument of map, filter, reduce...)"
    )]
    OutsidePredicate(String),
    /// A key read from nil (forgiven on the left of `??`).
    #[error("cannot read {0} of nil (write `?.` to get nil instead)")]
    NilAccess(String),
    /// An index past the end of a list or string.
    #[error("index {index} is out of range{}", .len.map(|l| format!(" (the list has {l})")).unwrap_or_default())]
    OutOfRange {
        /// The index.
        index: serde_json::Number,
        /// The list's length (not given for a string).
        len: Option<usize>,
    },
    /// A key read from a value that has none.
    #[error("cannot read {key} of {of}")]
    NoMember {
        /// The key, as text.
        key: String,
        /// [`show_type`] of the value.
        of: String,
    },
    /// A unary operator on the wrong kind of value.
    #[error("`{op}` cannot apply to {found}")]
    Unary {
        /// The operator.
        op: &'static str,
        /// [`show_type`] of the operand.
        found: String,
    },
    /// An operator refused its operands.
    #[error("{0}")]
    Operator(#[from] ValueError),
    /// A condition (`?:`, `&&`, `||`) that is not a boolean.
    #[error("a condition must be true or false, not {0}")]
    Condition(String),
    /// A predicate of `filter`, `all`... that gave no boolean.
    #[error("the predicate must give true or false, not {0}")]
    Predicate(String),
    /// A builtin refused its arguments.
    #[error("{name}(): {source}")]
    Builtin {
        /// The builtin.
        name: String,
        /// Why.
        source: ValueError,
    },
    /// No function of that name.
    #[error("there is no function `{0}`")]
    NoFunction(String),
    /// A stage's own function failed (`fail()`'s message is the whole error).
    #[error("{0}")]
    Host(#[from] HostError),
    /// A predicated builtin without its list and predicate.
    #[error("{0}() takes a list and a predicate, like {0}(list, #.x)")]
    PredicateUsage(String),
    /// A predicated builtin over something that is not a list.
    #[error("{name}() needs a list, not {found}")]
    NeedsList {
        /// The builtin.
        name: String,
        /// [`show_type`] of the value.
        found: String,
    },
    /// `sortBy`'s order that is neither `asc` nor `desc`.
    #[error("sortBy(): the order is \"asc\" or \"desc\", not {0}")]
    SortOrder(Value),
    /// `sortBy` keys without an order.
    #[error("sortBy(): {0}")]
    SortBy(ValueError),
    /// `reduce` of nothing, from nothing.
    #[error("reduce() of an empty list needs an initial value")]
    EmptyReduce,
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

fn err(pos: Pos, kind: impl Into<EvalErrorKind>) -> EvalError {
    EvalError {
        pos,
        kind: kind.into(),
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
                member(&of, &key, *optional).map_err(|kind| err(pos, kind))
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
                    ("-", Value::Number(_)) => {
                        builtins::arith("-", &Value::from(0), &v).map_err(Into::into)
                    }
                    ("+", Value::Number(_)) => Ok(v),
                    _ => Err(EvalErrorKind::Unary {
                        op,
                        found: show_type(&v),
                    }),
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
            other => Err(err(node.pos, EvalErrorKind::Condition(show_type(&other)))),
        }
    }

    fn binary(&mut self, op: &str, l: &Node, r: &Node, pos: Pos) -> Result<Value, EvalError> {
        match op {
            "&&" => return Ok(Value::Bool(self.truth(l)? && self.truth(r)?)),
            "||" => return Ok(Value::Bool(self.truth(l)? || self.truth(r)?)),
            "??" => {
                return match self.eval(l) {
                    Ok(Value::Null) => self.eval(r),
                    Err(EvalError {
                        kind: EvalErrorKind::NilAccess(_),
                        ..
                    }) => self.eval(r),
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
            return out.map_err(|e| err(pos, e));
        }
        match builtins::call(name, &values) {
            Some(out) => out.map_err(|source| {
                err(
                    pos,
                    EvalErrorKind::Builtin {
                        name: name.to_owned(),
                        source,
                    },
                )
            }),
            None => Err(err(pos, EvalErrorKind::NoFunction(name.to_owned()))),
        }
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
            other => Err(err(pred.pos, EvalErrorKind::Predicate(show_type(&other)))),
        }
    }

    fn predicated(&mut self, name: &str, args: &[Node], pos: Pos) -> Result<Value, EvalError> {
        let usage = || err(pos, EvalErrorKind::PredicateUsage(name.to_owned()));
        let (Some(list), Some(pred)) = (args.first(), args.get(1)) else {
            return Err(usage());
        };
        let items = match self.eval(list)? {
            Value::Array(a) => a,
            Value::Null => Vec::new(),
            other => {
                return Err(err(
                    pos,
                    EvalErrorKind::NeedsList {
                        name: name.to_owned(),
                        found: show_type(&other),
                    },
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
                return Err(err(pos, EvalErrorKind::SortOrder(other)));
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
            return Err(err(pos, EvalErrorKind::SortBy(m)));
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
                    return Err(err(pos, EvalErrorKind::EmptyReduce));
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

fn unknown_name(n: &str) -> EvalErrorKind {
    match n {
        "#" | "#index" | "#acc" => EvalErrorKind::OutsidePredicate(n.to_owned()),
        _ => EvalErrorKind::UnknownName(n.to_owned()),
    }
}

/// `of[key]`.
fn member(of: &Value, key: &Value, optional: bool) -> Result<Value, EvalErrorKind> {
    match (of, key) {
        (Value::Null, _) if optional => Ok(Value::Null),
        (Value::Null, k) => Err(EvalErrorKind::NilAccess(text(k))),
        (Value::Object(m), k) => Ok(m.get(&text(k)).cloned().unwrap_or(Value::Null)),
        (Value::Array(a), Value::Number(n)) => {
            index(a.len(), n)
                .map(|i| a[i].clone())
                .ok_or_else(|| EvalErrorKind::OutOfRange {
                    index: n.clone(),
                    len: Some(a.len()),
                })
        }
        (Value::String(s), Value::Number(n)) => {
            let chars: Vec<char> = s.chars().collect();
            index(chars.len(), n)
                .map(|i| Value::String(chars[i].to_string()))
                .ok_or_else(|| EvalErrorKind::OutOfRange {
                    index: n.clone(),
                    len: None,
                })
        }
        (other, k) => Err(EvalErrorKind::NoMember {
            key: text(k),
            of: show_type(other),
        }),
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
