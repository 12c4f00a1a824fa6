//! A sub-agent granted as a tool (`tools: [{ agent: NAME }]`), resolved when the file is
//! loaded: each agent's [`Agent::delegations`] says which agent of the same pipeline each
//! such grant calls, by an [`AgentRef`] that only [`resolve`] makes. Building an agent
//! step follows the reference without asking whether the name exists.
//!
//! A reference is an index into the pipeline's `agents:` rather than an `Arc<Agent>`
//! inside the definition: agents that delegate to each other (refused by the checks, but
//! found only after this runs) would otherwise be a cycle of `Arc`s, and a definition
//! holding its sub-agents' definitions would hold theirs too, down to the depth cap.

use std::collections::BTreeMap;

use super::agent_def::Agent;
pub use super::agent_def::{AgentRef, Delegation};
use super::at::At;
use super::tool_grant::AgentGrant;

/// Resolves the sub-agents every agent of `agents` grants, replacing what an earlier call
/// found (the list may have changed since). A name no agent has is left out of
/// [`Agent::delegations`] and returned with its position and its parent's name: loading's
/// checks report it (`check_agent`), and a workflow's agents refuse it.
pub fn resolve(agents: &mut [Agent]) -> Vec<Unknown> {
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for (i, a) in agents.iter().enumerate() {
        // The first of a name, as `Loaded::agent` finds it (the checks refuse duplicates).
        index.entry(a.name.value.clone()).or_insert(i);
    }
    let mut unknown = Vec::new();
    for agent in agents.iter_mut() {
        let mut found = Vec::new();
        for grant in agent.delegates() {
            match index.get(&grant.agent.value) {
                Some(&i) => found.push(Delegation {
                    grant: grant.clone(),
                    agent: AgentRef(i),
                }),
                None => unknown.push(Unknown {
                    parent: agent.name.value.clone(),
                    agent: grant.agent.clone(),
                }),
            }
        }
        agent.delegations = found;
    }
    unknown
}

/// A sub-agent grant naming no agent of the pipeline.
#[derive(Debug, Clone)]
pub struct Unknown {
    /// The agent granting it.
    pub parent: String,
    /// The name, where it is written.
    pub agent: At<String>,
}

impl Unknown {
    /// What is wrong, and the hint (one wording for the checks and a workflow's agents).
    pub fn said(&self) -> (String, &'static str) {
        (
            format!(
                "agent `{}` is granted unknown agent `{}` as a tool",
                self.parent, self.agent.value
            ),
            "define it under `agents:`, or fix the name",
        )
    }
}

impl Agent {
    /// The `{ agent: NAME }` grants [`resolve`] found no agent for (none once a pipeline
    /// is loaded; a workflow's agent built in code may have one).
    pub fn unresolved_delegates(&self) -> impl Iterator<Item = &AgentGrant> {
        self.delegates()
            .filter(|g| !self.delegations.iter().any(|d| d.name() == g.agent.value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tool_grant::ToolGrant;

    fn agent(name: &str, grants: &[&str]) -> Agent {
        let tools = grants
            .iter()
            .map(|g| {
                At::new(ToolGrant::Agent(AgentGrant {
                    agent: At::new((*g).to_owned()),
                    description: None,
                    strays: Vec::new(),
                }))
            })
            .collect();
        Agent {
            name: At::new(name.to_owned()),
            tools: Some(tools),
            ..Agent::default()
        }
    }

    #[test]
    fn each_grant_points_at_its_agent_and_an_unknown_one_is_returned() {
        let mut agents = vec![
            agent("lead", &["helper", "nobody"]),
            agent("helper", &["lead"]),
        ];
        let unknown = resolve(&mut agents);
        assert_eq!(
            unknown
                .iter()
                .map(|u| u.agent.value.as_str())
                .collect::<Vec<_>>(),
            ["nobody"]
        );
        let names: Vec<&str> = agents[0]
            .unresolved_delegates()
            .map(|g| g.agent.value.as_str())
            .collect();
        assert_eq!(names, ["nobody"]);
        let lead = &agents[0];
        let names: Vec<&str> = lead.delegations.iter().map(Delegation::name).collect();
        assert_eq!(names, ["helper"]);
        // `Pipeline::agent_at` is this index into the file's `agents:`.
        let helper = &agents[lead.delegations[0].agent.0];
        assert_eq!(helper.name.value, "helper");
        // A cycle is two indices, not two `Arc`s holding each other.
        let back = &agents[helper.delegations[0].agent.0];
        assert_eq!(back.name.value, "lead");
    }
}
