//! The one format of a value in the state file's tables: a format byte, then JSON. The
//! run store's tables and the cache's both write it, so the byte and its reading are here
//! once.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The format byte of a value written as JSON (the only one so far).
const FORMAT_JSON_V1: u8 = 1;

/// A stored value this version cannot read or a value that cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The JSON after the format byte does not read as the type asked for (or a value
    /// does not serialise): serde's error, with its line and column.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// The format byte is one this version does not know (a newer treadle wrote it).
    #[error("format byte {0}")]
    UnknownByte(u8),
    /// The value is empty: not even a format byte.
    #[error("empty value")]
    Empty,
}

/// `v` as stored: the format byte, then its JSON.
pub fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, FormatError> {
    let mut out = vec![FORMAT_JSON_V1];
    serde_json::to_writer(&mut out, v)?;
    Ok(out)
}

/// A stored value read back as `T`.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, FormatError> {
    match bytes.split_first() {
        Some((&FORMAT_JSON_V1, json)) => Ok(serde_json::from_slice(json)?),
        Some((&b, _)) => Err(FormatError::UnknownByte(b)),
        None => Err(FormatError::Empty),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_comes_back_and_an_unknown_byte_or_nothing_is_named() {
        let bytes = encode(&vec![1u8, 2]).unwrap_or_default();
        assert_eq!(bytes.first(), Some(&FORMAT_JSON_V1));
        assert_eq!(decode::<Vec<u8>>(&bytes).ok(), Some(vec![1, 2]));
        let newer = decode::<Vec<u8>>(&[9, b'1']);
        assert!(
            matches!(newer, Err(FormatError::UnknownByte(9))),
            "{newer:?}"
        );
        assert!(matches!(decode::<u8>(&[]), Err(FormatError::Empty)));
        let bad = decode::<u8>(&[FORMAT_JSON_V1, b'x']);
        assert!(matches!(bad, Err(FormatError::Json(_))), "{bad:?}");
    }
}
