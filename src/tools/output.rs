//! Cutting tool output to a size a model's context can hold.

/// The most bytes of output a built-in tool returns; the rest is replaced by a note.
pub const MAX_OUTPUT_BYTES: usize = 32 * 1024;

/// Cuts `text` to at most `max` bytes on a character boundary and, when it cut, appends a
/// note saying how much was left out and `hint` (what to do to see the rest).
pub fn truncate(text: String, max: usize, hint: &str) -> String {
    if text.len() <= max {
        return text;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    // Prefer ending on a whole line, unless that would throw away most of the budget.
    if let Some(newline) = text[..cut].rfind('\n')
        && newline >= cut / 2
    {
        cut = newline + 1;
    }
    let mut out = String::with_capacity(cut + 120);
    out.push_str(&text[..cut]);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&format!(
        "[output truncated: showed {cut} of {} bytes{}{hint}]",
        text.len(),
        if hint.is_empty() { "" } else { "; " },
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_unchanged() {
        assert_eq!(truncate("abc".into(), 10, "x"), "abc");
    }

    #[test]
    fn long_text_is_cut_with_a_note() {
        let text = "line one\nline two\nline three\n".to_owned();
        let out = truncate(text, 20, "read with offset");
        assert_eq!(
            out,
            "line one\nline two\n[output truncated: showed 18 of 29 bytes; read with offset]"
        );
    }

    #[test]
    fn cuts_on_char_boundaries() {
        let out = truncate("ééééé".into(), 3, "");
        assert!(out.starts_with("é\n[output truncated: showed 2 of 10 bytes]"));
    }
}
