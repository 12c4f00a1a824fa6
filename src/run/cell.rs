//! One cell of an `across:` step as the executor runs it: its coordinate (the index among
//! its step's cells, kept in the cell's outline entry as `Entry::cell`), its name and its
//! values, and the step's command with those values filled in.

use std::collections::BTreeMap;

use crate::pipeline::flow::render;
use crate::pipeline::outline::Entry;
use crate::pipeline::{RunSpec, Step};
use crate::template::TemplateError;

/// Whether an outline entry is one cell of an `across:` step.
pub(crate) fn is_cell(entry: &Entry) -> bool {
    entry.cell.is_some()
}

/// One cell of an `across:` step: its position, its name and its variables.
#[derive(Debug, Clone)]
pub(crate) struct Cell {
    index: u32,
    name: String,
    vars: BTreeMap<String, String>,
}

impl Cell {
    /// The cell's view of its step's outline entry.
    pub(crate) fn entry(&self, step: &Entry) -> Entry {
        step.cell(self.index, self.name.clone())
    }

    /// The cell's values, by variable.
    pub(crate) fn vars(&self) -> &BTreeMap<String, String> {
        &self.vars
    }

    /// The command with `{{ .vars.NAME }}` replaced by this cell's values.
    pub(crate) fn render_run(&self, run: &RunSpec) -> Result<RunSpec, TemplateError> {
        Ok(match run {
            RunSpec::Shell(line) => RunSpec::Shell(render(line, &self.vars)?),
            RunSpec::Exec(cfg) => {
                let mut cfg = cfg.clone();
                cfg.path = render(&cfg.path, &self.vars)?;
                cfg.args =
                    (cfg.args.iter().map(|a| render(a, &self.vars))).collect::<Result<_, _>>()?;
                cfg.dir = cfg
                    .dir
                    .as_deref()
                    .map(|d| render(d, &self.vars))
                    .transpose()?;
                RunSpec::Exec(cfg)
            }
        })
    }
}

/// The cells of an `across:` step, given each axis's values in order.
pub(crate) fn cells(step: &Step, axes: &[(String, Vec<String>)]) -> Vec<Cell> {
    crate::pipeline::flow::cells(step, axes)
        .into_iter()
        .zip(0u32..)
        .map(|((name, vars), index)| Cell { index, name, vars })
        .collect()
}
