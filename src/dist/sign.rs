//! Step messages signed with a key the server and its workers share, so that a worker runs
//! only steps its server queued: a step message carries a pipeline's text, and whoever can
//! publish on `treadle.steps` could otherwise have workers run anything.
//!
//! The signature is BLAKE3 in its keyed mode over the message's payload, hex, in the
//! `Treadle-Signature` header. BLAKE3's keyed mode is a MAC by design (a PRF keyed with 32
//! bytes), serves here as HMAC-SHA256 would, and is already the project's hash; the key is
//! derived from the shared secret with BLAKE3's key derivation, so a secret of any length
//! works. The payload holds the attempt id, so a signature cannot be moved to another step;
//! a replayed message names a step whose result exists, and is not run again.
//!
//! The secret comes from `--nats-signing-key FILE` or `TREADLE_NATS_SIGNING_KEY`; it is
//! never printed.

/// The header carrying a step message's signature.
pub const HEADER: &str = "Treadle-Signature";
/// The variable the secret may come from.
pub const ENV: &str = "TREADLE_NATS_SIGNING_KEY";
/// BLAKE3's derivation context: this use of the key, nothing else.
const CONTEXT: &str = "treadle 2026-12 step message signature v1";

/// A shared signing key.
#[derive(Clone)]
pub struct SigningKey([u8; 32]);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(***)")
    }
}

/// Why a step message is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// It has no signature.
    #[error("it is not signed (no Treadle-Signature header)")]
    Unsigned,
    /// Its signature is not this key's over this payload.
    #[error("its signature does not match (forged, altered, or signed with another key)")]
    Forged,
}

impl SigningKey {
    /// The key derived from `secret` (surrounding white space ignored).
    pub fn new(secret: &str) -> Self {
        Self(blake3::derive_key(CONTEXT, secret.trim().as_bytes()))
    }

    /// From `TREADLE_NATS_SIGNING_KEY`, when set and not empty.
    pub fn from_env() -> Option<Self> {
        let secret = std::env::var(ENV).ok()?;
        (!secret.trim().is_empty()).then(|| Self::new(&secret))
    }

    /// The signature of `payload`, hex.
    pub fn sign(&self, payload: &[u8]) -> String {
        blake3::keyed_hash(&self.0, payload).to_hex().to_string()
    }

    /// Checks the signature `given` (the header's value, if any) of `payload`.
    pub fn verify(&self, payload: &[u8], given: Option<&str>) -> Result<(), Refusal> {
        let given = given.ok_or(Refusal::Unsigned)?;
        let given = blake3::Hash::from_hex(given.trim()).map_err(|_| Refusal::Forged)?;
        // `Hash`'s equality is constant-time.
        if given == blake3::keyed_hash(&self.0, payload) {
            Ok(())
        } else {
            Err(Refusal::Forged)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_key_over_the_same_payload_verifies() {
        let key = SigningKey::new("shared secret\n");
        let sig = key.sign(b"step");
        assert_eq!(key.verify(b"step", Some(&sig)), Ok(()));
        assert_eq!(key.verify(b"step!", Some(&sig)), Err(Refusal::Forged));
        assert_eq!(key.verify(b"step", None), Err(Refusal::Unsigned));
        let other = SigningKey::new("another");
        assert_eq!(other.verify(b"step", Some(&sig)), Err(Refusal::Forged));
        assert!(!format!("{key:?}").contains("shared"));
    }
}
