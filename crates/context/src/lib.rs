//! Context management for Flynn: how much of the window a conversation
//! uses, and shaping the history before it is sent.
//!
//! Token counts here are estimates (about four characters per token);
//! provider-reported usage is the truth for accounting.

use flynn_protocol::{ContentBlock, Message, ToolSpec};

/// Tokens added per message for role and framing.
const MESSAGE_OVERHEAD: usize = 4;

/// Estimated tokens in a piece of text: one per four bytes, rounded up.
pub fn estimate_text(text: &str) -> usize {
    text.len().div_ceil(4)
}

/// Estimated tokens of one message, framing included.
pub fn estimate_message(message: &Message) -> usize {
    MESSAGE_OVERHEAD
        + message
            .content
            .iter()
            .map(|block| match block {
                ContentBlock::Text { text } => estimate_text(text),
                ContentBlock::Thinking { thinking, .. } => estimate_text(thinking),
                ContentBlock::RedactedThinking { data } => estimate_text(data),
                ContentBlock::ToolUse { name, input, .. } => {
                    estimate_text(name) + estimate_text(&input.to_string())
                }
                ContentBlock::ToolResult { content, .. } => estimate_text(content),
                // Providers bill images by size; this is a typical mid-size image.
                ContentBlock::Image { .. } => 1_000,
            })
            .sum::<usize>()
}

/// Estimated tokens of a whole request: system prompt, history and tools.
pub fn estimate_request(system: Option<&str>, messages: &[Message], tools: &[ToolSpec]) -> usize {
    system.map_or(0, estimate_text)
        + messages.iter().map(estimate_message).sum::<usize>()
        + tools
            .iter()
            .map(|t| {
                estimate_text(&t.name)
                    + estimate_text(&t.description)
                    + estimate_text(&t.input_schema.to_string())
            })
            .sum::<usize>()
}

/// Makes a stored history safe to send: merges consecutive messages of the
/// same role (left behind when a turn failed before the model answered)
/// and drops empty messages.
pub fn normalize(history: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(history.len());
    for message in history {
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
    use flynn_protocol::Role;

    #[test]
    fn estimates_four_bytes_per_token_rounded_up() {
        assert_eq!(estimate_text(""), 0);
        assert_eq!(estimate_text("abcd"), 1);
        assert_eq!(estimate_text("abcde"), 2);
        assert_eq!(estimate_message(&Message::user("abcdefgh")), 6);
    }

    #[test]
    fn request_estimate_counts_system_messages_and_tools() {
        let tools = [ToolSpec {
            name: "abcd".into(),
            description: "abcd".into(),
            input_schema: serde_json::json!({}),
        }];
        // system 1 + message (4 + 1) + tool (1 + 1 + 1)
        assert_eq!(
            estimate_request(Some("abcd"), &[Message::user("abcd")], &tools),
            9
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
}
