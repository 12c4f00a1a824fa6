//! The versioned byte encoding of journaled events: one format byte, then the payload.

use treadle_event::Event;

/// Format byte of a JSON payload (serde_json).
pub(crate) const FORMAT_JSON: u8 = 1;

/// Encodes `event` as the current format.
pub(crate) fn encode(event: &Event) -> Result<Vec<u8>, serde_json::Error> {
    // Most events are a few hundred bytes; reserving avoids the first regrowths.
    let mut bytes = Vec::with_capacity(256);
    bytes.push(FORMAT_JSON);
    serde_json::to_writer(&mut bytes, event)?;
    Ok(bytes)
}

/// Why a stored value does not decode; its text is the detail of
/// [`super::ReadError::Corrupt`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    /// Not even a format byte.
    #[error("the stored value is empty (no format byte)")]
    Empty,
    /// Written by a format this build does not know.
    #[error("unknown format byte {0}; this build reads format {FORMAT_JSON} (JSON)")]
    UnknownFormat(u8),
    /// The right format byte, but a payload that is not an event.
    #[error("the JSON payload (format {FORMAT_JSON}) does not decode: {0}")]
    Json(#[from] serde_json::Error),
}

/// Decodes a stored value, whatever format byte it was written with.
pub(crate) fn decode(bytes: &[u8]) -> Result<Event, DecodeError> {
    match bytes.split_first() {
        None => Err(DecodeError::Empty),
        Some((&FORMAT_JSON, payload)) => Ok(serde_json::from_slice(payload)?),
        Some((&other, _)) => Err(DecodeError::UnknownFormat(other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use treadle_event::{EventKind, Header, SessionId};

    #[test]
    fn round_trips_and_rejects_unknown_formats() {
        let event = Event::new(
            Header::session(SessionId::new()),
            EventKind::SessionStopped {
                reason: "done".into(),
            },
        );
        let bytes = encode(&event).unwrap();
        assert_eq!(bytes[0], FORMAT_JSON);
        assert_eq!(decode(&bytes).unwrap(), event);
        assert!(matches!(decode(&[]), Err(DecodeError::Empty)));
        let unknown = decode(&[9, b'{']).unwrap_err();
        assert!(matches!(unknown, DecodeError::UnknownFormat(9)));
        assert!(unknown.to_string().contains("unknown format byte 9"));
        let bad = decode(&[1, b'{']).unwrap_err();
        assert!(matches!(bad, DecodeError::Json(_)));
        assert!(bad.to_string().contains("does not decode"));
    }
}
