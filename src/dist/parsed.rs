//! The pipelines a worker has parsed, by digest: every step of a run carries the same
//! pipeline text, and parsing and checking it again for each step was most of a worker's
//! cost per step (docs/benchmarks.md, scale-out dispatch overhead).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::DistError;
use crate::pipeline::Loaded;
use crate::pipeline::check::CheckScope;

/// How many pipelines are kept; past this the cache starts again (runs of more distinct
/// pipelines than this at once only parse more often).
const KEEP: usize = 64;

/// Parsed pipelines by the digest of (file name, job, text).
#[derive(Default)]
pub struct Parsed(Mutex<HashMap<[u8; 32], Arc<Loaded>>>);

impl Parsed {
    /// The pipeline `source` (named `file`) loaded for job `job`, parsed once per digest.
    pub fn load(&self, file: &Path, job: &str, source: &str) -> Result<Arc<Loaded>, DistError> {
        let mut hasher = blake3::Hasher::new();
        for part in [
            file.to_string_lossy().as_bytes(),
            job.as_bytes(),
            source.as_bytes(),
        ] {
            // Lengths first, so no two triples hash the same bytes.
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
        let key = *hasher.finalize().as_bytes();
        if let Some(found) = self.0.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(found);
        }
        let scope = CheckScope {
            job: Some(job),
            env: &crate::pipeline::model::process_env,
            machine: false,
        };
        let loaded = crate::pipeline::load_text(file, source, &scope)
            .map(Arc::new)
            .map_err(DistError::Pipeline)?;
        if let Ok(mut m) = self.0.lock() {
            if m.len() >= KEEP {
                m.clear();
            }
            m.insert(key, loaded.clone());
        }
        Ok(loaded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_pipeline_is_parsed_once_and_another_apart() {
        let parsed = Parsed::default();
        let text = "jobs:\n  - name: j\n    plan:\n      - task: a\n        run: echo a\n";
        let file = Path::new("p.yml");
        let first = parsed.load(file, "j", text).unwrap();
        let again = parsed.load(file, "j", text).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "taken from the cache");
        let other = text.replace("echo a", "echo b");
        let changed = parsed.load(file, "j", &other).unwrap();
        assert!(
            !Arc::ptr_eq(&first, &changed),
            "a changed text is parsed anew"
        );
        let err = parsed.load(file, "j", "jobs: [").unwrap_err();
        assert!(err.to_string().contains("does not load"), "{err}");
    }
}
