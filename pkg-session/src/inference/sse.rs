//! A server-sent events decoder for chat-completion streams, run in the caller's task on
//! the body's pieces as they arrive: no task, no channel, and the data of a one-line event
//! (every event a chat-completions server sends) handed out as a slice of the read buffer.
//!
//! What it understands: lines ended by `\n` or `\r\n` (a piece may end mid-line; the rest
//! comes with the next one), `data:` lines (several in one event are joined with `\n`),
//! comment lines (`:`), the `event:` field (an `event: keepalive` is skipped), a leading
//! byte-order mark, and `data: [DONE]`, which ends the stream. `id:` and `retry:` are read
//! and ignored: a completion is never resumed. A lone `\r` does not end a line (no
//! chat-completions server sends one).

use std::ops::Range;

/// The UTF-8 byte-order mark, allowed before the first line.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// What the decoder found in the buffered bytes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Event<'a> {
    /// One event's data (not necessarily UTF-8 or JSON: the caller's parser says).
    Data(&'a [u8]),
    /// `data: [DONE]`: the answer is over.
    Done,
}

/// Where the current event's data is kept.
#[derive(Debug, Default)]
enum Data {
    /// No `data:` line yet.
    #[default]
    None,
    /// One `data:` line, still in the read buffer.
    Line(Range<usize>),
    /// Several lines joined, or one that had to leave the read buffer.
    Joined,
}

/// The decoder's state across body pieces. Its buffers are reused for every event of a
/// call, so decoding allocates only while they grow.
#[derive(Debug, Default)]
pub(super) struct SseDecoder {
    /// Bytes read and not yet consumed as lines start at `pos`.
    buf: Vec<u8>,
    pos: usize,
    /// Where the search for the next `\n` resumes: a long line is scanned once, not once
    /// per piece.
    scanned: usize,
    data: Data,
    joined: Vec<u8>,
    keepalive: bool,
    /// Whether the first line (which may start with a byte-order mark) was read.
    started: bool,
}

impl SseDecoder {
    /// Adds the next piece of the body.
    pub(super) fn feed(&mut self, piece: &[u8]) {
        if self.pos > 0 {
            // The consumed lines go; a one-line event still waiting for its blank line
            // keeps its data in `joined`, since the range it has in `buf` is about to move.
            if let Data::Line(range) = &self.data {
                self.joined.clear();
                self.joined.extend_from_slice(&self.buf[range.clone()]);
                self.data = Data::Joined;
            }
            self.buf.drain(..self.pos);
            self.scanned -= self.pos;
            self.pos = 0;
        }
        self.buf.extend_from_slice(piece);
    }

    /// The next complete event in what was fed, if there is one.
    pub(super) fn next_event(&mut self) -> Option<Event<'_>> {
        loop {
            let from = self.scanned.max(self.pos);
            let Some(end) = self.buf[from..].iter().position(|&b| b == b'\n') else {
                self.scanned = self.buf.len();
                return None;
            };
            let mut start = self.pos;
            if !self.started {
                self.started = true;
                if self.buf[start..].starts_with(BOM) {
                    start += BOM.len();
                }
            }
            let newline = from + end;
            self.pos = newline + 1;
            self.scanned = self.pos;
            let line_end = if newline > start && self.buf[newline - 1] == b'\r' {
                newline - 1
            } else {
                newline
            };
            if line_end == start {
                if self.dispatch() {
                    return Some(self.event());
                }
                continue;
            }
            self.field(start..line_end);
        }
    }

    /// Takes in one non-empty line.
    fn field(&mut self, line: Range<usize>) {
        let text = &self.buf[line.clone()];
        if text[0] == b':' {
            return;
        }
        let (name, value) = match text.iter().position(|&b| b == b':') {
            Some(colon) => {
                let after = colon + 1;
                let skip = usize::from(text.get(after) == Some(&b' '));
                (&text[..colon], line.start + after + skip..line.end)
            }
            None => (text, line.end..line.end),
        };
        match name {
            b"data" => match std::mem::take(&mut self.data) {
                Data::None => self.data = Data::Line(value),
                Data::Line(first) => {
                    self.joined.clear();
                    self.joined.extend_from_slice(&self.buf[first]);
                    self.push_joined(value);
                }
                Data::Joined => self.push_joined(value),
            },
            b"event" => self.keepalive = &self.buf[value] == b"keepalive",
            _ => {}
        }
    }

    fn push_joined(&mut self, value: Range<usize>) {
        self.joined.push(b'\n');
        self.joined.extend_from_slice(&self.buf[value]);
        self.data = Data::Joined;
    }

    /// At a blank line: whether the event just ended is one to hand out. An event without
    /// data, and a keepalive, are dropped.
    fn dispatch(&mut self) -> bool {
        let keepalive = std::mem::take(&mut self.keepalive);
        match self.data {
            Data::None => false,
            _ if keepalive => {
                self.data = Data::None;
                false
            }
            _ => true,
        }
    }

    /// The event `dispatch` accepted; its data is cleared for the next one.
    fn event(&mut self) -> Event<'_> {
        let data = match std::mem::take(&mut self.data) {
            Data::None => &[][..],
            Data::Line(range) => &self.buf[range],
            Data::Joined => &self.joined[..],
        };
        if data == b"[DONE]" {
            Event::Done
        } else {
            Event::Data(data)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `body` in pieces of `size` bytes and lists the events as text.
    fn decode(body: &str, size: usize) -> Vec<String> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for piece in body.as_bytes().chunks(size.max(1)) {
            decoder.feed(piece);
            while let Some(event) = decoder.next_event() {
                out.push(match event {
                    Event::Data(data) => String::from_utf8_lossy(data).into_owned(),
                    Event::Done => "<done>".to_owned(),
                });
            }
        }
        out
    }

    #[test]
    fn events_come_out_whole_however_the_body_is_cut() {
        let body = "\u{feff}data: {\"b\":2}\n\n: comment\r\ndata: {\"a\":1}\r\n\r\nevent: keepalive\ndata: {}\n\n\
                    id: 7\nretry: 10\ndata:first\ndata:  second\n\n\ndata:\n\ndata: [DONE]\n\n";
        let want = ["{\"b\":2}", "{\"a\":1}", "first\n second", "", "<done>"];
        for size in 1..body.len() + 1 {
            assert_eq!(decode(body, size), want, "pieces of {size}");
        }
    }

    #[test]
    fn an_unfinished_event_is_not_handed_out() {
        assert!(decode("data: {\"a\":1}\n", 4).is_empty());
        assert!(decode("data: {\"a\":1}", 100).is_empty());
        assert_eq!(decode("event: other\ndata: x\n\n", 3), ["x"]);
    }

    #[test]
    fn a_long_line_is_scanned_once() {
        let mut decoder = SseDecoder::default();
        decoder.feed(b"data: ");
        for _ in 0..1000 {
            decoder.feed(b"xxxxxxxxxx");
            assert_eq!(decoder.next_event(), None);
        }
        assert_eq!(decoder.scanned, decoder.buf.len());
        decoder.feed(b"\n\n");
        assert!(matches!(decoder.next_event(), Some(Event::Data(d)) if d.len() == 10_000));
    }
}
