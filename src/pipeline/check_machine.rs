//! The checks of this machine that `validate` adds: the shell and the programs tasks name
//! are on PATH, stdio MCP servers' commands exist, the local model server answers, and
//! the coding-agent CLI a `@claude/...` or `@codex/...` model runs is installed.

use std::collections::BTreeSet;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::at::Pos;
use super::diagnostic::{Finding, Problem};
use super::format::{Pipeline, RunSpec};
use super::mcp;
use super::step::StepKind;
use super::walk::{used_agents, visit_job};
use crate::environ::find_program;

/// Every problem of this machine for running `job` (or every job) of `pipeline`.
pub fn check(
    pipeline: &Pipeline,
    job: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    if find_program("sh").is_none() {
        out.push((
            Pos::default(),
            Problem::Machine,
            "`sh` is not on PATH; string `run:` commands need it".to_owned(),
            "install a POSIX shell or use `run: { path, args }`".to_owned(),
        ));
    }
    for j in &pipeline.jobs {
        visit_job(j, &mut |s| {
            if let StepKind::Task { run, .. } = &s.kind
                && let RunSpec::Exec(cfg) = &run.value
                && !cfg.path.contains('/')
                && find_program(&cfg.path).is_none()
            {
                let prog = &cfg.path;
                out.push((
                    run.pos,
                    Problem::Machine,
                    format!("program `{prog}` is not on PATH"),
                    format!("install `{prog}`, or give its full path in `run.path`"),
                ));
            }
        });
    }
    let agents = used_agents(pipeline, job, env);
    for (agent, _) in &agents {
        out.extend(mcp::check_machine(agent, env));
    }
    for (agent, resolved) in &agents {
        if let Ok(m) = resolved
            && m.provider == super::model::CLI_PROVIDER
            && let Some(finding) = cli_missing(agent, &m.model, env)
        {
            out.push(finding);
        }
    }
    let mut probed = BTreeSet::new();
    for (agent, resolved) in &agents {
        let Ok(m) = resolved else { continue };
        if m.provider == "local" && probed.insert(m.base_url.clone()) && !answers(&m.base_url) {
            out.push((
                agent.name.pos,
                Problem::Machine,
                format!(
                    "agent `{}` uses the local model server at {}, which is not answering",
                    agent.name.value, m.base_url
                ),
                "start it with `scripts/local-model start` (or set TREADLE_LOCAL_URL to where it runs)"
                    .to_owned(),
            ));
        }
    }
    out
}

/// The CLIs a model may name: `(prefix, program, variable naming it, npm package)`. The
/// runner finds them the same way (`crate::agent::cli::Cli::program`); its names are not
/// used here because the pipeline's checks come before the agent module.
const CLIS: [(&str, &str, &str, &str); 2] = [
    (
        "@claude/",
        "claude",
        "TREADLE_CLAUDE_BIN",
        "@anthropic-ai/claude-code",
    ),
    ("@codex/", "codex", "TREADLE_CODEX_BIN", "@openai/codex"),
];

/// The finding when the CLI that `model` (`@claude/sonnet`) runs is neither named by its
/// variable (as an existing file) nor on PATH.
fn cli_missing(
    agent: &super::Agent,
    model: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<Finding> {
    let (_, program, var, package) = CLIS.iter().find(|(p, ..)| model.starts_with(p))?;
    let named = env(var).filter(|v| !v.is_empty());
    let found = match &named {
        Some(path) => std::path::Path::new(path).is_file(),
        None => find_program(program).is_some(),
    };
    if found {
        return None;
    }
    let pos = agent
        .source
        .model
        .as_ref()
        .map_or(agent.name.pos, |m| m.pos);
    let message = match named {
        Some(path) => format!(
            "agent `{}` runs the {program} CLI (`{model}`), but {var} names `{path}`, which is not a file",
            agent.name.value
        ),
        None => format!(
            "agent `{}` runs the {program} CLI (`{model}`), which is not on PATH and {var} is not set",
            agent.name.value
        ),
    };
    let hint = format!(
        "install it (`npm install -g {package}`), or set {var} to its path; or give the agent a model served over HTTP"
    );
    Some((pos, Problem::Machine, message, hint))
}

/// Whether something accepts TCP connections at the URL's host and port.
fn answers(base_url: &str) -> bool {
    let (scheme, rest) = base_url.split_once("://").unwrap_or(("http", base_url));
    let authority = rest.split('/').next().unwrap_or(rest);
    let addr = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:{}", if scheme == "https" { 443 } else { 80 })
    };
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .is_some_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(700)).is_ok())
}
