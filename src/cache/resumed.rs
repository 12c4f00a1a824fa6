//! How a run starts ([`Mode`]: fresh, resumed, replayed, forced, rerun), and what a
//! resumed run (`--resume RUN`) keeps of how RUN started: a run begun with
//! `--force` takes nothing from the cache, `--rerun STEP` runs STEP and what chains to it
//! again, a replay or fork from STEP runs STEP and what follows; resuming it must not undo
//! that, or the step it was stopped in comes back from an older run's cache. Followed back
//! through the resumes in between. Also what the resumed run's header says of it.

use super::chain::Chain;
use std::collections::HashSet;

use super::records::{RecordError, Records};
use crate::pipeline::outline::Outline;

/// How a run starts: what it may take from the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    Fresh,
    /// `--resume RUN`, and how RUN started (`super::resumed`).
    Resume(u64, Box<Mode>),
    Replay {
        of: u64,
        from: u32,
    },
    Force,
    Rerun(HashSet<u32>),
}

impl Mode {
    /// Whether step `seq` must run whatever the cache holds.
    pub(super) fn forced_at(&self, seq: u32) -> bool {
        match self {
            Mode::Replay { from, .. } => seq >= *from,
            Mode::Force => true,
            Mode::Rerun(seqs) => seqs.contains(&seq),
            // A resumed run forces what the run it resumes forced; what that run recorded
            // as succeeded came back before this is asked.
            Mode::Resume(_, how) => how.forced_at(seq),
            Mode::Fresh => false,
        }
    }
}

/// The mode RUN `of` (or the run it resumed, and so on back) started in, as far as
/// forcing steps goes: `Fresh` for an ordinary run.
pub(super) fn inherited(
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
            "rerun" => seq(link.from).map_or(Mode::Fresh, |s| Mode::Rerun(chain.dependents(s))),
            "replay" | "fork" => {
                seq(link.from).map_or(Mode::Fresh, |from| Mode::Replay { of: link.of, from })
            }
            _ => Mode::Fresh,
        });
    }
}

/// What the header of a run resuming `of` says: which run, and what it keeps of how that
/// run started.
pub(super) fn header(of: u64, inherited: &Mode) -> String {
    let kept = match inherited {
        Mode::Force => "; it ran with --force, so nothing else comes from the cache",
        Mode::Rerun(_) => "; it ran with --rerun, so the steps it reran run again",
        Mode::Replay { .. } => "; it was a replay, so the steps it replayed from run again",
        Mode::Fresh | Mode::Resume(..) => "",
    };
    format!("resumes run {of}: the steps that succeeded in it come back from its records{kept}")
}
