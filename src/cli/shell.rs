//! `treadle completions SHELL` and `treadle man`: the shell completion script and the man
//! page, both generated from the same clap grammar as the command itself, so they cannot
//! drift from it.

use std::io::Write;

use clap::CommandFactory;

use super::{Cli, EXIT_CONFIG};
use crate::console::tell;

/// Prints the completion script for `shell`.
pub(super) fn completions(shell: clap_complete::Shell) -> u8 {
    // `treadle docs PAGE` completes the page names. Only the script is told them: the
    // command itself takes any word, to answer a wrong one with "did you mean".
    let pages: Vec<&'static str> = super::docs::PAGES.iter().map(|(name, _)| *name).collect();
    let mut command = Cli::command().mut_subcommand("docs", |docs| {
        docs.mut_arg("page", |page| {
            page.value_parser(clap::builder::PossibleValuesParser::new(pages))
        })
    });
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "treadle", &mut out);
    print_bytes(&out)
}

/// Prints the man page (roff), e.g. `treadle man > treadle.1`.
pub(super) fn man() -> u8 {
    let mut out = Vec::new();
    match render_man(&mut out) {
        Ok(()) => print_bytes(&out),
        Err(e) => {
            tell!("treadle: cannot render the man page: {e}");
            EXIT_CONFIG
        }
    }
}

/// The page: clap_mangen's sections, except its list of commands, which names a page per
/// command (`treadle-run(1)`) that nothing installs; here each command is listed with what
/// it does, and SEE ALSO points at `--help` and `treadle docs`, which every binary has.
fn render_man(out: &mut Vec<u8>) -> std::io::Result<()> {
    let command = Cli::command();
    let man = clap_mangen::Man::new(command.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    writeln!(out, ".SH COMMANDS")?;
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        writeln!(
            out,
            ".TP\n\\fBtreadle {}\\fR\n{}",
            sub.get_name(),
            roff_text(&about)
        )?;
    }
    writeln!(out, ".SH SEE ALSO")?;
    writeln!(
        out,
        "\\fBtreadle COMMAND \\-\\-help\\fR for a command's options; \\fBtreadle docs\\fR lists \
         the documentation pages, \\fBtreadle docs PAGE\\fR prints one."
    )?;
    man.render_version_section(out)
}

/// `text` as roff running text: backslashes escaped, no line starting as a request.
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    match escaped.starts_with(['.', '\'']) {
        true => format!("\\&{escaped}"),
        false => escaped,
    }
}

/// Writes to stdout; a closed stdout (`| head`) is not an error worth reporting.
fn print_bytes(bytes: &[u8]) -> u8 {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(bytes).and_then(|()| stdout.flush());
    0
}
