//! An agent step's questions for a person, from the worker that runs it to the server whose
//! run it is: a `permissions:` rule that says `ask`, a verdict below `min_confidence:`
//! escalated to a person, and `ask_human` calls.
//!
//! The worker puts each question in the `treadle-asks` bucket under `<attempt id>.<n>` and
//! waits for that key to hold an answer. The server, while it waits for the step's result,
//! watches `<attempt id>.*` and asks each question exactly as a step running in its own
//! process asks (`run::approval`): parked in its mailbox and recorded in its state file, so
//! `treadle approvals`, `treadle approve`, `treadle answer`, the API and the web page list
//! and answer it, with the step's `timeout:` as the deadline. The answer is written back to
//! the same key. Both sides go through NATS outages (watches are made again, keys read).
//!
//! A server that starts against a NATS where yes-or-no questions of its own steps wait
//! unanswered (it died while a worker's step waited on one; its attempt ids begin with its
//! id, the same across restarts) asks each again in its state file ([`adopt`]), so it is
//! listed and answered as before and the worker's step goes on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use treadle_session::{GateAnswer, HumanQuestion};

use super::attempt_id::AttemptId;
use super::bus::{Bus, retrying, wait_for};
use crate::agent::{Answered, Answerer, Asker, Question, QuestionKind};
use crate::pipeline::outline::Entry;
use crate::pipeline::{At, Step};
use crate::run::exec::Ctx;

/// What a question's key holds: the question, then its answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum Ask {
    /// A yes-or-no question (a permission, an escalation).
    Approval {
        /// `permission` or `escalation`.
        kind: String,
        /// What the person reads.
        message: String,
    },
    /// An `ask_human` question.
    Human {
        /// The question and the schema of its answer.
        question: HumanQuestion,
    },
    /// A yes-or-no answer.
    Decided {
        /// Approved or not.
        approved: bool,
        /// Who or what answered.
        by: String,
        /// What they said.
        comment: Option<String>,
    },
    /// A value (or a refusal, or the deadline) for an `ask_human` question.
    Answered {
        /// The gate's answer.
        answer: GateAnswer,
    },
}

/// The worker's side: the questions of attempt `attempt_id` go to the server.
pub struct Remote {
    bus: Bus,
    attempt_id: AttemptId,
    next: AtomicU32,
    cancel: CancellationToken,
}

impl Remote {
    /// For attempt `attempt_id`; waiting for an answer ends when `cancel` does.
    pub fn new(bus: Bus, attempt_id: &AttemptId, cancel: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            bus,
            attempt_id: attempt_id.clone(),
            next: AtomicU32::new(0),
            cancel,
        })
    }

    /// Asks `ask` and waits for its answer; `None` when the step was cancelled first.
    async fn put_and_wait(&self, ask: &Ask) -> Option<Ask> {
        let key = format!(
            "{}.{}",
            self.attempt_id,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        let value = bytes::Bytes::from(serde_json::to_vec(ask).ok()?);
        retrying("asking the server", || {
            self.bus.asks.put(&key, value.clone())
        })
        .await;
        let answered = wait_for(
            &self.bus.asks,
            &key,
            |bytes| match serde_json::from_slice::<Ask>(bytes).ok()? {
                a @ (Ask::Decided { .. } | Ask::Answered { .. }) => Some(a),
                _ => None,
            },
        );
        tokio::select! {
            a = answered => Some(a),
            () = self.cancel.cancelled() => None,
        }
    }

    /// The answerer of the step's `ask_human` calls.
    pub fn answerer(self: &Arc<Self>) -> Answerer {
        let me = self.clone();
        Answerer {
            ask: Arc::new(move |question| {
                let me = me.clone();
                Box::pin(async move {
                    match me.put_and_wait(&Ask::Human { question }).await {
                        Some(Ask::Answered { answer }) => answer,
                        _ => GateAnswer::deny("the step was cancelled before an answer came"),
                    }
                })
            }),
            // The server keeps the deadline (the step's `timeout:`).
            deadline: None,
        }
    }
}

#[async_trait::async_trait]
impl Asker for Remote {
    async fn ask(&self, question: Question) -> Answered {
        let ask = Ask::Approval {
            kind: question.kind.as_str().to_owned(),
            message: question.message,
        };
        match self.put_and_wait(&ask).await {
            Some(Ask::Decided {
                approved,
                by,
                comment,
            }) => Answered {
                approved,
                by,
                comment,
            },
            _ => Answered::refused("treadle (the step was interrupted)"),
        }
    }
}

/// The server's side: asks the questions of attempt `attempt_id` (run by a worker) as the
/// run's own, and writes each answer back. Runs until dropped.
pub(crate) async fn serve(
    bus: &Bus,
    ctx: &Ctx<'_>,
    step: &At<Step>,
    entry: &Entry,
    attempt_id: &AttemptId,
    cancel: &CancellationToken,
) {
    let pattern = format!("{attempt_id}.*");
    loop {
        let mut watch = retrying("watching a step's questions", || bus.asks.watch(&pattern)).await;
        loop {
            // A watch lost with a NATS restart may go quiet rather than fail: it is made
            // again now and then, which gives every key's value again (answered ones are
            // passed over).
            let next = tokio::time::timeout(std::time::Duration::from_secs(30), watch.next());
            let entry_seen = match next.await {
                Ok(Some(Ok(e))) => e,
                _ => break,
            };
            let Ok(ask) = serde_json::from_slice::<Ask>(&entry_seen.value) else {
                continue;
            };
            let Some(answer) = answer(ctx, step, entry, ask, cancel).await else {
                continue;
            };
            let Ok(value) = serde_json::to_vec(&answer) else {
                continue;
            };
            let value = bytes::Bytes::from(value);
            retrying("answering a worker's question", || {
                bus.asks.put(&entry_seen.key, value.clone())
            })
            .await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Asks one question here; `None` for a key that holds an answer already.
async fn answer(
    ctx: &Ctx<'_>,
    step: &At<Step>,
    entry: &Entry,
    ask: Ask,
    cancel: &CancellationToken,
) -> Option<Ask> {
    match ask {
        Ask::Approval { kind, message } => {
            let kind = match kind.as_str() {
                "escalation" => QuestionKind::Escalation,
                "effect" => QuestionKind::Effect,
                _ => QuestionKind::Permission,
            };
            let asker = crate::run::exec::agent_from_run::asker(ctx, step, entry, cancel);
            let answered = asker.ask(Question { kind, message }).await;
            Some(Ask::Decided {
                approved: answered.approved,
                by: answered.by,
                comment: answered.comment,
            })
        }
        Ask::Human { question } => {
            let deadline = step.timeout.as_ref().map(|t| t.value.0);
            let answerer = crate::run::exec::input::answerer(ctx, entry, deadline, cancel);
            Some(Ask::Answered {
                answer: (answerer.ask)(question).await,
            })
        }
        Ask::Decided { .. } | Ask::Answered { .. } => None,
    }
}

/// Asks again, in `store`, the yes-or-no questions of this server's (`server`) steps that
/// wait unanswered in the bucket when it starts, and writes each answer back; until
/// `stop`. An `ask_human` question is left waiting (its run's answerer is gone).
pub(crate) async fn adopt(
    bus: Bus,
    server: String,
    store: std::sync::Arc<crate::run::Store>,
    stop: CancellationToken,
) {
    let prefix = format!("{server}.");
    let keys: Vec<String> = match bus.asks.keys().await {
        Ok(keys) => {
            keys.filter_map(|k| async move { k.ok() })
                .filter(|k| std::future::ready(k.starts_with(&prefix)))
                .collect()
                .await
        }
        Err(e) => {
            tracing::warn!("cannot list the questions left in NATS: {e}");
            return;
        }
    };
    for key in keys {
        let Ok(Some(value)) = bus.asks.get(&key).await else {
            continue;
        };
        let Ok(Ask::Approval { kind, message }) = serde_json::from_slice::<Ask>(&value) else {
            continue;
        };
        // `<attempt id>.<n>`: `<server>.<run>.<seq>.<attempt>.<n>` (`super::attempt_id`)
        let mut parts = key[prefix.len()..].split('.');
        let (Some(Ok(run)), Some(Ok(seq))) = (
            parts.next().map(str::parse::<u64>),
            parts.next().map(str::parse::<u32>),
        ) else {
            continue;
        };
        // A run that ended (its record says so) has nobody waiting for the step.
        let running = store
            .run(run)
            .is_ok_and(|r| r.status == crate::run::state::RunStatus::Running);
        if !running {
            continue;
        }
        let (bus, store, stop) = (bus.clone(), store.clone(), stop.clone());
        tokio::spawn(async move {
            let asker = orphan_asker(store, run, seq, stop);
            let kind = match kind.as_str() {
                "escalation" => QuestionKind::Escalation,
                "effect" => QuestionKind::Effect,
                _ => QuestionKind::Permission,
            };
            let answered = asker.ask(Question { kind, message }).await;
            let decided = Ask::Decided {
                approved: answered.approved,
                by: answered.by,
                comment: answered.comment,
            };
            let Ok(value) = serde_json::to_vec(&decided) else {
                return;
            };
            let value = bytes::Bytes::from(value);
            retrying("answering a worker's question", || {
                bus.asks.put(&key, value.clone())
            })
            .await;
        });
    }
}

/// The asker of step `seq` of run `run`, whose walk is gone: the question is recorded and
/// parked in the state file as the run's own, with no deadline.
fn orphan_asker(
    store: std::sync::Arc<crate::run::Store>,
    run: u64,
    seq: u32,
    cancel: CancellationToken,
) -> crate::run::approval::ask::MailboxAsker {
    let job = store.run(run).map(|r| r.job).unwrap_or_default();
    let name = store
        .steps(run)
        .ok()
        .and_then(|steps| steps.into_iter().find(|s| s.seq == seq))
        .map_or_else(|| format!("step {seq}"), |s| s.name);
    let quiet = crate::run::transcript::Transcript::new(
        crate::run::transcript::Style::Quiet,
        crate::run::transcript::Redactor::default(),
    );
    let step = crate::run::approval::question::Asker {
        store,
        transcript: std::sync::Arc::new(quiet),
        run,
        seq,
        name,
        job,
        answer_args: String::new(),
        answerable: true,
    };
    crate::run::approval::ask::MailboxAsker::new(step, None, cancel)
}
