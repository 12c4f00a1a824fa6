//! The approval control directory shared by a waiting run and the commands that answer it.
//!
//! `RUN-SEQ.pending.json` is written by the waiting run, `RUN-SEQ.answer.json` by
//! `treadle approve` / `treadle reject`. Both are written whole to a temporary name first
//! and then linked into place, so a reader never sees half a file; the answer is linked
//! with `hard_link`, which fails when the name exists, so the first answer wins.
//!
//! An approval with a policy (`assignees:`, `approvers:`, `escalate_to:`) takes one answer
//! per person instead: `RUN-SEQ.vote.NAME.json` (the name hex-encoded), linked the same way
//! so each person answers once; someone the policy does not name is refused before anything
//! is written, and so is an answer once the votes already decide. The waiting run counts
//! the votes ([`crate::run::approval_record::Policy::tally`]).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use treadle_session::HumanQuestion;

/// How often a waiting run looks for an answer: short enough to feel immediate, long
/// enough to cost nothing measurable.
pub const POLL: Duration = Duration::from_millis(100);

/// The control directory of a state file: `state.redb` → `state.approvals/`.
pub fn dir_for(state: &Path) -> PathBuf {
    state.with_extension("approvals")
}

pub use crate::run::approval_record::Answer;
use crate::run::approval_record::{Policy, Vote};

/// What a waiting run publishes about itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pending {
    /// The run.
    pub run: u64,
    /// The step's number in the run.
    pub seq: u32,
    /// The step's name.
    pub name: String,
    /// The step's `message:`.
    #[serde(default)]
    pub message: Option<String>,
    /// The job.
    pub job: String,
    /// When it was asked (ms since the Unix epoch).
    pub asked_ms: u64,
    /// When it times out.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// What happens then.
    pub on_timeout: Answer,
    /// The waiting process, to tell a live wait from one whose process died.
    pub pid: u32,
    /// A question the answer must carry a value for (an `input:` step, an agent's
    /// `ask_human`); `None` for a plain approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<HumanQuestion>,
    /// Who may answer and how many must approve; `None`: anyone, the first answer decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
}

impl Pending {
    /// Whether the waiting process still exists.
    pub fn alive(&self) -> bool {
        let Some(pid) = i32::try_from(self.pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        else {
            return false;
        };
        // EPERM: it exists but belongs to someone else, which still counts as waiting.
        match rustix::process::test_kill_process(pid) {
            Ok(()) => true,
            Err(e) => e == rustix::io::Errno::PERM,
        }
    }
}

/// The answer a person gave.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    /// Approve or reject.
    pub answer: Answer,
    /// Who answered (`$USER`, else `someone`).
    pub by: String,
    /// When (ms since the Unix epoch).
    pub at_ms: u64,
    /// Why, when the person said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// The answer to a question (with `answer: approve`), checked against its schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
}

/// Woken when an answer is written by this process (`treadle serve` answering through its
/// API): a run waiting in the same process reads it at once instead of at its next poll.
pub static ANSWERED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Why the control directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum MailboxError {
    /// A file could not be read, written or removed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not in the expected format.
    #[error("{} is not a valid approval file: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Nothing waits at that run and step.
    #[error("run {run} has no approval waiting at step `{step}`")]
    NoPending {
        /// The run asked about.
        run: u64,
        /// The step, as given.
        step: String,
    },
    /// Someone answered first.
    #[error("the approval at run {run} step {seq} has already been answered")]
    AlreadyAnswered {
        /// The run.
        run: u64,
        /// The step.
        seq: u32,
    },
    /// The answer does not fit the question (its schema or choices): nothing was written.
    #[error("the answer to run {run} step {seq} was refused: {reason}")]
    Invalid {
        /// The run.
        run: u64,
        /// The step.
        seq: u32,
        /// What is wrong, and what would fit.
        reason: WrongReply,
    },
    /// The approval names who may answer, and this person is not one of them.
    #[error(
        "{by} may not answer the approval at run {run} step {seq}: only {} may{}",
        .allowed.join(", "),
        if *.escalated { " (it was escalated at its deadline)" } else { "" }
    )]
    NotAssignee {
        /// The run.
        run: u64,
        /// The step.
        seq: u32,
        /// Who tried.
        by: String,
        /// Who may.
        allowed: Vec<String>,
        /// Whether the deadline escalated it (the allowed are its `escalate_to`).
        escalated: bool,
    },
    /// This person already answered this approval.
    #[error("{by} already answered the approval at run {run} step {seq}")]
    AlreadyVoted {
        /// The run.
        run: u64,
        /// The step.
        seq: u32,
        /// Who.
        by: String,
    },
    /// The waiting process is gone, so nobody would read the answer.
    #[error("run {run} is no longer running (process {pid} exited while it waited)")]
    NotRunning {
        /// The run.
        run: u64,
        /// Its process.
        pid: u32,
    },
}

/// The control directory.
#[derive(Debug, Clone)]
pub struct Mailbox {
    dir: PathBuf,
}

fn io<'p>(what: &'static str, path: &'p Path) -> impl FnOnce(std::io::Error) -> MailboxError + 'p {
    move |source| MailboxError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

impl Mailbox {
    /// The control directory of this state file.
    pub fn of_state(state: &Path) -> Self {
        Self {
            dir: dir_for(state),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn pending_path(&self, run: u64, seq: u32) -> PathBuf {
        self.dir.join(format!("{run}-{seq}.pending.json"))
    }

    fn answer_path(&self, run: u64, seq: u32) -> PathBuf {
        self.dir.join(format!("{run}-{seq}.answer.json"))
    }

    fn vote_prefix(run: u64, seq: u32) -> String {
        format!("{run}-{seq}.vote.")
    }

    fn vote_path(&self, run: u64, seq: u32, by: &str) -> PathBuf {
        // Hex: any user name is a safe file name, and two names never share one.
        let hex: String = by.bytes().map(|b| format!("{b:02x}")).collect();
        self.dir
            .join(format!("{}{hex}.json", Self::vote_prefix(run, seq)))
    }

    /// Every answer given so far to the approval of `run` at `seq`, oldest first: the
    /// single answer file and the votes.
    pub fn votes(&self, run: u64, seq: u32) -> Result<Vec<Vote>, MailboxError> {
        let mut out: Vec<Vote> = self.reply(run, seq)?.into_iter().map(vote_of).collect();
        let prefix = Self::vote_prefix(run, seq);
        for path in self.files()? {
            let is_vote = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".json"));
            if is_vote && let Some(r) = read::<Reply>(&path)? {
                out.push(vote_of(r));
            }
        }
        out.sort_by_key(|v| v.at_ms);
        Ok(out)
    }

    /// The files of the directory (none when it does not exist).
    fn files(&self) -> Result<Vec<PathBuf>, MailboxError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("cannot read", &self.dir)(e)),
        };
        entries
            .map(|e| e.map(|e| e.path()).map_err(io("cannot read", &self.dir)))
            .collect()
    }

    /// Rewrites what a run publishes about its wait (an escalation changed who answers and
    /// the deadline), keeping the answers given so far.
    pub fn update(&self, pending: &Pending) -> Result<(), MailboxError> {
        let tmp = self.stage(pending, &format!("{}-{}", pending.run, pending.seq))?;
        let path = self.pending_path(pending.run, pending.seq);
        std::fs::rename(&tmp, &path).map_err(io("cannot write", &path))
    }

    /// Writes `value` to a temporary file in the directory and returns its path.
    fn stage<T: Serialize>(&self, value: &T, tag: &str) -> Result<PathBuf, MailboxError> {
        std::fs::create_dir_all(&self.dir).map_err(io("cannot create", &self.dir))?;
        let tmp = self.dir.join(format!(".{tag}.{}.tmp", std::process::id()));
        let bytes = serde_json::to_vec_pretty(value).map_err(|e| MailboxError::Corrupt {
            path: tmp.clone(),
            reason: e.to_string(),
        })?;
        std::fs::write(&tmp, bytes).map_err(io("cannot write", &tmp))?;
        Ok(tmp)
    }

    /// Publishes that a run waits (replacing an earlier file of the same step, e.g. from an
    /// earlier attempt), and removes a stale answer.
    pub fn park(&self, pending: &Pending) -> Result<(), MailboxError> {
        self.clear_answers(pending.run, pending.seq)?;
        let tmp = self.stage(pending, &format!("{}-{}", pending.run, pending.seq))?;
        let path = self.pending_path(pending.run, pending.seq);
        std::fs::rename(&tmp, &path).map_err(io("cannot write", &path))
    }

    /// The answer to a waiting approval, once there is one.
    pub fn reply(&self, run: u64, seq: u32) -> Result<Option<Reply>, MailboxError> {
        read(&self.answer_path(run, seq))
    }

    /// Removes both files of an approval (it was answered, timed out or aborted).
    pub fn clear(&self, run: u64, seq: u32) -> Result<(), MailboxError> {
        remove(&self.pending_path(run, seq))?;
        self.clear_answers(run, seq)
    }

    /// Removes the answers of an approval (answered, or stale from an earlier attempt).
    fn clear_answers(&self, run: u64, seq: u32) -> Result<(), MailboxError> {
        remove(&self.answer_path(run, seq))?;
        let prefix = Self::vote_prefix(run, seq);
        for path in self.files()? {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.starts_with(&prefix) {
                remove(&path)?;
            }
        }
        Ok(())
    }

    /// Every waiting approval, oldest run and step first.
    pub fn pending(&self) -> Result<Vec<Pending>, MailboxError> {
        let mut out = Vec::new();
        for path in self.files()? {
            let is_pending = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".pending.json") && !n.starts_with('.'));
            if is_pending && let Some(p) = read::<Pending>(&path)? {
                out.push(p);
            }
        }
        out.sort_by_key(|p| (p.run, p.seq));
        Ok(out)
    }

    /// Answers the approval of `run` at `step` (its number, or its name).
    pub fn answer(&self, run: u64, step: &str, reply: &Reply) -> Result<Pending, MailboxError> {
        let waiting = self
            .pending()?
            .into_iter()
            .find(|p| p.run == run && (p.seq.to_string() == step || p.name == step))
            .ok_or_else(|| MailboxError::NoPending {
                run,
                step: step.to_owned(),
            })?;
        if !waiting.alive() {
            return Err(MailboxError::NotRunning {
                run,
                pid: waiting.pid,
            });
        }
        check_reply(&waiting, reply).map_err(|reason| MailboxError::Invalid {
            run,
            seq: waiting.seq,
            reason,
        })?;
        let path = match &waiting.policy {
            Some(policy) => self.ballot(&waiting, policy, reply)?,
            None => self.answer_path(run, waiting.seq),
        };
        let tmp = self.stage(reply, &format!("answer-{run}-{}", waiting.seq))?;
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                ANSWERED.notify_waiters();
                Ok(waiting)
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists && waiting.policy.is_some() => {
                Err(MailboxError::AlreadyVoted {
                    run,
                    seq: waiting.seq,
                    by: reply.by.clone(),
                })
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(MailboxError::AlreadyAnswered {
                run,
                seq: waiting.seq,
            }),
            Err(e) => Err(io("cannot write", &path)(e)),
        }
    }
}

impl Mailbox {
    /// Where `reply` to an approval with `policy` goes: its person's vote file, once the
    /// policy lets that person answer and the votes so far decide nothing.
    fn ballot(
        &self,
        waiting: &Pending,
        policy: &Policy,
        reply: &Reply,
    ) -> Result<PathBuf, MailboxError> {
        let (run, seq) = (waiting.run, waiting.seq);
        if !policy.may_answer(&reply.by) {
            return Err(MailboxError::NotAssignee {
                run,
                seq,
                by: reply.by.clone(),
                allowed: policy.answerers().to_vec(),
                escalated: policy.escalated,
            });
        }
        if policy.tally(&self.votes(run, seq)?).is_some() {
            return Err(MailboxError::AlreadyAnswered { run, seq });
        }
        Ok(self.vote_path(run, seq, &reply.by))
    }
}

fn vote_of(r: Reply) -> Vote {
    Vote {
        by: r.by,
        answer: r.answer,
        at_ms: r.at_ms,
        comment: r.comment,
    }
}

/// Why a reply does not answer what its step waits for.
#[derive(Debug, thiserror::Error)]
pub enum WrongReply {
    /// The value does not fit the question (its schema or choices).
    #[error(transparent)]
    Unfit(#[from] treadle_session::AnswerError),
    /// The step asks a question and the reply approves without a value.
    #[error(
        "this step asks a question ({0}); answer it with a value: `treadle answer RUN STEP --json '...'`"
    )]
    NeedsValue(String),
    /// The step waits for an approval and the reply carries a value.
    #[error(
        "this step waits for an approval, not a value: use `treadle approve` or `treadle reject`"
    )]
    NotAQuestion,
}

/// Whether `reply` answers `waiting`: a question takes a value that fits it (or a
/// refusal); a plain approval takes no value.
pub fn check_reply(waiting: &Pending, reply: &Reply) -> Result<(), WrongReply> {
    match (&waiting.question, reply.answer, &reply.value) {
        (Some(question), Answer::Approve, Some(value)) => Ok(question.check(value)?),
        (Some(question), Answer::Approve, None) => {
            Err(WrongReply::NeedsValue(question.question.clone()))
        }
        (None, _, Some(_)) => Err(WrongReply::NotAQuestion),
        _ => Ok(()),
    }
}

fn read<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, MailboxError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| MailboxError::Corrupt {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }),
        // Answered and cleared between listing and reading: nothing to report.
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("cannot read", path)(e)),
    }
}

fn remove(path: &Path) -> Result<(), MailboxError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("cannot remove", path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(run: u64, seq: u32) -> Pending {
        Pending {
            run,
            seq,
            name: "deploy".into(),
            message: None,
            job: "j".into(),
            asked_ms: 0,
            deadline_ms: None,
            on_timeout: Answer::Reject,
            pid: std::process::id(),
            question: None,
            policy: None,
        }
    }

    fn reply(answer: Answer) -> Reply {
        Reply {
            answer,
            by: "tester".into(),
            at_ms: 1,
            comment: None,
            value: None,
        }
    }

    #[test]
    fn the_first_answer_wins_and_clear_removes_both_files() {
        let dir = tempfile::tempdir().unwrap();
        let mb = Mailbox::of_state(&dir.path().join("state.redb"));
        mb.park(&pending(3, 2)).unwrap();
        assert_eq!(mb.pending().unwrap().len(), 1);
        assert!(mb.reply(3, 2).unwrap().is_none());
        mb.answer(3, "deploy", &reply(Answer::Approve)).unwrap();
        assert!(matches!(
            mb.answer(3, "2", &reply(Answer::Reject)),
            Err(MailboxError::AlreadyAnswered { run: 3, seq: 2 })
        ));
        assert_eq!(mb.reply(3, 2).unwrap().unwrap().answer, Answer::Approve);
        mb.clear(3, 2).unwrap();
        assert!(mb.pending().unwrap().is_empty());
        assert!(matches!(
            mb.answer(3, "2", &reply(Answer::Approve)),
            Err(MailboxError::NoPending { .. })
        ));
    }

    #[test]
    fn a_policy_takes_one_vote_per_assignee_and_refuses_others() {
        let dir = tempfile::tempdir().unwrap();
        let mb = Mailbox::of_state(&dir.path().join("state.redb"));
        let mut p = pending(4, 1);
        p.policy = Some(Policy {
            assignees: vec!["alice".into(), "bob".into()],
            approvers: 2,
            ..Policy::default()
        });
        mb.park(&p).unwrap();
        let by = |name: &str| Reply {
            by: name.into(),
            ..reply(Answer::Approve)
        };
        assert!(matches!(
            mb.answer(4, "1", &by("mallory")),
            Err(MailboxError::NotAssignee { .. })
        ));
        mb.answer(4, "1", &by("alice")).unwrap();
        assert!(matches!(
            mb.answer(4, "1", &by("alice")),
            Err(MailboxError::AlreadyVoted { .. })
        ));
        mb.answer(4, "1", &by("bob")).unwrap();
        let votes = mb.votes(4, 1).unwrap();
        let names: Vec<&str> = votes.iter().map(|v| v.by.as_str()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(
            names.contains(&"alice") && names.contains(&"bob"),
            "{names:?}"
        );
        // The quorum is met: nobody else's answer is taken.
        mb.clear(4, 1).unwrap();
        assert!(mb.votes(4, 1).unwrap().is_empty());
    }

    #[test]
    fn a_dead_waiter_is_not_answered() {
        let dir = tempfile::tempdir().unwrap();
        let mb = Mailbox::of_state(&dir.path().join("state.redb"));
        let mut p = pending(1, 0);
        // Beyond Linux's pid_max: no such process.
        p.pid = 4_194_304 + 17;
        mb.park(&p).unwrap();
        assert!(matches!(
            mb.answer(1, "0", &reply(Answer::Approve)),
            Err(MailboxError::NotRunning { .. })
        ));
    }
}
