//! The checks of the container keys (`image:`, `network:`, `privileged:`, `user:`,
//! `container_limits:`) on steps and agents, of `workspace:`, and `validate`'s warnings
//! about what needs a container runtime; the keys themselves are in [`super::container`].

use super::agent_def::Agent;
use super::at::{At, Pos};
use super::container::{ContainerLimits, WorkspaceConfig, no_runtime, unsupported};
use super::diagnostic::{Finding, Problem};
use super::format::Pipeline;
use super::network::Network;
use super::step::Step;
use super::step::StepKind;
use super::walk::visit_job;

/// The warnings `validate` gives about what this file needs that treadle cannot do:
/// `(position, message)`.
pub fn warnings(pipeline: &Pipeline) -> Vec<(Pos, String)> {
    let mut out = Vec::new();
    if let Some(why) = pipeline.workspace.as_ref().and_then(unsupported) {
        let pos = pipeline
            .workspace
            .as_ref()
            .and_then(|w| w.strategy.as_ref())
            .map_or(Pos::default(), |s| s.pos);
        out.push((pos, why));
    }
    if let Some(n) = pipeline
        .defaults
        .as_ref()
        .and_then(|d| d.run_history.as_ref())
    {
        out.push((
            n.pos,
            "`defaults.run_history` has no effect: treadle keeps every run".to_owned(),
        ));
    }
    for t in &pipeline.resource_types {
        if let Some(image) = &t.image {
            out.push((image.pos, no_runtime(&image.value)));
        }
    }
    for job in &pipeline.jobs {
        visit_job(job, &mut |s| {
            if let Some(c) = &s.container {
                out.push((c.image.pos, no_runtime(&c.image.value)));
            }
        });
    }
    out
}

/// Checks a `workspace:` block.
pub fn workspace(w: &WorkspaceConfig) -> Vec<Finding> {
    match &w.strategy {
        Some(s) if s.value != "copy" && s.value != "btrfs" => vec![(
            s.pos,
            Problem::InvalidValue,
            format!("`workspace.strategy` is `{}`", s.value),
            "write `copy` (the default) or `btrfs`".to_owned(),
        )],
        _ => Vec::new(),
    }
}

/// Checks the container keys of an `agents:` entry: each beside `image:`.
pub fn agent(a: &Agent) -> Vec<Finding> {
    let keys = [
        ("network", container_network(a.network.as_ref())),
        ("privileged", a.privileged.as_ref().map(|p| p.pos)),
        ("user", a.user.as_ref().map(|u| u.pos)),
        (
            "container_limits",
            a.container_limits.as_ref().map(|c| c.pos),
        ),
    ];
    if a.image.is_some() {
        return Vec::new();
    }
    keys.into_iter()
        .filter_map(|(key, pos)| Some((key, pos?)))
        .map(|(key, pos)| {
            (
                pos,
                Problem::BadStep,
                format!("`{key}` of agent `{}` needs `image:`", a.name.value),
                needs_image_fix(key),
            )
        })
        .collect()
}

/// The finding for `container_limits:` that sets no limit (on a step or a resource type).
pub fn empty_limits(limits: &At<ContainerLimits>) -> Option<Finding> {
    (limits.value.cpu.is_none() && limits.value.memory.is_none()).then(|| {
        (
            limits.pos,
            Problem::MissingKey,
            "`container_limits` sets no limit".to_owned(),
            "give `cpu:` (a share weight, 1024 = default) and/or `memory:` (bytes)".to_owned(),
        )
    })
}

/// Where a `network:` needs `image:`: a container network name (`none`, `loopback`,
/// `any` and port lists are treadle's own grants).
fn container_network(network: Option<&At<Network>>) -> Option<Pos> {
    network
        .filter(|n| matches!(n.value, Network::Container(_)))
        .map(|n| n.pos)
}

/// Checks the container keys of a step: its `network:` (no `network:` on a `get`/`put`
/// step, a container network only beside `image:`, a real name), the user's name, the
/// image's, and the limits. Which keys go beside `image:` was settled when the step was
/// typed (`super::typing_folds`).
pub fn step(step: &At<Step>) -> Vec<Finding> {
    let mut out = Vec::new();
    let resource = matches!(&step.kind, StepKind::Get(_) | StepKind::Put(_));
    if let Some(n) = &step.network {
        if resource {
            out.push((
                n.pos,
                Problem::BadStep,
                "`network` does not belong on a `get`/`put` step".to_owned(),
                "a resource's commands run on this machine; set it on a task or agent step"
                    .to_owned(),
            ));
        } else if step.container.is_none()
            && let Some(pos) = container_network(Some(n))
        {
            out.push((
                pos,
                Problem::BadStep,
                "`network` needs `image:`".to_owned(),
                needs_image_fix("network"),
            ));
        }
        if let Network::Container(name) = &n.value
            && (name.starts_with('-') || name.is_empty())
        {
            out.push((
                n.pos,
                Problem::InvalidValue,
                format!("`network: {name}` is not a network name"),
                "write none, loopback, any, or a list of host:port".to_owned(),
            ));
        }
    }
    let Some(container) = &step.container else {
        return out;
    };
    if let Some(v) = &container.user
        && (v.value.starts_with('-') || v.value.is_empty())
    {
        out.push((
            v.pos,
            Problem::InvalidValue,
            format!("`user: {}` is not a user name", v.value),
            "write a plain name, e.g. `user: root`".to_owned(),
        ));
    }
    if container.image.value.trim().is_empty() {
        out.push((
            container.image.pos,
            Problem::InvalidValue,
            "`image` is empty".to_owned(),
            "name an image, e.g. `image: alpine:3.20`, or remove the key".to_owned(),
        ));
    }
    out.extend(container.limits.as_ref().and_then(empty_limits));
    out
}

/// How to fix a container key written without `image:`.
pub(super) fn needs_image_fix(key: &str) -> String {
    if key == "network" {
        return "without `image:`, `network:` is none, loopback, any, or a list of host:port"
            .to_owned();
    }
    format!("a command without a container has no {key} to set; add `image:` or remove `{key}`")
}
