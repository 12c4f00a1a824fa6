//! The step cache: every leaf step has a content-addressed key, and a step whose key has a
//! succeeded record is replayed instead of run (docs/caching.md).
//!
//! * `digest.rs`: tree digests and manifests;
//! * `cas.rs`: the object store under `.treadle/cas/`;
//! * `key.rs`: what a key is made of;
//! * `chain.rs`: which step each step's key chains to;
//! * `records.rs`: the cache's tables in the state file;
//! * `live.rs`: one run's view of the cache ([`StepCache`]), and how a run may start
//!   ([`Start`]: resume, replay, ...), whose mode the run owns (`crate::run::mode`);
//! * `lookup.rs`: the service the executor calls: hit or miss (and why) before a step,
//!   storing after it;
//! * `plan.rs`: `treadle plan`.

pub mod cas;
pub mod chain;
pub mod digest;
pub mod key;
pub mod live;
mod lookup;
pub mod plan;
pub mod records;

pub use digest::{Digest, Manifest, manifest};
pub use key::KeyParts;
pub(crate) use live::Slot;
pub use live::{ForkAt, ForkRun, Start, StartError, StepCache};
pub use lookup::CacheError;
pub(crate) use lookup::{Lookup, Miss, cell_replayable, is_leaf, produced, replayable};
// The settings are read with the pipeline file; the cache only applies them.
pub use crate::pipeline::settings::{CacheConfig, DEFAULT_MAX_SIZE, SizeSpec};
