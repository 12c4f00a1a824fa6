//! The size limit of one model response: its body is counted as it arrives and cut at the
//! limit, so a huge reply is refused without being held whole.
//!
//! The client reads the body itself (`client.rs`), so the count is a plain counter on its
//! stack, checked before each piece reaches the SSE decoder's buffer.

/// The bytes of one response body seen so far, against its limit.
#[derive(Debug)]
pub(super) struct BodyLimit {
    max_bytes: u64,
    seen: u64,
}

/// The body passed the limit; the piece that passed it was not kept.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Exceeded;

impl BodyLimit {
    pub(super) fn new(max_bytes: u64) -> Self {
        Self { max_bytes, seen: 0 }
    }

    /// Counts the next `len` bytes of the body.
    pub(super) fn take(&mut self, len: usize) -> Result<(), Exceeded> {
        self.seen = self.seen.saturating_add(len as u64);
        if self.seen > self.max_bytes {
            Err(Exceeded)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_on_the_sum_of_the_pieces() {
        let mut limit = BodyLimit::new(10);
        assert_eq!(limit.take(6), Ok(()));
        assert_eq!(limit.take(4), Ok(()));
        assert_eq!(limit.take(1), Err(Exceeded));
        assert_eq!(BodyLimit::new(0).take(usize::MAX), Err(Exceeded));
    }
}
