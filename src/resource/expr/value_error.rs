//! [`ValueError`]: why an operator or a builtin of the expr language refused its values.

/// Why an operator or a builtin refused its values (the evaluator adds where).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    /// A value of the wrong kind: what was wanted, and what it was.
    #[error("expected {want}, not {found}")]
    Expected {
        /// `a number`, `a list`...
        want: &'static str,
        /// [`show_type`] of the value.
        found: String,
    },
    /// An operator that does not apply to its operands.
    #[error("`{op}` cannot apply to {left} and {right}")]
    Operands {
        /// The operator.
        op: String,
        /// [`show_type`] of the left.
        left: String,
        /// [`show_type`] of the right.
        right: String,
    },
    /// An operator that needs strings.
    #[error("`{op}` needs strings, not {found}")]
    NeedsStrings {
        /// The operator.
        op: String,
        /// [`show_type`] of the operand.
        found: String,
    },
    /// `in` of something that is not a list or a map.
    #[error("`in` needs a list or a map, not {0}")]
    NotAContainer(String),
    /// Integer arithmetic out of range.
    #[error("`{0}` overflows")]
    Overflow(String),
    /// `/` or `%` by zero.
    #[error("division by zero")]
    DivisionByZero,
    /// A result that JSON cannot hold.
    #[error("the result is not a finite number ({0})")]
    NotFinite(f64),
    /// Two values without an order between them.
    #[error("cannot order {0} and {1}")]
    Unordered(String, String),
    /// A NaN in a comparison.
    #[error("cannot order NaN")]
    NaN,
    /// A range too long to build.
    #[error("the range {from}..{to} has more than {max} elements")]
    RangeTooLong {
        /// Its start.
        from: i64,
        /// Its end.
        to: i64,
        /// [`super::eval`]'s bound.
        max: i64,
    },
    /// `matches` with a pattern that does not compile.
    #[error("`matches`: {0}")]
    Regex(#[from] regex::Error),
    /// A builtin called with the wrong number of arguments.
    #[error("takes {want} argument(s), got {got}")]
    Arity {
        /// How many it takes.
        want: usize,
        /// How many it got.
        got: usize,
    },
    /// A builtin called without an argument.
    #[error("needs an argument")]
    NoArgument,
    /// `len` of a value without one.
    #[error("has no length for {0}")]
    NoLength(String),
    /// Text that `int()`/`float()`/`fromJSON()` cannot read.
    #[error("{text:?} is not {want}")]
    NotParsed {
        /// The text.
        text: String,
        /// `an integer`, `a number`, `JSON (...)`.
        want: String,
    },
    /// A misuse the message says all of (`[1] + [2]`, a slice bound that is not an
    /// integer...).
    #[error("{0}")]
    Misuse(&'static str),
}
