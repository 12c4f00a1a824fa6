//! `treadle answer RUN STEP --json '...'`: answers a question a run waits on (an `input:`
//! step, an agent's `ask_human`) with a JSON value that must fit the question's schema,
//! through the server when one owns the state file, else through the control directory.
//! Without `--json` on a terminal it shows the question and reads the answer from a prompt.

use std::io::{BufRead, IsTerminal, Write};

use super::{AnswerArgs, EXIT_CONFIG};
use crate::clock::now_ms;
use crate::console::{say, tell};
use crate::run::approval::mailbox::{Answer, Mailbox, Pending, Reply};
use crate::server::approvals::ApprovalView;
use crate::server::client::Client;

const HINT: &str = "hint: `treadle approvals` lists what waits now";

fn by() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "someone".to_owned())
}

/// Why no answer was read.
#[derive(Debug, thiserror::Error)]
enum ReadAnswerError {
    /// The terminal could not be read.
    #[error("cannot read the answer: {0}")]
    Read(#[from] std::io::Error),
    /// No `--json` and no terminal to ask on.
    #[error("give the answer with --json '...' (stdin is not a terminal)")]
    NoTerminal,
    /// The answer is not JSON.
    #[error("the answer is not JSON ({0}); a string is written with quotes: --json '\"yes\"'")]
    NotJson(#[from] serde_json::Error),
}

/// The answer as JSON: `--json`, or a prompt on a terminal showing `question`.
fn value(
    json: Option<String>,
    question: &str,
    schema: &serde_json::Value,
) -> Result<serde_json::Value, ReadAnswerError> {
    let text = match json {
        Some(text) => text,
        None if std::io::stdin().is_terminal() => {
            let mut out = std::io::stderr();
            let _ = writeln!(out, "{question}\n(answer as JSON fitting {schema})");
            let _ = write!(out, "> ");
            let _ = out.flush();
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line)?;
            line
        }
        None => return Err(ReadAnswerError::NoTerminal),
    };
    Ok(serde_json::from_str(text.trim())?)
}

/// The answer to the question waiting at the step (`question`: its text and schema), or
/// the exit code after saying why there is none.
fn waited_answer(
    at: &AnswerArgs,
    question: Option<(&str, &serde_json::Value)>,
    json: Option<String>,
) -> Result<serde_json::Value, u8> {
    let Some((question, schema)) = question else {
        return Err(no_question(at));
    };
    value(json, question, schema).map_err(|e| {
        tell!("{e}");
        EXIT_CONFIG
    })
}

fn no_question(at: &AnswerArgs) -> u8 {
    tell!(
        "run {} has no question waiting at step `{}`\n{HINT}",
        at.run,
        at.step
    );
    EXIT_CONFIG
}

pub(super) async fn answer(at: AnswerArgs, json: Option<String>) -> u8 {
    match super::remote::server_for(&at.file, at.state.clone()).await {
        Some(client) => remote(client, at, json).await,
        None => direct(at, json),
    }
}

/// Through the control directory beside the state file.
fn direct(at: AnswerArgs, json: Option<String>) -> u8 {
    let mailbox = Mailbox::of_state(&crate::run::state_path(&at.file, at.state.clone()));
    let waiting: Option<Pending> = match mailbox.pending() {
        Ok(p) => p
            .into_iter()
            .find(|p| p.run == at.run && (p.seq.to_string() == at.step || p.name == at.step)),
        Err(e) => {
            tell!("{e}");
            return EXIT_CONFIG;
        }
    };
    let question = waiting.as_ref().and_then(|p| p.question.as_ref());
    let value = match waited_answer(
        &at,
        question.map(|q| (q.question.as_str(), &q.schema)),
        json,
    ) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let reply = Reply {
        answer: Answer::Approve,
        by: by(),
        at_ms: now_ms(),
        comment: None,
        value: Some(value),
    };
    match mailbox.answer(at.run, &at.step, &reply) {
        Ok(p) => {
            say!("answered run {} step {} ({})", p.run, p.seq, p.name);
            0
        }
        Err(e) => {
            tell!("{e}\n{HINT}");
            EXIT_CONFIG
        }
    }
}

/// Through the server that owns the state file.
async fn remote(client: Client, at: AnswerArgs, json: Option<String>) -> u8 {
    let pending: Vec<ApprovalView> = match client.get("/api/v1/approvals?state=pending").await {
        Ok(p) => p,
        Err(e) => {
            tell!("treadle: {e}");
            return EXIT_CONFIG;
        }
    };
    let waiting = pending
        .into_iter()
        .find(|a| a.run == at.run && (a.seq.to_string() == at.step || a.step == at.step));
    let Some((seq, question)) = waiting.and_then(|a| Some((a.seq, a.question?))) else {
        return no_question(&at);
    };
    let value = match waited_answer(&at, Some((&question.question, &question.schema)), json) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let body = serde_json::json!({ "decision": "answer", "value": value, "by": by() });
    let path = format!("/api/v1/runs/{}/approvals/{seq}", at.run);
    let answered: Result<ApprovalView, _> = client.post(&path, &body).await;
    match answered {
        Ok(a) => {
            say!("answered run {} step {} ({})", a.run, a.seq, a.step);
            0
        }
        Err(e) => {
            tell!("{e}\n{HINT}");
            EXIT_CONFIG
        }
    }
}
