//! The PostgreSQL store against a real server: each test makes a
//! database of its own on the server `FLYNN_TEST_POSTGRES_URL` names
//! (`scripts/postgres.sh` starts one and prints its URL) and drops it
//! after. Without that variable the tests fail, saying so: they never
//! pass without having run.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use flynn_protocol::config::{CronJobConfig, Missed};
use flynn_protocol::{ContentBlock, Message, Principal, Purpose, Role, Tier, Usage};
use sqlx::{Connection, Executor};

use super::*;
use crate::automation::RunOutcome;

/// A database of one test's own; dropped with this value, also when the
/// test fails.
pub(super) struct TestDb {
    admin: String,
    name: String,
    url: String,
}

impl TestDb {
    pub(super) async fn new() -> TestDb {
        let admin = std::env::var("FLYNN_TEST_POSTGRES_URL").unwrap_or_else(|_| {
            panic!(
                "FLYNN_TEST_POSTGRES_URL is not set: the PostgreSQL store's tests need a server. \
                 Run scripts/postgres.sh and set FLYNN_TEST_POSTGRES_URL to the URL it prints \
                 (export FLYNN_TEST_POSTGRES_URL=$(scripts/postgres.sh))"
            )
        });
        let mut random = [0_u8; 8];
        getrandom::fill(&mut random).unwrap();
        let name = format!(
            "flynn_t_{}",
            random
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "cannot connect to FLYNN_TEST_POSTGRES_URL ({}): {e}; is scripts/postgres.sh running?",
                    crate::redact(&admin)
                )
            });
        conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .await
            .unwrap();
        conn.close().await.unwrap();
        let url = with_database(&admin, &name);
        TestDb { admin, name, url }
    }

    pub(super) async fn open(&self) -> PgStore {
        PgStore::open(&self.url)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A connection of its own, to look at the database behind the
    /// store's back.
    pub(super) async fn raw(&self) -> sqlx::PgConnection {
        sqlx::PgConnection::connect(&self.url).await.unwrap()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        // On a thread of its own: `Drop` cannot wait on the test's runtime.
        let dropped = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
                    let _ = conn.execute(sqlx::AssertSqlSafe(drop)).await;
                }
            });
        });
        let _ = dropped.join();
    }
}

/// `url` naming the database `name` instead of its own.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let (scheme, rest) = base.split_once("://").unwrap();
    let authority = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{authority}/{name}{query}")
}

pub(super) fn key(s: &str) -> SessionKey {
    s.parse().unwrap()
}

pub(super) fn origin(pid: u32) -> TurnOrigin {
    TurnOrigin {
        agent: "main".into(),
        owner_pid: pid,
        external_id: None,
        principal: Principal::Owner,
    }
}

fn from_chat(id: &str) -> TurnOrigin {
    TurnOrigin {
        external_id: Some(id.to_owned()),
        ..origin(1)
    }
}

fn numbered(history: &[StoredMessage]) -> Vec<(u64, String)> {
    history.iter().map(|m| (m.seq, m.message.text())).collect()
}

fn usage(
    session: &str,
    tier: Tier,
    purpose: Purpose,
    input: u64,
    cost: Option<f64>,
) -> UsageRecord {
    UsageRecord {
        session: key(session),
        provider: "anthropic".into(),
        model: "claude-haiku-4-5".into(),
        tier,
        purpose,
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

#[tokio::test]
async fn a_turn_goes_from_accepted_to_running_to_answered_to_finished() {
    let db = TestDb::new().await;
    let store = db.open().await;
    let k = key("telegram:42");
    store
        .append(&k, &[Message::user("earlier"), Message::assistant("ok")])
        .await
        .unwrap();
    let content = vec![ContentBlock::text("when is the deploy?\nsoon?")];

    let accepted = store.accept(&k, &content, &from_chat("u-1")).await.unwrap();
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
            origin: from_chat("u-1"),
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
    let meta = store.metadata(&k).await.unwrap();
    assert_eq!(
        (meta.title.as_deref(), meta.last_channel.as_deref()),
        (Some("when is the deploy?"), Some("telegram"))
    );
    assert_eq!(store.history(&k).await.unwrap().len(), 2);

    assert_eq!(store.start_turn(accepted.id, 200).await.unwrap(), 3);
    // A rerun keeps the message and takes the turn over.
    assert_eq!(store.start_turn(accepted.id, 300).await.unwrap(), 3);
    let running = store.turn(accepted.id).await.unwrap().unwrap();
    assert_eq!(
        (
            running.status,
            running.message_seq,
            running.origin.owner_pid
        ),
        (TurnStatus::Running, Some(3), 300)
    );
    let history = store.history(&k).await.unwrap();
    assert_eq!(
        history.last().map(|m| (m.seq, m.turn, m.principal.clone())),
        Some((3, Some(accepted.id), Some(Principal::Owner)))
    );

    assert_eq!(
        store
            .append_for_turn(&k, accepted.id, &[Message::assistant("checking")])
            .await
            .unwrap(),
        vec![4]
    );
    let seq = store
        .append_last_answer(
            &k,
            accepted.id,
            &Message::assistant("Friday."),
            &usage(
                "telegram:42",
                Tier::Default,
                Purpose::Conversation,
                100,
                Some(0.5),
            ),
        )
        .await
        .unwrap();
    assert_eq!(seq, 5);
    let finished = store.turn(accepted.id).await.unwrap().unwrap();
    assert_eq!(finished.status, TurnStatus::Completed);
    assert_eq!(store.open_turns(None).await.unwrap(), vec![]);
    assert_eq!(
        numbered(&store.history(&k).await.unwrap()),
        vec![
            (1, "earlier".to_owned()),
            (2, "ok".to_owned()),
            (3, "when is the deploy?\nsoon?".to_owned()),
            (4, "checking".to_owned()),
            (5, "Friday.".to_owned()),
        ]
    );
    assert_eq!(store.usage_by_tier(Some(&k)).await.unwrap()[0].1.calls, 1);

    let error = store.start_turn(accepted.id, 400).await.unwrap_err();
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
    let error = store.start_turn(TurnId(77), 1).await.unwrap_err();
    assert!(
        matches!(error, Error::UnknownTurn { turn: TurnId(77) }),
        "{error:?}"
    );
    let error = store
        .finish_turn(TurnId(77), TurnStatus::Failed)
        .await
        .unwrap_err();
    assert!(
        matches!(error, Error::UnknownTurn { turn: TurnId(77) }),
        "{error:?}"
    );

    // The outbox: the chat turn's answer was never marked sent.
    let undelivered = store.undelivered_turns(0).await.unwrap();
    assert_eq!(
        undelivered.iter().map(|t| t.id).collect::<Vec<_>>(),
        vec![accepted.id]
    );
    store.mark_delivered(accepted.id).await.unwrap();
    store.mark_delivered(accepted.id).await.unwrap();
    store.mark_delivered(TurnId(99)).await.unwrap();
    assert_eq!(store.undelivered_turns(0).await.unwrap(), vec![]);

    // An answer for a turn that is gone is kept all the same.
    let gone = store
        .append_last_answer(
            &key("cli:gone"),
            TurnId(999),
            &Message::assistant("kept"),
            &usage("cli:gone", Tier::Fast, Purpose::Conversation, 1, None),
        )
        .await
        .unwrap();
    assert_eq!(gone, 6);
    store.close().await;
}

#[tokio::test]
async fn a_message_accepted_and_started_at_once_is_a_running_turn_and_refused_twice() {
    let db = TestDb::new().await;
    let store = db.open().await;
    let k = key("telegram:77");
    store.append(&k, &[Message::user("earlier")]).await.unwrap();
    let content = vec![ContentBlock::text("book the train")];
    let record = store
        .accept_and_start(&k, &content, &from_chat("m-1"))
        .await
        .unwrap();
    assert_eq!(
        (record.status, record.message_seq),
        (TurnStatus::Running, Some(2))
    );
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
                content: content.clone()
            }
        ))
    );
    assert_eq!(store.start_turn(record.id, 301).await.unwrap(), 2);

    let error = store
        .accept_and_start(&k, &content, &from_chat("m-1"))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Duplicate { turn, external_id, .. } if *turn == record.id && external_id == "m-1"),
        "{error:?}"
    );
    assert_eq!(store.history(&k).await.unwrap().len(), 2);
    // The refused message stored no message; its turn number is not
    // given back (a sequence's is not): the next turn takes a later one.
    let next = store
        .accept_and_start(&k, &content, &from_chat("m-2"))
        .await
        .unwrap();
    assert!(next.id > record.id, "{next:?}");
    assert_eq!(next.message_seq, Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_of_many_concurrent_accepts_of_a_message_wins_across_processes() {
    let db = TestDb::new().await;
    // Two stores on one database: two daemons of a scaled-out Flynn.
    let stores = [Arc::new(db.open().await), Arc::new(db.open().await)];
    let k = key("telegram:5");
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let store = stores[i % 2].clone();
            let k = k.clone();
            tokio::spawn(async move {
                let content = vec![ContentBlock::text(format!("try {i}"))];
                if i % 3 == 0 {
                    store
                        .accept_and_start(&k, &content, &from_chat("update-9"))
                        .await
                } else {
                    store.accept(&k, &content, &from_chat("update-9")).await
                }
            })
        })
        .collect();
    let mut won = Vec::new();
    let mut refused = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(record) => won.push(record.id),
            Err(Error::Duplicate { turn, session, .. }) => {
                assert_eq!(session, "telegram:5");
                refused.push(turn);
            }
            Err(other) => panic!("unexpected error: {other:?}"),
        }
    }
    assert_eq!(won.len(), 1, "{won:?}");
    assert_eq!(refused, vec![won[0]; 11]);
    assert_eq!(won[0], TurnId(1));
    assert_eq!(stores[0].open_turns(None).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_on_two_stores_number_each_session_in_commit_order() {
    let db = TestDb::new().await;
    let stores = [Arc::new(db.open().await), Arc::new(db.open().await)];
    let k = key("cli:busy");
    let tasks: Vec<_> = (0..30)
        .map(|i| {
            let store = stores[i % 2].clone();
            let k = if i % 3 == 0 {
                key(&format!("cli:other{i}"))
            } else {
                k.clone()
            };
            tokio::spawn(async move { store.append(&k, &[Message::user(format!("m{i}"))]).await })
        })
        .collect();
    let mut seqs = Vec::new();
    for task in tasks {
        seqs.extend(task.await.unwrap().unwrap());
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=30).collect::<Vec<u64>>());
    let history = stores[1].history(&k).await.unwrap();
    let numbers: Vec<u64> = history.iter().map(|m| m.seq).collect();
    let mut sorted = numbers.clone();
    sorted.sort_unstable();
    assert_eq!((numbers.len(), &numbers), (20, &sorted));
    // Listed newest first (sessions written at the same moment by key).
    let listed = stores[0].list().await.unwrap();
    let stamps: Vec<i64> = listed.iter().map(|s| s.updated_at).collect();
    let mut newest_first = stamps.clone();
    newest_first.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(stamps, newest_first);
}

#[tokio::test]
async fn compaction_puts_new_messages_at_old_positions_and_numbers_are_never_reused() {
    let db = TestDb::new().await;
    let store = db.open().await;
    let k = key("cli:default");
    let texts: Vec<Message> = (1..=4).map(|i| Message::user(format!("m{i}"))).collect();
    assert_eq!(store.append(&k, &texts).await.unwrap(), vec![1, 2, 3, 4]);
    // Read once, so the next read starts from what was kept.
    assert_eq!(store.history(&k).await.unwrap().len(), 4);
    store.append(&k, &[Message::user("m5")]).await.unwrap();

    let summary = [Message::user("[summary]"), Message::assistant("ok")];
    assert_eq!(
        store.replace_history(&k, 3, &summary).await.unwrap(),
        vec![6, 7]
    );
    let expected = vec![
        (6, "[summary]".to_owned()),
        (7, "ok".to_owned()),
        (4, "m4".to_owned()),
        (5, "m5".to_owned()),
    ];
    assert_eq!(numbered(&store.history(&k).await.unwrap()), expected);
    // Another process (another store) sees the same, and so does this one
    // after that process compacts again.
    let other = db.open().await;
    assert_eq!(numbered(&other.history(&k).await.unwrap()), expected);
    other.append(&k, &[Message::user("m8")]).await.unwrap();
    assert_eq!(
        other
            .replace_history(&k, 7, &[Message::user("[summary 2]")])
            .await
            .unwrap(),
        vec![9]
    );
    assert_eq!(
        numbered(&store.history(&k).await.unwrap()),
        vec![
            (9, "[summary 2]".to_owned()),
            (4, "m4".to_owned()),
            (5, "m5".to_owned()),
            (8, "m8".to_owned()),
        ]
    );
    // Cursors skip what compaction wrote; pages follow positions.
    assert_eq!(
        numbered(&store.history_since(&k, 4).await.unwrap()),
        vec![(5, "m5".to_owned()), (8, "m8".to_owned())]
    );
    let page: Vec<u64> = store
        .history_page(&k, Some(5), 10)
        .await
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(page, vec![9, 4]);
    let last: Vec<u64> = store
        .history_page(&k, None, 2)
        .await
        .unwrap()
        .iter()
        .map(|m| m.seq)
        .collect();
    assert_eq!(last, vec![5, 8]);
    let error = store.history_page(&k, Some(99), 3).await.unwrap_err();
    assert!(
        matches!(error, Error::UnknownMessage { seq: 99, .. }),
        "{error:?}"
    );
    let error = store
        .replace_history(&k, 99, &[Message::user("x")])
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "session 'cli:default' has no message 99 in its history"
    );
    assert_eq!(store.info(&k).await.unwrap().unwrap().message_count, 4);

    // Nothing in place of everything, then a reset: the numbers go on.
    assert_eq!(
        store.replace_history(&k, 8, &[]).await.unwrap(),
        Vec::<u64>::new()
    );
    assert!(store.clear(&k).await.unwrap());
    assert!(!store.clear(&k).await.unwrap());
    store.close().await;
    let reopened = db.open().await;
    assert_eq!(
        reopened
            .append(&k, &[Message::user("fresh")])
            .await
            .unwrap(),
        vec![10]
    );
}

#[tokio::test]
async fn list_puts_the_most_recently_changed_session_first() {
    let db = TestDb::new().await;
    let store = db.open().await;
    for (k, text) in [("cli:a", "x"), ("cli:b", "y"), ("cli:c", "z")] {
        store.append(&key(k), &[Message::user(text)]).await.unwrap();
    }
    store
        .append(&key("cli:a"), &[Message::user("again")])
        .await
        .unwrap();
    store
        .set_metadata(
            &key("cli:b"),
            &SessionMeta {
                title: Some("B".into()),
                tier: Some(Tier::Fast),
                ..SessionMeta::default()
            },
        )
        .await
        .unwrap();
    store
        .set_taint(&key("cli:b"), Some("web.fetch in turn 3"))
        .await
        .unwrap();
    let listed = store.list().await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|s| (s.key.to_string(), s.message_count, s.meta.title.clone()))
            .collect::<Vec<_>>(),
        vec![
            ("cli:b".to_owned(), 1, Some("B".to_owned())),
            ("cli:a".to_owned(), 2, None),
            ("cli:c".to_owned(), 1, None),
        ]
    );
    assert_eq!(
        store.metadata(&key("cli:b")).await.unwrap(),
        SessionMeta {
            title: Some("B".into()),
            tier: Some(Tier::Fast),
            taint: Some("web.fetch in turn 3".into()),
            ..SessionMeta::default()
        }
    );
    assert!(listed.windows(2).all(|w| w[0].updated_at > w[1].updated_at));
    assert_eq!(
        store.info(&key("cli:a")).await.unwrap().as_ref(),
        listed.get(1)
    );
    assert_eq!(store.info(&key("cli:none")).await.unwrap(), None);
}

#[tokio::test]
async fn tool_outputs_keep_the_first_and_text_postgres_cannot_hold_is_stored_safely() {
    let db = TestDb::new().await;
    let store = db.open().await;
    let k = key("cli:ids");
    let output = |content: &str| ToolOutput {
        call_id: "call_0".into(),
        tool: "shell.exec".into(),
        content: content.into(),
        created_at: 1,
    };
    store.put_tool_output(&k, &output("first")).await.unwrap();
    store.put_tool_output(&k, &output("first")).await.unwrap();
    let refused = store.put_tool_output(&k, &output("second")).await;
    assert!(
        matches!(&refused, Err(Error::ToolOutputTaken { session, call_id }) if session == "cli:ids" && call_id == "call_0"),
        "{refused:?}"
    );
    assert_eq!(
        store.tool_output(&k, "call_0").await.unwrap(),
        Some(output("first"))
    );

    // A NUL in a first line (the title) or a tool output does not refuse
    // the write.
    let nul = key("cli:nul");
    store
        .accept(&nul, &[ContentBlock::text("a\0b")], &origin(1))
        .await
        .unwrap();
    assert_eq!(
        store.metadata(&nul).await.unwrap().title.as_deref(),
        Some("a\u{FFFD}b")
    );
    let binary = ToolOutput {
        call_id: "c\0".into(),
        ..output("bytes\0here")
    };
    store.put_tool_output(&nul, &binary).await.unwrap();
    store.put_tool_output(&nul, &binary).await.unwrap();
    assert_eq!(
        store
            .tool_output(&nul, "c\0")
            .await
            .unwrap()
            .map(|o| o.content),
        Some("bytes\u{FFFD}here".to_owned())
    );
    assert_eq!(
        numbered(&store.history(&nul).await.unwrap()),
        vec![],
        "an accepted message is not in the history yet"
    );
}

#[tokio::test]
async fn idle_sessions_are_pruned_with_what_they_hold_and_busy_ones_stay() {
    let db = TestDb::new().await;
    let store = db.open().await;
    let old = key("cli:old");
    let waiting = key("cli:waiting");
    store
        .append(&old, &[Message::user("long ago")])
        .await
        .unwrap();
    let done = store
        .accept(&old, &[ContentBlock::text("done")], &origin(1))
        .await
        .unwrap();
    store
        .finish_turn(done.id, TurnStatus::Completed)
        .await
        .unwrap();
    store
        .accept(&waiting, &[ContentBlock::text("queued")], &origin(1))
        .await
        .unwrap();
    let mut raw = db.raw().await;
    raw.execute("UPDATE sessions SET updated_at = updated_at - 86400000")
        .await
        .unwrap();
    let fresh = key("cli:fresh");
    store
        .append(&fresh, &[Message::user("today")])
        .await
        .unwrap();
    let newest: i64 = sqlx::query_scalar("SELECT MAX(updated_at) FROM sessions")
        .fetch_one(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        store.prune_idle(newest - 3_600_000).await.unwrap(),
        vec![old.clone()]
    );
    let left: Vec<SessionKey> = store
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.key)
        .collect();
    assert_eq!(left, vec![fresh, waiting]);
    assert_eq!(store.turn(done.id).await.unwrap(), None);
}

#[tokio::test]
async fn pairing_gives_one_code_per_sender_and_approval_lets_them_in() {
    let db = TestDb::new().await;
    let store = Arc::new(db.open().await);
    const HOUR: i64 = 3_600_000;
    // Asked for at once (two messages of one stranger, say): one code.
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .pairing_request("telegram", "42", Some("@alice"), 1_000, HOUR)
                    .await
            })
        })
        .collect();
    let mut tickets = Vec::new();
    for task in tasks {
        tickets.push(task.await.unwrap().unwrap());
    }
    let code = tickets[0].code.clone();
    assert!(
        tickets
            .iter()
            .all(|t| t.code == code && t.expires_at == 1_000 + HOUR)
    );
    assert_eq!(tickets.iter().filter(|t| t.fresh).count(), 1);
    assert_eq!(
        store.pairing_pending(2_000).await.unwrap(),
        vec![PendingPairing {
            channel: "telegram".into(),
            sender: "42".into(),
            name: Some("@alice".into()),
            code: code.clone(),
            created_at: 1_000,
            expires_at: 1_000 + HOUR,
        }]
    );
    assert!(matches!(
        store
            .pairing_approve("discord", &code, 3_000)
            .await
            .unwrap(),
        Err(PairingError::Unknown { .. })
    ));
    let typed = format!(" {} ", code.to_lowercase());
    let peer = store
        .pairing_approve("telegram", &typed, 3_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        peer,
        ApprovedPeer {
            channel: "telegram".into(),
            sender: "42".into(),
            name: Some("@alice".into()),
            approved_at: 3_000,
            owner: false,
        }
    );
    assert!(store.peer_approved("telegram", "42").await.unwrap());
    assert!(!store.peer_owner("telegram", "42").await.unwrap());
    assert!(store.set_peer_owner("telegram", "42", true).await.unwrap());
    assert!(!store.set_peer_owner("telegram", "7", true).await.unwrap());
    assert!(store.peer_owner("telegram", "42").await.unwrap());
    assert_eq!(
        store.approved_peers().await.unwrap(),
        vec![ApprovedPeer {
            owner: true,
            ..peer
        }]
    );
    assert!(store.revoke_peer("telegram", "42").await.unwrap());
    assert!(!store.revoke_peer("telegram", "42").await.unwrap());

    // An expired code is refused as expired.
    let short = store
        .pairing_request("whatsapp", "1555", None, 0, 10)
        .await
        .unwrap();
    assert!(matches!(
        store
            .pairing_approve("whatsapp", &short.code, 10)
            .await
            .unwrap(),
        Err(PairingError::Expired { .. })
    ));

    // Every code tried is taken: an error, not a loop.
    let same = &mut || Ok("AAAAAA".to_owned());
    store
        .pairing_request_with("slack", "1", None, 0, HOUR, same)
        .await
        .unwrap();
    let error = store
        .pairing_request_with("slack", "2", None, 0, HOUR, same)
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "cannot make a pairing code on slack: the 16 codes tried were all taken; the sender may write again later"
    );
}

#[tokio::test]
async fn a_full_channel_refuses_new_codes() {
    let db = TestDb::new().await;
    let store = db.open().await;
    for i in 0..MAX_PENDING {
        store
            .pairing_request(
                "discord",
                &format!("u{i}"),
                None,
                i64::try_from(i).unwrap(),
                100,
            )
            .await
            .unwrap();
    }
    let refused = store
        .pairing_request("discord", "flood", None, 50, 100)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &refused,
            Error::Pairing(PairingError::Full { pending, frees_at, .. })
                if *pending == MAX_PENDING && *frees_at == 100
        ),
        "{refused:?}"
    );
    // Once the first codes expire, their slots free.
    assert!(
        store
            .pairing_request("discord", "late", None, 101, 100)
            .await
            .unwrap()
            .fresh
    );
}

fn cron_job(name: &str) -> StoredCronJob {
    StoredCronJob {
        job: CronJobConfig {
            name: name.to_owned(),
            schedule: "30 7 * * MON-FRI".to_owned(),
            timezone: "Europe/Berlin".to_owned(),
            message: "morning brief".to_owned(),
            agent: Some("main".to_owned()),
            session: None,
            deliver_to: Some("telegram:42".to_owned()),
            missed: Missed::RunOnce,
            enabled: true,
        },
        created_by: key("telegram:42"),
        created_at: 1_000,
    }
}

#[tokio::test]
async fn cron_jobs_and_their_runs_are_kept_by_name() {
    let db = TestDb::new().await;
    let store = db.open().await;
    assert!(store.add_cron_job(&cron_job("brief")).await.unwrap());
    let mut other = cron_job("brief");
    other.job.message = "something else".to_owned();
    assert!(!store.add_cron_job(&other).await.unwrap());
    let mut plain = cron_job("Alpha");
    plain.job.agent = None;
    plain.job.deliver_to = None;
    plain.job.missed = Missed::Skip;
    plain.job.enabled = false;
    assert!(store.add_cron_job(&plain).await.unwrap());
    // By name, bytewise: upper case first.
    assert_eq!(
        store.cron_jobs().await.unwrap(),
        vec![plain.clone(), cron_job("brief")]
    );

    let tracked = store
        .track_job(JobKind::Heartbeat, "beat", 100)
        .await
        .unwrap();
    assert_eq!(
        tracked,
        JobRuns {
            kind: JobKind::Heartbeat,
            name: "beat".into(),
            since: 100,
            last: None
        }
    );
    assert_eq!(
        store
            .track_job(JobKind::Heartbeat, "beat", 500)
            .await
            .unwrap(),
        tracked
    );
    let run = LastRun {
        scheduled_for: 5_000,
        started_at: 5_005,
        finished_at: Some(5_900),
        outcome: RunOutcome::Undelivered,
        error: Some("telegram is down".into()),
        session: Some(key("cron:brief")),
        turn: Some(TurnId(7)),
    };
    store
        .record_run(JobKind::Cron, "brief", &run)
        .await
        .unwrap();
    let running = LastRun {
        finished_at: None,
        outcome: RunOutcome::Running,
        error: None,
        ..run.clone()
    };
    store
        .record_run(JobKind::Cron, "new", &running)
        .await
        .unwrap();
    assert_eq!(
        store.job_runs().await.unwrap(),
        vec![
            JobRuns {
                kind: JobKind::Cron,
                name: "Alpha".into(),
                since: 1_000,
                last: None
            },
            JobRuns {
                kind: JobKind::Cron,
                name: "brief".into(),
                since: 1_000,
                last: Some(run)
            },
            JobRuns {
                kind: JobKind::Cron,
                name: "new".into(),
                since: 5_005,
                last: Some(running)
            },
            tracked,
        ]
    );
    assert!(store.remove_cron_job("brief").await.unwrap());
    assert!(!store.remove_cron_job("brief").await.unwrap());
    assert_eq!(store.cron_jobs().await.unwrap(), vec![plain]);
    assert!(
        store
            .job_runs()
            .await
            .unwrap()
            .iter()
            .all(|r| r.name != "brief")
    );
}

#[tokio::test]
async fn usage_is_totalled_by_tier_purpose_and_day() {
    let db = TestDb::new().await;
    let store = db.open().await;
    for r in [
        usage(
            "cli:a",
            Tier::Default,
            Purpose::Conversation,
            100,
            Some(0.5),
        ),
        usage("cli:a", Tier::Fast, Purpose::Compaction, 40, Some(0.01)),
        usage("cli:a", Tier::Fast, Purpose::Compaction, 60, None),
        usage(
            "cli:a",
            Tier::Fast,
            Purpose::ToolSummarisation,
            5,
            Some(0.02),
        ),
        usage(
            "cli:b",
            Tier::Complex,
            Purpose::ComplexReasoning,
            9,
            Some(2.0),
        ),
    ] {
        store.record_usage(&r).await.unwrap();
    }
    let lines: Vec<(Tier, Purpose, u64, u64, u64)> = store
        .usage_by_purpose(Some(&key("cli:a")))
        .await
        .unwrap()
        .iter()
        .map(|l| {
            (
                l.tier,
                l.purpose,
                l.total.calls,
                l.total.usage.input_tokens,
                l.total.unpriced_calls,
            )
        })
        .collect();
    assert_eq!(
        lines,
        vec![
            (Tier::Fast, Purpose::Compaction, 2, 100, 1),
            (Tier::Fast, Purpose::ToolSummarisation, 1, 5, 0),
            (Tier::Default, Purpose::Conversation, 1, 100, 0),
        ]
    );
    let tiers = store.usage_by_tier(None).await.unwrap();
    assert_eq!(
        tiers
            .iter()
            .map(|(t, u)| (*t, u.calls, u.usage.input_tokens, u.usage.output_tokens))
            .collect::<Vec<_>>(),
        vec![
            (Tier::Fast, 3, 105, 30),
            (Tier::Default, 1, 100, 10),
            (Tier::Complex, 1, 9, 10)
        ]
    );
    assert!((tiers[0].1.cost_usd - 0.03).abs() < 1e-9);

    // Days in UTC: move two rows to known times.
    let mut raw = db.raw().await;
    // 2024-03-01T23:59:59.999Z and 2024-03-02T00:00:00Z.
    raw.execute(
        "UPDATE usage SET created_at = CASE WHEN tier = 'complex' THEN 1709337599999
             ELSE 1709337600000 END",
    )
    .await
    .unwrap();
    let days: Vec<(String, Tier, u64)> = store
        .usage_by_day(1709337599999)
        .await
        .unwrap()
        .into_iter()
        .map(|d| (d.day, d.tier, d.total.calls))
        .collect();
    assert_eq!(
        days,
        vec![
            ("2024-03-01".to_owned(), Tier::Complex, 1),
            // By the tier's name within a day, as SQLite sorts them.
            ("2024-03-02".to_owned(), Tier::Default, 1),
            ("2024-03-02".to_owned(), Tier::Fast, 3),
        ]
    );
    assert_eq!(store.usage_by_day(1709337600001).await.unwrap(), vec![]);
}

#[tokio::test]
async fn a_write_waits_for_another_writer_of_its_session_but_not_of_another() {
    let db = TestDb::new().await;
    let store = Arc::new(db.open().await);
    let k = key("cli:locked");
    // Another process in the middle of a write of the session.
    let mut holder = db.raw().await;
    let mut writing = holder.begin().await.unwrap();
    super::lock_session(&mut writing, k.as_str()).await.unwrap();
    // A write of another session goes through meanwhile.
    assert_eq!(
        store
            .append(&key("cli:other"), &[Message::user("free")])
            .await
            .unwrap()
            .len(),
        1
    );
    let appending = {
        let store = store.clone();
        let k = k.clone();
        tokio::spawn(async move { store.append(&k, &[Message::user("waits")]).await })
    };
    // The session's write is seen waiting for the lock.
    let mut watcher = db.raw().await;
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
            )
            .fetch_one(&mut watcher)
            .await
            .unwrap();
            if waiting == 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the write did not wait for the session's lock"));
    assert!(!appending.is_finished());
    writing.rollback().await.unwrap();
    let stored = appending.await.unwrap().unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(store.history(&k).await.unwrap().len(), 1);
}

#[tokio::test]
async fn serialization_failures_deadlocks_and_lock_timeouts_are_busy() {
    let db = TestDb::new().await;
    let store = db.open().await;
    for (code, retryable) in [
        ("40001", true),
        ("40P01", true),
        ("55P03", true),
        ("53100", false),
        ("23505", false),
    ] {
        let sql = format!("DO $$ BEGIN RAISE EXCEPTION 'raised' USING ERRCODE = '{code}'; END $$");
        let error = Error::from(
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&store.pool)
                .await
                .unwrap_err(),
        );
        assert_eq!(error.is_retryable(), retryable, "{code}: {error:?}");
    }
    let full = Error::from(
        sqlx::query("DO $$ BEGIN RAISE EXCEPTION 'no room' USING ERRCODE = '53100'; END $$")
            .execute(&store.pool)
            .await
            .unwrap_err(),
    );
    assert!(matches!(full, Error::DiskFull { .. }), "{full:?}");
}

#[tokio::test]
async fn opening_says_what_failed_and_never_shows_the_password() {
    let refused = PgStore::open("postgres://flynn:s3cret-pw@127.0.0.1:1/flynn")
        .await
        .unwrap_err();
    let message = refused.to_string();
    assert!(matches!(refused, Error::Open { .. }), "{refused:?}");
    assert!(
        message.starts_with(
            "cannot open the session database postgres://flynn:***@127.0.0.1:1/flynn: cannot reach the PostgreSQL server at 127.0.0.1:1: "
        ),
        "{message}"
    );
    assert!(
        message.ends_with("(check that it runs and listens there)"),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");

    // A password given as an option after `?` is hidden too.
    let refused = PgStore::open("postgres://flynn@127.0.0.1:1/flynn?password=s3cret-pw")
        .await
        .unwrap_err();
    let message = refused.to_string();
    assert!(
        message.starts_with(
            "cannot open the session database postgres://flynn@127.0.0.1:1/flynn?password=***: cannot reach"
        ),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");

    let unreadable = PgStore::open("postgres://flynn:s3cret-pw@db.local:port/flynn")
        .await
        .unwrap_err();
    let message = unreadable.to_string();
    assert!(matches!(unreadable, Error::Open { .. }), "{unreadable:?}");
    assert!(
        message.contains("cannot be read as a PostgreSQL URL"),
        "{message}"
    );
    assert!(!message.contains("s3cret"), "{message}");

    let Ok(admin) = std::env::var("FLYNN_TEST_POSTGRES_URL") else {
        panic!(
            "FLYNN_TEST_POSTGRES_URL is not set: run scripts/postgres.sh and set FLYNN_TEST_POSTGRES_URL to the URL it prints"
        );
    };
    let options = PgConnectOptions::from_str(&admin).unwrap();
    let server = server_of(&options);
    let user = options.get_username().to_owned();
    let wrong = format!(
        "postgres://{user}:Wr0ng-Passw0rd@{server}/{}",
        options.get_database().unwrap_or("postgres")
    );
    let error = PgStore::open(&wrong).await.unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "the PostgreSQL server at {server} refused the login of user '{user}'"
        )),
        "{message}"
    );
    assert!(!message.contains("Wr0ng"), "{message}");

    let missing = with_database(&admin, "flynn_no_such_database");
    let message = PgStore::open(&missing).await.unwrap_err().to_string();
    assert!(
        message.contains("has no database 'flynn_no_such_database'"),
        "{message}"
    );
}

#[tokio::test]
async fn a_user_who_may_not_create_tables_is_told_what_to_grant() {
    let db = TestDb::new().await;
    let mut raw = db.raw().await;
    let role = format!("{}_guest", db.name);
    raw.execute(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {role} LOGIN PASSWORD 'guest-pass'"
    )))
    .await
    .unwrap();
    let options = PgConnectOptions::from_str(&db.url).unwrap();
    let url = format!(
        "postgres://{role}:guest-pass@{}/{}",
        server_of(&options),
        db.name
    );
    let error = PgStore::open(&url).await.unwrap_err();
    raw.execute(sqlx::AssertSqlSafe(format!("DROP ROLE {role}")))
        .await
        .unwrap();
    let message = error.to_string();
    assert!(matches!(error, Error::Open { .. }), "{error:?}");
    assert!(
        message.contains(&format!(
            "user '{role}' may not create the session store's tables in database '{}'",
            db.name
        )) && message.ends_with(&format!("GRANT CREATE ON SCHEMA public TO {role})")),
        "{message}"
    );
    assert!(!message.contains("guest-pass"), "{message}");
}

#[tokio::test]
async fn opening_a_current_database_again_changes_nothing_and_a_closed_store_refuses() {
    let db = TestDb::new().await;
    let stores: Vec<PgStore> = futures::future::join_all((0..3).map(|_| db.open())).await;
    let k = key("cli:a");
    stores[0].append(&k, &[Message::user("hi")]).await.unwrap();
    let reopened = db.open().await;
    assert_eq!(
        numbered(&reopened.history(&k).await.unwrap()),
        vec![(1, "hi".to_owned())]
    );
    let store: Arc<dyn crate::SessionStore> = Arc::new(reopened);
    store.close().await;
    assert!(store.append(&k, &[Message::user("late")]).await.is_err());
}

#[test]
fn passwords_are_hidden_as_written_and_decoded() {
    let password = Password::of("postgres://flynn:p%40ss-word@db.local/flynn");
    assert_eq!(password.hide("p%40ss-word and p@ss-word"), "*** and ***");
    assert_eq!(Password::of("postgres://flynn@db/x").hide("flynn"), "flynn");
    let in_query = Password::of("postgres://flynn@db/x?sslmode=require&Password=a%26b#top");
    assert_eq!(in_query.hide("a%26b, a&b"), "***, ***");
    assert_eq!(
        with_database("postgres://u:p@h:1/postgres?sslmode=disable", "t"),
        "postgres://u:p@h:1/t?sslmode=disable"
    );
}
