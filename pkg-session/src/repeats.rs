//! Loop detection: a model that makes the same tool call again and again, getting the same
//! result each time, is stuck, and would otherwise spend its whole step limit doing it.
//!
//! [`RepeatWatch`] remembers the tool interactions (tool, arguments, result) of a turn's
//! last [`WINDOW`] tool steps. Once one interaction has happened more than `limit` times
//! in that window, its result is followed by a nudge telling the model that repeating it
//! changes nothing; if the model repeats it once more after the nudge, the turn ends with
//! [`treadle_event::FailureCause::Repeated`]. The result is part of the identity, so a call
//! repeated because what it looks at changed (a build re-run after an edit) is not a loop.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashSet, VecDeque};
use std::hash::{Hash, Hasher};

use treadle_event::{Block, Message};

/// How many of a turn's most recent tool steps are looked at.
pub(crate) const WINDOW: usize = 10;

/// The default of [`crate::SessionBuilder::repeat_limit`].
pub(crate) const DEFAULT_REPEAT_LIMIT: u32 = 3;

/// What the watch says about one step's calls.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Repeats {
    /// Nothing to say (nudges, if any, were added to the results).
    Fine,
    /// A call was repeated after its nudge: the turn should end with this explanation.
    Stuck(String),
}

/// The interactions of a turn's recent tool steps.
#[derive(Debug, Default)]
pub(crate) struct RepeatWatch {
    /// Most identical interactions allowed before the nudge; `0` turns the watch off.
    limit: u32,
    /// One entry per tool step, newest last: the hashes of its interactions.
    window: VecDeque<Vec<u64>>,
    /// Interactions that were already nudged.
    nudged: HashSet<u64>,
}

/// One call of a step as the watch sees it.
pub(crate) struct Interaction<'a> {
    pub name: &'a str,
    pub arguments: &'a str,
}

impl RepeatWatch {
    pub(crate) fn new(limit: u32) -> Self {
        Self {
            limit,
            ..Self::default()
        }
    }

    /// Looks at one step's calls and their results (`results`, one `ToolResult` per call in
    /// call order). Adds a nudge to the result of a call repeated past the limit for the
    /// first time; reports [`Repeats::Stuck`] for one repeated again after its nudge.
    pub(crate) fn observe(&mut self, calls: &[Interaction<'_>], results: &mut Message) -> Repeats {
        if self.limit == 0 || calls.is_empty() {
            return Repeats::Fine;
        }
        let mut hashes = Vec::with_capacity(calls.len());
        let mut stuck = None;
        let mut blocks = results
            .content
            .iter_mut()
            .filter(|b| matches!(b, Block::ToolResult { .. }));
        for call in calls {
            let Some(Block::ToolResult { content, .. }) = blocks.next() else {
                break;
            };
            let hash = identity(call, content);
            // Identical calls in one step are one parallel batch the model asked for at
            // once, not a loop: a loop is the same call again in later steps.
            if hashes.contains(&hash) {
                continue;
            }
            hashes.push(hash);
            let seen = self.count(hash) + 1;
            if seen <= self.limit as usize {
                continue;
            }
            if self.nudged.insert(hash) {
                content.push_str(&nudge(call.name, seen));
            } else if stuck.is_none() {
                stuck = Some(format!(
                    "the model is stuck in a loop: it called {} with the same arguments {seen} \
                     times, getting the same result, and went on after being told to stop \
                     ({})",
                    call.name,
                    preview(call.arguments)
                ));
            }
        }
        self.window.push_back(hashes);
        if self.window.len() > WINDOW {
            self.window.pop_front();
        }
        stuck.map_or(Repeats::Fine, Repeats::Stuck)
    }

    fn count(&self, hash: u64) -> usize {
        self.window.iter().map(|step| count_in(step, hash)).sum()
    }
}

fn count_in(hashes: &[u64], hash: u64) -> usize {
    hashes.iter().filter(|h| **h == hash).count()
}

/// The identity of an interaction: the tool, its arguments (as parsed JSON, so spacing
/// does not matter) and its result.
fn identity(call: &Interaction<'_>, result: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    call.name.hash(&mut hasher);
    match serde_json::from_str::<serde_json::Value>(call.arguments) {
        Ok(value) => value.to_string().hash(&mut hasher),
        Err(_) => call.arguments.hash(&mut hasher),
    }
    result.hash(&mut hasher);
    hasher.finish()
}

/// What the model reads after the result of a call it keeps repeating.
fn nudge(tool: &str, times: usize) -> String {
    format!(
        "\n\n[note: you have now called {tool} {times} times with these same arguments and \
         got this same result each time. Calling it again will not change anything. Use what you \
         already have: do the next part of the task or give your final answer. If you call \
         it the same way again, the turn ends as stuck in a loop.]"
    )
}

fn preview(arguments: &str) -> String {
    const MAX: usize = 120;
    match arguments.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &arguments[..end]),
        None => arguments.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use treadle_event::Role;

    use super::*;

    fn results(contents: &[&str]) -> Message {
        Message {
            role: Role::Tool,
            content: contents
                .iter()
                .enumerate()
                .map(|(i, c)| Block::ToolResult {
                    call_id: i.to_string(),
                    content: (*c).to_owned(),
                    is_error: false,
                })
                .collect(),
        }
    }

    fn text(message: &Message, i: usize) -> &str {
        match &message.content[i] {
            Block::ToolResult { content, .. } => content,
            _ => "",
        }
    }

    const WRITE: Interaction<'static> = Interaction {
        name: "write_file",
        arguments: r#"{"path": "a", "content": "x"}"#,
    };

    #[test]
    fn nudges_past_the_limit_then_reports_stuck() {
        let mut watch = RepeatWatch::new(2);
        for _ in 0..2 {
            let mut r = results(&["wrote 1 byte"]);
            assert_eq!(watch.observe(&[WRITE], &mut r), Repeats::Fine);
            assert_eq!(text(&r, 0), "wrote 1 byte");
        }
        let mut r = results(&["wrote 1 byte"]);
        assert_eq!(watch.observe(&[WRITE], &mut r), Repeats::Fine);
        assert!(
            text(&r, 0)
                .starts_with("wrote 1 byte\n\n[note: you have now called write_file 3 times")
        );
        // Same call, spelled with other spacing: still the same interaction.
        let spaced = Interaction {
            name: "write_file",
            arguments: r#"{"content":"x","path":"a"}"#,
        };
        let mut r = results(&["wrote 1 byte"]);
        match watch.observe(&[spaced], &mut r) {
            Repeats::Stuck(why) => {
                assert!(why.contains("write_file"), "{why}");
                assert!(why.contains("4 times"), "{why}");
            }
            Repeats::Fine => panic!("the fourth copy after a nudge is a loop"),
        }
    }

    #[test]
    fn a_different_result_or_call_is_not_a_repeat() {
        let mut watch = RepeatWatch::new(1);
        for i in 0..5 {
            let mut r = results(&[&format!("build output {i}")]);
            assert_eq!(watch.observe(&[WRITE], &mut r), Repeats::Fine);
            assert!(!text(&r, 0).contains("[note"));
        }
        let mut off = RepeatWatch::new(0);
        for _ in 0..5 {
            let mut r = results(&["same"]);
            assert_eq!(off.observe(&[WRITE], &mut r), Repeats::Fine);
        }
    }

    #[test]
    fn identical_calls_in_one_step_are_a_batch_not_a_loop() {
        let mut watch = RepeatWatch::new(2);
        let calls: Vec<Interaction<'_>> = (0..8).map(|_| WRITE.clone_ref()).collect();
        let mut r = results(&["rested"; 8]);
        assert_eq!(watch.observe(&calls, &mut r), Repeats::Fine);
        assert!((0..8).all(|i| !text(&r, i).contains("[note")));
        // The same batch again in later steps is a repeat, counted once per step.
        let mut r = results(&["rested"; 8]);
        assert_eq!(watch.observe(&calls, &mut r), Repeats::Fine);
        let mut r = results(&["rested"; 8]);
        assert_eq!(watch.observe(&calls, &mut r), Repeats::Fine);
        assert!(text(&r, 0).contains("[note: you have now called write_file 3 times"));
        let mut r = results(&["rested"; 8]);
        assert!(matches!(watch.observe(&calls, &mut r), Repeats::Stuck(_)));
    }

    #[test]
    fn old_steps_leave_the_window() {
        let mut watch = RepeatWatch::new(1);
        let other = Interaction {
            name: "read_file",
            arguments: "{}",
        };
        let mut r = results(&["same"]);
        watch.observe(&[WRITE], &mut r);
        for i in 0..WINDOW {
            let mut r = results(&[&i.to_string()]);
            watch.observe(&[other.clone_ref()], &mut r);
        }
        let mut r = results(&["same"]);
        assert_eq!(watch.observe(&[WRITE], &mut r), Repeats::Fine);
        assert!(!text(&r, 0).contains("[note"));
    }

    impl Interaction<'_> {
        fn clone_ref(&self) -> Interaction<'_> {
            Interaction {
                name: self.name,
                arguments: self.arguments,
            }
        }
    }
}
