//! `ensemble:`: several agents answer the same question in one vocabulary of verdicts, a
//! rule decides among their votes, and the block routes on the decision.
//!
//! The block's `verdicts:` is both the vocabulary every member votes in and the block's
//! routing. Loading hands each member the names (not the targets, and not the reserved
//! `failure` catch) as its own bare `verdicts:`, so a member is an ordinary agent step:
//! it is keyed, cached, recorded and logged like one. A judge named in `decide:` is an
//! agent step too, made at load from the block, whose prompt gets every member's vote and
//! note when it runs.

use schemars::JsonSchema;
use serde::Deserialize;

use super::at::At;
use super::flow_keys::{FAILURE_VERDICT, Verdict, VerdictEntry};

/// The rules `decide:` names besides an agent.
pub const RULES: [&str; 3] = ["majority", "unanimous", "any"];

/// What `member_errors:` may be.
pub const MEMBER_ERRORS: [&str; 2] = ["fail", "exclude"];

/// `ensemble:`: the members, their shared vocabulary and how their votes are decided.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Ensemble")]
pub struct Ensemble<S> {
    /// The verdicts every member votes in, in order, each with where the block goes when
    /// it is the decision (`- approve: publish`; a bare name continues in order).
    pub verdicts: Vec<VerdictEntry>,
    /// `majority` (the default), `unanimous`, `any` (the first verdict of `verdicts:` that
    /// anybody chose), or the name of an agent that judges from every vote and note.
    #[serde(default)]
    pub decide: Option<At<String>>,
    /// `fail` (the default): one member that errors fails the block; `exclude`: the
    /// decision is made among the members that voted.
    #[serde(default)]
    pub member_errors: Option<At<String>>,
    /// The members: agent steps (`{ agent: NAME, prompt: ... }`), run at once.
    pub agents: Vec<At<S>>,
    /// The judge's step, made at load when `decide:` names an agent.
    #[serde(skip)]
    #[schemars(skip)]
    pub judge: Option<Box<At<S>>>,
}

/// How an ensemble decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule<'a> {
    /// More than half of the voters chose it.
    Majority,
    /// Every voter chose it.
    Unanimous,
    /// The first verdict in `verdicts:` order that anybody chose.
    Any,
    /// This agent judges.
    Judge(&'a str),
}

impl<S> Ensemble<S> {
    /// The rule `decide:` names (`majority` when it is left out).
    pub fn rule(&self) -> Rule<'_> {
        match self.decide.as_ref().map(|d| d.value.as_str()) {
            None | Some("majority") => Rule::Majority,
            Some("unanimous") => Rule::Unanimous,
            Some("any") => Rule::Any,
            Some(agent) => Rule::Judge(agent),
        }
    }

    /// Whether members that errored are left out of the decision.
    pub fn excludes_errors(&self) -> bool {
        self.member_errors
            .as_ref()
            .is_some_and(|m| m.value == "exclude")
    }

    /// The verdict names the members choose from, in order (`failure` is not one).
    pub fn choices(&self) -> Vec<String> {
        self.verdicts
            .iter()
            .flat_map(|v| v.value.pairs())
            .map(|(name, _)| name)
            .filter(|name| *name != FAILURE_VERDICT)
            .map(str::to_owned)
            .collect()
    }

    /// The choices as bare `verdicts:` entries, for a member or the judge.
    pub(super) fn bare_verdicts(&self) -> Vec<VerdictEntry> {
        self.choices()
            .into_iter()
            .map(|c| At::new(Verdict::Bare(c)))
            .collect()
    }

    /// The nested steps: the members, then the judge.
    pub fn steps(&self) -> impl Iterator<Item = &At<S>> {
        self.agents.iter().chain(self.judge.as_deref())
    }
}

/// One member's vote: who, what, and the note it gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vote {
    /// The member's step name.
    pub member: String,
    /// The verdict it chose.
    pub verdict: String,
    /// What it said with it.
    pub note: String,
}

/// Why the votes decide nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoDecision {
    /// Nobody voted.
    #[error("no member voted")]
    NoVotes,
    /// No verdict has more than half of the votes.
    #[error("no majority: {0}; name an agent in `decide:` to break ties")]
    Tie(String),
    /// The voters did not all agree.
    #[error("the members did not agree: {0}")]
    Disagreed(String),
}

/// The tally of `votes`, as `approve: a, b; reject: c`.
pub fn tally(votes: &[Vote]) -> String {
    let mut by: Vec<(&str, Vec<&str>)> = Vec::new();
    for v in votes {
        match by.iter_mut().find(|(name, _)| *name == v.verdict) {
            Some((_, who)) => who.push(&v.member),
            None => by.push((&v.verdict, vec![&v.member])),
        }
    }
    by.iter()
        .map(|(name, who)| format!("{name}: {}", who.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The decision of `votes` under a rule that needs no agent (`choices` in their order).
pub fn decide(rule: Rule<'_>, votes: &[Vote], choices: &[String]) -> Result<String, NoDecision> {
    if votes.is_empty() {
        return Err(NoDecision::NoVotes);
    }
    let count = |c: &str| votes.iter().filter(|v| v.verdict == c).count();
    match rule {
        Rule::Unanimous => {
            let first = &votes[0].verdict;
            if votes.iter().all(|v| &v.verdict == first) {
                Ok(first.clone())
            } else {
                Err(NoDecision::Disagreed(tally(votes)))
            }
        }
        Rule::Any => choices
            .iter()
            .find(|c| count(c) > 0)
            .cloned()
            .ok_or(NoDecision::NoVotes),
        // A judge's decision is its own verdict; the rule here is the fallback's.
        Rule::Majority | Rule::Judge(_) => choices
            .iter()
            .find(|c| count(c) * 2 > votes.len())
            .cloned()
            .ok_or_else(|| NoDecision::Tie(tally(votes))),
    }
}

/// The judge's prompt: every member's vote and note, and the verdicts to choose from.
pub fn judge_prompt(votes: &[Vote], excluded: &[String], choices: &[String]) -> String {
    let mut out = String::from(
        "You judge an ensemble. Each member below answered the same question with a verdict and a note.\n\n",
    );
    for v in votes {
        out.push_str(&format!(
            "- {} voted `{}`: {}\n",
            v.member,
            v.verdict,
            v.note.trim()
        ));
    }
    if !excluded.is_empty() {
        out.push_str(&format!(
            "\nThese members failed and did not vote: {}.\n",
            excluded.join(", ")
        ));
    }
    out.push_str(&format!(
        "\nDecide with the verdict tool, choosing one of: {}. Say briefly why.",
        choices.join(", ")
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn votes(list: &[(&str, &str)]) -> Vec<Vote> {
        list.iter()
            .map(|(m, v)| Vote {
                member: (*m).to_owned(),
                verdict: (*v).to_owned(),
                note: String::new(),
            })
            .collect()
    }

    fn choices() -> Vec<String> {
        vec!["reject".to_owned(), "approve".to_owned()]
    }

    #[test]
    fn majority_needs_more_than_half() {
        let v = votes(&[("a", "approve"), ("b", "reject"), ("c", "approve")]);
        assert_eq!(decide(Rule::Majority, &v, &choices()), Ok("approve".into()));
        let tie = votes(&[("a", "approve"), ("b", "reject")]);
        assert!(matches!(
            decide(Rule::Majority, &tie, &choices()),
            Err(NoDecision::Tie(t)) if t == "approve: a; reject: b"
        ));
    }

    #[test]
    fn unanimous_and_any() {
        let v = votes(&[("a", "approve"), ("b", "reject"), ("c", "approve")]);
        assert!(matches!(
            decide(Rule::Unanimous, &v, &choices()),
            Err(NoDecision::Disagreed(_))
        ));
        // `reject` is first in the vocabulary: one objection is enough.
        assert_eq!(decide(Rule::Any, &v, &choices()), Ok("reject".into()));
        let all = votes(&[("a", "approve"), ("b", "approve")]);
        assert_eq!(
            decide(Rule::Unanimous, &all, &choices()),
            Ok("approve".into())
        );
        assert_eq!(
            decide(Rule::Majority, &[], &choices()),
            Err(NoDecision::NoVotes)
        );
    }
}
