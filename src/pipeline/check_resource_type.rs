//! The checks of a `resource_types:` entry's own keys: one backend (`check:`/`in:`/`out:`
//! shell, `expr:` or `mcp:`), container keys only beside `image:` (and never on an `expr:`
//! type, which runs in-process), `env:` as variable names, `expr:` stages set once, `mcp:`
//! naming a server of the file with a stage to call; and a resource's own `env:`.

use super::check_watch::is_var_name;
use super::diagnostic::Finding;
use super::resource_type::{Backend, ResourceType};
use super::{At, Pipeline, Problem};

/// Every problem of the types' keys and the resources' `env:`.
pub fn check(pipeline: &Pipeline) -> Vec<Finding> {
    let mut out = Vec::new();
    for t in &pipeline.resource_types {
        out.extend(backends(t));
        out.extend(containers(t));
        out.extend(env_names(
            &t.env,
            &format!("resource type `{}`", t.name.value),
        ));
        out.extend(expr(t));
        out.extend(mcp(pipeline, t));
    }
    for r in &pipeline.resources {
        out.extend(env_names(&r.env, &format!("resource `{}`", r.name.value)));
        let mcp_typed = pipeline
            .resource_types
            .iter()
            .any(|t| t.name.value == r.kind.value && t.config.backend() == Backend::Mcp);
        if let Some(first) = r.env.first().filter(|_| mcp_typed) {
            out.push((
                first.pos,
                Problem::InvalidValue,
                format!(
                    "resource `{}` has `env:`, but its type `{}` is MCP-backed",
                    r.name.value, r.kind.value
                ),
                "an MCP-backed type authenticates through its `mcp_servers:` entry; remove `env:`"
                    .to_owned(),
            ));
        }
    }
    out
}

fn backends(t: &ResourceType) -> Vec<Finding> {
    let c = &t.config;
    let shell = [&c.check, &c.in_, &c.out]
        .into_iter()
        .flatten()
        .next()
        .map(|s| s.pos);
    let set: Vec<(&str, super::at::Pos)> = [
        ("check:/in:/out:", shell),
        ("expr:", c.expr.as_ref().map(|e| e.pos)),
        ("mcp:", c.mcp.as_ref().map(|m| m.pos)),
    ]
    .into_iter()
    .filter_map(|(k, p)| p.map(|p| (k, p)))
    .collect();
    match set.as_slice() {
        [_, (second, pos), ..] => vec![(
            *pos,
            Problem::InvalidValue,
            format!(
                "resource type `{}` sets both `{}` and `{second}`",
                t.name.value, set[0].0
            ),
            "a type is written one way: shell scripts, `expr:` or `mcp:`; keep one".to_owned(),
        )],
        _ => Vec::new(),
    }
}

fn containers(t: &ResourceType) -> Vec<Finding> {
    let mut out = Vec::new();
    let expr = t.config.backend() == Backend::Expr;
    for (key, pos) in t.container_keys() {
        if expr {
            out.push((
                pos,
                Problem::InvalidValue,
                format!(
                    "resource type `{}` is written with `expr:` and sets `{key}`",
                    t.name.value
                ),
                format!("an expression runs inside treadle, with no container; remove `{key}`"),
            ));
        } else if key != "image" && t.image.is_none() {
            out.push((
                pos,
                Problem::BadStep,
                format!("`{key}` of resource type `{}` needs `image:`", t.name.value),
                format!("a script without a container has no {key} to set; add `image:` or remove `{key}`"),
            ));
        }
    }
    out.extend(
        t.container_limits
            .as_ref()
            .and_then(super::check_container::empty_limits),
    );
    out
}

/// A finding for each `env:` entry that is not a variable name (`owner`: whose list).
pub fn env_names(env: &[At<String>], owner: &str) -> Vec<Finding> {
    env.iter()
        .filter(|v| !is_var_name(&v.value))
        .map(|v| {
            // The value is not echoed: `NAME=value` may carry the secret itself.
            (
                v.pos,
                Problem::InvalidValue,
                format!("an `env:` entry of {owner} is not a variable name"),
                "list NAMES of variables to pass through (capitals, digits and `_`, e.g. \
                 `env: [DEPLOY_TOKEN]`), never `NAME=value`: the file is hashed into the state file"
                    .to_owned(),
            )
        })
        .collect()
}

fn expr(t: &ResourceType) -> Vec<Finding> {
    let Some(e) = &t.config.expr else {
        return Vec::new();
    };
    let e = &e.value;
    let mut out = Vec::new();
    for (stage, inline, file) in [
        ("check", &e.check, &e.check_file),
        ("in", &e.in_, &e.in_file),
        ("out", &e.out, &e.out_file),
    ] {
        if let (Some(_), Some(f)) = (inline, file) {
            out.push((
                f.pos,
                Problem::BadStep,
                format!("`{stage}_file:` and `{stage}:` are both set"),
                format!(
                    "keep one of them: `{stage}:` inline, or `{stage}_file:` to read it from a file"
                ),
            ));
        }
    }
    out
}

fn mcp(pipeline: &Pipeline, t: &ResourceType) -> Vec<Finding> {
    let Some(m) = &t.config.mcp else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let server = &m.value.server;
    if !pipeline
        .mcp_servers
        .iter()
        .any(|s| s.name.value == server.value)
    {
        let names: Vec<&str> = pipeline
            .mcp_servers
            .iter()
            .map(|s| s.name.value.as_str())
            .collect();
        out.push((
            server.pos,
            Problem::InvalidValue,
            format!(
                "resource type `{}` calls MCP server `{}`, which `mcp_servers:` does not define",
                t.name.value, server.value
            ),
            if names.is_empty() {
                "declare it under `mcp_servers:` (`- name: ...` with `endpoint:` or `command:`)"
                    .to_owned()
            } else {
                format!("servers in this file: {}", names.join(", "))
            },
        ));
    }
    let stages = &m.value;
    if stages.check.is_none() && stages.in_.is_none() && stages.out.is_none() {
        out.push((
            m.pos,
            Problem::MissingKey,
            format!("MCP-backed resource type `{}` calls no tool", t.name.value),
            "give at least one of `check:`, `in:` or `out:` with `tool: NAME`".to_owned(),
        ));
    }
    out
}
