//! One cell of an `across:` step as the executor runs it: its typed coordinate (its step's
//! seq and its index among the step's cells), its name and its values, where its outputs
//! are collected, and the step's command with its values filled in. Also what a block
//! gives the step it runs ([`Given`]): the per-step arguments passed down explicitly.

use std::collections::BTreeMap;

use crate::pipeline::flow_keys::render;
use crate::pipeline::outline::Entry;
use crate::pipeline::{RunSpec, Step};
use crate::template::TemplateError;

/// Where a cell is: its `across:` step (by outline seq) and its index among the cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CellAt {
    /// The `across:` step's outline seq (its cells share it).
    pub seq: u32,
    /// The cell's index among its step's cells.
    pub index: u32,
}

impl CellAt {
    /// The coordinate of the cell an outline entry is, if it is one.
    pub(crate) fn of(entry: &Entry) -> Option<Self> {
        entry.cell.map(|index| Self {
            seq: entry.seq,
            index,
        })
    }
}

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
    /// The cell's values in the order of the axes: where its outputs are collected under
    /// the block's artifact (`ARTIFACT/value/value`).
    segments: Vec<String>,
}

impl Cell {
    /// The cell's view of its step's outline entry.
    pub(crate) fn entry(&self, step: &Entry) -> Entry {
        step.cell(self.index, self.name.clone())
    }

    /// What travels to a worker.
    pub(crate) fn values(&self) -> CellValues {
        CellValues {
            index: self.index,
            name: self.name.clone(),
            vars: self.vars.clone(),
            segments: self.segments.clone(),
        }
    }

    /// The cell a worker was sent.
    pub(crate) fn from_values(v: CellValues) -> Self {
        Self {
            index: v.index,
            name: v.name,
            vars: v.vars,
            segments: v.segments,
        }
    }

    /// The cell's values, by variable.
    pub(crate) fn vars(&self) -> &BTreeMap<String, String> {
        &self.vars
    }

    /// Where the cell's outputs go under each output artifact: its values, axis by axis.
    pub(crate) fn segments(&self) -> &[String] {
        &self.segments
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

    /// A prompt with `{{ .vars.NAME }}` replaced by this cell's values.
    pub(crate) fn render_text(&self, text: &str) -> Result<String, TemplateError> {
        render(text, &self.vars)
    }
}

/// The cells of an `across:` step, given each axis's values in order.
pub(crate) fn cells(step: &Step, axes: &[(String, Vec<String>)]) -> Vec<Cell> {
    crate::pipeline::flow_keys::cells(step, axes)
        .into_iter()
        .zip(0u32..)
        .map(|((name, vars), index)| {
            let segments = axes
                .iter()
                .filter_map(|(var, _)| vars.get(var).cloned())
                .collect();
            Cell {
                index,
                name,
                vars,
                segments,
            }
        })
        .collect()
}

/// What the block running a step gives it, passed down explicitly from the walker to the
/// leaf: the same for every step kind.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Given<'a> {
    /// The `across:` cell this run of the step is: its coordinate and its values.
    pub cell: Option<&'a Cell>,
    /// Text put before an agent step's prompt (the votes an ensemble's judge decides
    /// from).
    pub handed: Option<&'a str>,
}

impl<'a> Given<'a> {
    /// A cell of an `across:` step.
    pub(crate) fn cell(cell: &'a Cell) -> Self {
        Self {
            cell: Some(cell),
            handed: None,
        }
    }

    /// A step handed `text` before its prompt.
    pub(crate) fn handed(text: &'a str) -> Self {
        Self {
            cell: None,
            handed: Some(text),
        }
    }
}

/// An `across:` cell's values, as they travel to a worker with its step.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CellValues {
    /// The cell's index among its step's cells.
    pub index: u32,
    /// The cell's name.
    pub name: String,
    /// Its values, by variable.
    pub vars: std::collections::BTreeMap<String, String>,
    /// Its values in the order of the axes.
    pub segments: Vec<String>,
}
