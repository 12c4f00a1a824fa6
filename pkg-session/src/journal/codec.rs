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

/// Decodes a stored value, whatever format byte it was written with.
///
/// The error is a sentence for [`super::ReadError::Corrupt`].
pub(crate) fn decode(bytes: &[u8]) -> Result<Event, String> {
    match bytes.split_first() {
        None => Err("the stored value is empty (no format byte)".to_owned()),
        Some((&FORMAT_JSON, payload)) => serde_json::from_slice(payload)
            .map_err(|e| format!("the JSON payload (format {FORMAT_JSON}) does not decode: {e}")),
        Some((other, _)) => Err(format!(
            "unknown format byte {other}; this build reads format {FORMAT_JSON} (JSON)"
        )),
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
        assert!(decode(&[]).unwrap_err().contains("empty"));
        assert!(
            decode(&[9, b'{'])
                .unwrap_err()
                .contains("unknown format byte 9")
        );
        assert!(decode(&[1, b'{']).unwrap_err().contains("does not decode"));
    }
}
