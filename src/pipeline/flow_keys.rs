//! The control-flow keys of a step, as the file spells them: `when:` guards, `to:` routes,
//! `verdicts:` entries, `race:` and `across:`.
//!
//! Each type accepts every spelling the docs give (a shorthand and a long form) with a
//! visitor rather than `#[serde(untagged)]`, which would lose the positions of nested values
//! and the precise error of the form the author meant.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};

use super::at::At;

/// `when:` a command whose exit code decides whether the step runs (0: it runs).
#[derive(Debug, Clone, JsonSchema)]
#[schemars(untagged)]
pub enum When {
    /// `when: grep -q high risk/level.txt`.
    Shell(String),
    /// `when: { run: test -s risk/level.txt }`.
    Long(WhenConfig),
    /// Decided when the step was made, so no command runs: a Rust workflow's recorded
    /// branch (`Flow::when`, `Flow::skip`). Not a spelling of the file.
    #[schemars(skip)]
    Decided(Decided),
}

/// A guard decided in advance ([`When::Decided`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// Whether the step runs.
    pub taken: bool,
    /// Why, said with the step when it is skipped (its record's `note`, the transcript's
    /// line, the API's step).
    pub reason: Option<String>,
}

/// The long form of `when:`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WhenConfig {
    /// The command, run with `sh -c` in a directory holding the step's inputs.
    pub run: String,
}

impl When {
    /// The guard's command line (`None`: decided in advance, no command).
    pub fn command(&self) -> Option<&str> {
        match self {
            Self::Shell(s) => Some(s),
            Self::Long(c) => Some(&c.run),
            Self::Decided(_) => None,
        }
    }

    /// Why a step this guard skips is skipped, when it says.
    pub fn skip_reason(&self) -> Option<&str> {
        match self {
            Self::Decided(d) => d.reason.as_deref(),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for When {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = When;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a shell command string, or a mapping with `run`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<When, E> {
                Ok(When::Shell(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<When, A::Error> {
                WhenConfig::deserialize(de::value::MapAccessDeserializer::new(map)).map(When::Long)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// `to:` where the plan goes after this step, by its outcome.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct To {
    /// The step to continue at after a success (`next`: the following one).
    #[serde(default)]
    pub success: Option<At<String>>,
    /// The step to continue at after a failure; the route consumes the failure.
    #[serde(default)]
    pub failure: Option<At<String>>,
}

/// The verdict name a step arrives at when it fails or picks nothing; never offered to
/// the model.
pub const FAILURE_VERDICT: &str = "failure";

/// One entry of `verdicts:`: a bare choice (`- bug`), or a choice with its target
/// (`- approve: publish`).
#[derive(Debug, Clone, JsonSchema)]
#[schemars(untagged)]
pub enum Verdict {
    /// A choice that records the verdict and continues in order.
    Bare(String),
    /// A `choice: target` mapping (the checks refuse more than one pair).
    Route(BTreeMap<String, At<String>>),
}

impl Verdict {
    /// The `(choice, target)` pairs; a bare choice has no target.
    pub fn pairs(&self) -> Vec<(&str, Option<&At<String>>)> {
        match self {
            Self::Bare(name) => vec![(name.as_str(), None)],
            Self::Route(map) => map.iter().map(|(k, v)| (k.as_str(), Some(v))).collect(),
        }
    }
}

impl<'de> Deserialize<'de> for Verdict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Verdict;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a verdict name, or a `choice: target` mapping")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Verdict, E> {
                Ok(Verdict::Bare(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Verdict, A::Error> {
                BTreeMap::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(Verdict::Route)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// One `verdicts:` entry and where it was written.
pub type VerdictEntry = At<Verdict>;

/// `race:` steps run at once; the first to succeed wins and the others are cancelled.
#[derive(Debug, Clone, Default, JsonSchema)]
#[schemars(rename = "Race")]
pub struct Race<S> {
    /// The competing steps.
    pub steps: Vec<At<S>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RaceConfig<S> {
    steps: Vec<At<S>>,
}

// `race: [a, b]` and `race: { steps: [a, b] }` both read.
impl<'de, S: Deserialize<'de>> Deserialize<'de> for Race<S> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<S>(std::marker::PhantomData<S>);
        impl<'de, S: Deserialize<'de>> Visitor<'de> for V<S> {
            type Value = Race<S>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of steps, or a mapping with `steps`")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Race<S>, A::Error> {
                Vec::deserialize(de::value::SeqAccessDeserializer::new(seq))
                    .map(|steps| Race { steps })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Race<S>, A::Error> {
                RaceConfig::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(|c| Race { steps: c.steps })
            }
        }
        deserializer.deserialize_any(V(std::marker::PhantomData))
    }
}

/// One axis of `across:`: a variable and the values it takes.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Axis {
    /// The variable's name, used as `{{ .vars.NAME }}`.
    pub var: At<String>,
    /// The values, in order.
    #[serde(default)]
    pub values: Option<Vec<At<Scalar>>>,
    /// Instead of `values:`: a JSON array of strings an earlier step wrote, as
    /// `ARTIFACT/path` (the artifact must be an input of the step).
    #[serde(default)]
    pub from_file: Option<At<String>>,
}

/// A YAML scalar read as text (`1.25`, `true` and `api` are all values of an axis).
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
pub struct Scalar(pub String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, number or boolean")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_owned()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// `across:` with its dials, made when the step is typed (a `max_in_flight:` or
/// `fail_fast:` without `across:` is a load error).
#[derive(Debug, Clone)]
pub struct Across {
    /// The axes: the step runs once per combination of their values.
    pub axes: At<Vec<Axis>>,
    /// How many cells run at once (default 1).
    pub max_in_flight: Option<At<u32>>,
    /// Start no further cell once one failed (default false).
    pub fail_fast: bool,
}

/// What the cells of an `across:` step are made from: its axes and its name. The typed step
/// ([`super::step::Step`]) has them; a trait, so that this file needs no step type.
pub trait AcrossStep {
    /// The step's `across:`, if written.
    fn across_axes(&self) -> Option<&At<Vec<Axis>>>;
    /// The step's name as shown.
    fn shown_name(&self) -> String;
}

impl<T: AcrossStep + ?Sized> AcrossStep for &T {
    fn across_axes(&self) -> Option<&At<Vec<Axis>>> {
        (**self).across_axes()
    }
    fn shown_name(&self) -> String {
        (**self).shown_name()
    }
}

impl<T: AcrossStep> AcrossStep for At<T> {
    fn across_axes(&self) -> Option<&At<Vec<Axis>>> {
        self.value.across_axes()
    }
    fn shown_name(&self) -> String {
        self.value.shown_name()
    }
}

/// The values of each axis of an `across:` step when all are written in the file (`None`
/// when one comes `from_file:`, known only when the step runs).
pub fn static_axes(step: &impl AcrossStep) -> Option<Vec<(String, Vec<String>)>> {
    step.across_axes()
        .iter()
        .flat_map(|a| a.value.iter())
        .map(|axis| {
            let values = axis.values.as_ref()?;
            Some((
                axis.var.value.clone(),
                values.iter().map(|v| v.value.0.clone()).collect(),
            ))
        })
        .collect()
}

/// The cells of an `across:` step given each axis's values in order: the product, the
/// last axis varying fastest, each with its name (`STEP [var=value ...]`, or the step's
/// name with the values put in when it uses them) and its values.
pub fn cells(
    step: &impl AcrossStep,
    axes: &[(String, Vec<String>)],
) -> Vec<(String, BTreeMap<String, String>)> {
    let mut combos: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (var, values) in axes {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((var.clone(), v.clone()));
                    c
                })
            })
            .collect();
    }
    let base = step.shown_name();
    combos
        .into_iter()
        .map(|combo| {
            let vars: BTreeMap<String, String> = combo.iter().cloned().collect();
            // A name that uses no variable (or, not loaded, one that does not render) is
            // given the coordinates.
            let name = match render(&base, &vars) {
                Ok(name) if !vars_used(&base).is_empty() => name,
                _ => {
                    let coords: Vec<String> =
                        combo.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!("{base} [{}]", coords.join(" "))
                }
            };
            (name, vars)
        })
        .collect()
}

/// Renders `text` for one `across:` cell: `{{ .vars.NAME }}` is the cell's value. The
/// template engine is the one of resource scripts ([`crate::template`]), and so is its
/// rule: a name that is not there is an error (loading refuses such a text first, see
/// `check_flow_keys::across`).
pub fn render(
    text: &str,
    vars: &BTreeMap<String, String>,
) -> Result<String, crate::template::TemplateError> {
    crate::template::render(text, &serde_json::json!({ "vars": vars }))
}

/// The `{{ .vars.NAME }}` names a text uses (none when it is no template).
pub fn vars_used(text: &str) -> Vec<String> {
    crate::template::fields_under(text, "vars").unwrap_or_default()
}
