//! Snapshots, integrity checks and pruning idle sessions.

use flynn_protocol::{ContentBlock, Message, SessionKey};
use flynn_sessions::{Conversations, SqliteStore, TurnOrigin, TurnStatus, Turns};

use crate::{Db, key, numbered, open};

fn origin() -> TurnOrigin {
    TurnOrigin {
        agent: "main".into(),
        owner_pid: 1,
        external_id: None,
        principal: Default::default(),
    }
}

#[tokio::test]
async fn a_snapshot_taken_while_turns_are_written_is_sound_and_has_the_messages() {
    let (dir, store) = open().await;
    let k = key("cli:snap");
    store
        .append(&k, &[Message::user("one"), Message::assistant("two")])
        .await
        .unwrap();
    // Writes go on while the copy is taken.
    let writer = {
        let store = store.clone();
        let k = k.clone();
        tokio::spawn(async move {
            for i in 0..50 {
                store
                    .append(&k, &[Message::user(format!("more {i}"))])
                    .await
                    .unwrap();
            }
        })
    };
    let copy = dir.path().join("copy.db");
    store.snapshot(&copy).await.unwrap();
    writer.await.unwrap();

    let restored = SqliteStore::open(&copy).await.unwrap();
    assert_eq!(restored.quick_check().await.unwrap(), Vec::<String>::new());
    let history = numbered(&restored.history(&k).await.unwrap());
    assert_eq!(history[..2], [(1, "one".to_owned()), (2, "two".to_owned())]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&copy).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}

#[tokio::test]
async fn quick_check_names_a_damaged_index() {
    let (_dir, store) = open().await;
    let k = key("cli:damaged");
    store.append(&k, &[Message::user("hello")]).await.unwrap();
    assert_eq!(store.quick_check().await.unwrap(), Vec::<String>::new());
    let problems = damage_an_index(&store).await;
    assert!(!problems.is_empty(), "quick_check found nothing");
}

/// Empties the sessions table's primary-key index under the table, which
/// quick_check reports as missing index entries.
async fn damage_an_index(store: &SqliteStore) -> Vec<String> {
    let mut raw = crate::raw(store.path()).await;
    let root: i64 = sqlx::query_scalar(
        "SELECT rootpage FROM sqlite_schema WHERE type = 'index' AND tbl_name = 'messages' LIMIT 1",
    )
    .fetch_one(&mut raw)
    .await
    .unwrap();
    // Every page into the main file, whether or not closing the pool
    // checkpoints the WAL: the damage is done to the file itself.
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut raw)
        .await
        .unwrap();
    drop(raw);
    store.close().await;
    let bytes = std::fs::read(store.path()).unwrap();
    let page = 4096_usize;
    let mut bytes = bytes;
    let start = usize::try_from(root - 1).unwrap() * page;
    // A leaf index page with no cells.
    bytes[start..start + page].fill(0);
    bytes[start] = 0x0a;
    std::fs::write(store.path(), bytes).unwrap();
    let reopened = SqliteStore::open(store.path()).await.unwrap();
    reopened.quick_check().await.unwrap()
}

#[tokio::test]
async fn idle_sessions_go_with_their_turns_and_tool_outputs_and_busy_ones_stay() {
    let (_dir, store) = open().await;
    let old = key("cli:old");
    let waiting = key("cli:waiting");
    let fresh = key("cli:fresh");
    store
        .append(&old, &[Message::user("long ago")])
        .await
        .unwrap();
    store
        .put_tool_output(
            &old,
            &flynn_sessions::ToolOutput {
                call_id: "c1".into(),
                tool: "shell.exec".into(),
                content: "output".into(),
                created_at: 1,
            },
        )
        .await
        .unwrap();
    let done = store
        .accept(&old, &[ContentBlock::text("done")], &origin())
        .await
        .unwrap();
    store
        .finish_turn(done.id, TurnStatus::Completed)
        .await
        .unwrap();
    store
        .accept(&waiting, &[ContentBlock::text("queued")], &origin())
        .await
        .unwrap();
    // Everything so far is a day old; `fresh` is written now.
    let mut raw = crate::raw(store.path()).await;
    sqlx::query("UPDATE sessions SET updated_at = updated_at - 86400000")
        .execute(&mut raw)
        .await
        .unwrap();
    store
        .append(&fresh, &[Message::user("today")])
        .await
        .unwrap();
    let cutoff: i64 = sqlx::query_scalar("SELECT MAX(updated_at) FROM sessions")
        .fetch_one(&mut raw)
        .await
        .unwrap();

    let pruned = store.prune_idle(cutoff - 3_600_000).await.unwrap();
    assert_eq!(pruned, vec![old.clone()]);
    let left: Vec<SessionKey> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.key)
        .collect();
    assert_eq!(left, vec![fresh, waiting]);
    assert_eq!(store.tool_output(&old, "c1").await.unwrap(), None);
    assert_eq!(store.turn(done.id).await.unwrap(), None);
    let rows: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE session_key = 'cli:old'")
            .fetch_one(&mut raw)
            .await
            .unwrap();
    assert_eq!(rows, 0);
}

async fn a_kept_tool_output_is_not_replaced_by_another_calls_output_under_the_same_id(db: Db) {
    let store = db.open().await;
    let k = key("cli:ids");
    let output = |content: &str| flynn_sessions::ToolOutput {
        call_id: "call_0".into(),
        tool: "shell.exec".into(),
        content: content.into(),
        created_at: 1,
    };
    store.put_tool_output(&k, &output("first")).await.unwrap();
    // Keeping the same output again (a retried write) is fine.
    store.put_tool_output(&k, &output("first")).await.unwrap();
    // A later call that reuses the id (a server that numbers its calls
    // afresh each answer) must not take the first one's place.
    let refused = store.put_tool_output(&k, &output("second")).await;
    match refused {
        Err(flynn_sessions::Error::ToolOutputTaken { session, call_id }) => {
            assert_eq!((session.as_str(), call_id.as_str()), ("cli:ids", "call_0"));
        }
        other => panic!("expected ToolOutputTaken, got {other:?}"),
    }
    assert_eq!(
        store.tool_output(&k, "call_0").await.unwrap(),
        Some(output("first"))
    );
}

crate::on_both!(a_kept_tool_output_is_not_replaced_by_another_calls_output_under_the_same_id,);
