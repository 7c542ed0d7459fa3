//! Databases written by earlier (and later) releases.

use std::path::{Path, PathBuf};

use flynn_protocol::{ContentBlock, Message, Role, Tier, Usage};
use flynn_sessions::{
    Conversations, Error, SessionInfo, SessionMeta, SqliteStore, Turns, UsageLog, UsageTotal,
};

use crate::{key, messages, numbered};

/// A copy of the database 0.1.0 wrote, in its own temp dir.
fn v0_1_0() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sessions-v0.1.0.db");
    std::fs::copy(fixture, &path).unwrap();
    (dir, path)
}

fn deploy_exchange() -> Vec<Message> {
    vec![
        Message::user("when is the deploy?"),
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: "call_1".into(),
                name: "shell.exec".into(),
                input: serde_json::json!({"command": "cat deploy.txt"}),
            }],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "call_1".into(),
                content: "Friday\n".into(),
                is_error: false,
            }],
        },
        Message::assistant("The deploy is on Friday."),
    ]
}

fn compacted_greeting() -> Vec<Message> {
    vec![
        Message::user("[summary] we said hello"),
        Message::assistant("Noted."),
        Message::user("hello again"),
        Message::assistant("Hi!"),
    ]
}

#[tokio::test]
async fn a_database_written_by_0_1_0_keeps_its_history() {
    let (_dir, path) = v0_1_0();
    let store = SqliteStore::open(&path).await.unwrap();
    let work = key("cli:work");
    let telegram = key("telegram:42");

    let history = store.history(&work).await.unwrap();
    assert_eq!(messages(&history), deploy_exchange());
    assert_eq!(
        history.iter().map(|m| (m.seq, m.turn)).collect::<Vec<_>>(),
        vec![(1, None), (2, None), (3, None), (4, None)]
    );
    let history = store.history(&telegram).await.unwrap();
    assert_eq!(messages(&history), compacted_greeting());
    assert_eq!(
        history.iter().map(|m| m.seq).collect::<Vec<_>>(),
        vec![7, 8, 9, 10]
    );

    assert_eq!(
        store.list().await.unwrap(),
        vec![
            SessionInfo {
                key: telegram.clone(),
                message_count: 4,
                created_at: 1_795_391_460_965,
                updated_at: 1_795_391_460_966,
                meta: SessionMeta::default(),
            },
            SessionInfo {
                key: work.clone(),
                message_count: 4,
                created_at: 1_795_391_460_963,
                updated_at: 1_795_391_460_965,
                meta: SessionMeta::default(),
            },
        ]
    );
    assert_eq!(store.metadata(&work).await.unwrap(), SessionMeta::default());
    assert_eq!(
        store.usage_by_tier(None).await.unwrap(),
        vec![(
            Tier::Default,
            UsageTotal {
                calls: 1,
                usage: Usage {
                    input_tokens: 100,
                    output_tokens: 20,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                },
                cost_usd: 0.0006,
                unpriced_calls: 0,
            }
        )]
    );
    // Calls recorded before purposes existed were the conversation's.
    let lines = store.usage_by_purpose(None).await.unwrap();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].purpose, flynn_protocol::Purpose::Conversation);
    assert_eq!(store.open_turns(None).await.unwrap(), vec![]);

    // New messages get higher numbers and sort after the old ones.
    assert_eq!(
        store
            .append(&work, &[Message::user("and the retro?")])
            .await
            .unwrap(),
        vec![11]
    );
    assert_eq!(
        numbered(&store.history(&work).await.unwrap())[3..],
        [
            (4, "The deploy is on Friday.".to_owned()),
            (11, "and the retro?".to_owned())
        ]
    );
    assert_eq!(
        store
            .list()
            .await
            .unwrap()
            .iter()
            .map(|s| s.key.to_string())
            .collect::<Vec<_>>(),
        vec!["cli:work".to_owned(), "telegram:42".to_owned()]
    );
    // Old messages can be compacted like new ones.
    assert_eq!(
        store
            .replace_history(&telegram, 9, &[Message::user("[summary] hello twice")])
            .await
            .unwrap(),
        vec![12]
    );
    assert_eq!(
        numbered(&store.history(&telegram).await.unwrap()),
        vec![
            (12, "[summary] hello twice".to_owned()),
            (10, "Hi!".to_owned())
        ]
    );
    store.close().await;

    // Opening it again finds it current.
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.history(&work).await.unwrap().len(), 5);
    assert_eq!(
        store
            .append(&work, &[Message::assistant("Monday.")])
            .await
            .unwrap(),
        vec![13]
    );
}

#[tokio::test]
async fn migrating_keeps_numbers_of_deleted_messages_used() {
    let (_dir, path) = v0_1_0();
    // 0.1.0 deletes the newest messages (7..=10) with their session: the
    // old table remembers that 10 was used, though no row has it.
    sqlx::query("DELETE FROM sessions WHERE key = 'telegram:42'")
        .execute(&mut crate::raw(&path).await)
        .await
        .unwrap();

    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        store
            .append(&key("telegram:42"), &[Message::user("hello")])
            .await
            .unwrap(),
        vec![11]
    );
}

#[tokio::test]
async fn a_database_from_a_newer_flynn_is_refused_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    SqliteStore::open(&path).await.unwrap().close().await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (9999, 'from the future', TRUE, X'00', 0)",
    )
    .execute(&mut crate::raw(&path).await)
    .await
    .unwrap();

    let error = SqliteStore::open(&path).await.unwrap_err();
    assert!(matches!(error, Error::Migrate { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "cannot bring the session database {} up to this version's schema: migration 9999 was previously applied but is missing in the resolved migrations (a newer Flynn may have written it: upgrade Flynn, or point sessions.url at another file)",
            path.display()
        )
    );
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_called_damaged_not_newer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    std::fs::write(&path, "these are my notes, not a database\n".repeat(200)).unwrap();

    let error = SqliteStore::open(&path).await.unwrap_err();
    assert!(matches!(error, Error::Damaged { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "the session database {} is damaged or is not a SQLite database: ",
            path.display()
        )) && message.ends_with(
            "(restore a backup with `flynn restore <archive>`, or move the file aside and Flynn starts an empty one)"
        ),
        "{message}"
    );
}
