//! A loop's history as groups of shared messages: one step's messages are one allocation
//! (`Arc<[Message]>`), held at once by the loop actor's history, the turn's request, the
//! journal's write and each subscriber's `StepDone`, instead of a copy for each.
//!
//! Why groups rather than `Vec<Arc<Message>>` or `Arc<Message>` inside events: a step's
//! messages travel as one group everywhere (the commit, the event, the history's growth),
//! so one reference count per step is all the sharing needs, and the event's field stays a
//! plain slice of messages for every reader.

use std::sync::Arc;

use treadle_event::{Block, Message};

/// A history: messages in order, kept as the groups they were committed in. Cloning it
/// clones the groups' handles, not the messages.
#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    groups: Vec<Arc<[Message]>>,
    /// Messages over all groups.
    len: usize,
}

/// A step's `messages` as the group the history, the turn's request and the `StepDone`
/// share, each without spare room: they are kept for the session's life, and the strings a
/// stream or a tool built keep the room they grew into (a copy used to trim it; an idle
/// session's size, docs/benchmarks.md). A shrink is in place, not a copy.
pub(crate) fn group(mut messages: Vec<Message>) -> Arc<[Message]> {
    for message in &mut messages {
        message.content.shrink_to_fit();
        for block in &mut message.content {
            match block {
                Block::Text { text } | Block::Reasoning { text } => text.shrink_to_fit(),
                Block::ToolUse {
                    id,
                    name,
                    arguments,
                } => {
                    id.shrink_to_fit();
                    name.shrink_to_fit();
                    arguments.shrink_to_fit();
                }
                Block::ToolResult {
                    call_id, content, ..
                } => {
                    call_id.shrink_to_fit();
                    content.shrink_to_fit();
                }
            }
        }
    }
    messages.into()
}

impl From<Vec<Message>> for History {
    /// A history of one group (a restored or forked one, built message by message).
    fn from(messages: Vec<Message>) -> Self {
        let mut history = History::default();
        history.push_group(messages.into());
        history
    }
}

impl History {
    /// Appends one message, as a group of its own (a turn's input).
    pub(crate) fn push(&mut self, message: Message) {
        self.push_group(Arc::from([message]));
    }

    /// Appends a group of messages (a step's), sharing it.
    pub(crate) fn push_group(&mut self, group: Arc<[Message]>) {
        if group.is_empty() {
            return;
        }
        self.len += group.len();
        self.groups.push(group);
    }

    /// Appends `other`'s groups, sharing them.
    pub(crate) fn append(&mut self, other: &History) {
        for group in &other.groups {
            self.push_group(Arc::clone(group));
        }
    }

    /// How many messages it holds.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Its messages, oldest first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Message> {
        self.groups.iter().flat_map(|group| group.iter())
    }

    /// Its messages as one vector of copies (for a reader outside the loop, or a
    /// compaction, which rewrites the history).
    pub(crate) fn to_vec(&self) -> Vec<Message> {
        let mut messages = Vec::with_capacity(self.len);
        messages.extend(self.iter().cloned());
        messages
    }

    /// Holds no spare room (a loop parked between turns, perhaps for long).
    pub(crate) fn shrink_to_fit(&mut self) {
        self.groups.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use treadle_event::Role;

    #[test]
    fn groups_are_shared_and_read_in_order() {
        let step: Arc<[Message]> = vec![
            Message::text(Role::Assistant, "a"),
            Message::text(Role::Tool, "b"),
        ]
        .into();
        let mut history = History::from(vec![Message::user("hi")]);
        history.push_group(Arc::clone(&step));
        history.push_group(Vec::new().into());
        history.push(Message::user("again"));
        assert_eq!(history.len(), 4);
        let texts: Vec<String> = history.iter().map(Message::text_content).collect();
        assert_eq!(texts, ["hi", "a", "b", "again"]);
        // The step's messages are the event's allocation, not a copy of it.
        assert_eq!(Arc::strong_count(&step), 2);
        let copy = history.clone();
        assert_eq!(Arc::strong_count(&step), 3);
        assert_eq!(copy.to_vec(), history.to_vec());
    }

    #[test]
    fn a_group_holds_no_spare_room() {
        let mut content = String::with_capacity(128);
        content.push('1');
        let mut blocks = Vec::with_capacity(4);
        blocks.push(Block::ToolResult {
            call_id: "call_1".into(),
            content,
            is_error: false,
        });
        let group = group(vec![Message {
            role: Role::Tool,
            content: blocks,
        }]);
        assert_eq!(group[0].content.capacity(), 1);
        let Block::ToolResult { content, .. } = &group[0].content[0] else {
            panic!("not a result: {group:?}");
        };
        assert_eq!(content.capacity(), 1);
    }
}
