//! The tokens of an expression (numbers, strings, names, operators), with their places;
//! comments (`//`, `/* */`) and white space are dropped.

use serde_json::Value;

/// Where in the expression: 1-based line and column, and the 0-based offset in
/// characters from its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    /// Line.
    pub line: usize,
    /// Column (in characters).
    pub column: usize,
    /// Characters before it in the whole expression.
    pub offset: usize,
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// An expression that does not parse.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{pos}: {message}")]
pub struct SyntaxError {
    /// Where.
    pub pos: Pos,
    /// What was expected or found.
    pub message: String,
}

/// A token.
#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    /// A number.
    Num(Value),
    /// A string.
    Str(String),
    /// A name or word (`#`, `#acc` included).
    Ident(String),
    /// An operator or punctuation.
    Op(&'static str),
    /// The end of the text.
    End,
}

/// Operators, longest first so that `??` is not read as `?` twice.
const OPS: &[&str] = &[
    "?.", "??", "..", "==", "!=", "<=", ">=", "&&", "||", "**", "+", "-", "*", "/", "%", "^", "<",
    ">", "!", "?", ":", ",", ".", "(", ")", "[", "]", "{", "}", "|", ";", "=",
];

/// The tokens of `text`, each with where it starts, ending with [`Tok::End`].
pub fn lex(text: &str) -> Result<Vec<(Tok, Pos)>, SyntaxError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line, mut col) = (0, 1, 1);
    let advance = |i: &mut usize, line: &mut usize, col: &mut usize, n: usize| {
        for _ in 0..n {
            if chars.get(*i) == Some(&'\n') {
                *line += 1;
                *col = 1;
            } else {
                *col += 1;
            }
            *i += 1;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let pos = Pos {
            line,
            column: col,
            offset: i,
        };
        let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
        if c.is_whitespace() {
            advance(&mut i, &mut line, &mut col, 1);
        } else if rest == "//" {
            while i < chars.len() && chars[i] != '\n' {
                advance(&mut i, &mut line, &mut col, 1);
            }
        } else if rest == "/*" {
            let start = i;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                advance(&mut i, &mut line, &mut col, 1);
            }
            if i >= chars.len() {
                let _ = start;
                return Err(SyntaxError {
                    pos,
                    message: "a `/*` comment is not closed with `*/`".to_owned(),
                });
            }
            advance(&mut i, &mut line, &mut col, 2);
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '_') {
                i += 1;
            }
            let mut float = false;
            // `1..3` is a range, not the number `1.`.
            if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(char::is_ascii_digit) {
                float = true;
                i += 1;
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if matches!(chars.get(i), Some('e' | 'E')) {
                float = true;
                i += 1;
                if matches!(chars.get(i), Some('+' | '-')) {
                    i += 1;
                }
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let digits: String = chars[start..i].iter().filter(|c| **c != '_').collect();
            col += i - start;
            let bad = || SyntaxError {
                pos,
                message: format!("`{digits}` is not a number"),
            };
            let num = if float {
                digits
                    .parse::<f64>()
                    .ok()
                    .and_then(serde_json::Number::from_f64)
                    .map(Value::Number)
                    .ok_or_else(bad)?
            } else {
                Value::from(digits.parse::<i64>().map_err(|_| bad())?)
            };
            out.push((Tok::Num(num), pos));
        } else if c == '"' || c == '\'' || c == '`' {
            let (s, used) = string(&chars[i..], pos)?;
            advance(&mut i, &mut line, &mut col, used);
            out.push((Tok::Str(s), pos));
        } else if c.is_alphabetic() || c == '_' || c == '$' || c == '#' {
            let start = i;
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            col += i - start;
            out.push((Tok::Ident(chars[start..i].iter().collect()), pos));
        } else if let Some(op) = OPS.iter().find(|op| {
            let n = op.chars().count();
            chars[i..].iter().take(n).copied().eq(op.chars())
        }) {
            advance(&mut i, &mut line, &mut col, op.len());
            out.push((Tok::Op(op), pos));
        } else {
            return Err(SyntaxError {
                pos,
                message: format!("unexpected character `{c}`"),
            });
        }
    }
    out.push((
        Tok::End,
        Pos {
            line,
            column: col,
            offset: i,
        },
    ));
    Ok(out)
}

/// A string literal at the start of `chars`: its value and how many characters it took.
fn string(chars: &[char], pos: Pos) -> Result<(String, usize), SyntaxError> {
    let quote = chars[0];
    let mut out = String::new();
    let mut i = 1;
    while i < chars.len() {
        let c = chars[i];
        if c == quote {
            return Ok((out, i + 1));
        }
        if c == '\\' && quote != '`' {
            let e = chars.get(i + 1).copied().unwrap_or(quote);
            i += 2;
            match e {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                'u' => {
                    let hex: String = chars.iter().skip(i).take(4).collect();
                    let ch = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32);
                    out.push(ch.ok_or_else(|| SyntaxError {
                        pos,
                        message: format!("`\\u{hex}` is not a character"),
                    })?);
                    i += 4;
                }
                other => out.push(other),
            }
            continue;
        }
        if c == '\n' && quote != '`' {
            break;
        }
        out.push(c);
        i += 1;
    }
    Err(SyntaxError {
        pos,
        message: format!("a string opened with {quote} is not closed on its line"),
    })
}
