//! Turns: the durable inbox.

use flynn_protocol::{ContentBlock, Message, Role, TurnId};
use flynn_sessions::{Conversations, Error, TurnOrigin, TurnRecord, TurnStatus, Turns};

use crate::{Db, key, messages, numbered, open, turns_of};

fn origin(pid: u32) -> TurnOrigin {
    TurnOrigin {
        agent: "main".into(),
        owner_pid: pid,
        external_id: None,
        principal: Default::default(),
    }
}

async fn a_turn_goes_from_accepted_to_running_to_finished(db: Db) {
    let store = db.open().await;
    let k = key("cli:default");
    store
        .append(&k, &[Message::user("earlier"), Message::assistant("ok")])
        .await
        .unwrap();
    let content = vec![ContentBlock::text("when is the deploy?")];

    let accepted = store.accept(&k, &content, &origin(100)).await.unwrap();
    assert_eq!(
        TurnRecord {
            created_at: 0,
            updated_at: 0,
            ..accepted.clone()
        },
        TurnRecord {
            id: TurnId(1),
            session: k.clone(),
            status: TurnStatus::Pending,
            content: content.clone(),
            origin: origin(100),
            message_seq: None,
            created_at: 0,
            updated_at: 0,
        }
    );
    assert_eq!(
        store.turn(accepted.id).await.unwrap(),
        Some(accepted.clone())
    );
    assert_eq!(
        store.open_turns(None).await.unwrap(),
        vec![accepted.clone()]
    );
    // Accepted is not yet in the history.
    assert_eq!(
        numbered(&store.history(&k).await.unwrap()),
        vec![(1, "earlier".to_owned()), (2, "ok".to_owned())]
    );

    let seq = store.start_turn(accepted.id, 200).await.unwrap();
    assert_eq!(seq, 3);
    let history = store.history(&k).await.unwrap();
    assert_eq!(
        history.last().map(|m| (m.seq, m.turn, m.message.clone())),
        Some((
            3,
            Some(accepted.id),
            Message {
                role: Role::User,
                content: content.clone(),
            }
        ))
    );
    let running = store.turn(accepted.id).await.unwrap().unwrap();
    assert_eq!(
        running,
        TurnRecord {
            status: TurnStatus::Running,
            message_seq: Some(3),
            origin: origin(200),
            updated_at: running.updated_at,
            ..accepted.clone()
        }
    );

    // Starting it again (a rerun after a crash) adds nothing and takes
    // the turn over.
    assert_eq!(store.start_turn(accepted.id, 300).await.unwrap(), 3);
    assert_eq!(store.history(&k).await.unwrap().len(), 3);
    assert_eq!(
        store.turn(accepted.id).await.unwrap().map(|t| t.origin),
        Some(origin(300))
    );

    // The turn's answer.
    let answer = store
        .append_for_turn(&k, accepted.id, &[Message::assistant("Friday.")])
        .await
        .unwrap();
    assert_eq!(answer, vec![4]);
    assert_eq!(
        turns_of(&store.history(&k).await.unwrap()),
        vec![
            (1, None),
            (2, None),
            (3, Some(accepted.id)),
            (4, Some(accepted.id))
        ]
    );

    store
        .finish_turn(accepted.id, TurnStatus::Completed)
        .await
        .unwrap();
    let finished = store.turn(accepted.id).await.unwrap().unwrap();
    assert_eq!(
        (finished.status, finished.message_seq),
        (TurnStatus::Completed, Some(3))
    );
    assert_eq!(store.open_turns(None).await.unwrap(), vec![]);

    let error = store.start_turn(accepted.id, 400).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "turn 1 cannot start: it has already ended (completed)"
    );
    assert!(
        matches!(
            error,
            Error::TurnFinished {
                turn: TurnId(1),
                status: TurnStatus::Completed
            }
        ),
        "{error:?}"
    );
    assert_eq!(store.history(&k).await.unwrap().len(), 4);
}

async fn a_message_accepted_and_started_at_once_is_a_running_turn(db: Db) {
    let store = db.open().await;
    let k = key("telegram:77");
    store.append(&k, &[Message::user("earlier")]).await.unwrap();
    let content = vec![ContentBlock::text("book the train")];
    let from_chat = TurnOrigin {
        external_id: Some("m-1".into()),
        ..origin(300)
    };

    let record = store
        .accept_and_start(&k, &content, &from_chat)
        .await
        .unwrap();
    assert_eq!(
        (record.status, record.message_seq),
        (TurnStatus::Running, Some(2))
    );
    // What the store holds is what it returned, and the message is in the
    // history as the turn's.
    assert_eq!(store.turn(record.id).await.unwrap(), Some(record.clone()));
    assert_eq!(
        store.open_turns(Some(&k)).await.unwrap(),
        vec![record.clone()]
    );
    let history = store.history(&k).await.unwrap();
    assert_eq!(
        history.last().map(|m| (m.seq, m.turn, m.message.clone())),
        Some((
            2,
            Some(record.id),
            Message {
                role: Role::User,
                content: content.clone(),
            }
        ))
    );
    // As `accept` does: the session is titled and knows its channel.
    let meta = store.metadata(&k).await.unwrap();
    assert_eq!(meta.title.as_deref(), Some("book the train"));
    assert_eq!(meta.last_channel.as_deref(), Some("telegram"));
    // Starting it again (a rerun) keeps its message.
    assert_eq!(store.start_turn(record.id, 301).await.unwrap(), 2);

    // The platform's retry of the same message is refused, and stores
    // nothing.
    let error = store
        .accept_and_start(&k, &content, &from_chat)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Duplicate { turn, .. } if *turn == record.id),
        "{error:?}"
    );
    assert_eq!(store.history(&k).await.unwrap().len(), 2);
    assert_eq!(store.open_turns(None).await.unwrap().len(), 1);
}

async fn a_waiting_turn_does_not_split_a_running_turn_from_its_tool_results(db: Db) {
    let store = db.open().await;
    let k = key("cli:default");
    let first = store
        .accept(&k, &[ContentBlock::text("list files")], &origin(1))
        .await
        .unwrap();
    store.start_turn(first.id, 1).await.unwrap();
    // A second message arrives while the first turn runs a tool.
    let second = store
        .accept(&k, &[ContentBlock::text("and then?")], &origin(1))
        .await
        .unwrap();
    let exchange = &crate::tool_exchange()[1..];
    store.append_for_turn(&k, first.id, exchange).await.unwrap();
    store
        .finish_turn(first.id, TurnStatus::Completed)
        .await
        .unwrap();
    store.start_turn(second.id, 1).await.unwrap();

    let mut expected = crate::tool_exchange();
    expected.push(Message::user("and then?"));
    assert_eq!(messages(&store.history(&k).await.unwrap()), expected);
}

async fn open_turns_are_oldest_first_and_filter_by_session(db: Db) {
    let store = db.open().await;
    let a = key("cli:a");
    let b = key("cli:b");
    let text = |t: &str| vec![ContentBlock::text(t)];
    let a1 = store.accept(&a, &text("a1"), &origin(1)).await.unwrap();
    let b1 = store.accept(&b, &text("b1"), &origin(1)).await.unwrap();
    let a2 = store.accept(&a, &text("a2"), &origin(1)).await.unwrap();
    let a3 = store.accept(&a, &text("a3"), &origin(1)).await.unwrap();
    store.start_turn(a1.id, 1).await.unwrap();
    store
        .finish_turn(a2.id, TurnStatus::Cancelled)
        .await
        .unwrap();

    let ids = |turns: Vec<TurnRecord>| turns.iter().map(|t| (t.id, t.status)).collect::<Vec<_>>();
    assert_eq!(
        ids(store.open_turns(None).await.unwrap()),
        vec![
            (a1.id, TurnStatus::Running),
            (b1.id, TurnStatus::Pending),
            (a3.id, TurnStatus::Pending)
        ]
    );
    assert_eq!(
        ids(store.open_turns(Some(&a)).await.unwrap()),
        vec![(a1.id, TurnStatus::Running), (a3.id, TurnStatus::Pending)]
    );
    assert_eq!(
        ids(store.open_turns(Some(&key("cli:none"))).await.unwrap()),
        vec![]
    );
    // A cancelled turn never reached the history.
    assert_eq!(
        numbered(&store.history(&a).await.unwrap()),
        vec![(1, "a1".to_owned())]
    );
}

async fn a_reset_removes_the_sessions_turns(db: Db) {
    let store = db.open().await;
    let k = key("cli:default");
    let turn = store
        .accept(&k, &[ContentBlock::text("hi")], &origin(1))
        .await
        .unwrap();
    assert!(store.clear(&k).await.unwrap());
    assert_eq!(store.turn(turn.id).await.unwrap(), None);
    assert_eq!(store.open_turns(None).await.unwrap(), vec![]);
    // Turn ids are not reused either.
    let next = store
        .accept(&k, &[ContentBlock::text("hi")], &origin(1))
        .await
        .unwrap();
    assert_eq!((turn.id, next.id), (TurnId(1), TurnId(2)));
}

async fn unknown_turns_are_a_clear_error(db: Db) {
    let store = db.open().await;
    let error = store.start_turn(TurnId(7), 1).await.unwrap_err();
    assert_eq!(error.to_string(), "there is no turn 7 in the session store");
    assert!(
        matches!(error, Error::UnknownTurn { turn: TurnId(7) }),
        "{error:?}"
    );
    let error = store
        .finish_turn(TurnId(7), TurnStatus::Failed)
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::UnknownTurn { turn: TurnId(7) }),
        "{error:?}"
    );
    assert_eq!(store.turn(TurnId(7)).await.unwrap(), None);
}

#[tokio::test]
async fn an_unreadable_open_turn_is_marked_failed_and_the_others_recover() {
    let (_dir, store) = open().await;
    let k = key("cli:default");
    let text = |t: &str| vec![ContentBlock::text(t)];
    let good = store.accept(&k, &text("fine"), &origin(1)).await.unwrap();
    let bad = store.accept(&k, &text("later"), &origin(1)).await.unwrap();
    // A content block this version does not know (a newer Flynn wrote it).
    sqlx::query("UPDATE turns SET content = '[{\"type\":\"hologram\"}]' WHERE id = ?1")
        .bind(i64::try_from(bad.id.0).unwrap())
        .execute(&mut crate::raw(store.path()).await)
        .await
        .unwrap();

    let open = store.open_turns(None).await.unwrap();
    assert_eq!(
        open.iter().map(|t| (t.id, t.status)).collect::<Vec<_>>(),
        vec![(good.id, TurnStatus::Pending)]
    );
    let status: String = sqlx::query_scalar("SELECT status FROM turns WHERE id = ?1")
        .bind(i64::try_from(bad.id.0).unwrap())
        .fetch_one(&mut crate::raw(store.path()).await)
        .await
        .unwrap();
    assert_eq!(status, "failed");
}

async fn the_outbox_holds_finished_chat_turns_until_they_are_marked_sent(db: Db) {
    let store = db.open().await;
    let chat = key("telegram:4242");
    let from_chat = |id: &str| TurnOrigin {
        external_id: Some(id.to_owned()),
        ..origin(1)
    };
    let text = |t: &str| vec![ContentBlock::text(t)];
    let answered = store
        .accept(&chat, &text("a"), &from_chat("1"))
        .await
        .unwrap();
    let failed = store
        .accept(&chat, &text("b"), &from_chat("2"))
        .await
        .unwrap();
    let running = store
        .accept(&chat, &text("c"), &from_chat("3"))
        .await
        .unwrap();
    // Not from a chat (the CLI, the gateway): nothing to send it to.
    let cli = store
        .accept(&key("cli:x"), &text("d"), &origin(1))
        .await
        .unwrap();
    for turn in [answered.id, failed.id, running.id, cli.id] {
        store.start_turn(turn, 1).await.unwrap();
    }
    store
        .finish_turn(answered.id, TurnStatus::Completed)
        .await
        .unwrap();
    store
        .finish_turn(failed.id, TurnStatus::Failed)
        .await
        .unwrap();
    store
        .finish_turn(cli.id, TurnStatus::Completed)
        .await
        .unwrap();

    let ids = |turns: Vec<TurnRecord>| turns.iter().map(|t| (t.id, t.status)).collect::<Vec<_>>();
    assert_eq!(
        ids(store.undelivered_turns(0).await.unwrap()),
        vec![
            (answered.id, TurnStatus::Completed),
            (failed.id, TurnStatus::Failed)
        ]
    );
    // Only what finished since the cut-off.
    assert_eq!(
        ids(store.undelivered_turns(i64::MAX).await.unwrap()),
        vec![]
    );
    store.mark_delivered(answered.id).await.unwrap();
    // Marking twice, or a turn the store does not have, is harmless.
    store.mark_delivered(answered.id).await.unwrap();
    store.mark_delivered(TurnId(99)).await.unwrap();
    assert_eq!(
        ids(store.undelivered_turns(0).await.unwrap()),
        vec![(failed.id, TurnStatus::Failed)]
    );
    // The running turn joins the outbox once it finishes.
    store
        .finish_turn(running.id, TurnStatus::Interrupted)
        .await
        .unwrap();
    store.mark_delivered(failed.id).await.unwrap();
    assert_eq!(
        ids(store.undelivered_turns(0).await.unwrap()),
        vec![(running.id, TurnStatus::Interrupted)]
    );
    // The marks outlive the process: another store on the same file (the
    // next start) sees them.
    store.mark_delivered(running.id).await.unwrap();
    store.close().await;
    drop(store);
    let again = db.open().await;
    assert_eq!(ids(again.undelivered_turns(0).await.unwrap()), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_arriving_together_share_commits_and_each_is_kept_whole() {
    let (_dir, store) = open().await;
    let store = std::sync::Arc::new(store);
    const SESSIONS: usize = 100;
    let before = store.write_commits();
    let accepted = futures::future::join_all((0..SESSIONS).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            let k = key(&format!("api:s{i}"));
            let content = vec![ContentBlock::text(format!("message {i}"))];
            let turn = store.accept(&k, &content, &origin(7)).await.unwrap();
            let seq = store.start_turn(turn.id, 7).await.unwrap();
            store
                .append_for_turn(&k, turn.id, &[Message::assistant(format!("answer {i}"))])
                .await
                .unwrap();
            store
                .finish_turn(turn.id, TurnStatus::Completed)
                .await
                .unwrap();
            (k, turn.id, seq)
        })
    }))
    .await;
    let writes = SESSIONS as u64 * 4;
    let commits = store.write_commits() - before;
    assert!(
        commits <= writes / 2,
        "{writes} writes of {SESSIONS} turns at once took {commits} commits"
    );
    let mut ids = std::collections::BTreeSet::new();
    for (i, joined) in accepted.into_iter().enumerate() {
        let (k, turn, seq) = joined.unwrap();
        assert!(ids.insert(turn), "turn {turn} given twice");
        let history = store.history(&k).await.unwrap();
        assert_eq!(
            numbered(&history),
            vec![
                (seq, format!("message {i}")),
                (seq_after(&history, seq), format!("answer {i}"))
            ]
        );
        assert_eq!(
            store.turn(turn).await.unwrap().unwrap().status,
            TurnStatus::Completed
        );
    }
}

/// The sequence number stored after `seq` in `history`.
fn seq_after(history: &[flynn_sessions::StoredMessage], seq: u64) -> u64 {
    history
        .iter()
        .map(|m| m.seq)
        .find(|s| *s > seq)
        .unwrap_or_default()
}

#[tokio::test]
async fn accepting_and_starting_at_once_is_one_commit() {
    let (_dir, store) = open().await;
    let before = store.write_commits();
    let record = store
        .accept_and_start(&key("cli:one"), &[ContentBlock::text("hi")], &origin(1))
        .await
        .unwrap();
    assert_eq!(store.write_commits() - before, 1);
    assert_eq!(record.status, TurnStatus::Running);
}

crate::on_both!(
    a_message_accepted_and_started_at_once_is_a_running_turn,
    the_outbox_holds_finished_chat_turns_until_they_are_marked_sent,
    a_turn_goes_from_accepted_to_running_to_finished,
    a_waiting_turn_does_not_split_a_running_turn_from_its_tool_results,
    open_turns_are_oldest_first_and_filter_by_session,
    a_reset_removes_the_sessions_turns,
    unknown_turns_are_a_clear_error,
);
