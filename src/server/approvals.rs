//! Approvals through the API: list them (`GET /api/v1/approvals`), answer one
//! (`POST /api/v1/runs/{id}/approvals/{seq}`). Questions (`input:` steps, an agent's
//! `ask_human`) are approvals with a `question`, answered with `decision: answer` and a
//! `value` that fits it (else 422, and the question stays open).
//!
//! An approval with `assignees:` refuses anyone else (403); with `approvers: N` an answer
//! is one vote, and the view lists every vote taken so far (`answers`).
//!
//! An answer goes through the approval control directory, as `treadle approve` writes it
//! (first answer wins, atomically); the run waiting in this process is woken at once
//! (`mailbox::ANSWERED`) and records the decision itself. The answer waits for that record,
//! so what it returns is what the state file now says.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use serde::{Deserialize, Serialize};

use super::api::{blocking, run_id};
use super::error::ApiError;
use super::shared::App;
use super::views::pipeline_name;
use crate::run::approval::mailbox::{Answer, Mailbox, MailboxError, Reply};
use crate::run::approval::{ApprovalRecord, ApprovalStatus, Policy, Vote};
use crate::run::state::{RunStatus, Store};

/// An approval, as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalView {
    /// The run.
    pub run: u64,
    /// The step's outline seq.
    pub seq: u32,
    /// The step's name.
    pub step: String,
    /// The pipeline's name.
    pub pipeline: String,
    /// The job.
    pub job: String,
    /// `pending`, `approved`, `rejected`, `timed_out` or `aborted`.
    pub status: String,
    /// The step's `message:`.
    pub message: Option<String>,
    /// When it was asked.
    pub asked_ms: u64,
    /// When it times out.
    pub deadline_ms: Option<u64>,
    /// When it was decided.
    pub decided_ms: Option<u64>,
    /// Who decided: a user, `web`, `api`, `timeout`, `headless`.
    pub by: Option<String>,
    /// Why, when they said.
    pub comment: Option<String>,
    /// What the deadline answers (`approve` or `reject`), when there is a deadline.
    pub on_timeout: Option<Answer>,
    /// For a question (an `input:` step, an agent's `ask_human`): what is asked, the JSON
    /// Schema of the answer, its choices and default. `null` for a plain approval.
    #[serde(default)]
    pub question: Option<treadle_session::HumanQuestion>,
    /// The answer given to a question.
    #[serde(default)]
    pub value: Option<serde_json::Value>,
    /// Who may answer, how many must approve, who the deadline escalates to (`null`:
    /// anyone, one answer decides).
    #[serde(default)]
    pub policy: Option<Policy>,
    /// Every answer taken so far: who, when, what.
    #[serde(default)]
    pub answers: Vec<Vote>,
    /// When the deadline escalated it.
    #[serde(default)]
    pub escalated_ms: Option<u64>,
}

fn view(record: &ApprovalRecord, store: &Store) -> ApprovalView {
    let run = store.run(record.run).ok();
    let status = match record.status {
        ApprovalStatus::Approved | ApprovalStatus::Rejected
            if record.by.as_deref() == Some("timeout") =>
        {
            "timed_out"
        }
        other => other.as_str(),
    };
    ApprovalView {
        run: record.run,
        seq: record.seq,
        step: record.name.clone(),
        pipeline: run
            .as_ref()
            .map_or_else(String::new, |r| pipeline_name(&r.pipeline)),
        job: run.map_or_else(String::new, |r| r.job),
        status: status.to_owned(),
        message: record.message.clone(),
        asked_ms: record.asked_ms,
        deadline_ms: record.deadline_ms,
        decided_ms: record.answered_ms,
        by: record.by.clone(),
        comment: record.comment.clone(),
        on_timeout: record.on_timeout,
        question: record.question.clone(),
        value: record.value.clone(),
        policy: record.policy.clone(),
        answers: record.answers.clone(),
        escalated_ms: record.escalated_ms,
    }
}

/// Which approvals to list.
#[derive(Debug, Deserialize)]
pub struct ListQuery {
    state: Option<String>,
}

/// Whether an approval still waits: pending, and its run still running.
fn waiting(record: &ApprovalRecord, store: &Store) -> bool {
    record.status == ApprovalStatus::Pending
        && store
            .run(record.run)
            .is_ok_and(|r| r.status == RunStatus::Running)
}

/// `GET /api/v1/approvals?state=pending|decided`: newest run first.
pub async fn list(
    State(app): State<Arc<App>>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Vec<ApprovalView>>, ApiError> {
    let want = match q.state.as_deref() {
        None => None,
        Some("pending") => Some(true),
        Some("decided") => Some(false),
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "state `{other}`: expected `pending` or `decided`"
            )));
        }
    };
    let list = blocking(&app, move |store| {
        let mut out: Vec<ApprovalView> = store
            .approvals()?
            .iter()
            .filter(|r| want.is_none_or(|w| waiting(r, store) == w))
            .map(|r| view(r, store))
            .collect();
        out.reverse();
        Ok(out)
    })
    .await?;
    Ok(Json(list))
}

/// The body of an answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// `approve`, `reject`, or `answer` (with `value`) for a question.
    pub decision: String,
    /// The answer to a question (`decision: answer`), checked against its schema.
    #[serde(default)]
    pub value: Option<serde_json::Value>,
    /// Why.
    #[serde(default)]
    pub comment: Option<String>,
    /// Who answers (default `api`; the page says `web`, the CLI the user's name).
    #[serde(default)]
    pub by: Option<String>,
}

fn find(store: &Store, run: u64, seq: u32) -> Result<ApprovalRecord, ApiError> {
    store.run(run)?;
    store
        .approvals()?
        .into_iter()
        .find(|r| r.run == run && r.seq == seq)
        .ok_or_else(|| {
            ApiError::NotFound(format!(
                "run {run} has no approval at step {seq} (see GET /api/v1/approvals)"
            ))
        })
}

fn decided(record: &ApprovalRecord) -> ApiError {
    ApiError::Conflict(format!(
        "the approval at run {} step {} was already decided: {}{}; nothing changed",
        record.run,
        record.seq,
        record.status.as_str(),
        record
            .by
            .as_deref()
            .map_or_else(String::new, |b| format!(" by {b}"))
    ))
}

/// `POST /api/v1/runs/{id}/approvals/{seq}`: 200 with the decided approval; 409 when it was
/// already decided (nothing changes); 404 when there is none.
pub async fn answer(
    State(app): State<Arc<App>>,
    Path((id, seq)): Path<(String, String)>,
    caller: Option<axum::Extension<super::identity::Caller>>,
    headers: axum::http::HeaderMap,
    Json(req): Json<AnswerRequest>,
) -> Result<Json<ApprovalView>, ApiError> {
    // Who answers, when the operator said how to know it (never the body's word then).
    let named = app
        .identity
        .approver(caller.as_ref().map(|c| &c.0), &headers)?;
    let run = run_id(&id)?;
    let seq: u32 = seq.parse().map_err(|_| {
        ApiError::BadRequest(format!(
            "`{seq}` is not a step number (see GET /api/v1/approvals)"
        ))
    })?;
    // A question's answer is an approval that carries a value.
    let decision = match req.decision.as_str() {
        "answer" => Some(Answer::Approve),
        other => Answer::parse(other),
    }
    .ok_or_else(|| {
        ApiError::BadRequest(format!(
            "decision `{}`: expected `approve`, `reject` or `answer` (with `value`)",
            req.decision
        ))
    })?;
    let record = blocking(&app, move |store| find(store, run, seq)).await?;
    if record.status != ApprovalStatus::Pending {
        return Err(decided(&record));
    }
    let by = named.or(req.by).unwrap_or_else(|| "api".to_owned());
    let reply = Reply {
        answer: decision,
        by: by.clone(),
        at_ms: crate::clock::now_ms(),
        comment: req.comment,
        value: req.value,
    };
    let mailbox = Mailbox::of_state(app.store.path());
    let written =
        tokio::task::spawn_blocking(move || mailbox.answer(run, &seq.to_string(), &reply))
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?;
    match written {
        Ok(_) => {}
        Err(MailboxError::AlreadyAnswered { .. }) => {
            // Someone answered first; what they decided is being recorded.
            let now = settled(&app, run, seq, &by).await?;
            return Err(decided(&now));
        }
        Err(e @ MailboxError::NotAssignee { .. }) => {
            return Err(ApiError::Forbidden(format!("{e}; nothing changed")));
        }
        Err(
            e @ (MailboxError::NoPending { .. }
            | MailboxError::NotRunning { .. }
            | MailboxError::AlreadyVoted { .. }),
        ) => {
            return Err(ApiError::Conflict(format!("{e}; nothing changed")));
        }
        Err(e @ MailboxError::Invalid { .. }) => {
            return Err(ApiError::Unprocessable(format!(
                "{e}; nothing changed, the question is still open"
            )));
        }
        Err(e) => return Err(ApiError::Internal(e.to_string())),
    }
    let now = settled(&app, run, seq, &by).await?;
    blocking(&app, move |store| Ok(view(&now, store)))
        .await
        .map(Json)
}

/// The approval's record once its run has recorded the decision, or `by`'s vote when more
/// answers are needed (or after a few seconds, as it stands).
async fn settled(app: &Arc<App>, run: u64, seq: u32, by: &str) -> Result<ApprovalRecord, ApiError> {
    for _ in 0..100 {
        let record = blocking(app, move |store| find(store, run, seq)).await?;
        let counted = record.policy.is_some() && record.answers.iter().any(|v| v.by == by);
        if record.status != ApprovalStatus::Pending || counted {
            return Ok(record);
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    blocking(app, move |store| find(store, run, seq)).await
}
