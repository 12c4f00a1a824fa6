//! `At<T>`: a value together with the line and column it was written at in the pipeline file.
//!
//! serde-saphyr's `Spanned<T>` carries the location, but it has no JSON Schema and exposes
//! more than the checks need; this wrapper keeps the schema of `T` and only the position.

use std::borrow::Cow;
use std::fmt;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer};

/// A 1-based line and column in the pipeline file; `0:0` when unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
}

impl Pos {
    /// Whether the position came from the file (values built in code have none).
    pub fn is_known(self) -> bool {
        self.line > 0
    }
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// A value and where it was written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct At<T> {
    /// The value itself.
    pub value: T,
    /// Where the value starts in the file.
    pub pos: Pos,
}

impl<T> At<T> {
    /// A value with no known position (built in code rather than read from a file).
    pub fn new(value: T) -> Self {
        Self {
            value,
            pos: Pos::default(),
        }
    }
}

/// The values of a list as written, without their positions (a step's `inputs:` as the
/// names an artifact store or a cache key takes).
pub fn values<T: Clone>(list: &[At<T>]) -> Vec<T> {
    list.iter().map(|a| a.value.clone()).collect()
}

impl<T> std::ops::Deref for At<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for At<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = serde_saphyr::Spanned::<T>::deserialize(deserializer)?;
        Ok(Self {
            pos: Pos {
                line: u32::try_from(spanned.referenced.line()).unwrap_or(0),
                column: u32::try_from(spanned.referenced.column()).unwrap_or(0),
            },
            value: spanned.value,
        })
    }
}

impl<T: JsonSchema> JsonSchema for At<T> {
    fn inline_schema() -> bool {
        T::inline_schema()
    }
    fn schema_name() -> Cow<'static, str> {
        T::schema_name()
    }
    fn schema_id() -> Cow<'static, str> {
        T::schema_id()
    }
    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        T::json_schema(generator)
    }
}
