//! Approval policies through real processes: `treadle run` waits while `treadle approve` /
//! `treadle reject`, run as different users (`USER`), answer it. Two assignees' approvals
//! make the quorum, a name the policy does not list is refused with nothing written, one
//! rejection rejects, and the deadline approves, rejects or escalates to other people
//! (with its own deadline). Every answer is in the approval's record (who, when, what);
//! a policy nobody could satisfy is refused at load, located. The escalation example of
//! docs/approvals.md (```yaml escalation, which the docs test leaves to this file) is run
//! and answered as the page says.

use crate::common;

use std::process::Child;

use common::{Fixture, Run, spawn_run, wait_until_asked};
use treadle::run::approval::mailbox::Answer;
use treadle::run::approval::{ApprovalRecord, ApprovalStatus};
use treadle::run::{FailureKind, Store};

/// A job that waits for approval `deploy` with `keys` (indented as the mapping's), then
/// deploys.
fn gated(keys: &str) -> String {
    format!(
        "jobs:\n  - name: ship\n    plan:\n      - approval:\n          name: deploy\n          \
         message: Ship it?\n{keys}      - task: deploy-now\n        run: echo deploying\n"
    )
}

/// `treadle approve|reject 1 deploy` as `user`.
fn answer(f: &Fixture, verb: &str, user: &str) -> Run {
    f.treadle_env(&[verb, "1", "deploy"], &[("USER", user)])
}

fn finish(child: Child) -> Run {
    Run(child.wait_with_output().expect("wait for treadle run"))
}

/// The approval record of run 1's `deploy`.
fn record(f: &Fixture) -> ApprovalRecord {
    let store = Store::open(&f.path().join(".treadle/state.redb")).expect("state");
    let all = store.approvals().expect("approvals");
    all.into_iter()
        .find(|r| r.run == 1 && r.name == "deploy")
        .expect("deploy's record")
}

/// The failure kind the state file recorded for run 1's `deploy` step.
fn kind_of_deploy(f: &Fixture) -> Option<FailureKind> {
    let store = Store::open(&f.path().join(".treadle/state.redb")).expect("state");
    let steps = store.steps(1).expect("steps");
    steps
        .into_iter()
        .find(|s| s.name == "deploy")
        .expect("deploy's step")
        .failure
}

/// Waits until `treadle approvals` shows `text` on deploy's line.
fn until_listed(f: &Fixture, text: &str) -> String {
    let mut shown = String::new();
    common::server::eventually(&format!("`{text}` listed"), || {
        shown = f.treadle(&["approvals"]).stdout();
        shown
            .lines()
            .any(|l| l.contains("deploy") && l.contains(text))
    });
    shown
}

#[test]
fn two_assignees_approve_and_a_stranger_is_refused() {
    let f = Fixture::new(&gated(
        "          assignees: [alice, bob, carol]\n          approvers: 2\n          timeout: 60s\n",
    ));
    let child = spawn_run(&f, &[]);
    wait_until_asked(&f, "deploy");
    let refused = answer(&f, "approve", "mallory");
    refused.expect_code(2);
    assert!(
        refused.stderr().contains(
            "mallory may not answer the approval at run 1 step 0: only alice, bob, carol may"
        ),
        "{}",
        refused.stderr()
    );
    let first = answer(&f, "approve", "alice");
    first.expect_code(0);
    assert!(
        first.stdout().contains("one of the 2 approvals it needs"),
        "{}",
        first.stdout()
    );
    let listed = until_listed(&f, "alice approved");
    assert!(listed.contains("2 of alice, bob, carol"), "{listed}");
    let twice = answer(&f, "approve", "alice");
    twice.expect_code(2);
    assert!(
        twice.stderr().contains("alice already answered"),
        "{}",
        twice.stderr()
    );
    answer(&f, "approve", "bob").expect_code(0);
    let run = finish(child);
    run.expect_code(0);
    assert!(run.stdout().contains("deploying"), "{}", run.stdout());
    let r = record(&f);
    assert_eq!(r.status, ApprovalStatus::Approved);
    assert_eq!(r.by.as_deref(), Some("alice, bob"));
    let who: Vec<(&str, Answer)> = r
        .answers
        .iter()
        .map(|v| (v.by.as_str(), v.answer))
        .collect();
    assert_eq!(who, [("alice", Answer::Approve), ("bob", Answer::Approve)]);
    assert!(r.answers.iter().all(|v| v.at_ms >= r.asked_ms), "{r:?}");
    let policy = r.policy.expect("the policy is recorded");
    assert_eq!(policy.approvers, 2);
    assert_eq!(policy.assignees, ["alice", "bob", "carol"]);
}

#[test]
fn one_rejection_rejects_though_another_approved() {
    let f = Fixture::new(&gated(
        "          assignees: [alice, bob]\n          approvers: 2\n          timeout: 60s\n",
    ));
    let child = spawn_run(&f, &[]);
    wait_until_asked(&f, "deploy");
    answer(&f, "approve", "alice").expect_code(0);
    until_listed(&f, "alice approved");
    answer(&f, "reject", "bob").expect_code(0);
    let run = finish(child);
    run.expect_code(1);
    assert!(
        run.stdout()
            .contains("approval `deploy` was rejected by bob"),
        "{}",
        run.stdout()
    );
    assert!(!run.stdout().contains("deploying"), "{}", run.stdout());
    let r = record(&f);
    assert_eq!(r.status, ApprovalStatus::Rejected);
    assert_eq!(r.answers.len(), 2, "{r:?}");
    assert_eq!(kind_of_deploy(&f), Some(FailureKind::Declined));
}

#[test]
fn a_deadline_short_of_the_quorum_rejects_and_keeps_the_answer_given() {
    let f = Fixture::new(&gated(
        "          assignees: [alice, bob]\n          approvers: 2\n          timeout: 2s\n",
    ));
    let child = spawn_run(&f, &[]);
    wait_until_asked(&f, "deploy");
    answer(&f, "approve", "alice").expect_code(0);
    let run = finish(child);
    run.expect_code(1);
    assert!(
        run.stdout().contains("timed out and was rejected"),
        "{}",
        run.stdout()
    );
    let r = record(&f);
    assert_eq!(r.status, ApprovalStatus::Rejected);
    assert_eq!(r.by.as_deref(), Some("timeout"));
    assert_eq!(r.answers.len(), 1, "{r:?}");
    assert_eq!(r.answers[0].by, "alice");
    assert_eq!(kind_of_deploy(&f), Some(FailureKind::Timeout));
}

#[test]
fn a_deadline_that_approves_goes_on_without_anyone() {
    let f = Fixture::new(&gated(
        "          assignees: [alice]\n          timeout: 1s\n          on_timeout: approve\n",
    ));
    let run = finish(spawn_run(&f, &[]));
    run.expect_code(0);
    assert!(run.stdout().contains("deploying"), "{}", run.stdout());
    let r = record(&f);
    assert_eq!(r.status, ApprovalStatus::Approved);
    assert_eq!(r.by.as_deref(), Some("timeout"));
    assert!(r.answers.is_empty(), "{r:?}");
}

const ESCALATING: &str = "          assignees: [alice]\n          timeout: 1s\n          on_timeout: escalate\n          escalate_to: [ops-lead]\n";

#[test]
fn the_deadline_escalates_and_only_the_escalation_answers_then() {
    let f = Fixture::new(&gated(ESCALATING));
    let child = spawn_run(&f, &[]);
    let listed = until_listed(&f, "escalated: ops-lead");
    assert!(!listed.contains("→ reject"), "no second deadline: {listed}");
    let late = answer(&f, "approve", "alice");
    late.expect_code(2);
    assert!(
        late.stderr()
            .contains("only ops-lead may (it was escalated at its deadline)"),
        "{}",
        late.stderr()
    );
    answer(&f, "approve", "ops-lead").expect_code(0);
    let run = finish(child);
    run.expect_code(0);
    assert!(
        run.stdout().contains("now only ops-lead may answer"),
        "{}",
        run.stdout()
    );
    let r = record(&f);
    assert_eq!(r.status, ApprovalStatus::Approved);
    assert_eq!(r.by.as_deref(), Some("ops-lead"));
    let escalated = r.escalated_ms.expect("the escalation is recorded");
    assert!(
        escalated >= r.asked_ms && r.answers[0].at_ms >= escalated,
        "{r:?}"
    );
}

#[test]
fn an_escalation_nobody_answers_is_rejected_at_its_own_deadline() {
    let keys = format!("{ESCALATING}          escalate_timeout: 1s\n");
    let f = Fixture::new(&gated(&keys));
    let run = finish(spawn_run(&f, &[]));
    run.expect_code(1);
    assert!(
        run.stdout()
            .contains("was escalated to ops-lead and got no answer before its `escalate_timeout`"),
        "{}",
        run.stdout()
    );
    let r = record(&f);
    assert_eq!(r.status, ApprovalStatus::Rejected);
    assert!(r.escalated_ms.is_some(), "{r:?}");
}

/// `treadle validate` refuses `keys` with `what` at `at` and a hint.
fn refused(keys: &str, at: &str, what: &str) {
    let f = Fixture::new(&gated(keys));
    let out = f.treadle(&["validate"]);
    out.expect_code(2);
    let err = out.stderr();
    assert!(
        err.contains(&format!("treadle.yml:{at}: ")),
        "{at} in:\n{err}"
    );
    assert!(err.contains(what), "`{what}` in:\n{err}");
    assert!(err.contains("\nhint: "), "a hint in:\n{err}");
}

#[test]
fn a_policy_nobody_could_satisfy_is_refused_at_load() {
    refused("          approvers: 0\n", "7:22", "`approvers` is 0");
    refused(
        "          assignees: [alice]\n          approvers: 2\n",
        "8:22",
        "`approvers: 2` but only 1 `assignees` may answer",
    );
    refused(
        "          timeout: 1m\n          on_timeout: escalate\n",
        "8:23",
        "`on_timeout: escalate` without `escalate_to`",
    );
    refused(
        "          escalate_to: [ops]\n",
        "7:25",
        "`escalate_to` without `on_timeout: escalate`",
    );
    refused(
        "          on_timeout: later\n          timeout: 1m\n",
        "7:23",
        "`on_timeout` is `later`",
    );
}

/// The ```yaml escalation block of docs/approvals.md.
fn escalation_doc() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/approvals.md")).expect("docs/approvals.md");
    let start = doc
        .find("```yaml escalation\n")
        .expect("the escalation block");
    let body = &doc[start..];
    let body = &body[body.find('\n').map_or(0, |i| i + 1)..];
    body[..body.find("```").expect("its end")].to_owned()
}

#[test]
fn the_escalation_of_the_docs_is_answered_as_they_say() {
    let f = Fixture::new(&escalation_doc());
    let child = spawn_run(&f, &[]);
    wait_until_asked(&f, "publish");
    f.treadle_env(&["approve", "1", "publish"], &[("USER", "alice")])
        .expect_code(0);
    let mut shown = String::new();
    common::server::eventually("escalated", || {
        shown = f.treadle(&["approvals"]).stdout();
        shown.contains("escalated: ops-lead")
    });
    assert!(shown.contains("alice approved"), "{shown}");
    let late = f.treadle_env(&["approve", "1", "publish"], &[("USER", "bob")]);
    late.expect_code(2);
    assert!(
        late.stderr().contains("escalated at its deadline"),
        "{}",
        late.stderr()
    );
    f.treadle_env(&["approve", "1", "publish"], &[("USER", "ops-lead")])
        .expect_code(0);
    let run = finish(child);
    run.expect_code(0);
    assert!(run.stdout().contains("publishing"), "{}", run.stdout());
    let store = Store::open(&f.path().join(".treadle/state.redb")).expect("state");
    let approvals = store.approvals().expect("approvals");
    let r = approvals
        .iter()
        .find(|r| r.name == "publish")
        .expect("record");
    assert_eq!(r.by.as_deref(), Some("ops-lead"));
    let who: Vec<&str> = r.answers.iter().map(|v| v.by.as_str()).collect();
    assert_eq!(who, ["alice", "ops-lead"]);
}
