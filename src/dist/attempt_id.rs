//! The name of one attempt of one step sent to a worker (an [`AttemptId`]): what its
//! result, its lease, its questions, its mirrored session and its cancel and token
//! subjects are filed under on NATS. Not the step's cache key (`cache::key`, a digest of
//! what the step reads): a step has one key, and an id per attempt per run.

use serde::{Deserialize, Serialize};

/// `<server>.<run>.<seq>.<attempt>`, or `<server>.<run>.<seq>.c<cell>.<attempt>` for a
/// cell of an `across:` step. The server's id comes from its state file, whose run ids are
/// unique, so two servers sharing a NATS (or one restarted) never make the same id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AttemptId(String);

impl AttemptId {
    /// The id of attempt `attempt` of step `seq` (of cell `cell` of an `across:`) of run
    /// `run` on server `server`: the one place its shape is written.
    pub fn new(server: &str, run: u64, seq: u32, cell: Option<u32>, attempt: u32) -> Self {
        AttemptId(match cell {
            Some(c) => format!("{server}.{run}.{seq}.c{c}.{attempt}"),
            None => format!("{server}.{run}.{seq}.{attempt}"),
        })
    }

    /// The id as NATS subjects and bucket keys take it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for AttemptId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for AttemptId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::AttemptId;

    #[test]
    fn a_step_and_a_cell_of_it_get_ids_of_their_own() {
        assert_eq!(AttemptId::new("s1", 7, 3, None, 2).as_str(), "s1.7.3.2");
        assert_eq!(
            AttemptId::new("s1", 7, 3, Some(0), 2).as_str(),
            "s1.7.3.c0.2"
        );
        let wire = serde_json::to_string(&AttemptId::new("s", 1, 1, None, 1)).unwrap_or_default();
        assert_eq!(wire, "\"s.1.1.1\"");
    }
}
