//! The operators and the builtins without a predicate of the expr language over JSON
//! values: arithmetic, comparison, `in`/`contains`, ranges, and `len`, `concat`,
//! `flatten`, `toJSON`, `string`... (the predicated ones are in [`super::eval`]).

use std::cmp::Ordering;

use serde_json::{Map, Value};

pub use super::value_error::ValueError;

fn not_parsed(text: &str, want: &str) -> ValueError {
    ValueError::NotParsed {
        text: text.to_owned(),
        want: want.to_owned(),
    }
}

fn expected(want: &'static str, v: &Value) -> ValueError {
    ValueError::Expected {
        want,
        found: show_type(v),
    }
}

/// A number, as an integer when it is one.
#[derive(Debug, Clone, Copy)]
pub enum N {
    /// An integer.
    Int(i64),
    /// Anything else.
    Float(f64),
}

impl N {
    /// The integer, when it is one (or a float with no fraction).
    pub fn as_i64(self) -> Option<i64> {
        match self {
            N::Int(i) => Some(i),
            // In range and whole: the cast is exact.
            #[allow(clippy::cast_possible_truncation)]
            N::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(f as i64),
            N::Float(_) => None,
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            // Integers of expressions are small; precision past 2^53 is not a concern.
            #[allow(clippy::cast_precision_loss)]
            N::Int(i) => i as f64,
            N::Float(f) => f,
        }
    }
}

/// `v` as a number.
pub fn num(v: &Value) -> Result<N, ValueError> {
    match v {
        Value::Number(n) => Ok(n
            .as_i64()
            .map(N::Int)
            .unwrap_or_else(|| N::Float(n.as_f64().unwrap_or(f64::NAN)))),
        other => Err(expected("a number", other)),
    }
}

fn from_n(n: N) -> Result<Value, ValueError> {
    match n {
        N::Int(i) => Ok(Value::from(i)),
        N::Float(f) => serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or(ValueError::NotFinite(f)),
    }
}

/// What kind of value `v` is, for messages.
pub fn show_type(v: &Value) -> String {
    match v {
        Value::Null => "nil".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(a) => format!("a list of {}", a.len()),
        Value::Object(_) => "a map".to_owned(),
    }
}

/// `v` as text, as `string()` writes it: strings as they are, numbers as numerals,
/// lists and maps as compact JSON.
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "<nil>".to_owned(),
        Value::Number(n) => match num(v) {
            Ok(N::Float(f)) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// `+ - * / % **` on numbers, `+` on strings.
pub fn arith(op: &str, a: &Value, b: &Value) -> Result<Value, ValueError> {
    if let (Value::String(x), Value::String(y), "+") = (a, b, op) {
        return Ok(Value::String(format!("{x}{y}")));
    }
    if let (Value::Array(_), _, "+") | (_, Value::Array(_), "+") = (a, b, op) {
        return Err(ValueError::Misuse(
            "`+` adds numbers or joins strings; join lists with concat(a, b)",
        ));
    }
    let (x, y) = match (num(a), num(b)) {
        (Ok(x), Ok(y)) => (x, y),
        _ => {
            return Err(ValueError::Operands {
                op: op.to_owned(),
                left: show_type(a),
                right: show_type(b),
            });
        }
    };
    let overflow = || ValueError::Overflow(op.to_owned());
    let out = match (op, x, y) {
        ("+", N::Int(x), N::Int(y)) => N::Int(x.checked_add(y).ok_or_else(overflow)?),
        ("-", N::Int(x), N::Int(y)) => N::Int(x.checked_sub(y).ok_or_else(overflow)?),
        ("*", N::Int(x), N::Int(y)) => N::Int(x.checked_mul(y).ok_or_else(overflow)?),
        ("%", N::Int(_), N::Int(0)) | ("/", _, N::Int(0)) => {
            return Err(ValueError::DivisionByZero);
        }
        ("%", N::Int(x), N::Int(y)) => N::Int(x % y),
        ("%", _, _) => return Err(ValueError::Misuse("`%` needs integers")),
        ("+", x, y) => N::Float(x.as_f64() + y.as_f64()),
        ("-", x, y) => N::Float(x.as_f64() - y.as_f64()),
        ("*", x, y) => N::Float(x.as_f64() * y.as_f64()),
        ("/", x, y) => N::Float(x.as_f64() / y.as_f64()),
        (_, x, y) => N::Float(x.as_f64().powf(y.as_f64())),
    };
    from_n(out)
}

/// Equality as the language has it: numbers by value (`1 == 1.0`), the rest structurally.
pub fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => {
            matches!(compare(a, b), Ok(Ordering::Equal))
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

/// Ordering of two numbers or two strings.
pub fn compare(a: &Value, b: &Value) -> Result<Ordering, ValueError> {
    match (a, b) {
        (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
        (Value::Number(_), Value::Number(_)) => match (num(a)?, num(b)?) {
            (N::Int(x), N::Int(y)) => Ok(x.cmp(&y)),
            (x, y) => x.as_f64().partial_cmp(&y.as_f64()).ok_or(ValueError::NaN),
        },
        _ => Err(ValueError::Unordered(show_type(a), show_type(b))),
    }
}

/// A binary operator other than `&&`, `||` and `??` (which short-circuit).
pub fn operate(op: &str, a: &Value, b: &Value, max_range: i64) -> Result<Value, ValueError> {
    let s = |v: &Value| match v {
        Value::String(s) => Ok(s.clone()),
        other => Err(ValueError::NeedsStrings {
            op: op.to_owned(),
            found: show_type(other),
        }),
    };
    Ok(match op {
        "==" => Value::Bool(equal(a, b)),
        "!=" => Value::Bool(!equal(a, b)),
        "<" => Value::Bool(compare(a, b)? == Ordering::Less),
        ">" => Value::Bool(compare(a, b)? == Ordering::Greater),
        "<=" => Value::Bool(compare(a, b)? != Ordering::Greater),
        ">=" => Value::Bool(compare(a, b)? != Ordering::Less),
        "in" | "not in" => {
            let found = match b {
                Value::Array(items) => items.iter().any(|i| equal(i, a)),
                Value::Object(m) => m.contains_key(&text(a)),
                Value::Null => false,
                other => {
                    return Err(ValueError::NotAContainer(show_type(other)));
                }
            };
            Value::Bool(found == (op == "in"))
        }
        "contains" => Value::Bool(s(a)?.contains(&s(b)?)),
        "startsWith" => Value::Bool(s(a)?.starts_with(&s(b)?)),
        "endsWith" => Value::Bool(s(a)?.ends_with(&s(b)?)),
        "matches" => {
            let re = regex::Regex::new(&s(b)?)?;
            Value::Bool(re.is_match(&s(a)?))
        }
        ".." => {
            let (Some(from), Some(to)) = (num(a)?.as_i64(), num(b)?.as_i64()) else {
                return Err(ValueError::Misuse("a range `a..b` needs integers"));
            };
            if to.saturating_sub(from) >= max_range {
                return Err(ValueError::RangeTooLong {
                    from,
                    to,
                    max: max_range,
                });
            }
            Value::Array((from..=to).map(Value::from).collect())
        }
        _ => arith(op, a, b)?,
    })
}

/// `of[from:to]` of a list or string.
pub fn slice(of: &Value, from: Option<&Value>, to: Option<&Value>) -> Result<Value, ValueError> {
    let bound = |v: Option<&Value>, len: usize, default: usize| -> Result<usize, ValueError> {
        let Some(v) = v else { return Ok(default) };
        let i = num(v)?
            .as_i64()
            .ok_or(ValueError::Misuse("a slice bound must be an integer"))?;
        let len_i = i64::try_from(len).unwrap_or(i64::MAX);
        let i = if i < 0 { len_i + i } else { i };
        Ok(usize::try_from(i.clamp(0, len_i)).unwrap_or(0))
    };
    match of {
        Value::Array(a) => {
            let (f, t) = (bound(from, a.len(), 0)?, bound(to, a.len(), a.len())?);
            Ok(Value::Array(a[f.min(t)..t].to_vec()))
        }
        Value::String(s) => {
            let chars: Vec<char> = s.chars().collect();
            let (f, t) = (
                bound(from, chars.len(), 0)?,
                bound(to, chars.len(), chars.len())?,
            );
            Ok(Value::String(chars[f.min(t)..t].iter().collect()))
        }
        other => Err(expected("a list or a string to slice", other)),
    }
}

fn list(v: &Value) -> Result<&Vec<Value>, ValueError> {
    match v {
        Value::Array(a) => Ok(a),
        other => Err(expected("a list", other)),
    }
}

fn string(v: &Value) -> Result<&str, ValueError> {
    match v {
        Value::String(s) => Ok(s),
        other => Err(expected("a string", other)),
    }
}

fn flatten_into(v: &Value, out: &mut Vec<Value>) {
    match v {
        Value::Array(a) => a.iter().for_each(|i| flatten_into(i, out)),
        other => out.push(other.clone()),
    }
}

fn arity(args: &[Value], n: usize) -> Result<(), ValueError> {
    if args.len() == n {
        Ok(())
    } else {
        Err(ValueError::Arity {
            want: n,
            got: args.len(),
        })
    }
}

fn a0(args: &[Value]) -> Result<&Value, ValueError> {
    args.first().ok_or(ValueError::NoArgument)
}

/// A group of builtins: the result of the named one, or `None` when it has none of that
/// name.
type Group = fn(&str, &[Value]) -> Result<Option<Value>, ValueError>;

/// A builtin without a predicate; `None` when there is none of that name.
pub fn call(name: &str, args: &[Value]) -> Option<Result<Value, ValueError>> {
    let groups: [Group; 3] = [lists, texts, conversions];
    groups
        .iter()
        .find_map(|group| group(name, args).transpose())
}

/// Builtins over lists (and `len` of anything).
fn lists(name: &str, args: &[Value]) -> Result<Option<Value>, ValueError> {
    Ok(Some(match name {
        "len" => {
            arity(args, 1)?;
            Value::from(match a0(args)? {
                Value::Array(a) => a.len(),
                Value::Object(m) => m.len(),
                Value::String(s) => s.chars().count(),
                other => return Err(ValueError::NoLength(show_type(other))),
            })
        }
        "concat" => {
            let mut out = Vec::new();
            for a in args {
                out.extend(list(a)?.iter().cloned());
            }
            Value::Array(out)
        }
        "flatten" => {
            arity(args, 1)?;
            let mut out = Vec::new();
            list(a0(args)?)?
                .iter()
                .for_each(|i| flatten_into(i, &mut out));
            Value::Array(out)
        }
        "take" => {
            arity(args, 2)?;
            let n = num(&args[1])?.as_i64().unwrap_or(0).max(0);
            let l = list(&args[0])?;
            Value::Array(
                l.iter()
                    .take(usize::try_from(n).unwrap_or(0))
                    .cloned()
                    .collect(),
            )
        }
        "uniq" => {
            arity(args, 1)?;
            let mut out: Vec<Value> = Vec::new();
            for v in list(a0(args)?)? {
                if !out.iter().any(|o| equal(o, v)) {
                    out.push(v.clone());
                }
            }
            Value::Array(out)
        }
        "first" | "last" => {
            arity(args, 1)?;
            let l = list(a0(args)?)?;
            let pick = if name == "first" { l.first() } else { l.last() };
            pick.cloned().unwrap_or(Value::Null)
        }
        "reverse" => {
            arity(args, 1)?;
            Value::Array(list(a0(args)?)?.iter().rev().cloned().collect())
        }
        "sort" => {
            let mut l = list(a0(args)?)?.clone();
            let mut bad = None;
            l.sort_by(|a, b| {
                compare(a, b).unwrap_or_else(|m| {
                    bad.get_or_insert(m);
                    Ordering::Equal
                })
            });
            if let Some(m) = bad {
                return Err(m);
            }
            if matches!(args.get(1), Some(Value::String(o)) if o == "desc") {
                l.reverse();
            }
            Value::Array(l)
        }
        "sum" | "max" | "min" => {
            let l = match args {
                [Value::Array(l)] => l.clone(),
                _ => args.to_vec(),
            };
            let mut it = l.into_iter();
            let Some(mut acc) = it.next() else {
                return Ok(Some(if name == "sum" {
                    Value::from(0)
                } else {
                    Value::Null
                }));
            };
            num(&acc)?;
            for v in it {
                acc = match name {
                    "sum" => arith("+", &acc, &v)?,
                    "max" if compare(&v, &acc)? == Ordering::Greater => v,
                    "min" if compare(&v, &acc)? == Ordering::Less => v,
                    _ => acc,
                };
            }
            acc
        }
        "abs" => {
            arity(args, 1)?;
            match num(a0(args)?)? {
                N::Int(i) => Value::from(
                    i.checked_abs()
                        .ok_or(ValueError::Overflow("abs".to_owned()))?,
                ),
                N::Float(f) => from_n(N::Float(f.abs()))?,
            }
        }
        _ => return Ok(None),
    }))
}

/// Builtins over strings.
fn texts(name: &str, args: &[Value]) -> Result<Option<Value>, ValueError> {
    Ok(Some(match name {
        "trim" | "trimPrefix" | "trimSuffix" => {
            let s = string(a0(args)?)?;
            let cut = args.get(1).map(string).transpose()?;
            Value::String(match (name, cut) {
                ("trim", None) => s.trim().to_owned(),
                ("trim", Some(c)) => s.trim_matches(|ch| c.contains(ch)).to_owned(),
                ("trimPrefix", Some(c)) => s.strip_prefix(c).unwrap_or(s).to_owned(),
                ("trimSuffix", Some(c)) => s.strip_suffix(c).unwrap_or(s).to_owned(),
                _ => return Err(ValueError::Misuse("needs the text to cut")),
            })
        }
        "upper" | "lower" => {
            arity(args, 1)?;
            let s = string(a0(args)?)?;
            Value::String(if name == "upper" {
                s.to_uppercase()
            } else {
                s.to_lowercase()
            })
        }
        "split" => {
            arity(args, 2)?;
            let (s, sep) = (string(&args[0])?, string(&args[1])?);
            Value::Array(s.split(sep).map(|p| Value::String(p.to_owned())).collect())
        }
        "join" => {
            let sep = args.get(1).map(string).transpose()?.unwrap_or("");
            let parts: Vec<String> = list(a0(args)?)?.iter().map(text).collect();
            Value::String(parts.join(sep))
        }
        "indexOf" => {
            arity(args, 2)?;
            let (s, sub) = (string(&args[0])?, string(&args[1])?);
            Value::from(
                s.find(sub)
                    .map_or(-1, |b| i64::try_from(s[..b].chars().count()).unwrap_or(-1)),
            )
        }
        _ => return Ok(None),
    }))
}

/// Conversions between kinds of value, and builtins over maps.
fn conversions(name: &str, args: &[Value]) -> Result<Option<Value>, ValueError> {
    Ok(Some(match name {
        "toJSON" => {
            arity(args, 1)?;
            // A JSON value always writes back as JSON.
            Value::String(serde_json::to_string_pretty(a0(args)?).unwrap_or_default())
        }
        "fromJSON" => {
            arity(args, 1)?;
            let s = string(a0(args)?)?;
            serde_json::from_str(s).map_err(|e| ValueError::NotParsed {
                text: s.to_owned(),
                want: format!("JSON ({e})"),
            })?
        }
        "string" => {
            arity(args, 1)?;
            Value::String(text(a0(args)?))
        }
        "int" => {
            arity(args, 1)?;
            match a0(args)? {
                Value::String(s) => Value::from(
                    s.trim()
                        .parse::<i64>()
                        .map_err(|_| not_parsed(s, "an integer"))?,
                ),
                v => match num(v)? {
                    N::Int(i) => Value::from(i),
                    // Truncation toward zero is what `int()` means.
                    #[allow(clippy::cast_possible_truncation)]
                    N::Float(f) => Value::from(f.trunc() as i64),
                },
            }
        }
        "float" => {
            arity(args, 1)?;
            let f = match a0(args)? {
                Value::String(s) => s
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| not_parsed(s, "a number"))?,
                v => num(v)?.as_f64(),
            };
            from_n(N::Float(f))?
        }
        "keys" | "values" => {
            arity(args, 1)?;
            let Value::Object(m) = a0(args)? else {
                return Err(expected("a map", a0(args)?));
            };
            Value::Array(if name == "keys" {
                m.keys().map(|k| Value::String(k.clone())).collect()
            } else {
                m.values().cloned().collect()
            })
        }
        "get" => {
            arity(args, 2)?;
            match (&args[0], &args[1]) {
                (Value::Object(m), k) => m.get(&text(k)).cloned().unwrap_or(Value::Null),
                (Value::Array(a), Value::Number(_)) => {
                    let i = num(&args[1])?.as_i64().unwrap_or(-1);
                    usize::try_from(i)
                        .ok()
                        .and_then(|i| a.get(i))
                        .cloned()
                        .unwrap_or(Value::Null)
                }
                _ => Value::Null,
            }
        }
        "type" => {
            arity(args, 1)?;
            Value::String(
                match a0(args)? {
                    Value::Null => "nil",
                    Value::Bool(_) => "bool",
                    Value::Number(n) if n.is_f64() => "float",
                    Value::Number(_) => "int",
                    Value::String(_) => "string",
                    Value::Array(_) => "array",
                    Value::Object(_) => "map",
                }
                .to_owned(),
            )
        }
        "toPairs" => {
            arity(args, 1)?;
            let Value::Object(m) = a0(args)? else {
                return Err(expected("a map", a0(args)?));
            };
            Value::Array(
                m.iter()
                    .map(|(k, v)| Value::Array(vec![Value::String(k.clone()), v.clone()]))
                    .collect(),
            )
        }
        "fromPairs" => {
            arity(args, 1)?;
            let mut m = Map::new();
            for p in list(a0(args)?)? {
                let pair = list(p)?;
                if let [k, v] = pair.as_slice() {
                    m.insert(text(k), v.clone());
                } else {
                    return Err(ValueError::Misuse("each pair must be a list of two"));
                }
            }
            Value::Object(m)
        }
        _ => return Ok(None),
    }))
}
