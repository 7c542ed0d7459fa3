//! Context management for Flynn: shaping the history before it is sent.
//!
//! [`normalize`] merges what a failed turn left behind, [`repair`] pairs
//! every tool call with a result so a history cut short by a crash is
//! still one that providers accept, and [`prepare`] does both.
//!
//! [`Compactor`] keeps a conversation within its model's context window:
//! it replaces the older part of a session's stored history with one
//! summary message written by a [`Summariser`], falling back to a
//! deterministic extractive summary whenever the summariser fails, so it
//! always finishes. Tokens are counted with the models'
//! `flynn_models::TokenCounter`, since how tokens are counted depends on
//! the model.

mod compaction;
mod error;

use std::collections::{HashMap, HashSet};

pub use compaction::{
    Budget, COMPACTION_PROMPT, CompactionReport, CompactionSettings, Compactor, MemoryFlush,
    SUMMARY_PREFIX, Summariser, is_summary, render_message,
};
pub use error::CompactionError;

use flynn_protocol::{ContentBlock, Message, Role};

/// The result given to a tool call whose result never arrived: the process
/// stopped (a crash, a kill) while the tool ran.
pub const INTERRUPTED_RESULT: &str = "interrupted: the tool did not finish because Flynn stopped while it ran; it may or may not have had an effect";

/// What an image a tool attached in an earlier turn becomes (see
/// [`fade_tool_images`]).
pub const FADED_IMAGE: &str =
    "[the image that came with this result was shown in an earlier turn and is no longer sent]";

/// A stored history made ready to send: [`normalize`], then [`repair`],
/// then [`fade_tool_images`].
pub fn prepare(history: Vec<Message>) -> Vec<Message> {
    fade_tool_images(repair(normalize(history)))
}

/// Replaces the images tools attached in earlier turns (those in messages
/// of tool results before the last user message that is not one) with
/// [`FADED_IMAGE`], appended to the result before each. The model saw
/// them in their turn; sending every old screenshot again would cost its
/// tokens on every call. The images of the turn under way, and those a
/// person sent, stay.
pub fn fade_tool_images(mut history: Vec<Message>) -> Vec<Message> {
    let Some(start) = history
        .iter()
        .rposition(|message| message.role == Role::User && !message.is_tool_results())
    else {
        return history;
    };
    for message in &mut history[..start] {
        let from_tools = message
            .content
            .iter()
            .any(|block| matches!(block, ContentBlock::ToolResult { .. }));
        if from_tools {
            message.replace_images(FADED_IMAGE);
        }
    }
    history
}

/// Makes every tool call answered and every tool result asked for, as
/// providers require: a `tool_use` whose `tool_result` is missing from the
/// next message gets a synthetic error result ([`INTERRUPTED_RESULT`]),
/// placed first in that message (or in a new user message), and a
/// `tool_result` that answers no call of the previous message is dropped.
///
/// Call ids are made unique too (providers refuse a history that repeats
/// one, and a server that numbers its calls afresh in every answer repeats
/// them): a call whose id came earlier is renamed `<id>_<n>`, and so is the
/// result that answers it (the n-th result with an id answers the n-th call
/// with it). A second result for one call is dropped.
pub fn repair(history: Vec<Message>) -> Vec<Message> {
    repair_reporting(history).0
}

/// [`repair`], also returning the ids of the calls given a synthetic result
/// (as renamed).
pub fn repair_reporting(history: Vec<Message>) -> (Vec<Message>, Vec<String>) {
    let mut ids = CallIds::new(&history);
    let mut out: Vec<Message> = Vec::with_capacity(history.len() + 1);
    let mut interrupted = Vec::new();
    // The calls of the previous message: (id as stored, id as sent).
    let mut asked: Vec<(String, String)> = Vec::new();
    let mut iter = history.into_iter().peekable();
    while let Some(mut message) = iter.next() {
        match message.role {
            Role::Assistant => {
                asked.clear();
                for block in &mut message.content {
                    if let ContentBlock::ToolUse { id, .. } = block {
                        let unique = ids.claim(id);
                        asked.push((std::mem::replace(id, unique.clone()), unique));
                    }
                }
                out.push(message);
                let next_is_user = iter.peek().is_some_and(|m| m.role == Role::User);
                if !asked.is_empty() && !next_is_user {
                    // The results never arrived and nothing followed.
                    let content = synthetic(asked.drain(..), &mut interrupted);
                    out.push(Message {
                        role: Role::User,
                        content,
                    });
                }
            }
            Role::User => {
                // Each result answers the first call not answered yet that
                // has its id; a result that answers none is dropped.
                let mut open = std::mem::take(&mut asked);
                message.content.retain_mut(|block| match block {
                    ContentBlock::ToolResult { tool_use_id, .. } => {
                        match open.iter().position(|(stored, _)| stored == tool_use_id) {
                            Some(at) => {
                                *tool_use_id = open.remove(at).1;
                                true
                            }
                            None => false,
                        }
                    }
                    _ => true,
                });
                if !open.is_empty() {
                    let mut content = synthetic(open.into_iter(), &mut interrupted);
                    // Results first, as Anthropic requires.
                    let (results, rest): (Vec<_>, Vec<_>) = message
                        .content
                        .into_iter()
                        .partition(|block| matches!(block, ContentBlock::ToolResult { .. }));
                    let mut merged = results;
                    merged.append(&mut content);
                    merged.extend(rest);
                    message.content = merged;
                }
                if !message.content.is_empty() {
                    out.push(message);
                }
            }
        }
    }
    (out, interrupted)
}

/// The call ids of one history, handed out once each.
struct CallIds {
    /// Every id a call has in the history as stored: a new name must not
    /// take one that a later call has.
    stored: HashSet<String>,
    /// Ids given out so far.
    given: HashSet<String>,
    /// For an id given out once: the `n` its next repeat tries first
    /// (every smaller one is taken), so `n` repeats cost `n`, not `n²`.
    next: HashMap<String, u64>,
}

impl CallIds {
    fn new(history: &[Message]) -> Self {
        CallIds {
            stored: history
                .iter()
                .flat_map(|message| message.tool_uses().map(|(id, _, _)| id.to_owned()))
                .collect(),
            given: HashSet::new(),
            next: HashMap::new(),
        }
    }

    /// `id` the first time; `<id>_<n>`, with the smallest free `n` from 2,
    /// after that.
    fn claim(&mut self, id: &str) -> String {
        if self.given.insert(id.to_owned()) {
            return id.to_owned();
        }
        let n = self.next.entry(id.to_owned()).or_insert(2);
        loop {
            let candidate = format!("{id}_{n}");
            *n = n.saturating_add(1);
            if !self.stored.contains(&candidate) && self.given.insert(candidate.clone()) {
                return candidate;
            }
        }
    }
}

fn synthetic(
    calls: impl Iterator<Item = (String, String)>,
    interrupted: &mut Vec<String>,
) -> Vec<ContentBlock> {
    calls
        .map(|(_, id)| {
            interrupted.push(id.clone());
            ContentBlock::ToolResult {
                tool_use_id: id,
                content: INTERRUPTED_RESULT.to_owned(),
                is_error: true,
            }
        })
        .collect()
}

/// Makes a stored history safe to send: drops tool results from the
/// assistant's messages and tool calls from the user's (a call is the
/// model's, its result the user's side), merges consecutive messages of the same role (left behind when a
/// turn failed before the model answered) and drops empty messages.
pub fn normalize(history: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(history.len());
    for mut message in history {
        // A call is the model's and its result the user's side: one in
        // the other's message is answered by nothing, or answers nothing.
        message.content.retain(|block| match block {
            ContentBlock::ToolResult { .. } => message.role == Role::User,
            ContentBlock::ToolUse { .. } => message.role == Role::Assistant,
            _ => true,
        });
        if message.content.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == message.role => last.content.extend(message.content),
            _ => out.push(message),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> ContentBlock {
        ContentBlock::ToolUse {
            id: id.into(),
            name: "shell.exec".into(),
            input: json!({"command": "sleep 30"}),
        }
    }

    fn result(id: &str, content: &str, is_error: bool) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: content.into(),
            is_error,
        }
    }

    fn assistant(content: Vec<ContentBlock>) -> Message {
        Message {
            role: Role::Assistant,
            content,
        }
    }

    fn user(content: Vec<ContentBlock>) -> Message {
        Message {
            role: Role::User,
            content,
        }
    }

    #[test]
    fn a_call_cut_off_at_the_end_gets_an_interrupted_result() {
        let history = vec![
            Message::user("wait"),
            assistant(vec![call("t1"), call("t2")]),
        ];
        let (repaired, ids) = repair_reporting(history.clone());
        assert_eq!(ids, ["t1", "t2"]);
        let mut expected = history;
        expected.push(user(vec![
            result("t1", INTERRUPTED_RESULT, true),
            result("t2", INTERRUPTED_RESULT, true),
        ]));
        assert_eq!(repaired, expected);
    }

    #[test]
    fn a_later_message_after_a_cut_off_call_gets_the_result_first() {
        let history = vec![
            Message::user("wait"),
            assistant(vec![call("t1"), call("t2")]),
            user(vec![result("t2", "done", false)]),
            Message::user("are you there?"),
        ];
        assert_eq!(
            prepare(history),
            vec![
                Message::user("wait"),
                assistant(vec![call("t1"), call("t2")]),
                user(vec![
                    result("t2", "done", false),
                    result("t1", INTERRUPTED_RESULT, true),
                    ContentBlock::text("are you there?"),
                ]),
            ]
        );
    }

    #[test]
    fn results_that_answer_nothing_are_dropped_and_whole_histories_are_unchanged() {
        let whole = vec![
            Message::user("go"),
            assistant(vec![call("t1")]),
            user(vec![result("t1", "ok", false)]),
            Message::assistant("done"),
        ];
        assert_eq!(repair(whole.clone()), whole);
        let orphan = vec![
            user(vec![result("gone", "old", false), ContentBlock::text("hi")]),
            Message::assistant("hello"),
        ];
        assert_eq!(
            repair(orphan),
            vec![Message::user("hi"), Message::assistant("hello")]
        );
    }

    #[test]
    fn repeated_call_ids_are_renamed_with_their_results() {
        // `call_0` again in a later turn, and twice in one message: each
        // repeat is renamed, and so is the result that answers it (the
        // n-th result of an id answers the n-th call with it).
        let history = vec![
            Message::user("go"),
            assistant(vec![call("call_0")]),
            user(vec![result("call_0", "first", false)]),
            assistant(vec![call("call_0"), call("call_0"), call("call_0_2")]),
            user(vec![
                result("call_0", "second", false),
                result("call_0_2", "fourth", false),
                result("call_0", "third", false),
                result("call_0", "a fourth answer to a pair", false),
            ]),
            Message::assistant("done"),
        ];
        assert_eq!(
            repair(history),
            vec![
                Message::user("go"),
                assistant(vec![call("call_0")]),
                user(vec![result("call_0", "first", false)]),
                assistant(vec![call("call_0_3"), call("call_0_4"), call("call_0_2")]),
                user(vec![
                    result("call_0_3", "second", false),
                    result("call_0_2", "fourth", false),
                    result("call_0_4", "third", false),
                ]),
                Message::assistant("done"),
            ]
        );
    }

    /// Found by the `history` fuzz target: the n-th repeat of an id tried
    /// every name from `<id>_2` up, so a long session of a model that
    /// calls everything `call_0` took quadratic time on every turn.
    #[test]
    fn many_repeats_of_one_call_id_are_renamed_in_linear_time() {
        let turns = 20_000;
        let mut history = Vec::new();
        for _ in 0..turns {
            history.push(assistant(vec![call("call_0")]));
            history.push(user(vec![result("call_0", "ok", false)]));
        }
        let started = std::time::Instant::now();
        let repaired = repair(history);
        let took = started.elapsed();
        let ids: HashSet<&str> = repaired
            .iter()
            .flat_map(|message| message.tool_uses().map(|(id, _, _)| id))
            .collect();
        assert_eq!(ids.len(), turns);
        assert!(ids.contains("call_0") && ids.contains("call_0_20000"));
        // Linear: well under a second even in a debug build; the
        // quadratic search took minutes.
        assert!(took < std::time::Duration::from_secs(5), "took {took:?}");
    }

    #[test]
    fn a_repeated_id_cut_off_at_the_end_is_renamed_before_its_interrupted_result() {
        let history = vec![
            assistant(vec![call("t1")]),
            user(vec![result("t1", "ok", false)]),
            assistant(vec![call("t1")]),
        ];
        let (repaired, ids) = repair_reporting(history);
        assert_eq!(ids, ["t1_2"]);
        assert_eq!(
            repaired,
            vec![
                assistant(vec![call("t1")]),
                user(vec![result("t1", "ok", false)]),
                assistant(vec![call("t1_2")]),
                user(vec![result("t1_2", INTERRUPTED_RESULT, true)]),
            ]
        );
    }

    #[test]
    fn a_result_inside_an_assistant_message_is_dropped() {
        // Found by the `history` fuzz target: a result stored in the
        // assistant's own message answers nothing, and providers refuse it.
        let history = vec![
            Message::user("go"),
            assistant(vec![result("t1", "done", false), call("t1")]),
            user(vec![result("t1", "ok", false)]),
            assistant(vec![result("t2", "done", false)]),
            Message::user("next"),
        ];
        assert_eq!(
            prepare(history),
            vec![
                Message::user("go"),
                assistant(vec![call("t1")]),
                user(vec![result("t1", "ok", false), ContentBlock::text("next")]),
            ]
        );
    }

    #[test]
    fn a_call_inside_a_user_message_is_dropped() {
        // Found by the `history` fuzz target: a call stored in the user's
        // message is no call of the model's, and nothing answers it.
        let history = vec![
            user(vec![ContentBlock::text("hi"), call("t1")]),
            Message::assistant("hello"),
            user(vec![call("t2")]),
        ];
        assert_eq!(
            prepare(history),
            vec![Message::user("hi"), Message::assistant("hello")]
        );
    }

    #[test]
    fn normalize_merges_same_role_runs_and_drops_empty_messages() {
        let history = vec![
            Message::user("first"),
            Message {
                role: Role::Assistant,
                content: vec![],
            },
            Message::user("second"),
            Message::assistant("answer"),
        ];
        assert_eq!(
            normalize(history),
            vec![
                Message {
                    role: Role::User,
                    content: vec![ContentBlock::text("first"), ContentBlock::text("second")],
                },
                Message::assistant("answer"),
            ]
        );
    }

    fn png(data: &str) -> ContentBlock {
        ContentBlock::Image {
            source: flynn_protocol::ImageSource::Base64 {
                media_type: "image/png".into(),
                data: data.into(),
            },
        }
    }

    #[test]
    fn only_the_turn_under_ways_tool_images_are_sent() {
        let photo = user(vec![png("PHOTO"), ContentBlock::text("and this?")]);
        let history = vec![
            Message::user("look at the page"),
            assistant(vec![call("a")]),
            user(vec![result("a", "saved", false), png("OLD")]),
            Message::assistant("a login form"),
            photo.clone(),
            assistant(vec![call("b")]),
            user(vec![result("b", "saved", false), png("NEW")]),
        ];
        assert_eq!(
            prepare(history),
            vec![
                Message::user("look at the page"),
                assistant(vec![call("a")]),
                user(vec![result("a", &format!("saved\n{FADED_IMAGE}"), false)]),
                Message::assistant("a login form"),
                photo,
                assistant(vec![call("b")]),
                user(vec![result("b", "saved", false), png("NEW")]),
            ]
        );
    }
}
