//! Context management for Flynn: shaping the history before it is sent.
//!
//! Token counting lives with the models (`flynn_models::TokenCounter`),
//! since how tokens are counted depends on the model; compaction, which
//! uses it, arrives here later.

use flynn_protocol::Message;

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
    use flynn_protocol::{ContentBlock, Role};

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
