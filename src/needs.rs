//! The programs a run needs on this machine (`sh` for shell commands and the `run_shell`
//! tool, `git` for git resources), checked before the run starts: a missing one is one
//! clear message and exit code 2, not a step failing halfway with "No such file".

use crate::environ::find_program;
use crate::pipeline::format::RunSpec;
use crate::pipeline::walk::visit_job;
use crate::pipeline::{Pipeline, StepKind};

/// A program the pipeline needs that is not on PATH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The program, e.g. `git`.
    pub program: &'static str,
    /// What in the pipeline needs it.
    pub needed_by: String,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "treadle needs `{}` on PATH for {}, and it is not there\nhint: install it (Debian: \
             `apt-get install {}`), or put the directory that holds it on PATH",
            self.program,
            self.needed_by,
            match self.program {
                "sh" => "dash",
                other => other,
            }
        )
    }
}

/// What `pipeline` needs from PATH that is missing, in a stable order (`sh`, then `git`).
pub fn missing(pipeline: &Pipeline) -> Vec<Missing> {
    let mut out = Vec::new();
    if let Some(needed_by) = needs_sh(pipeline)
        && find_program("sh").is_none()
    {
        out.push(Missing {
            program: "sh",
            needed_by,
        });
    }
    if let Some(resource) = pipeline.resources.iter().find(|r| r.kind.value == "git")
        && find_program("git").is_none()
    {
        out.push(Missing {
            program: "git",
            needed_by: format!("the git resource `{}`", resource.name.value),
        });
    }
    out
}

/// Why the pipeline needs `sh`, if it does: a shell command line, or an agent granted
/// `run_shell`.
fn needs_sh(pipeline: &Pipeline) -> Option<String> {
    let mut shell_step = None;
    for job in &pipeline.jobs {
        visit_job(job, &mut |s| {
            if shell_step.is_none()
                && let StepKind::Task { run, .. } = &s.kind
                && let RunSpec::Shell(_) = &run.value
            {
                shell_step = Some(s.display_name());
            }
        });
    }
    if let Some(step) = shell_step {
        return Some(format!("the shell command of step `{step}`"));
    }
    pipeline
        .agents
        .iter()
        .find(|a| {
            a.grant()
                .into_iter()
                .flatten()
                .any(|t| t.value == "run_shell")
        })
        .map(|a| format!("the run_shell tool of agent `{}`", a.name.value))
}
