//! The agents a workflow's agent steps name, read from the same `agents:` shapes as a
//! pipeline file (with `defaults:`, `mcp_servers:`, `prices:` and the rest of a file's
//! top level), from a file or from text built in code.

use std::path::{Path, PathBuf};

use crate::pipeline::At;
use crate::pipeline::agent_def::Agent;
use crate::pipeline::format::{Job, Pipeline, RawStep};
use crate::pipeline::{Diagnostic, LoadError, Problem, delegation, load, resolve, secrets};

/// A pipeline file's top level without its jobs: the agents (and the settings they use)
/// a workflow's agent steps name.
#[derive(Debug, Clone)]
pub struct Agents {
    /// The file they were read from (named in messages; relative `*_file:` keys are read
    /// beside it).
    pub(crate) file: PathBuf,
    /// Everything but the jobs, resolved as loading resolves a pipeline file's.
    pub(crate) pipeline: Pipeline,
}

impl Default for Agents {
    fn default() -> Self {
        Self::none()
    }
}

impl Agents {
    /// No agents: a workflow of shell steps only.
    pub fn none() -> Self {
        Self {
            file: PathBuf::from("workflow.yml"),
            pipeline: without_jobs(Pipeline::<RawStep>::default()),
        }
    }

    /// Reads the top level of a pipeline file: its `agents:` and what they use. Jobs in it
    /// are ignored, so a YAML pipeline's own file can give a workflow its agents.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        let path = path.as_ref();
        let text = load::read_source(path)?;
        Self::from_yaml_at(path, &text)
    }

    /// [`Self::from_file`] for text built in code (relative files are read from the
    /// current directory).
    ///
    /// ```
    /// let agents = treadle::workflow::Agents::from_yaml(
    ///     "agents:\n  - name: reviewer\n    system: You review short texts.\n    tools: [read_file]\n",
    /// )?;
    /// assert_eq!(agents.names(), ["reviewer"]);
    /// # Ok::<(), treadle::pipeline::LoadError>(())
    /// ```
    pub fn from_yaml(text: &str) -> Result<Self, LoadError> {
        Self::from_yaml_at(Path::new("workflow.yml"), text)
    }

    fn from_yaml_at(path: &Path, text: &str) -> Result<Self, LoadError> {
        let mut raw = load::parse(path, text)?;
        raw.jobs.clear();
        raw.plan = None;
        let problems = resolve::resolve(path, &mut raw);
        if !problems.is_empty() {
            return Err(LoadError(problems));
        }
        // As loading does: a provider key is never passed on to a command.
        let keys = secrets::key_vars(&raw);
        for agent in &mut raw.agents {
            agent.env.retain(|name| !keys.contains(&name.value));
        }
        let unknown = delegation::resolve(&mut raw.agents);
        if !unknown.is_empty() {
            return Err(LoadError(
                unknown
                    .iter()
                    .map(|u| {
                        let (message, hint) = u.said();
                        Diagnostic::new(path, u.agent.pos, Problem::UnknownAgent, message, hint)
                    })
                    .collect(),
            ));
        }
        Ok(Self {
            file: path.to_path_buf(),
            pipeline: without_jobs(raw),
        })
    }

    /// With `agent`, built in code, taken as it is (the fills loading makes from a file's
    /// top level, such as `defaults: model`, are not applied to it); it replaces an agent
    /// of its name.
    ///
    /// ```
    /// use treadle::pipeline::At;
    /// use treadle::pipeline::agent_def::Agent;
    /// use treadle::workflow::Agents;
    ///
    /// let agents = Agents::none().with(Agent {
    ///     name: At::new("writer".to_owned()),
    ///     system: Some("You write short texts.".to_owned()),
    ///     ..Agent::default()
    /// });
    /// assert_eq!(agents.names(), ["writer"]);
    /// ```
    pub fn with(mut self, agent: Agent) -> Self {
        let agents = &mut self.pipeline.agents;
        agents.retain(|a| a.name.value != agent.name.value);
        agents.push(agent);
        // The places in the list moved: every sub-agent grant is resolved again. One
        // naming an agent not (yet) given is left unresolved; a step of its agent is
        // refused ([`super::AgentTask::into_step`]).
        delegation::resolve(agents);
        self
    }

    /// The agents' names, in the order written.
    pub fn names(&self) -> Vec<String> {
        self.pipeline
            .agents
            .iter()
            .map(|a| a.name.value.clone())
            .collect()
    }
}

/// The typed top level of a file whose jobs were taken out (no step to type).
fn without_jobs(raw: Pipeline<RawStep>) -> Pipeline {
    raw.with_jobs(Vec::new(), None)
}

/// A job named `name` with no step yet: a workflow's, whose plan grows as it runs.
pub(crate) fn empty_job(name: &str) -> Job {
    let raw = Job::<RawStep> {
        name: At::new(name.to_owned()),
        ..Job::default()
    };
    raw.with_steps(Vec::new(), Default::default())
}
