//! How a run starts ([`Mode`]: fresh, resumed, replayed, forced, rerun), owned by the run
//! (`lifecycle::Run`) and read by the walker through its context: what the run may take
//! from the cache and which earlier run's records bring steps back. Made once, at the
//! run's begin, from what was asked (`cache::Start`) and the links the state file keeps:
//! a resumed run (`--resume RUN`) keeps how RUN started (a run begun with `--force` takes
//! nothing from the cache, `--rerun STEP` runs STEP and what chains to it again, a replay
//! or fork from STEP runs STEP and what follows), followed back through the resumes in
//! between, or the step RUN was stopped in would come back from an older run's cache.

use std::collections::HashSet;

use crate::cache::chain::Chain;
use crate::cache::records::{RecordError, Records, RunLink};
use crate::cache::{ForkAt, Start, StartError};
use crate::pipeline::outline::Outline;

/// How a run starts: what it may take from the cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Mode {
    #[default]
    Fresh,
    /// `--resume RUN`, and how RUN started.
    Resume(u64, Box<Mode>),
    Replay {
        of: u64,
        from: u32,
    },
    Force,
    /// `--rerun STEP`: STEP (its outline seq) and what chains to it.
    Rerun(u32, HashSet<u32>),
}

/// What a run's start decides, read from the request and the state file's links.
pub(crate) struct Opened {
    /// How the run starts.
    pub mode: Mode,
    /// The link the run records to how it started (`None`: a fresh run).
    pub link: Option<RunLink>,
    /// Where a forked run forks (`--fork`).
    pub fork: Option<ForkAt>,
}

impl Mode {
    /// The mode a run of `job` (its `outline` and `chain`) starts in when asked `start`,
    /// checking that the earlier run it names exists (`run_exists`) and the step it names
    /// is the job's.
    pub(crate) fn open(
        start: &Start,
        records: &Records,
        (job, outline, chain): (&str, &Outline, &Chain),
        run_exists: &dyn Fn(u64) -> bool,
    ) -> Result<Opened, StartError> {
        let exists = |of: u64| {
            if run_exists(of) {
                Ok(of)
            } else {
                Err(StartError::NoRun(of))
            }
        };
        let seq_of = |step: &str| {
            outline
                .entries
                .iter()
                .find(|e| e.name == step || e.path == step)
        };
        let link = |how: &str, of: u64, from: Option<String>| RunLink {
            how: how.to_owned(),
            of,
            from,
        };
        let mut fork = None;
        let (mode, link) = match start {
            Start::Fresh => (Mode::Fresh, None),
            Start::Resume(of) => {
                let of = exists(*of)?;
                let how = inherited(records, of, outline, chain)?;
                (
                    Mode::Resume(of, Box::new(how)),
                    Some(link("resume", of, None)),
                )
            }
            Start::Replay(of, step) => {
                let of = exists(*of)?;
                let from = seq_of(step)
                    .map(|e| e.seq)
                    .ok_or_else(|| StartError::NoStep {
                        run: of,
                        job: job.to_owned(),
                        step: step.clone(),
                    })?;
                let link = link("replay", of, Some(step.clone()));
                (Mode::Replay { of, from }, Some(link))
            }
            Start::Fork(asked) => {
                let of = exists(asked.of)?;
                let (seq, turn) =
                    fork_point(outline, &asked.at).ok_or_else(|| StartError::NoStep {
                        run: of,
                        job: job.to_owned(),
                        step: asked.at.clone(),
                    })?;
                fork = Some(ForkAt {
                    of,
                    seq,
                    turn,
                    prompt: asked.prompt.clone(),
                });
                let link = link("fork", of, Some(asked.at.clone()));
                (Mode::Replay { of, from: seq }, Some(link))
            }
            // Recorded, so that a resume of this run keeps forcing (`inherited`).
            Start::Force => (Mode::Force, Some(RunLink::started("force", None))),
            Start::Rerun(step) => {
                let seq = seq_of(step)
                    .map(|e| e.seq)
                    .ok_or_else(|| StartError::NoJobStep {
                        job: job.to_owned(),
                        step: step.clone(),
                    })?;
                let link = RunLink::started("rerun", Some(step.clone()));
                (Mode::Rerun(seq, chain.dependents(seq)), Some(link))
            }
        };
        Ok(Opened { mode, link, fork })
    }

    /// Whether step `seq` must run whatever the cache holds.
    pub(crate) fn forced_at(&self, seq: u32) -> bool {
        match self {
            Mode::Replay { from, .. } => seq >= *from,
            Mode::Force => true,
            Mode::Rerun(_, seqs) => seqs.contains(&seq),
            // A resumed run forces what the run it resumes forced; what that run recorded
            // as succeeded came back before this is asked.
            Mode::Resume(_, how) => how.forced_at(seq),
            Mode::Fresh => false,
        }
    }

    /// Whether step `seq` is the one `--rerun` names (a resumed run: the one the run it
    /// resumes named), which starts from the outputs a failed run kept of it
    /// (`keep_on_failure:`, `crate::run::exec::kept`).
    pub(crate) fn reruns(&self, seq: u32) -> bool {
        match self {
            Mode::Rerun(step, _) => *step == seq,
            Mode::Resume(_, how) => how.reruns(seq),
            _ => false,
        }
    }

    /// The earlier run whose record step `seq` must come back from, if any.
    pub(crate) fn recorded_from(&self, seq: u32) -> Option<u64> {
        match self {
            Mode::Resume(of, _) => Some(*of),
            Mode::Replay { of, from } if seq < *from => Some(*of),
            _ => None,
        }
    }

    /// Whether this run resumes an earlier one (`--resume`).
    pub(crate) fn resuming(&self) -> bool {
        matches!(self, Mode::Resume(..))
    }

    /// Whether this run ignores what earlier runs persisted (`--force`).
    pub(crate) fn forcing(&self) -> bool {
        matches!(self, Mode::Force)
    }

    /// What the header of a resumed run says of the run it resumes, and what it keeps of
    /// how that run started (`None`: not a resumed run).
    pub(crate) fn resumes(&self) -> Option<String> {
        let Mode::Resume(of, inherited) = self else {
            return None;
        };
        let kept = match **inherited {
            Mode::Force => "; it ran with --force, so nothing else comes from the cache",
            Mode::Rerun(..) => "; it ran with --rerun, so the steps it reran run again",
            Mode::Replay { .. } => "; it was a replay, so the steps it replayed from run again",
            Mode::Fresh | Mode::Resume(..) => "",
        };
        Some(format!(
            "resumes run {of}: the steps that succeeded in it come back from its records{kept}"
        ))
    }
}

/// The mode RUN `of` (or the run it resumed, and so on back) started in, as far as
/// forcing steps goes: `Fresh` for an ordinary run.
fn inherited(
    records: &Records,
    of: u64,
    outline: &Outline,
    chain: &Chain,
) -> Result<Mode, RecordError> {
    let seq = |step: Option<String>| {
        let step = step?;
        outline
            .entries
            .iter()
            .find(|e| e.name == step || e.path == step)
            .map(|e| e.seq)
    };
    let mut run = of;
    loop {
        let Some(link) = records.link_of(run)? else {
            return Ok(Mode::Fresh);
        };
        return Ok(match link.how.as_str() {
            // Links point to earlier runs only, so this ends.
            "resume" if link.of < run => {
                run = link.of;
                continue;
            }
            "force" => Mode::Force,
            "rerun" => seq(link.from).map_or(Mode::Fresh, |s| Mode::Rerun(s, chain.dependents(s))),
            "replay" | "fork" => {
                seq(link.from).map_or(Mode::Fresh, |from| Mode::Replay { of: link.of, from })
            }
            _ => Mode::Fresh,
        });
    }
}

/// The step (outline seq) and turn that `STEP` or `STEP/TURN` names. A whole that names a
/// step wins, since outline paths hold slashes and numbers (`2/in_parallel/0`).
fn fork_point(outline: &Outline, at: &str) -> Option<(u32, Option<u32>)> {
    let step = |name: &str| {
        outline
            .entries
            .iter()
            .find(|e| e.name == name || e.path == name)
            .map(|e| e.seq)
    };
    if let Some(seq) = step(at) {
        return Some((seq, None));
    }
    let (name, turn) = at.rsplit_once('/')?;
    let turn = turn.parse::<u32>().ok().filter(|t| *t > 0)?;
    Some((step(name)?, Some(turn)))
}
