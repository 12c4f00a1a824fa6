//! The payloads of the leaf kinds that are more than a name and a command: an `input:`
//! step's question ([`InputStep`]) and a `get:` or `put:` step's resource ([`GetStep`],
//! [`PutStep`]). Each is one variant's configuration of [`super::step::StepKind`], taken
//! out of a written step when it is typed, and what that kind's handler is given.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::at::At;
use super::resource_type::VersionSpec;
use super::typed_resource::TypedResource;

/// `input:`: a question a person answers.
#[derive(Debug, Clone)]
pub struct InputStep {
    /// The value of `input:`, the step's name.
    pub name: At<String>,
    /// What is asked.
    pub question: Option<At<String>>,
    /// The JSON Schema the answer must fit.
    pub schema: Option<serde_json::Value>,
    /// The only answers allowed.
    pub choices: Option<Vec<String>>,
    /// The answer taken when the step's `timeout` passes.
    pub default: Option<serde_json::Value>,
}

impl InputStep {
    /// The question asked (`None` without `question:`): its schema (default: any string),
    /// choices and default answer.
    pub fn question(&self) -> Option<treadle_session::HumanQuestion> {
        let text = &self.question.as_ref()?.value;
        let mut question = treadle_session::HumanQuestion::new(text.clone());
        let choices = self.choices.clone().unwrap_or_default();
        question.schema = match (&self.schema, choices.is_empty()) {
            (Some(schema), _) => schema.clone(),
            (None, false) => serde_json::json!({ "enum": choices }),
            (None, true) => question.schema,
        };
        question.choices = choices;
        question.default = self.default.clone();
        Some(question)
    }
}

/// `get:` of a resource.
#[derive(Debug, Clone)]
pub struct GetStep {
    /// The value of `get:`, the artifact fetched into.
    pub name: At<String>,
    /// The resource: `resource:`, else the name.
    pub resource: At<String>,
    /// That resource, its type resolved at load (`Loaded::resources`).
    pub typed: Arc<TypedResource>,
    /// Resource-specific parameters.
    pub params: Option<BTreeMap<String, serde_json::Value>>,
    /// `latest`, `every`, or a pinned version.
    pub version: Option<At<VersionSpec>>,
    /// Whether `treadle watch` builds the job on a new version.
    pub trigger: Option<At<bool>>,
    /// Only versions that passed these jobs together.
    pub passed: Option<At<Vec<At<String>>>>,
}

impl GetStep {
    /// Whether it is `version: every` (from it on, the plan runs once per version not
    /// taken yet).
    pub fn is_every(&self) -> bool {
        self.version
            .as_ref()
            .is_some_and(|v| v.value == VersionSpec::Every)
    }
}

/// `put:` to a resource.
#[derive(Debug, Clone)]
pub struct PutStep {
    /// The value of `put:`.
    pub name: At<String>,
    /// The resource: `resource:`, else the name.
    pub resource: At<String>,
    /// That resource, its type resolved at load (`Loaded::resources`).
    pub typed: Arc<TypedResource>,
    /// Resource-specific parameters.
    pub params: Option<BTreeMap<String, serde_json::Value>>,
}
