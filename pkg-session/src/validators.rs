//! Tool-argument validators compiled once per process and shared by every loop whose tool
//! has the same parameter schema (through [`Interned`]).
//!
//! A compiled JSON Schema is a tree of keyword nodes, a few KB even for a one-field schema.
//! Compiled per loop, that was a tenth of what an idle session held (docs/benchmarks.md,
//! `concurrent_sessions`), and a pipeline starts many sessions with the same tools. Entries
//! are weak: a validator no loop uses any more is freed, and its entry goes at the next miss.
//! [`problems`] words what a validator found, for tool arguments and human answers alike.

use std::sync::Arc;

use jsonschema::{ValidationError, Validator};
use serde_json::Value;

use crate::interned::Interned;

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
