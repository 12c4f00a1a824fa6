//! What a step's kind says: its display name and what it nests, the keys that belong to
//! each kind (read off a written [`RawStep`] when it is typed), and why a step has no single
//! kind. The kinds themselves ([`super::step::StepKind`], [`super::step::Kind`]) are beside
//! [`Step`].

use super::at::{At, Pos};
use super::flow_keys::FAILURE_VERDICT;
use super::raw_step::RawStep;
use super::step::{Step, StepKind};

/// Why a step has no single kind.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum KindError {
    /// None of the kind keys is present.
    #[error(
        "this step has no kind: it needs one of task, agent, approval, input, get, put, do, in_parallel, try, race, ensemble, load_var, http"
    )]
    None,
    /// More than one is.
    #[error("this step has several kinds ({0}); a step has exactly one")]
    Several(String),
    /// A `task:` without `run:`.
    #[error("task `{0}` has no `run:` command")]
    TaskWithoutRun(String),
}

impl RawStep {
    /// The names of the kind keys present.
    pub(super) fn kind_keys(&self) -> Vec<&'static str> {
        [
            ("task", self.task.is_some()),
            ("agent", self.agent.is_some()),
            ("approval", self.approval.is_some()),
            ("input", self.input.is_some()),
            ("get", self.get.is_some()),
            ("put", self.put.is_some()),
            ("do", self.do_.is_some()),
            ("in_parallel", self.in_parallel.is_some()),
            ("try", self.try_.is_some()),
            ("race", self.race.is_some()),
            ("ensemble", self.ensemble.is_some()),
            ("load_var", self.load_var.is_some()),
            ("http", self.http.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, present)| present.then_some(k))
        .collect()
    }

    /// Kind-specific keys present on this step, with the kinds they belong to.
    pub fn specific_keys(&self) -> Vec<(&'static str, &'static [&'static str], Option<Pos>)> {
        const TASK: &[&str] = &["task"];
        const AGENT: &[&str] = &["agent"];
        const APPROVAL: &[&str] = &["approval"];
        const INPUT: &[&str] = &["input"];
        const RESOURCE: &[&str] = &["get", "put"];
        let mut keys = Vec::new();
        let mut add = |key, kinds, present: bool, pos: Option<Pos>| {
            if present {
                keys.push((key, kinds, pos));
            }
        };
        add(
            "run",
            TASK,
            self.run.is_some(),
            self.run.as_ref().map(|r| r.pos),
        );
        add("prompt", AGENT, self.prompt.is_some(), None);
        add("messages", AGENT, self.messages.is_some(), None);
        add(
            "tools",
            AGENT,
            self.tools.is_some(),
            self.tools.as_ref().and_then(|t| t.first()).map(|t| t.pos),
        );
        add(
            "verdicts",
            AGENT,
            self.verdicts.is_some(),
            self.verdicts
                .as_ref()
                .and_then(|t| t.first())
                .map(|t| t.pos),
        );
        add("budget", AGENT, self.budget.is_some(), None);
        add("commit", AGENT, self.commit.is_some(), None);
        add(
            "output_schema",
            AGENT,
            self.output_schema.is_some(),
            self.output_schema.as_ref().map(|t| t.pos),
        );
        add(
            "min_confidence",
            AGENT,
            self.min_confidence.is_some(),
            self.min_confidence.as_ref().map(|t| t.pos),
        );
        add(
            "verdict_from_text",
            AGENT,
            self.verdict_from_text.is_some(),
            self.verdict_from_text.as_ref().map(|t| t.pos),
        );
        add(
            "escalate_to",
            AGENT,
            self.escalate_to.is_some(),
            self.escalate_to.as_ref().map(|t| t.pos),
        );
        add(
            "max_context_bytes",
            AGENT,
            self.max_context_bytes.is_some(),
            None,
        );
        add(
            "keep_on_failure",
            &["task", "agent"],
            self.keep_on_failure.is_some(),
            self.keep_on_failure.as_ref().map(|k| k.pos),
        );
        add("message", APPROVAL, self.message.is_some(), None);
        add(
            "question",
            INPUT,
            self.question.is_some(),
            self.question.as_ref().map(|q| q.pos),
        );
        add("schema", INPUT, self.schema.is_some(), None);
        add("choices", INPUT, self.choices.is_some(), None);
        add("default", INPUT, self.default.is_some(), None);
        add(
            "on_timeout",
            APPROVAL,
            self.on_timeout.is_some(),
            self.on_timeout.as_ref().map(|t| t.pos),
        );
        add(
            "resource",
            RESOURCE,
            self.resource.is_some(),
            self.resource.as_ref().map(|t| t.pos),
        );
        add("params", RESOURCE, self.params.is_some(), None);
        add(
            "version",
            &["get"],
            self.version.is_some(),
            self.version.as_ref().map(|v| v.pos),
        );
        add(
            "trigger",
            &["get"],
            self.trigger.is_some(),
            self.trigger.as_ref().map(|t| t.pos),
        );
        add(
            "passed",
            &["get"],
            self.passed.is_some(),
            self.passed.as_ref().map(|t| t.pos),
        );
        add(
            "file",
            &["load_var"],
            self.file.is_some(),
            self.file.as_ref().map(|f| f.pos),
        );
        const HTTP: &[&str] = &["http"];
        let at = |k: &Option<At<String>>| k.as_ref().map(|k| k.pos);
        add("url", HTTP, self.url.is_some(), at(&self.url));
        add("method", HTTP, self.method.is_some(), at(&self.method));
        add("headers", HTTP, self.headers.is_some(), None);
        add("secret_headers", HTTP, self.secret_headers.is_some(), None);
        add("body", HTTP, self.body.is_some(), None);
        add("expect", HTTP, self.expect.is_some(), None);
        add(
            "follow_redirects",
            HTTP,
            self.follow_redirects.is_some(),
            None,
        );
        add("output", HTTP, self.output.is_some(), at(&self.output));
        keys
    }
}

impl Step {
    /// The step's name: `name:` if given, else the value of its kind key, else the kind.
    pub fn display_name(&self) -> String {
        if let Some(n) = &self.name {
            return n.value.clone();
        }
        self.kind
            .named()
            .unwrap_or_else(|| self.kind.key().to_owned())
    }

    /// The nested steps of a container (not its hooks), in the order they are written:
    /// an ensemble's members, then its judge.
    pub fn children(&self) -> Vec<&At<Step>> {
        match &self.kind {
            StepKind::Do(steps) => steps.iter().collect(),
            StepKind::InParallel(p) => p.steps().iter().collect(),
            StepKind::Race(r) => r.steps.iter().collect(),
            StepKind::Try(inner) => vec![inner],
            StepKind::Ensemble(e) => e.steps().collect(),
            _ => Vec::new(),
        }
    }

    /// The step's `verdicts:` entries: its own, or an ensemble's (which route the block).
    fn verdict_entries(&self) -> impl Iterator<Item = &super::flow_keys::VerdictEntry> {
        match &self.kind {
            StepKind::Ensemble(e) => e.verdicts.as_slice(),
            StepKind::Agent(call) => call.verdicts.as_deref().unwrap_or_default(),
            _ => &[],
        }
        .iter()
    }

    /// The routes of this step's verdicts that name a target: `(verdict, target)` pairs,
    /// `next` and the reserved `failure` included; a bare verdict has none.
    pub fn routes(&self) -> Vec<(&str, &At<String>)> {
        self.verdict_entries()
            .flat_map(|entry| entry.value.pairs())
            .filter_map(|(name, target)| target.map(|t| (name, t)))
            .collect()
    }

    /// The verdicts the model may pick, in the order written (`failure` is not one: the
    /// runtime arrives at it).
    pub fn verdict_choices(&self) -> Vec<String> {
        self.verdict_entries()
            .flat_map(|entry| entry.value.pairs())
            .map(|(name, _)| name)
            .filter(|name| *name != FAILURE_VERDICT)
            .map(str::to_owned)
            .collect()
    }

    /// Where the plan goes when this step failed: `to: { failure }`, or the reserved
    /// `failure` verdict.
    pub fn failure_route(&self) -> Option<&At<String>> {
        self.to
            .as_ref()
            .and_then(|t| t.value.failure.as_ref())
            .or_else(|| {
                self.routes()
                    .into_iter()
                    .find(|(v, _)| *v == FAILURE_VERDICT)
                    .map(|(_, t)| t)
            })
    }

    /// Whether this is a `get` with `version: every` (from it on, the plan runs once per
    /// version not taken yet).
    pub fn is_every_get(&self) -> bool {
        matches!(&self.kind, StepKind::Get(get) if get.is_every())
    }

    /// Every route target this step names, with the outcome or verdict that takes it.
    pub fn all_routes(&self) -> Vec<(&str, &At<String>)> {
        let mut all = self.routes();
        if let Some(to) = &self.to {
            all.extend(to.value.success.as_ref().map(|t| ("success", t)));
            all.extend(to.value.failure.as_ref().map(|t| ("failure", t)));
        }
        all
    }

    /// The artifacts this step sees under another name (`input_mapping:`,
    /// `output_mapping:`), as `(artifact, name in the step directory)`.
    /// Only a task maps; every other step sees its artifacts under their own names.
    pub fn mounts(&self) -> Vec<(String, String)> {
        match &self.kind {
            StepKind::Task { keys, .. } => keys.mounts(),
            _ => Vec::new(),
        }
    }

    /// The hooks present, in the order they may run.
    pub fn hooks(&self) -> impl Iterator<Item = (&'static str, &At<Step>)> {
        self.outcomes.iter()
    }
}
