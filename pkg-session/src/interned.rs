//! [`Interned`]: what loops of one process share, built once from equal inputs and held
//! weakly, so that a value no loop uses any more is freed (its entry goes at the next miss).
//! Tool-argument validators (`validators.rs`) and the tools' specs (`tool.rs`) use it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

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
