//! Making text from tasks and models safe to show on a terminal: control characters are
//! shown as `\xNN`, so an escape sequence in a step's output cannot clear the screen,
//! retitle the window, move the cursor or hide what came before.

use std::borrow::Cow;

/// Whether `c` would act on a terminal rather than show: C0 and C1 controls, DEL, and the
/// bidirectional overrides that reorder what is shown. Tab and newline stay: they only
/// move on.
fn acts(c: char) -> bool {
    (c.is_control() && !matches!(c, '\t' | '\n'))
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with each acting character written out as `\xNN` (`\u{NNNN}` above 0xff).
pub fn neutralise(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !acts(c) {
            out.push(c);
        } else if (c as u32) <= 0xff {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push_str(&format!("\\u{{{:04x}}}", c as u32));
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::neutralise;

    #[test]
    fn controls_are_written_out_and_plain_text_is_untouched() {
        assert_eq!(neutralise("a\tb ✓\n"), "a\tb ✓\n");
        assert_eq!(neutralise("\u{1b}[2J\r\u{7}"), "\\x1b[2J\\x0d\\x07");
        assert_eq!(neutralise("\u{9b}x\u{202e}"), "\\x9bx\\u{202e}");
    }
}
