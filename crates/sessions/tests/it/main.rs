//! Session store tests on a real SQLite file with the real migrations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use flynn_protocol::{ContentBlock, Message, Role, SessionKey};
use flynn_sessions::{SessionStore, SqliteStore};

fn key(s: &str) -> SessionKey {
    s.parse().unwrap()
}

async fn open() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("nested/sessions.db"))
        .await
        .unwrap();
    (dir, store)
}

fn tool_exchange() -> Vec<Message> {
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

#[tokio::test]
async fn appended_messages_come_back_in_order_with_every_block() {
    let (_dir, store) = open().await;
    let k = key("cli:default");
    let messages = tool_exchange();
    store.append(&k, &messages[..2]).await.unwrap();
    store.append(&k, &messages[2..]).await.unwrap();
    assert_eq!(store.history(&k).await.unwrap(), messages);
    assert_eq!(store.history(&key("cli:other")).await.unwrap(), vec![]);
}

#[tokio::test]
async fn history_survives_reopening_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let k = key("telegram:42");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store.append(&k, &[Message::user("hi")]).await.unwrap();
        store.close().await;
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(store.history(&k).await.unwrap(), vec![Message::user("hi")]);
    let mode: String = sqlx_journal_mode(&path).await;
    assert_eq!(mode, "wal");
}

async fn sqlx_journal_mode(path: &std::path::Path) -> String {
    use sqlx::Connection;
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn list_reports_counts_and_clear_removes_a_session() {
    let (_dir, store) = open().await;
    store.append(&key("cli:a"), &tool_exchange()).await.unwrap();
    store
        .append(&key("cli:b"), &[Message::user("x")])
        .await
        .unwrap();
    let listed: Vec<(String, u64)> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.key.to_string(), s.message_count))
        .collect();
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(sorted, vec![("cli:a".into(), 4), ("cli:b".into(), 1)]);

    assert!(store.clear(&key("cli:a")).await.unwrap());
    assert!(!store.clear(&key("cli:a")).await.unwrap());
    assert_eq!(store.history(&key("cli:a")).await.unwrap(), vec![]);
    assert_eq!(store.info(&key("cli:a")).await.unwrap(), None);
    assert_eq!(
        store
            .info(&key("cli:b"))
            .await
            .unwrap()
            .map(|i| i.message_count),
        Some(1)
    );
}

#[tokio::test]
async fn replace_history_swaps_the_whole_history() {
    let (_dir, store) = open().await;
    let k = key("cli:default");
    store.append(&k, &tool_exchange()).await.unwrap();
    let summary = vec![
        Message::user("[summary] files were listed"),
        Message::assistant("ok"),
    ];
    store.replace_history(&k, &summary).await.unwrap();
    assert_eq!(store.history(&k).await.unwrap(), summary);
    store.append(&k, &[Message::user("next")]).await.unwrap();
    assert_eq!(store.history(&k).await.unwrap().len(), 3);
}

#[tokio::test]
async fn concurrent_appends_to_one_session_lose_nothing() {
    let (_dir, store) = open().await;
    let k = key("cli:busy");
    let mut tasks = Vec::new();
    for i in 0..20 {
        let store = store.clone();
        let k = k.clone();
        tasks.push(tokio::spawn(async move {
            store.append(&k, &[Message::user(format!("m{i}"))]).await
        }));
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let mut texts: Vec<String> = store
        .history(&k)
        .await
        .unwrap()
        .iter()
        .map(Message::text)
        .collect();
    texts.sort();
    let mut expected: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
    expected.sort();
    assert_eq!(texts, expected);
}

#[tokio::test]
async fn a_directory_in_place_of_the_file_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let error = SqliteStore::open(dir.path()).await.unwrap_err();
    assert!(
        error.to_string().starts_with(&format!(
            "cannot open session database {}",
            dir.path().display()
        )),
        "{error}"
    );
}

#[tokio::test]
async fn usage_is_totalled_per_tier_per_session_and_survives_a_reset() {
    use flynn_protocol::{Tier, Usage};
    use flynn_sessions::{UsageRecord, UsageTotal};

    let (_dir, store) = open().await;
    let record = |session: &str, tier, input, cost| UsageRecord {
        session: key(session),
        provider: "anthropic".into(),
        model: "claude-haiku-4-5".into(),
        tier,
        usage: Usage {
            input_tokens: input,
            output_tokens: 10,
            cache_read_tokens: 1,
            cache_write_tokens: 2,
        },
        cost_usd: cost,
    };
    store
        .record_usage(&record("cli:a", Tier::Default, 100, Some(0.5)))
        .await
        .unwrap();
    store
        .record_usage(&record("cli:a", Tier::Default, 50, None))
        .await
        .unwrap();
    store
        .record_usage(&record("cli:a", Tier::Fast, 7, Some(0.25)))
        .await
        .unwrap();
    store
        .record_usage(&record("cli:b", Tier::Default, 1, Some(1.0)))
        .await
        .unwrap();

    let totals = store.usage_by_tier(Some(&key("cli:a"))).await.unwrap();
    assert_eq!(
        totals,
        vec![
            (
                Tier::Fast,
                UsageTotal {
                    calls: 1,
                    usage: Usage {
                        input_tokens: 7,
                        output_tokens: 10,
                        cache_read_tokens: 1,
                        cache_write_tokens: 2
                    },
                    cost_usd: 0.25,
                    unpriced_calls: 0,
                }
            ),
            (
                Tier::Default,
                UsageTotal {
                    calls: 2,
                    usage: Usage {
                        input_tokens: 150,
                        output_tokens: 20,
                        cache_read_tokens: 2,
                        cache_write_tokens: 4
                    },
                    cost_usd: 0.5,
                    unpriced_calls: 1,
                }
            ),
        ]
    );
    store.clear(&key("cli:a")).await.unwrap();
    let all = store.usage_by_tier(None).await.unwrap();
    assert_eq!(
        all.iter().map(|(t, u)| (*t, u.calls)).collect::<Vec<_>>(),
        vec![(Tier::Fast, 1), (Tier::Default, 3)]
    );
}

#[test]
fn the_database_is_in_home_unless_the_config_names_one() {
    use flynn_protocol::config::SessionsConfig;
    use std::path::{Path, PathBuf};

    let home = Path::new("/data/flynn");
    assert_eq!(
        flynn_sessions::database_path(&SessionsConfig::default(), home),
        PathBuf::from("/data/flynn/sessions.db")
    );
    let named = SessionsConfig {
        database: Some(PathBuf::from("/var/lib/flynn/s.db")),
    };
    assert_eq!(
        flynn_sessions::database_path(&named, home),
        PathBuf::from("/var/lib/flynn/s.db")
    );
}
