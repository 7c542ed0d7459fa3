//! Session store tests on real SQLite files in temp dirs, with the real
//! migrations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod automation;
mod channels;
mod factory;
mod history;
mod metadata;
mod migration;
mod operations;
mod turns;
mod usage;

use std::path::Path;

use flynn_protocol::{ContentBlock, Message, Role, SessionKey, TurnId};
use flynn_sessions::{SqliteStore, StoredMessage};
use sqlx::ConnectOptions;
use sqlx::sqlite::SqliteConnectOptions;

pub fn key(s: &str) -> SessionKey {
    s.parse().unwrap()
}

/// A fresh store in a directory the store has to create.
pub async fn open() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("nested/sessions.db"))
        .await
        .unwrap();
    (dir, store)
}

/// A second connection to a store's file, to look at or change it behind
/// the store's back.
pub async fn raw(path: &Path) -> sqlx::SqliteConnection {
    SqliteConnectOptions::new()
        .filename(path)
        .connect()
        .await
        .unwrap()
}

pub fn tool_exchange() -> Vec<Message> {
    vec![
        Message::user("list files"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "use the shell".into(),
                    signature: Some("sig-1".into()),
                },
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "shell.exec".into(),
                    input: serde_json::json!({"command": "ls"}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: "a.txt".into(),
                is_error: false,
            }],
        },
        Message::assistant("There is a.txt."),
    ]
}

/// The messages of a history, in order.
pub fn messages(history: &[StoredMessage]) -> Vec<Message> {
    history.iter().map(|m| m.message.clone()).collect()
}

/// Each message's sequence number and text, in order.
pub fn numbered(history: &[StoredMessage]) -> Vec<(u64, String)> {
    history.iter().map(|m| (m.seq, m.message.text())).collect()
}

/// Each message's sequence number and turn, in order.
pub fn turns_of(history: &[StoredMessage]) -> Vec<(u64, Option<TurnId>)> {
    history.iter().map(|m| (m.seq, m.turn)).collect()
}
