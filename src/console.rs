//! Writing to stdout and stderr without panicking when they are closed.
//!
//! `println!` and `eprintln!` panic when their stream is a pipe whose reader is gone
//! (`treadle schema | head`, `treadle run 2>&1 | head -1`). Every line treadle writes goes
//! through [`say!`] (stdout: the commands' results) or [`tell!`] (stderr: errors, warnings,
//! notes) instead, which drop what cannot be written: a run goes on to its end and a
//! command exits with its own code. Clippy denies the panicking macros in the crate.

use std::fmt::Arguments;
use std::io::Write;

/// Writes one line to stdout; a closed or failing stdout is ignored.
pub(crate) fn line(args: Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    // Nobody reads the rest: nothing to report it to, and no reason to fail the command.
    let _ = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
}

/// Writes one line to stderr; a closed or failing stderr is ignored.
pub(crate) fn err_line(args: Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// Writes text as it is (it ends with its own newline); a closed stdout is ignored.
pub(crate) fn text(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// `println!` that survives a closed stdout (see the module docs).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::console::line(format_args!($($arg)*))
    };
}
pub(crate) use say;

/// `eprintln!` that survives a closed stderr (see the module docs).
macro_rules! tell {
    ($($arg:tt)*) => {
        $crate::console::err_line(format_args!($($arg)*))
    };
}
pub(crate) use tell;
