//! [`Few`]: a JSON array kept without a `Vec` when it holds one element, as nearly every
//! streamed chunk's `choices` and `tool_calls` do.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{Deserializer, SeqAccess, Visitor};

/// The elements of a JSON array: the first kept inline, any others in a `Vec` that a
/// one-element array never allocates. Parsing a chunk then allocates no array of its own
/// (a `Vec` per chunk, and another per tool-call delta, was a share of each chunk's cost).
#[derive(Debug)]
pub(crate) struct Few<T> {
    first: Option<T>,
    rest: Vec<T>,
}

impl<T> Default for Few<T> {
    fn default() -> Self {
        Few {
            first: None,
            rest: Vec::new(),
        }
    }
}

impl<T> Few<T> {
    /// Whether the array was empty.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    /// The first element.
    #[cfg(test)]
    pub(crate) fn first(&self) -> Option<&T> {
        self.first.as_ref()
    }
}

impl<T> IntoIterator for Few<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<std::option::IntoIter<T>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Few<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_seq(FewVisitor(PhantomData))
    }
}

struct FewVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for FewVisitor<T> {
    type Value = Few<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let first = seq.next_element()?;
        let mut rest = Vec::new();
        if first.is_some() {
            while let Some(element) = seq.next_element()? {
                rest.push(element);
            }
        }
        Ok(Few { first, rest })
    }
}

#[cfg(test)]
mod tests {
    use super::Few;

    fn parse(s: &str) -> Vec<u32> {
        match serde_json::from_str::<Few<u32>>(s) {
            Ok(few) => few.into_iter().collect(),
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn keeps_every_element_in_order() {
        assert_eq!(parse("[]"), Vec::<u32>::new());
        assert_eq!(parse("[7]"), vec![7]);
        assert_eq!(parse("[1, 2, 3]"), vec![1, 2, 3]);
        assert!(serde_json::from_str::<Few<u32>>("{}").is_err());
    }
}
