//! Usage records, alone and with the answer they paid for.

use flynn_protocol::{Message, Purpose, Tier, TurnId, Usage};
use flynn_sessions::{
    Conversations, Error, SqliteStore, ToolOutput, Turns, UsageLine, UsageLog, UsageRecord,
    UsageTotal,
};

use crate::{Db, key, numbered, open, turns_of};

fn record(session: &str, tier: Tier, input: u64, cost: Option<f64>) -> UsageRecord {
    UsageRecord {
        session: key(session),
        provider: "anthropic".into(),
        model: "claude-haiku-4-5".into(),
        tier,
        purpose: Purpose::Conversation,
        usage: Usage {
            input_tokens: input,
            output_tokens: 10,
            cache_read_tokens: 1,
            cache_write_tokens: 2,
        },
        cost_usd: cost,
        partial: false,
    }
}

async fn usage_is_totalled_per_tier_and_purpose(db: Db) {
    let store = db.open().await;
    let with = |tier, purpose, input, cost| UsageRecord {
        purpose,
        ..record("cli:a", tier, input, cost)
    };
    for r in [
        with(Tier::Default, Purpose::Conversation, 100, Some(0.5)),
        with(Tier::Fast, Purpose::Compaction, 40, Some(0.01)),
        with(Tier::Fast, Purpose::Compaction, 60, None),
        with(Tier::Fast, Purpose::ToolSummarisation, 5, Some(0.02)),
        with(Tier::Complex, Purpose::ComplexReasoning, 9, Some(2.0)),
    ] {
        store.record_usage(&r).await.unwrap();
    }
    let lines = store.usage_by_purpose(Some(&key("cli:a"))).await.unwrap();
    let summary: Vec<(Tier, Purpose, u64, u64, f64, u64)> = lines
        .iter()
        .map(
            |UsageLine {
                 tier,
                 purpose,
                 total,
             }| {
                (
                    *tier,
                    *purpose,
                    total.calls,
                    total.usage.input_tokens,
                    total.cost_usd,
                    total.unpriced_calls,
                )
            },
        )
        .collect();
    assert_eq!(
        summary,
        vec![
            (Tier::Fast, Purpose::Compaction, 2, 100, 0.01, 1),
            (Tier::Fast, Purpose::ToolSummarisation, 1, 5, 0.02, 0),
            (Tier::Default, Purpose::Conversation, 1, 100, 0.5, 0),
            (Tier::Complex, Purpose::ComplexReasoning, 1, 9, 2.0, 0),
        ]
    );
    // Per tier, the purposes add up.
    let fast = store.usage_by_tier(None).await.unwrap()[0].clone();
    assert_eq!(fast.0, Tier::Fast);
    assert_eq!((fast.1.calls, fast.1.usage.input_tokens), (3, 105));
    assert!((fast.1.cost_usd - 0.03).abs() < 1e-9);
}

async fn tool_outputs_are_kept_per_session_by_id_and_cleared_with_it(db: Db) {
    let store = db.open().await;
    let output = |content: &str| ToolOutput {
        call_id: "call_1".into(),
        tool: "shell.exec".into(),
        content: content.into(),
        created_at: 1,
    };
    store
        .put_tool_output(&key("cli:a"), &output("first"))
        .await
        .unwrap();
    assert_eq!(
        store.tool_output(&key("cli:a"), "call_1").await.unwrap(),
        Some(output("first"))
    );
    // Another session's call of the same id is not this one.
    assert_eq!(
        store.tool_output(&key("cli:b"), "call_1").await.unwrap(),
        None
    );
    assert!(store.clear(&key("cli:a")).await.unwrap());
    assert_eq!(
        store.tool_output(&key("cli:a"), "call_1").await.unwrap(),
        None
    );
}

async fn usage_is_totalled_per_tier_per_session_and_survives_a_reset(db: Db) {
    let store = db.open().await;
    for r in [
        record("cli:a", Tier::Default, 100, Some(0.5)),
        record("cli:a", Tier::Default, 50, None),
        record("cli:a", Tier::Fast, 7, Some(0.25)),
        record("cli:b", Tier::Default, 1, Some(1.0)),
    ] {
        store.record_usage(&r).await.unwrap();
    }

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

async fn an_answer_and_its_usage_are_stored_together(db: Db) {
    let store = db.open().await;
    let k = key("cli:a");
    store.append(&k, &[Message::user("hi")]).await.unwrap();
    let seq = store
        .append_answer(
            &k,
            Some(TurnId(9)),
            &Message::assistant("hello"),
            &record("cli:a", Tier::Default, 100, Some(0.5)),
        )
        .await
        .unwrap();
    assert_eq!(seq, 2);
    assert_eq!(
        turns_of(&store.history(&k).await.unwrap()),
        vec![(1, None), (2, Some(TurnId(9)))]
    );
    assert_eq!(
        store.usage_by_tier(Some(&k)).await.unwrap(),
        vec![(
            Tier::Default,
            UsageTotal {
                calls: 1,
                usage: Usage {
                    input_tokens: 100,
                    output_tokens: 10,
                    cache_read_tokens: 1,
                    cache_write_tokens: 2
                },
                cost_usd: 0.5,
                unpriced_calls: 0,
            }
        )]
    );
}

#[tokio::test]
async fn an_answer_whose_usage_cannot_be_stored_is_not_stored_either() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let k = key("cli:a");
    store.append(&k, &[Message::user("hi")]).await.unwrap();
    // Make the usage insert fail inside the transaction.
    sqlx::query(
        "CREATE TRIGGER refuse_usage BEFORE INSERT ON usage
         BEGIN SELECT RAISE(ABORT, 'usage refused'); END",
    )
    .execute(&mut crate::raw(&path).await)
    .await
    .unwrap();

    let error = store
        .append_answer(
            &k,
            None,
            &Message::assistant("hello"),
            &record("cli:a", Tier::Default, 100, Some(0.5)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::Backend { ref message } if message.contains("usage refused")),
        "{error:?}"
    );
    assert!(!error.is_retryable());
    assert_eq!(
        numbered(&store.history(&k).await.unwrap()),
        vec![(1, "hi".to_owned())]
    );
    assert_eq!(store.usage_by_tier(None).await.unwrap(), vec![]);
}

#[tokio::test]
async fn a_last_answer_is_kept_with_its_usage_and_completes_its_turn_in_one_commit() {
    let (_dir, store) = open().await;
    let k = key("cli:last");
    let origin = flynn_sessions::TurnOrigin {
        agent: "main".into(),
        owner_pid: 1,
        external_id: None,
        principal: Default::default(),
    };
    let turn = store
        .accept(&k, &[flynn_protocol::ContentBlock::text("hi")], &origin)
        .await
        .unwrap();
    store.start_turn(turn.id, 1).await.unwrap();
    let before = store.write_commits();
    let seq = store
        .append_last_answer(
            &k,
            turn.id,
            &Message::assistant("hello"),
            &record("cli:last", Tier::Default, 100, Some(0.5)),
        )
        .await
        .unwrap();
    assert_eq!(store.write_commits() - before, 1);
    assert_eq!(
        turns_of(&store.history(&k).await.unwrap()),
        vec![(seq - 1, Some(turn.id)), (seq, Some(turn.id))]
    );
    assert_eq!(
        store.turn(turn.id).await.unwrap().unwrap().status,
        flynn_sessions::TurnStatus::Completed
    );
    assert_eq!(store.usage_by_tier(Some(&k)).await.unwrap()[0].1.calls, 1);

    // A turn that is gone (its session was cleared meanwhile): the answer
    // is kept all the same.
    let other = key("cli:gone");
    let seq = store
        .append_last_answer(
            &other,
            TurnId(999),
            &Message::assistant("still kept"),
            &record("cli:gone", Tier::Default, 1, None),
        )
        .await
        .unwrap();
    assert_eq!(
        turns_of(&store.history(&other).await.unwrap()),
        vec![(seq, Some(TurnId(999)))]
    );
}

#[tokio::test]
async fn an_answer_waits_out_a_writer_that_holds_the_database_past_the_busy_timeout() {
    use sqlx::Connection;

    let (_dir, store) = open().await;
    let k = key("cli:locked");
    // Another process takes the write lock and keeps it longer than
    // SQLite's busy timeout.
    let mut holder = crate::raw(store.path()).await;
    let mut lock = holder.begin_with("BEGIN EXCLUSIVE").await.unwrap();
    sqlx::query("UPDATE sessions SET title = title")
        .execute(&mut *lock)
        .await
        .unwrap();
    let answer = Message::assistant("paid for");
    let appending = {
        let store = store.clone();
        let k = k.clone();
        let answer = answer.clone();
        tokio::spawn(async move {
            store
                .append_answer(
                    &k,
                    None,
                    &answer,
                    &record("cli:locked", Tier::Default, 100, Some(0.1)),
                )
                .await
        })
    };
    tokio::time::sleep(flynn_sessions::retry::BUSY_TIMEOUT + std::time::Duration::from_millis(500))
        .await;
    assert!(
        !appending.is_finished(),
        "the answer gave up while the lock was held"
    );
    lock.rollback().await.unwrap();

    let seq = appending.await.unwrap().unwrap();
    let history = store.history(&k).await.unwrap();
    assert_eq!(
        history
            .iter()
            .map(|m| (m.seq, m.message.clone()))
            .collect::<Vec<_>>(),
        vec![(seq, answer)]
    );
    let usage = store.usage_by_purpose(Some(&k)).await.unwrap();
    assert_eq!(
        usage
            .iter()
            .map(|l| (l.total.calls, l.total.usage.input_tokens))
            .collect::<Vec<_>>(),
        vec![(1, 100)]
    );
}

#[tokio::test]
async fn usage_since_a_day_reads_through_the_time_index() {
    let (_dir, store) = open().await;
    let mut raw = crate::raw(store.path()).await;
    let plan: Vec<(i64, i64, i64, String)> = sqlx::query_as(
        "EXPLAIN QUERY PLAN SELECT COUNT(*) FROM usage WHERE created_at >= 0 GROUP BY tier",
    )
    .fetch_all(&mut raw)
    .await
    .unwrap();
    assert!(
        plan.iter()
            .any(|(_, _, _, detail)| detail.contains("USING INDEX usage_by_time")),
        "{plan:?}"
    );
}

crate::on_both!(
    usage_is_totalled_per_tier_and_purpose,
    tool_outputs_are_kept_per_session_by_id_and_cleared_with_it,
    usage_is_totalled_per_tier_per_session_and_survives_a_reset,
    an_answer_and_its_usage_are_stored_together,
);
