//! What loops of one process share, built once from equal inputs: tool-argument validators
//! (and, through [`Interned`], the tools' encoded specs, see `tool.rs`).
//!
//! A compiled JSON Schema is a tree of keyword nodes, a few KB even for a one-field schema.
//! Compiled per loop, that was a tenth of what an idle session held (docs/benchmarks.md,
//! `concurrent_sessions`), and a pipeline starts many sessions with the same tools. Entries
//! are weak: a value no loop uses any more is freed, and its entry goes at the next miss.
//! [`problems`] words what a validator found, for tool arguments and human answers alike.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use jsonschema::{ValidationError, Validator};
use serde_json::Value;

/// A process-wide map from an input's text (its identity: equal inputs print equally) to
/// what was built from it, held weakly.
pub(crate) struct Interned<T> {
    map: OnceLock<Mutex<HashMap<String, Weak<T>>>>,
}

impl<T> Interned<T> {
    pub(crate) const fn new() -> Self {
        Self {
            map: OnceLock::new(),
        }
    }

    /// What was built for `key` while some loop still holds it, else `build()`'s, kept.
    pub(crate) fn get_or_build<E>(
        &self,
        key: String,
        build: impl FnOnce() -> Result<T, E>,
    ) -> Result<Arc<T>, E> {
        let map = self.map.get_or_init(Mutex::default);
        // Nothing panics while the map is held, and a half-done insert is still a valid map.
        let lock = || map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = lock().get(&key).and_then(Weak::upgrade) {
            return Ok(found);
        }
        // Built outside the lock: two loops racing on a new input may both build it, and
        // the second insert wins; both values are equal.
        let built = Arc::new(build()?);
        let mut map = lock();
        map.retain(|_, entry| entry.strong_count() > 0);
        map.insert(key, Arc::downgrade(&built));
        Ok(built)
    }
}

static VALIDATORS: Interned<Validator> = Interned::new();

/// The validator of `schema`, compiled now or shared with a loop that compiled it before.
pub(crate) fn shared(schema: &Value) -> Result<Arc<Validator>, ValidationError<'static>> {
    VALIDATORS.get_or_build(schema.to_string(), || jsonschema::validator_for(schema))
}

/// Up to `n` of what `validator` finds wrong with `value`, each with where it is.
pub(crate) fn problems(validator: &Validator, value: &Value, n: usize) -> Vec<String> {
    validator
        .iter_errors(value)
        .take(n)
        .map(|error| {
            let at = error.instance_path().to_string();
            if at.is_empty() {
                error.to_string()
            } else {
                format!("at {at}: {error}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_schemas_share_one_validator_while_it_is_used() {
        let schema = json!({"type": "object", "properties": {"shared_probe": {"type": "integer"}}});
        let a = shared(&schema).unwrap();
        let b = shared(&schema.clone()).unwrap();
        assert!(
            Arc::ptr_eq(&a, &b),
            "the second loop reuses the first's validator"
        );
        assert!(b.is_valid(&json!({"shared_probe": 1})));
        assert!(!b.is_valid(&json!({"shared_probe": "one"})));
        let other = shared(&json!({"type": "object", "required": ["shared_probe"]})).unwrap();
        assert!(!Arc::ptr_eq(&a, &other), "a different schema gets its own");
    }

    #[test]
    fn a_validator_nobody_uses_is_freed() {
        let schema = json!({"type": "object", "properties": {"freed_probe": {"type": "string"}}});
        let weak = Arc::downgrade(&shared(&schema).unwrap());
        assert!(
            weak.upgrade().is_none(),
            "the cache holds no strong reference"
        );
        let again = shared(&schema).unwrap();
        assert!(again.is_valid(&json!({"freed_probe": "x"})));
    }

    #[test]
    fn a_schema_that_does_not_compile_is_an_error_each_time() {
        let bad = json!({"type": "no-such-type"});
        assert!(shared(&bad).is_err());
        assert!(shared(&bad).is_err());
    }
}
