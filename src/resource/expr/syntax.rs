//! Reading an expression: the tokens and the tree of the expr language subset that
//! `expr:` resource types are written in (see docs/resources.md, "Expression types").
//!
//! Precedence, lowest first: `let NAME = E; E`, the ternary `C ? A : B`, pipes
//! `E | f(...)`, `||`/`or`, `&&`/`and`, comparisons and `in`/`contains`/`startsWith`/
//! `endsWith`/`matches`, `..`, `+ -`, `* / %`, unary `! not`, `**`/`^`, unary `- +`, `??`,
//! then member access (`.k`, `?.k`, `[i]`, `[a:b]`) and calls.

use serde_json::Value;

use super::lex::{self, Tok};
pub use super::lex::{Pos, SyntaxError};

/// A node of the tree.
#[derive(Debug, Clone)]
pub struct Node {
    /// What it is.
    pub kind: Kind,
    /// Where it starts.
    pub pos: Pos,
}

/// The kinds of node.
#[derive(Debug, Clone)]
pub enum Kind {
    /// A literal.
    Lit(Value),
    /// A name: a variable of the stage, a `let`, or `#`, `#acc`, `#index`.
    Name(String),
    /// `[a, b]`.
    Array(Vec<Node>),
    /// `{k: v}` (keys are expressions so that `(k): v` works too).
    Map(Vec<(Node, Node)>),
    /// `obj.key`, `obj[key]`; `optional` for `?.`.
    Member {
        /// The object.
        of: Box<Node>,
        /// The key or index.
        key: Box<Node>,
        /// `?.`: nil instead of an error on nil.
        optional: bool,
    },
    /// `arr[a:b]` (either end may be absent).
    Slice(Box<Node>, Option<Box<Node>>, Option<Box<Node>>),
    /// `f(args)` (a pipe `x | f(a)` is `f(x, a)`).
    Call(String, Vec<Node>),
    /// A unary operator and its operand.
    Unary(&'static str, Box<Node>),
    /// A binary operator and its operands.
    Binary(&'static str, Box<Node>, Box<Node>),
    /// `c ? a : b`.
    Cond(Box<Node>, Box<Node>, Box<Node>),
    /// `let name = value; body`.
    Let(String, Box<Node>, Box<Node>),
}

/// Reads `text` into its tree.
pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    let tokens = lex::lex(text)?;
    let mut p = Parser {
        tokens,
        at: 0,
        depth: 0,
    };
    let node = p.expr()?;
    match p.peek() {
        Tok::End => Ok(node),
        other => Err(p.error(format!("unexpected {} after the expression", show(other)))),
    }
}

fn show(t: &Tok) -> String {
    match t {
        Tok::Num(n) => format!("number {n}"),
        Tok::Str(s) => format!("string {s:?}"),
        Tok::Ident(i) => format!("`{i}`"),
        Tok::Op(o) => format!("`{o}`"),
        Tok::End => "the end".to_owned(),
    }
}

/// Nesting deeper than this is refused (a stack overflow is not an error message).
const MAX_DEPTH: usize = 200;

struct Parser {
    tokens: Vec<(Tok, Pos)>,
    at: usize,
    depth: usize,
}

/// A binary operator and its precedence level (higher binds tighter), as the reference's.
fn binary(t: &Tok) -> Option<(&'static str, u16)> {
    let op: &'static str = match t {
        Tok::Op(o) => o,
        Tok::Ident(w) => match w.as_str() {
            "or" => "||",
            "and" => "&&",
            "in" => "in",
            "contains" => "contains",
            "startsWith" => "startsWith",
            "endsWith" => "endsWith",
            "matches" => "matches",
            _ => return None,
        },
        _ => return None,
    };
    let level = match op {
        "||" => 10,
        "&&" => 15,
        "==" | "!=" | "<" | ">" | "<=" | ">=" | "in" | "contains" | "startsWith" | "endsWith"
        | "matches" => 20,
        ".." => 25,
        "+" | "-" => 30,
        "*" | "/" | "%" => 60,
        "**" | "^" => return Some(("**", 100)),
        "??" => 500,
        _ => return None,
    };
    Some((op, level))
}

fn word(t: &Tok) -> Option<&str> {
    match t {
        Tok::Ident(w) => Some(w),
        _ => None,
    }
}

impl Parser {
    fn peek(&self) -> &Tok {
        &self.tokens[self.at.min(self.tokens.len() - 1)].0
    }

    fn pos(&self) -> Pos {
        self.tokens[self.at.min(self.tokens.len() - 1)].1
    }

    fn next(&mut self) -> (Tok, Pos) {
        let t = self.tokens[self.at.min(self.tokens.len() - 1)].clone();
        self.at += 1;
        t
    }

    fn error(&self, message: String) -> SyntaxError {
        SyntaxError {
            pos: self.pos(),
            message,
        }
    }

    fn eat(&mut self, op: &'static str) -> bool {
        if self.peek() == &Tok::Op(op) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, op: &'static str) -> Result<(), SyntaxError> {
        if self.eat(op) {
            Ok(())
        } else {
            Err(self.error(format!("expected `{op}`, found {}", show(self.peek()))))
        }
    }

    /// A whole expression: `let`s, then a ternary.
    fn expr(&mut self) -> Result<Node, SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("the expression is nested too deeply".to_owned()));
        }
        let out = self.expr_inner();
        self.depth -= 1;
        out
    }

    fn expr_inner(&mut self) -> Result<Node, SyntaxError> {
        let pos = self.pos();
        if self.peek() == &Tok::Ident("let".to_owned()) {
            self.at += 1;
            let name = match self.next() {
                (Tok::Ident(n), _) => n,
                (other, p) => {
                    return Err(SyntaxError {
                        pos: p,
                        message: format!("expected a name after `let`, found {}", show(&other)),
                    });
                }
            };
            self.expect("=")?;
            let value = self.expr()?;
            self.expect(";")?;
            let body = self.expr()?;
            return Ok(Node {
                kind: Kind::Let(name, Box::new(value), Box::new(body)),
                pos,
            });
        }
        let cond = self.pipes()?;
        if !self.eat("?") {
            return Ok(cond);
        }
        let yes = self.expr()?;
        self.expect(":")?;
        let no = self.expr()?;
        Ok(Node {
            kind: Kind::Cond(Box::new(cond), Box::new(yes), Box::new(no)),
            pos,
        })
    }

    fn pipes(&mut self) -> Result<Node, SyntaxError> {
        let mut node = self.binary(0)?;
        while self.eat("|") {
            let pos = self.pos();
            let (name, mut args) = match self.postfix()? {
                Node {
                    kind: Kind::Call(name, args),
                    ..
                } => (name, args),
                _ => {
                    return Err(SyntaxError {
                        pos,
                        message: "a pipe `|` must lead into a function call, like `| map(#.id)`"
                            .to_owned(),
                    });
                }
            };
            args.insert(0, node);
            node = Node {
                kind: Kind::Call(name, args),
                pos,
            };
        }
        Ok(node)
    }

    fn binary(&mut self, min: u16) -> Result<Node, SyntaxError> {
        let mut left = self.unary()?;
        loop {
            let pos = self.pos();
            // `not in`.
            let negated_in = word(self.peek()) == Some("not")
                && self.tokens.get(self.at + 1).map(|t| &t.0) == Some(&Tok::Ident("in".into()));
            let (op, prec) = if negated_in {
                ("not in", 20)
            } else {
                match binary(self.peek()) {
                    Some(b) => b,
                    None => return Ok(left),
                }
            };
            if prec <= min {
                return Ok(left);
            }
            self.at += if negated_in { 2 } else { 1 };
            // `**` is right-associative; the rest left.
            let right = self.binary(if op == "**" { prec - 1 } else { prec })?;
            left = Node {
                kind: Kind::Binary(op, Box::new(left), Box::new(right)),
                pos,
            };
        }
    }

    fn unary(&mut self) -> Result<Node, SyntaxError> {
        let pos = self.pos();
        let op = match self.peek() {
            Tok::Op("!") => "!",
            Tok::Ident(w) if w == "not" => "!",
            Tok::Op("-") => "-",
            Tok::Op("+") => "+",
            _ => return self.postfix(),
        };
        self.at += 1;
        // `!` binds looser than arithmetic operands (`!a == b` is `(!a) == b`).
        let operand = if op == "!" {
            self.binary(50)?
        } else {
            self.binary(90)?
        };
        Ok(Node {
            kind: Kind::Unary(op, Box::new(operand)),
            pos,
        })
    }

    fn postfix(&mut self) -> Result<Node, SyntaxError> {
        let mut node = self.primary()?;
        loop {
            let pos = self.pos();
            let optional = self.peek() == &Tok::Op("?.");
            if self.eat(".") || self.eat("?.") {
                if self.eat("[") {
                    let key = self.expr()?;
                    self.expect("]")?;
                    node = member(node, key, optional, pos);
                    continue;
                }
                let key = match self.next() {
                    (Tok::Ident(n), p) => Node {
                        kind: Kind::Lit(Value::String(n)),
                        pos: p,
                    },
                    (other, p) => {
                        return Err(SyntaxError {
                            pos: p,
                            message: format!("expected a key after `.`, found {}", show(&other)),
                        });
                    }
                };
                node = member(node, key, optional, pos);
            } else if self.eat("[") {
                let from = if self.peek() == &Tok::Op(":") {
                    None
                } else {
                    Some(Box::new(self.expr()?))
                };
                if self.eat(":") {
                    let to = if self.peek() == &Tok::Op("]") {
                        None
                    } else {
                        Some(Box::new(self.expr()?))
                    };
                    self.expect("]")?;
                    node = Node {
                        kind: Kind::Slice(Box::new(node), from, to),
                        pos,
                    };
                } else {
                    self.expect("]")?;
                    let key = from.map_or(
                        Node {
                            kind: Kind::Lit(Value::Null),
                            pos,
                        },
                        |b| *b,
                    );
                    node = member(node, key, false, pos);
                }
            } else {
                return Ok(node);
            }
        }
    }

    fn primary(&mut self) -> Result<Node, SyntaxError> {
        let (tok, pos) = self.next();
        let kind = match tok {
            Tok::Num(n) => Kind::Lit(n),
            Tok::Str(s) => Kind::Lit(Value::String(s)),
            Tok::Ident(w) => match w.as_str() {
                "true" => Kind::Lit(Value::Bool(true)),
                "false" => Kind::Lit(Value::Bool(false)),
                "nil" => Kind::Lit(Value::Null),
                _ if self.peek() == &Tok::Op("(") => {
                    self.at += 1;
                    Kind::Call(w, self.list(")")?)
                }
                _ => Kind::Name(w),
            },
            Tok::Op("(") => {
                let inner = self.expr()?;
                self.expect(")")?;
                return Ok(inner);
            }
            Tok::Op("[") => Kind::Array(self.list("]")?),
            Tok::Op("{") => Kind::Map(self.entries()?),
            other => {
                return Err(SyntaxError {
                    pos,
                    message: format!("expected a value, found {}", show(&other)),
                });
            }
        };
        Ok(Node { kind, pos })
    }

    /// Comma-separated expressions up to `close` (a trailing comma allowed).
    fn list(&mut self, close: &'static str) -> Result<Vec<Node>, SyntaxError> {
        let mut out = Vec::new();
        while !self.eat(close) {
            out.push(self.expr()?);
            if !self.eat(",") {
                self.expect(close)?;
                break;
            }
        }
        Ok(out)
    }

    fn entries(&mut self) -> Result<Vec<(Node, Node)>, SyntaxError> {
        let mut out = Vec::new();
        while !self.eat("}") {
            let (tok, pos) = self.next();
            let key = match tok {
                Tok::Ident(k) => Value::String(k),
                Tok::Str(k) => Value::String(k),
                Tok::Num(n) => Value::String(n.to_string()),
                Tok::Op("(") => {
                    let k = self.expr()?;
                    self.expect(")")?;
                    self.expect(":")?;
                    out.push((k, self.expr()?));
                    if !self.eat(",") {
                        self.expect("}")?;
                        break;
                    }
                    continue;
                }
                other => {
                    return Err(SyntaxError {
                        pos,
                        message: format!("expected a map key, found {}", show(&other)),
                    });
                }
            };
            self.expect(":")?;
            out.push((
                Node {
                    kind: Kind::Lit(key),
                    pos,
                },
                self.expr()?,
            ));
            if !self.eat(",") {
                self.expect("}")?;
                break;
            }
        }
        Ok(out)
    }
}

fn member(of: Node, key: Node, optional: bool, pos: Pos) -> Node {
    Node {
        kind: Kind::Member {
            of: Box::new(of),
            key: Box::new(key),
            optional,
        },
        pos,
    }
}
