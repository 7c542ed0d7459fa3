//! Appending, reading (whole, since a cursor, in pages), listing, clearing
//! and replacing history.

use flynn_protocol::Message;
use flynn_sessions::{Conversations, Error, SqliteStore};

use crate::{Db, key, messages, numbered, open, tool_exchange};

async fn appended_messages_come_back_in_order_with_every_block(db: Db) {
    let store = db.open().await;
    let k = key("cli:default");
    let all = tool_exchange();
    let first = store.append(&k, &all[..2]).await.unwrap();
    let second = store.append(&k, &all[2..]).await.unwrap();
    assert_eq!((first, second), (vec![1, 2], vec![3, 4]));

    let history = store.history(&k).await.unwrap();
    assert_eq!(messages(&history), all);
    assert_eq!(
        history.iter().map(|m| (m.seq, m.turn)).collect::<Vec<_>>(),
        vec![(1, None), (2, None), (3, None), (4, None)]
    );
    assert_eq!(store.history(&key("cli:other")).await.unwrap(), vec![]);
}

async fn appending_nothing_stores_nothing(db: Db) {
    let store = db.open().await;
    let k = key("cli:default");
    assert_eq!(store.append(&k, &[]).await.unwrap(), Vec::<u64>::new());
    assert_eq!(store.history(&k).await.unwrap(), vec![]);
    assert_eq!(store.list().await.unwrap(), vec![]);
}

#[tokio::test]
async fn history_survives_reopening_the_file_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let k = key("telegram:42");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store.append(&k, &[Message::user("hi")]).await.unwrap();
        store.close().await;
    }
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        numbered(&store.history(&k).await.unwrap()),
        vec![(1, "hi".to_owned())]
    );
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut crate::raw(&path).await)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
}

#[tokio::test]
async fn history_since_returns_what_was_stored_after_a_cursor() {
    let (_dir, store) = open().await;
    let k = key("cli:default");
    let other = key("cli:other");
    store
        .append(&k, &[Message::user("a"), Message::assistant("b")])
        .await
        .unwrap();
    store.append(&other, &[Message::user("x")]).await.unwrap();
    store
        .append(&k, &[Message::user("c"), Message::assistant("d")])
        .await
        .unwrap();

    let since = |after| {
        let store = store.clone();
        let k = k.clone();
        async move { numbered(&store.history_since(&k, after).await.unwrap()) }
    };
    assert_eq!(
        since(2).await,
        vec![(4, "c".to_owned()), (5, "d".to_owned())]
    );
    assert_eq!(since(0).await.len(), 4);
    assert_eq!(since(5).await, vec![]);

    // A compaction's summary has a new number, but it restates messages
    // a reader has seen already: a reader following the cursor sees each
    // message once, and the summary never as a new one.
    store
        .replace_history(&k, 2, &[Message::user("[summary] a, b")])
        .await
        .unwrap();
    assert_eq!(since(5).await, vec![]);
    assert_eq!(
        since(2).await,
        vec![(4, "c".to_owned()), (5, "d".to_owned())]
    );
    store.append(&k, &[Message::user("e")]).await.unwrap();
    assert_eq!(since(5).await, vec![(7, "e".to_owned())]);
    // Read whole, the history starts with the summary.
    assert_eq!(
        numbered(&store.history(&k).await.unwrap()),
        vec![
            (6, "[summary] a, b".to_owned()),
            (4, "c".to_owned()),
            (5, "d".to_owned()),
            (7, "e".to_owned())
        ]
    );
}

#[tokio::test]
async fn history_pages_walk_back_from_the_end_oldest_first() {
    let (_dir, store) = open().await;
    let k = key("cli:default");
    let texts: Vec<Message> = (1..=7).map(|i| Message::user(format!("m{i}"))).collect();
    let seqs = store.append(&k, &texts).await.unwrap();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6, 7]);

    let page = |before, limit| {
        let store = store.clone();
        let k = k.clone();
        async move {
            store
                .history_page(&k, before, limit)
                .await
                .unwrap()
                .iter()
                .map(|m| m.seq)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(page(None, 3).await, vec![5, 6, 7]);
    assert_eq!(page(Some(5), 3).await, vec![2, 3, 4]);
    assert_eq!(page(Some(2), 3).await, vec![1]);
    assert_eq!(page(Some(1), 3).await, Vec::<u64>::new());
    assert_eq!(page(None, 100).await, seqs);
    assert_eq!(page(None, 0).await, Vec::<u64>::new());

    // Pages follow positions, not numbers: after a compaction the summary
    // (numbered 8) comes before message 4.
    store
        .replace_history(&k, 3, &[Message::user("[summary]")])
        .await
        .unwrap();
    assert_eq!(page(Some(5), 10).await, vec![8, 4]);

    let error = store.history_page(&k, Some(99), 3).await.unwrap_err();
    assert!(
        matches!(error, Error::UnknownMessage { ref session, seq: 99 } if session == "cli:default"),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "session 'cli:default' has no message 99 in its history"
    );
}

async fn list_puts_the_most_recently_changed_session_first_and_clear_removes_one(db: Db) {
    let store = db.open().await;
    store.append(&key("cli:a"), &tool_exchange()).await.unwrap();
    store
        .append(&key("cli:b"), &[Message::user("x")])
        .await
        .unwrap();
    store
        .append(&key("cli:c"), &[Message::user("y")])
        .await
        .unwrap();
    // Changes made within the same millisecond still order the list.
    store
        .append(&key("cli:a"), &[Message::user("again")])
        .await
        .unwrap();

    let listed = store.list().await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|s| (s.key.to_string(), s.message_count))
            .collect::<Vec<_>>(),
        vec![
            ("cli:a".to_owned(), 5),
            ("cli:c".to_owned(), 1),
            ("cli:b".to_owned(), 1),
        ]
    );
    let stamps: Vec<i64> = listed.iter().map(|s| s.updated_at).collect();
    let mut strictly_newest_first = stamps.clone();
    strictly_newest_first.sort_unstable_by(|a, b| b.cmp(a));
    strictly_newest_first.dedup();
    assert_eq!(stamps, strictly_newest_first);

    assert!(store.clear(&key("cli:a")).await.unwrap());
    assert!(!store.clear(&key("cli:a")).await.unwrap());
    assert_eq!(store.history(&key("cli:a")).await.unwrap(), vec![]);
    assert_eq!(store.info(&key("cli:a")).await.unwrap(), None);
    assert_eq!(
        store
            .list()
            .await
            .unwrap()
            .iter()
            .map(|s| s.key.to_string())
            .collect::<Vec<_>>(),
        vec!["cli:c".to_owned(), "cli:b".to_owned()]
    );
    let b = store.info(&key("cli:b")).await.unwrap().unwrap();
    assert_eq!(
        (b.key.to_string(), b.message_count),
        ("cli:b".to_owned(), 1)
    );
    assert!(b.created_at <= b.updated_at, "{b:?}");
}

async fn replace_history_keeps_what_was_appended_after_upto(db: Db) {
    let store = db.open().await;
    let k = key("cli:default");
    store.append(&k, &tool_exchange()).await.unwrap();
    // A turn appends while compaction summarises messages 1..=3.
    store.append(&k, &[Message::user("next")]).await.unwrap();

    let summary = vec![
        Message::user("[summary] files were listed"),
        Message::assistant("ok"),
    ];
    let seqs = store.replace_history(&k, 3, &summary).await.unwrap();
    assert_eq!(seqs, vec![6, 7]);
    assert_eq!(
        numbered(&store.history(&k).await.unwrap()),
        vec![
            (6, "[summary] files were listed".to_owned()),
            (7, "ok".to_owned()),
            (4, "There is a.txt.".to_owned()),
            (5, "next".to_owned()),
        ]
    );

    store.append(&k, &[Message::user("later")]).await.unwrap();
    // Compacting again, up to a message of the first replacement.
    let again = store
        .replace_history(&k, 7, &[Message::user("[summary 2]")])
        .await
        .unwrap();
    assert_eq!(again, vec![9]);
    assert_eq!(
        numbered(&store.history(&k).await.unwrap()),
        vec![
            (9, "[summary 2]".to_owned()),
            (4, "There is a.txt.".to_owned()),
            (5, "next".to_owned()),
            (8, "later".to_owned()),
        ]
    );
    assert_eq!(
        store.info(&k).await.unwrap().map(|i| i.message_count),
        Some(4)
    );
}

async fn a_replacement_may_be_longer_or_empty(db: Db) {
    let store = db.open().await;
    let k = key("cli:default");
    store
        .append(&k, &[Message::user("one"), Message::assistant("two")])
        .await
        .unwrap();
    // Three messages in place of one: they go before message 2.
    store
        .replace_history(
            &k,
            1,
            &[
                Message::user("x"),
                Message::assistant("y"),
                Message::user("z"),
            ],
        )
        .await
        .unwrap();
    store.append(&k, &[Message::user("three")]).await.unwrap();
    assert_eq!(
        numbered(&store.history(&k).await.unwrap()),
        vec![
            (3, "x".to_owned()),
            (4, "y".to_owned()),
            (5, "z".to_owned()),
            (2, "two".to_owned()),
            (6, "three".to_owned()),
        ]
    );

    // Nothing in place of everything up to message 2.
    assert_eq!(
        store.replace_history(&k, 2, &[]).await.unwrap(),
        Vec::<u64>::new()
    );
    assert_eq!(
        numbered(&store.history(&k).await.unwrap()),
        vec![(6, "three".to_owned())]
    );
}

async fn sequence_numbers_are_never_reused(db: Db) {
    let store = db.open().await;
    let k = key("cli:default");
    assert_eq!(
        store.append(&k, &tool_exchange()).await.unwrap(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(
        store
            .replace_history(&k, 4, &[Message::user("[summary]")])
            .await
            .unwrap(),
        vec![5]
    );
    // The highest number (5) goes, then the session itself.
    assert_eq!(
        store.replace_history(&k, 5, &[]).await.unwrap(),
        Vec::<u64>::new()
    );
    assert!(store.clear(&k).await.unwrap());
    store.close().await;

    // Re-created under the same key, in a new process.
    let store = db.open().await;
    assert_eq!(
        store.append(&k, &[Message::user("fresh")]).await.unwrap(),
        vec![6]
    );
    assert_eq!(
        store
            .append(&key("cli:other"), &[Message::user("elsewhere")])
            .await
            .unwrap(),
        vec![7]
    );
    assert_eq!(
        numbered(&store.history(&k).await.unwrap()),
        vec![(6, "fresh".to_owned())]
    );
}

async fn replace_history_up_to_an_unknown_message_fails_and_changes_nothing(db: Db) {
    let store = db.open().await;
    let k = key("cli:default");
    let other = key("cli:other");
    store.append(&k, &tool_exchange()).await.unwrap();
    let foreign = store.append(&other, &[Message::user("x")]).await.unwrap();

    for upto in [99, foreign[0]] {
        let error = store
            .replace_history(&k, upto, &[Message::user("[summary]")])
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("session 'cli:default' has no message {upto} in its history")
        );
        assert!(
            matches!(error, Error::UnknownMessage { seq, .. } if seq == upto),
            "{error:?}"
        );
    }
    assert_eq!(messages(&store.history(&k).await.unwrap()), tool_exchange());
    // The failed attempts used no numbers.
    assert_eq!(
        store.append(&k, &[Message::user("next")]).await.unwrap(),
        vec![6]
    );
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
    let mut seqs = Vec::new();
    for task in tasks {
        seqs.extend(task.await.unwrap().unwrap());
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=20).collect::<Vec<u64>>());

    let history = store.history(&k).await.unwrap();
    // Stored in the order the appends committed: numbers ascend.
    assert_eq!(
        history.iter().map(|m| m.seq).collect::<Vec<_>>(),
        (1..=20).collect::<Vec<u64>>()
    );
    let mut texts: Vec<String> = history.iter().map(|m| m.message.text()).collect();
    texts.sort();
    let mut expected: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
    expected.sort();
    assert_eq!(texts, expected);
}

/// The whole history as the file holds it, read on a connection of its
/// own (the store keeps recent histories decoded).
async fn on_disk(path: &std::path::Path, session: &str) -> Vec<String> {
    let mut conn = crate::raw(path).await;
    let contents: Vec<String> =
        sqlx::query_scalar("SELECT content FROM messages WHERE session_key = ?1 ORDER BY pos")
            .bind(session)
            .fetch_all(&mut conn)
            .await
            .unwrap();
    contents
        .iter()
        .map(|c| {
            let blocks: Vec<flynn_protocol::ContentBlock> = serde_json::from_str(c).unwrap();
            Message {
                role: flynn_protocol::Role::User,
                content: blocks,
            }
            .text()
        })
        .collect()
}

fn texts(history: &[flynn_sessions::StoredMessage]) -> Vec<String> {
    history.iter().map(|m| m.message.text()).collect()
}

#[tokio::test]
async fn a_history_read_again_is_what_the_file_holds_after_every_kind_of_change() {
    let (dir, store) = open().await;
    let path = dir.path().join("nested/sessions.db");
    let k = key("telegram:42");
    let session = "telegram:42";
    let seqs = store
        .append(
            &k,
            &[
                Message::user("one"),
                Message::assistant("two"),
                Message::user("three"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        texts(&store.history(&k).await.unwrap()),
        ["one", "two", "three"]
    );

    // Appends come after what was read.
    store
        .append(&k, &[Message::assistant("four")])
        .await
        .unwrap();
    assert_eq!(
        texts(&store.history(&k).await.unwrap()),
        ["one", "two", "three", "four"]
    );

    // A compaction that replaces one message with one summary keeps the
    // count: the summary must still take its place.
    store
        .replace_history(&k, seqs[0], &[Message::user("summary of one")])
        .await
        .unwrap();
    store.append(&k, &[Message::user("five")]).await.unwrap();
    let history = texts(&store.history(&k).await.unwrap());
    assert_eq!(history, ["summary of one", "two", "three", "four", "five"]);
    assert_eq!(history, on_disk(&path, session).await);

    // Another process deletes a message and appends one: same count, one
    // message gone.
    let mut other = crate::raw(&path).await;
    sqlx::query("DELETE FROM messages WHERE session_key = ?1 AND seq = ?2")
        .bind(session)
        .bind(i64::try_from(seqs[1]).unwrap())
        .execute(&mut other)
        .await
        .unwrap();
    drop(other);
    store
        .append(&k, &[Message::assistant("six")])
        .await
        .unwrap();
    let history = texts(&store.history(&k).await.unwrap());
    assert_eq!(history, ["summary of one", "three", "four", "five", "six"]);
    assert_eq!(history, on_disk(&path, session).await);

    // Another process puts a message before the others: it must come
    // first, not last.
    let mut other = crate::raw(&path).await;
    sqlx::query(
        "INSERT INTO messages (session_key, pos, turn_id, role, content, created_at)
         VALUES (?1, -1, NULL, 'user', '[{\"type\":\"text\",\"text\":\"zero\"}]', 0)",
    )
    .bind(session)
    .execute(&mut other)
    .await
    .unwrap();
    drop(other);
    let history = texts(&store.history(&k).await.unwrap());
    assert_eq!(
        history,
        ["zero", "summary of one", "three", "four", "five", "six"]
    );
    assert_eq!(history, on_disk(&path, session).await);

    // A cleared session starts empty, and again from there.
    assert!(store.clear(&k).await.unwrap());
    assert_eq!(store.history(&k).await.unwrap(), vec![]);
    store.append(&k, &[Message::user("seven")]).await.unwrap();
    assert_eq!(texts(&store.history(&k).await.unwrap()), ["seven"]);
}

async fn many_sessions_read_in_turn_each_get_their_own_history(db: Db) {
    let store = db.open().await;
    // More sessions than the store keeps decoded, read round and round.
    for round in 0..3 {
        for i in 0..40 {
            let k = key(&format!("api:s{i}"));
            store
                .append(&k, &[Message::user(format!("s{i} r{round}"))])
                .await
                .unwrap();
            let expected: Vec<String> = (0..=round).map(|r| format!("s{i} r{r}")).collect();
            assert_eq!(texts(&store.history(&k).await.unwrap()), expected);
        }
    }
}

crate::on_both!(
    sequence_numbers_are_never_reused,
    appended_messages_come_back_in_order_with_every_block,
    appending_nothing_stores_nothing,
    list_puts_the_most_recently_changed_session_first_and_clear_removes_one,
    replace_history_keeps_what_was_appended_after_upto,
    a_replacement_may_be_longer_or_empty,
    replace_history_up_to_an_unknown_message_fails_and_changes_nothing,
    many_sessions_read_in_turn_each_get_their_own_history,
);
