//! `in_parallel:`: steps run together, written as a list or as `{ steps, limit, fail_fast }`.
//! Generic over the step (`RawStep` as read, the typed `Step` once loaded).

use std::fmt;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::at::At;

/// `in_parallel:` either as a list of steps or as `{ steps, limit, fail_fast }`.
#[derive(Debug, Clone, JsonSchema)]
#[schemars(untagged)]
pub enum InParallel<S> {
    /// A bare list: `in_parallel: [step, step]`.
    Steps(Vec<At<S>>),
    /// The long form.
    Config(InParallelConfig<S>),
}

/// The long form of `in_parallel:`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InParallelConfig<S> {
    /// The steps to run together.
    pub steps: Vec<At<S>>,
    /// At most this many at once (default: all).
    #[serde(default)]
    pub limit: Option<At<u32>>,
    /// Interrupt the others as soon as one fails (default false).
    #[serde(default)]
    pub fail_fast: bool,
}

impl<S> InParallel<S> {
    /// The nested steps.
    pub fn steps(&self) -> &[At<S>] {
        match self {
            Self::Steps(s) => s,
            Self::Config(c) => &c.steps,
        }
    }
    /// The concurrency limit, if any.
    pub fn limit(&self) -> Option<u32> {
        match self {
            Self::Config(c) => c.limit.as_ref().map(|l| l.value),
            _ => None,
        }
    }
    /// Whether one failure interrupts the others.
    pub fn fail_fast(&self) -> bool {
        matches!(self, Self::Config(c) if c.fail_fast)
    }
}

// A visitor, not `#[serde(untagged)]`: untagged buffers the input and loses both the
// locations of nested values and the precise error of the form the user meant.
impl<'de, S: Deserialize<'de>> Deserialize<'de> for InParallel<S> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<S>(std::marker::PhantomData<S>);
        impl<'de, S: Deserialize<'de>> Visitor<'de> for V<S> {
            type Value = InParallel<S>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of steps, or a mapping with `steps`, `limit`, `fail_fast`")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<InParallel<S>, A::Error> {
                Vec::deserialize(de::value::SeqAccessDeserializer::new(seq)).map(InParallel::Steps)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<InParallel<S>, A::Error> {
                InParallelConfig::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(InParallel::Config)
            }
        }
        deserializer.deserialize_any(V(std::marker::PhantomData))
    }
}
