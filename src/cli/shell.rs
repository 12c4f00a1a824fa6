//! `treadle completions SHELL` and `treadle man`: the shell completion script and the man
//! page, both generated from the same clap grammar as the command itself, so they cannot
//! drift from it.

use std::io::Write;

use clap::CommandFactory;

use super::{Cli, EXIT_CONFIG};
use crate::console::tell;

/// Prints the completion script for `shell`.
pub(super) fn completions(shell: clap_complete::Shell) -> u8 {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "treadle", &mut out);
    print_bytes(&out)
}

/// Prints the man page (roff), e.g. `treadle man > treadle.1`.
pub(super) fn man() -> u8 {
    let mut out = Vec::new();
    match clap_mangen::Man::new(Cli::command()).render(&mut out) {
        Ok(()) => print_bytes(&out),
        Err(e) => {
            tell!("treadle: cannot render the man page: {e}");
            EXIT_CONFIG
        }
    }
}

/// Writes to stdout; a closed stdout (`| head`) is not an error worth reporting.
fn print_bytes(bytes: &[u8]) -> u8 {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(bytes).and_then(|()| stdout.flush());
    0
}
