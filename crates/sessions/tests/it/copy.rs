//! `flynn_sessions::copy`: an installation moved from SQLite to
//! PostgreSQL and back keeps everything, numbers included.

use std::sync::Arc;

use flynn_protocol::config::{CronJobConfig, Missed, ModelRef, VoiceReply};
use flynn_protocol::{ContentBlock, MediaFile, MediaKind, Message, Purpose, Tier, TurnId, Usage};
use flynn_sessions::{
    JobKind, LastRun, RunOutcome, SessionMeta, SessionStore, StoreLocation, StoredCronJob,
    ToolOutput, TurnOrigin, TurnStatus, UsageRecord, copy,
};

use crate::{Db, key, tool_exchange};

fn location(db: &Db) -> StoreLocation {
    match db {
        Db::Sqlite { path, .. } => StoreLocation::Sqlite(path.clone()),
        Db::Postgres { .. } => StoreLocation::Postgres(db.url()),
    }
}

/// A store with some of everything it keeps.
async fn fill(store: &dyn SessionStore) {
    let chat = key("telegram:42");
    store.append(&chat, &tool_exchange()).await.unwrap();
    // Compaction: new numbers at old positions.
    let history = store.history(&chat).await.unwrap();
    store
        .replace_history(
            &chat,
            history[1].seq,
            &[Message::user("summary: files listed")],
        )
        .await
        .unwrap();
    let origin = |external: &str| TurnOrigin {
        agent: "main".into(),
        owner_pid: 7,
        external_id: Some(external.into()),
        principal: Default::default(),
    };
    let text = |t: &str| vec![ContentBlock::text(t)];
    let answered = store
        .accept_and_start(&chat, &text("what is new?"), &origin("u1"))
        .await
        .unwrap();
    store
        .append_last_answer(
            &chat,
            answered.id,
            &Message::assistant("Nothing."),
            &UsageRecord {
                session: chat.clone(),
                provider: "anthropic".into(),
                model: "claude-haiku-4-5".into(),
                tier: Tier::Fast,
                purpose: Purpose::Conversation,
                usage: Usage {
                    input_tokens: 120,
                    output_tokens: 3,
                    cache_read_tokens: 5,
                    cache_write_tokens: 0,
                },
                cost_usd: Some(0.25),
                partial: true,
            },
        )
        .await
        .unwrap();
    let waiting = store
        .accept(&chat, &text("and later?"), &origin("u2"))
        .await
        .unwrap();
    store.mark_delivered(answered.id).await.unwrap();
    assert_eq!(waiting.status, TurnStatus::Pending);
    // A file the answer sent, one not sent yet: bytes of every value.
    for (id, sent) in [("0195c1", true), ("0195c2", false)] {
        let data: Vec<u8> = (0..=255u8).rev().cycle().take(1000).collect();
        let file = MediaFile {
            id: id.into(),
            name: format!("{id}.bin"),
            media_type: "application/octet-stream".into(),
            size: data.len() as u64,
            kind: MediaKind::Document,
            caption: Some("raw".into()),
        };
        store
            .keep_file(&chat, Some(answered.id), &file, &data)
            .await
            .unwrap();
        if sent {
            store.mark_file_sent(id).await.unwrap();
        }
    }
    store
        .set_metadata(
            &chat,
            &SessionMeta {
                agent: Some("main".into()),
                tier: Some(Tier::Complex),
                model: Some(ModelRef::new("openai", "gpt-4o-mini")),
                title: Some("News".into()),
                last_channel: Some("telegram".into()),
                taint: None,
                voice: Some(VoiceReply::Auto),
            },
        )
        .await
        .unwrap();
    store
        .set_taint(&chat, Some("web.fetch in turn 1"))
        .await
        .unwrap();
    store
        .put_tool_output(
            &chat,
            &ToolOutput {
                call_id: "t1".into(),
                tool: "shell.exec".into(),
                content: "a.txt\n".into(),
                created_at: 11,
            },
        )
        .await
        .unwrap();
    let now = 1_700_000_000_000;
    let ticket = store
        .pairing_request("telegram", "99", Some("Ann"), now, 3_600_000)
        .await
        .unwrap();
    store
        .pairing_approve("telegram", &ticket.code, now)
        .await
        .unwrap()
        .unwrap();
    store.set_peer_owner("telegram", "99", true).await.unwrap();
    store
        .pairing_request("discord", "5", None, now, 3_600_000)
        .await
        .unwrap();
    store
        .add_cron_job(&StoredCronJob {
            job: CronJobConfig {
                name: "brief".into(),
                schedule: "30 7 * * *".into(),
                timezone: "UTC".into(),
                message: "morning brief".into(),
                agent: None,
                session: None,
                deliver_to: Some("telegram:42".into()),
                missed: Missed::RunOnce,
                enabled: false,
            },
            created_by: chat.clone(),
            created_at: 1_000,
        })
        .await
        .unwrap();
    store
        .track_job(JobKind::Cron, "brief", 1_000)
        .await
        .unwrap();
    store
        .record_run(
            JobKind::Cron,
            "brief",
            &LastRun {
                scheduled_for: 5_000,
                started_at: 5_005,
                finished_at: Some(5_900),
                outcome: RunOutcome::Failed,
                error: Some("the model was down".into()),
                session: Some(key("cron:brief")),
                turn: Some(TurnId(3)),
            },
        )
        .await
        .unwrap();
    // A cleared session, last: it held the highest numbers handed out,
    // which must not come back.
    let gone = key("cli:gone");
    store
        .append(&gone, &[Message::user("a"), Message::assistant("b")])
        .await
        .unwrap();
    assert!(store.clear(&gone).await.unwrap());
}

/// Everything a store answers, as text to compare.
async fn contents(store: &dyn SessionStore) -> String {
    let mut out = String::new();
    let now = 1_700_000_000_000;
    for info in store.list().await.unwrap() {
        out += &format!("{info:?}\n");
        out += &format!("{:?}\n", store.history(&info.key).await.unwrap());
        out += &format!("{:?}\n", store.tool_output(&info.key, "t1").await.unwrap());
    }
    out += &format!("{:?}\n", store.open_turns(None).await.unwrap());
    out += &format!("{:?}\n", store.undelivered_turns(0).await.unwrap());
    out += &format!("{:?}\n", store.file("0195c1").await.unwrap());
    out += &format!("{:?}\n", store.unsent_files(0).await.unwrap());
    out += &format!("{:?}\n", store.usage_by_tier(None).await.unwrap());
    out += &format!("{:?}\n", store.usage_by_purpose(None).await.unwrap());
    out += &format!("{:?}\n", store.usage_by_day(0).await.unwrap());
    out += &format!("{:?}\n", store.approved_peers().await.unwrap());
    out += &format!("{:?}\n", store.pairing_pending(now).await.unwrap());
    out += &format!("{:?}\n", store.cron_jobs().await.unwrap());
    out += &format!("{:?}\n", store.job_runs().await.unwrap());
    out
}

#[tokio::test]
async fn a_store_moved_to_postgresql_and_back_keeps_everything() {
    let first = Db::sqlite().await;
    let postgres = Db::postgres().await;
    let back = Db::sqlite().await;
    let original: Arc<dyn SessionStore> = first.open().await;
    fill(&*original).await;
    let expected = contents(&*original).await;
    // Every setting of the session is set, so one left out of the copy
    // shows.
    assert!(expected.contains("voice: Some(Auto)"), "{expected}");
    original.close().await;
    drop(original);

    let there = copy(&location(&first), &location(&postgres)).await.unwrap();
    assert_eq!(there.rows_of("sessions"), 1);
    assert_eq!(there.rows_of("turns"), 2);
    assert_eq!(there.rows_of("channel_peers"), 1);
    assert_eq!(there.rows_of("pairing_codes"), 1);
    assert_eq!(
        there.to_string(),
        "1 sessions, 5 messages, 2 turns, 1 usage records, 1 kept tool outputs, 2 files sent to chats, 1 approved senders, 1 pairing codes, 1 cron jobs, 1 job run records"
    );
    let again = copy(&location(&postgres), &location(&back)).await.unwrap();
    assert_eq!(again, there);

    for db in [&postgres, &back] {
        let store = db.open().await;
        assert_eq!(contents(&*store).await, expected, "{}", db.url());
        // The cleared session's numbers stay used: the next message is
        // numbered after every number the original store handed out.
        let seqs = store
            .append(&key("cli:new"), &[Message::user("hello")])
            .await
            .unwrap();
        assert_eq!(seqs, vec![10], "{}", db.url());
        store.close().await;
    }
}

#[tokio::test]
async fn a_copy_into_a_store_that_holds_anything_is_refused_and_changes_nothing() {
    let source = Db::sqlite().await;
    let target = Db::postgres().await;
    let store = source.open().await;
    store
        .append(&key("cli:a"), &[Message::user("mine")])
        .await
        .unwrap();
    store.close().await;
    let held = target.open().await;
    held.append(&key("cli:b"), &[Message::user("theirs")])
        .await
        .unwrap();
    let before = contents(&*held).await;
    held.close().await;

    let error = copy(&location(&source), &location(&target))
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("is not empty (1 sessions, 1 messages): copy into an empty database"),
        "{error}"
    );
    let after = target.open().await;
    assert_eq!(contents(&*after).await, before);
}
