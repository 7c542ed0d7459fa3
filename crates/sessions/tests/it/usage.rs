//! Usage records, alone and with the answer they paid for.

use flynn_protocol::{Message, Tier, TurnId, Usage};
use flynn_sessions::{Error, SessionStore, SqliteStore, UsageRecord, UsageTotal};

use crate::{key, numbered, open, turns_of};

fn record(session: &str, tier: Tier, input: u64, cost: Option<f64>) -> UsageRecord {
    UsageRecord {
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
    }
}

#[tokio::test]
async fn usage_is_totalled_per_tier_per_session_and_survives_a_reset() {
    let (_dir, store) = open().await;
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

#[tokio::test]
async fn an_answer_and_its_usage_are_stored_together() {
    let (_dir, store) = open().await;
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
