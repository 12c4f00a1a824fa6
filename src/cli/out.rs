//! Writing the commands' results to stdout without panicking when it is closed.
//!
//! `println!` panics when stdout is a pipe whose reader is gone (`treadle schema | head`);
//! every result line of the commands goes through [`say!`] instead, which drops what cannot
//! be written and lets the command end with its own exit code.

use std::fmt::Arguments;
use std::io::Write;

/// Writes one line to stdout; a closed or failing stdout is ignored.
pub(crate) fn line(args: Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    // Nobody reads the rest: nothing to report it to, and no reason to fail the command.
    let _ = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
}

/// Writes text as it is (it ends with its own newline); a closed stdout is ignored.
pub(crate) fn text(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// `println!` for the commands' results (see the module docs).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::out::line(format_args!($($arg)*))
    };
}
pub(crate) use say;
