//! Conversions both stores share between the crate's types and the
//! values of their columns.

use flynn_protocol::{ContentBlock, Message, Principal};

use crate::{Error, Result, TurnStatus};

/// A message ready to store: its role and its content as JSON, encoded
/// before the write begins.
pub(crate) struct Encoded {
    pub(crate) role: &'static str,
    pub(crate) content: String,
}

impl Encoded {
    pub(crate) fn all(messages: &[Message]) -> Result<Vec<Encoded>> {
        messages
            .iter()
            .map(|message| {
                Ok(Encoded {
                    role: message.role.as_str(),
                    content: encode(&message.content)?,
                })
            })
            .collect()
    }
}

pub(crate) fn encode(content: &[ContentBlock]) -> Result<String> {
    // Content blocks are plain JSON-shaped data; this cannot fail short of
    // running out of memory. JSON escapes the NUL character, which
    // PostgreSQL's text cannot hold.
    serde_json::to_string(content).map_err(|e| Error::Backend {
        message: format!("cannot encode a message as JSON: {e}"),
    })
}

pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A stored principal; NULL (turns from before principals) and anything
/// unreadable are the owner's, as every turn was then.
pub(crate) fn principal_from(text: Option<String>) -> Principal {
    text.and_then(|text| text.parse().ok()).unwrap_or_default()
}

pub(crate) fn status_from(text: &str) -> TurnStatus {
    match text {
        "pending" => TurnStatus::Pending,
        "running" => TurnStatus::Running,
        "completed" => TurnStatus::Completed,
        "cancelled" => TurnStatus::Cancelled,
        "interrupted" => TurnStatus::Interrupted,
        // "failed"; the table's CHECK constraint admits nothing else.
        _ => TurnStatus::Failed,
    }
}
