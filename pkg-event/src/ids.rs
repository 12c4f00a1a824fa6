//! Time-ordered identifiers for every coordinate of an event.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// An id string that is not a UUID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid id {input:?}: expected a UUID such as 0192f0c1-7f4e-7a3b-9c2d-1e2f3a4b5c6d")]
pub struct IdParseError {
    /// The text that failed to parse.
    pub input: String,
}

macro_rules! define_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A fresh id. Ids made later sort after ids made earlier (UUID v7).
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }

            /// The id's 16 bytes, big-endian, so byte order is time order.
            pub fn to_bytes(self) -> [u8; 16] {
                *self.0.as_bytes()
            }

            /// Rebuilds an id from [`Self::to_bytes`].
            pub fn from_bytes(bytes: [u8; 16]) -> Self {
                Self(Uuid::from_bytes(bytes))
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdParseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self).map_err(|_| IdParseError { input: s.to_owned() })
            }
        }
    };
}

define_id!(
    /// One session: a conversation with one or more loops.
    SessionId
);
define_id!(
    /// One loop of a session: the main agent or a sub-agent.
    LoopId
);
define_id!(
    /// One turn: the work that answers one input.
    TurnId
);
define_id!(
    /// One step: a model request/response cycle and its tool batch.
    StepId
);
define_id!(
    /// One event. The journal is idempotent on it.
    EventId
);
define_id!(
    /// One submitted input.
    InputId
);
define_id!(
    /// One gate: a question that parks work until it is answered.
    GateId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_creation_and_round_trip() {
        let a = TurnId::new();
        let b = TurnId::new();
        assert!(a < b);
        assert_eq!(TurnId::from_bytes(a.to_bytes()), a);
        assert_eq!(a.to_string().parse::<TurnId>(), Ok(a));
        assert!("nope".parse::<TurnId>().is_err());
    }
}
