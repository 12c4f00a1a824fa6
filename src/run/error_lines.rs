//! A failed run's error as the terminal shows it under `run N failed in T:`: one clause a
//! line (the step and its cause, each hint, each source that did not answer, the cached
//! step, how to run it again), where it was one line of up to ~900 characters. A clause is
//! not cut: the terminal wraps it, and a URL or a command stays whole for copying and for
//! grep. The record, `treadle runs` and the API keep the one-line message (`; ` between the
//! clauses): tables and scripts read it whole.

/// Where each line of the error starts.
const INDENT: &str = "  ";

/// The lines (indented) that show `error`: one per `; `-separated clause.
pub fn error_lines(error: &str) -> Vec<String> {
    error
        .split("; ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|clause| format!("{INDENT}{clause}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_clause_is_a_line_and_the_rerun_command_stays_whole() {
        let error = "step `check` failed: exit code 3; agent step `writer` was taken from the cache \
                     (run 1); to run it again: treadle run treadle.yml --rerun writer";
        assert_eq!(
            error_lines(error),
            [
                "  step `check` failed: exit code 3",
                "  agent step `writer` was taken from the cache (run 1)",
                "  to run it again: treadle run treadle.yml --rerun writer",
            ]
        );
    }

    #[test]
    fn a_message_of_one_clause_is_one_line() {
        assert_eq!(error_lines("interrupted"), ["  interrupted"]);
    }
}
