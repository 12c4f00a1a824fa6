//! The planner behind a planning flow (`super::plan()`): each step the workflow calls is
//! judged by `crate::cache::plan::plan` over the job as it stands, and the flow is given back
//! the step's recorded result when the cache would replay it, else an empty one.

use crate::cache::cas::{Cas, CasError};
use crate::cache::plan::{Line, Planned};
use crate::cache::records::{Records, SuccessRecord};
use crate::pipeline::outline::Outline;
use crate::pipeline::{Job, Loaded};
use crate::run::StepStatus;
use crate::run::state::StepRecord;

/// Why a replayed step's typed answer cannot be read in a plan.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerError {
    /// Its record has no output of the answer's name.
    #[error("its recorded outputs hold no `{0}`")]
    Missing(String),
    /// The cache cannot give it back.
    #[error("cannot restore it from the cache: {0}")]
    Cas(#[from] CasError),
    /// It cannot be read.
    #[error("cannot read it: {0}")]
    Io(#[from] std::io::Error),
}

/// The planner behind a planning [`Flow`]: the lines so far, and the record of the last
/// step when the cache would replay it.
pub(crate) struct Planner {
    records: Option<Records>,
    cas: Cas,
    lines: Vec<Line>,
    last: Option<SuccessRecord>,
    /// Whether every step so far would be replayed.
    all_known: bool,
}

impl Planner {
    /// A planner against `records` (`None`: nothing recorded yet), replayed outputs read
    /// from `cas`.
    pub(super) fn new(records: Option<Records>, cas: Cas) -> Self {
        Self {
            records,
            cas,
            lines: Vec::new(),
            last: None,
            all_known: true,
        }
    }

    /// The lines of the steps planned, in order.
    pub(super) fn into_lines(self) -> Vec<Line> {
        self.lines
    }

    /// Plans the last step of `job` (just appended): its lines, and the record the flow
    /// gives back (its recorded result when it would be replayed, else an empty one).
    pub(super) fn step(&mut self, loaded: &Loaded, job: &Job) -> StepRecord {
        let outline = Outline::of(job);
        let entry = job.plan.last().and_then(|s| outline.entry(s)).cloned();
        let lines = crate::cache::plan::plan(loaded, job, self.records.as_ref());
        let Some(entry) = entry else {
            self.last = None;
            return StepRecord::pending(0, String::new(), String::new(), String::new());
        };
        self.lines
            .extend(lines.iter().filter(|l| l.seq >= entry.seq).cloned());
        let planned = lines
            .iter()
            .find(|l| l.seq == entry.seq)
            .map(|l| &l.verdict);
        self.last = match (planned, &self.records) {
            (Some(Planned::Cached(run)), Some(records)) => records
                .result(*run, entry.seq)
                .ok()
                .flatten()
                .filter(|r| r.run == *run && r.seq == entry.seq),
            _ => None,
        };
        self.all_known &= self.last.is_some();
        let mut record =
            StepRecord::pending(entry.seq, entry.path, entry.name, entry.kind.to_string());
        record.produced.exit_code = Some(0);
        if let Some(r) = &self.last {
            record.status = StepStatus::Succeeded;
            record.cached_from = Some(r.run);
            record.produced.exit_code = r.produced.exit_code;
            record.produced.stdout_tail = r.produced.stdout_tail.clone();
            record.produced.streams = r.produced.streams.clone();
            record.produced.verdict = r.produced.verdict.clone();
            record.produced.note = r.produced.note.clone();
        }
        record
    }

    /// Whether the last step's result is known (it would be replayed).
    pub(super) fn known(&self) -> bool {
        self.last.is_some()
    }

    /// Whether every step's result so far is known.
    pub(super) fn all_known(&self) -> bool {
        self.all_known
    }

    /// The typed answer (`file` of output `name`) of the last step, when it would be
    /// replayed; `None`: not known.
    pub(super) fn typed_answer(
        &self,
        name: &str,
        file: &str,
    ) -> Option<Result<String, AnswerError>> {
        let last = self.last.as_ref()?;
        Some(self.read_answer(last, name, file))
    }

    fn read_answer(
        &self,
        last: &SuccessRecord,
        name: &str,
        file: &str,
    ) -> Result<String, AnswerError> {
        let tree = last
            .outputs
            .iter()
            .find(|o| o.name == name)
            .ok_or_else(|| AnswerError::Missing(name.to_owned()))?;
        let dir = tempfile::tempdir()?;
        let dest = dir.path().join("answer");
        self.cas.restore(&tree.manifest, &dest)?;
        Ok(std::fs::read_to_string(dest.join(file))?)
    }
}
