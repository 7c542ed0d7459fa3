//! Where a history may be cut: turns, and cut points that never separate a
//! tool call from its result.
//!
//! A cut index `i` compacts `messages[..i]` and keeps `messages[i..]`.

use std::collections::HashMap;

use flynn_protocol::{ContentBlock, Message, Role};

/// Whether `message` starts a turn: a user message with a block that is
/// not a tool result (text, an image), other than a message of tool
/// results with the images the tools attached.
pub(crate) fn is_turn_start(message: &Message) -> bool {
    message.role == Role::User
        && !message.is_tool_results()
        && message
            .content
            .iter()
            .any(|block| !matches!(block, ContentBlock::ToolResult { .. }))
}

/// Whether `message` is a user message of tool results only (and the
/// images the tools attached).
fn is_tool_results(message: &Message) -> bool {
    message.is_tool_results()
}

/// The turns and safe cut points of one history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cuts {
    /// Where each turn starts, in order; the first is always 0 (messages
    /// before the first real turn start belong to the first turn).
    pub turn_starts: Vec<usize>,
    /// The safe cut points in `1..len`, ascending.
    pub safe: Vec<usize>,
}

impl Cuts {
    /// The turns and safe cut points of `messages`.
    pub fn of(messages: &[Message]) -> Self {
        let n = messages.len();
        // Cuts in `call + 1 ..= result` would separate a call from its
        // result: count, per cut, the pairs it would split.
        let mut split = vec![0_i64; n + 2];
        let mut called_at: HashMap<&str, usize> = HashMap::new();
        for (i, message) in messages.iter().enumerate() {
            match message.role {
                Role::Assistant => {
                    for (id, _, _) in message.tool_uses() {
                        called_at.insert(id, i);
                    }
                }
                Role::User => {
                    for block in &message.content {
                        if let ContentBlock::ToolResult { tool_use_id, .. } = block
                            && let Some(&call) = called_at.get(tool_use_id.as_str())
                            && call < i
                        {
                            split[call + 1] += 1;
                            split[i + 1] -= 1;
                        }
                    }
                }
            }
        }
        let mut turn_starts = vec![0];
        let mut safe = Vec::new();
        let mut splitting = 0_i64;
        for i in 0..n {
            splitting += split[i];
            if i == 0 {
                continue;
            }
            let turn_start = is_turn_start(&messages[i]);
            if turn_start {
                turn_starts.push(i);
            }
            let after_results =
                messages[i].role == Role::Assistant && is_tool_results(&messages[i - 1]);
            if (turn_start || after_results) && splitting == 0 {
                safe.push(i);
            }
        }
        Cuts { turn_starts, safe }
    }

    /// The cut that keeps the last `keep_turns` turns whole: the start of
    /// the oldest kept turn, or the latest safe cut before it when that
    /// start is not safe; 0 when there are no more turns than that. With
    /// `keep_turns` 0, the last safe cut.
    pub fn keeping_turns(&self, keep_turns: usize) -> usize {
        let turns = self.turn_starts.len();
        if keep_turns == 0 {
            return self.safe.last().copied().unwrap_or(0);
        }
        if turns <= keep_turns {
            return 0;
        }
        let start = self.turn_starts[turns - keep_turns];
        self.safe
            .iter()
            .copied()
            .take_while(|&cut| cut <= start)
            .last()
            .unwrap_or(0)
    }

    /// The first safe cut after `cut`, if any.
    pub fn next_after(&self, cut: usize) -> Option<usize> {
        self.safe.iter().copied().find(|&safe| safe > cut)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(ids: &[&str]) -> Message {
        Message {
            role: Role::Assistant,
            content: ids
                .iter()
                .map(|id| ContentBlock::ToolUse {
                    id: (*id).into(),
                    name: "shell.exec".into(),
                    input: json!({}),
                })
                .collect(),
        }
    }

    fn results(ids: &[&str]) -> Message {
        Message {
            role: Role::User,
            content: ids
                .iter()
                .map(|id| ContentBlock::ToolResult {
                    tool_use_id: (*id).into(),
                    content: "ok".into(),
                    is_error: false,
                })
                .collect(),
        }
    }

    #[test]
    fn turns_start_at_user_text_and_cuts_fall_between_exchanges() {
        let history = vec![
            Message::assistant("greeting before any user message"), // 0
            Message::user("one"),                                   // 1
            call(&["a"]),                                           // 2
            results(&["a"]),                                        // 3
            call(&["b", "c"]),                                      // 4
            results(&["b", "c"]),                                   // 5
            Message::assistant("done"),                             // 6
            Message::user("two"),                                   // 7
            Message::user("two again"),                             // 8: same-role run
            Message::assistant("answer"),                           // 9
        ];
        let cuts = Cuts::of(&history);
        assert_eq!(
            cuts,
            Cuts {
                turn_starts: vec![0, 1, 7, 8],
                safe: vec![1, 4, 6, 7, 8],
            }
        );
        assert_eq!(cuts.keeping_turns(1), 8);
        assert_eq!(cuts.keeping_turns(2), 7);
        assert_eq!(cuts.keeping_turns(3), 1);
        assert_eq!(cuts.keeping_turns(4), 0);
        assert_eq!(cuts.keeping_turns(0), 8);
        assert_eq!(cuts.next_after(1), Some(4));
        assert_eq!(cuts.next_after(8), None);
    }

    #[test]
    fn a_cut_never_falls_between_a_call_and_its_result() {
        let history = vec![
            Message::user("go"),       // 0
            call(&["a"]),              // 1
            Message::user("hurry up"), // 2: a turn start, but "a" is unanswered
            results(&["a"]),           // 3
            Message::assistant("ok"),  // 4
            Message::user("next"),     // 5
            call(&["b"]),              // 6: never answered
            Message::user("again"),    // 7
        ];
        let cuts = Cuts::of(&history);
        assert_eq!(cuts.turn_starts, vec![0, 2, 5, 7]);
        assert_eq!(cuts.safe, vec![4, 5, 7]);
        // Keeping 3 turns would cut at 2; the latest safe cut before it is none.
        assert_eq!(cuts.keeping_turns(3), 0);
        assert_eq!(cuts.keeping_turns(2), 5);
    }

    #[test]
    fn images_a_tool_attached_do_not_start_a_turn() {
        let mut screenshot = results(&["a"]);
        screenshot.content.push(ContentBlock::Image {
            source: flynn_protocol::ImageSource::Base64 {
                media_type: "image/png".into(),
                data: "AAAA".into(),
            },
        });
        let history = vec![
            Message::user("look"),       // 0
            call(&["a"]),                // 1
            screenshot,                  // 2: results and their image
            Message::assistant("I see"), // 3
            Message::user("next"),       // 4
        ];
        let cuts = Cuts::of(&history);
        assert_eq!(
            cuts,
            Cuts {
                turn_starts: vec![0, 4],
                safe: vec![3, 4],
            }
        );
    }
}
