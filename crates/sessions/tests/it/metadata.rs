//! Per-session metadata.

use flynn_protocol::config::{ModelRef, VoiceReply};
use flynn_protocol::{Message, Tier};
use flynn_sessions::{Conversations, SessionMeta, SqliteStore, Turns};

use crate::{Db, key};

async fn metadata_round_trips_through_the_file_and_shows_in_list_and_info(db: Db) {
    let store = db.open().await;
    let k = key("telegram:42");
    assert_eq!(store.metadata(&k).await.unwrap(), SessionMeta::default());

    let meta = SessionMeta {
        agent: Some("coder".into()),
        tier: Some(Tier::Complex),
        model: Some(ModelRef::new("openrouter", "meta-llama/llama-3.3-70b")),
        title: Some("Deploy plans".into()),
        last_channel: Some("telegram".into()),
        taint: None,
        voice: Some(VoiceReply::Always),
    };
    // Setting metadata creates the session.
    store.set_metadata(&k, &meta).await.unwrap();
    store.close().await;

    let store = db.open().await;
    assert_eq!(store.metadata(&k).await.unwrap(), meta);
    let info = store.info(&k).await.unwrap().unwrap();
    assert_eq!(
        (info.key.to_string(), info.message_count, info.meta.clone()),
        ("telegram:42".to_owned(), 0, meta.clone())
    );
    assert_eq!(store.list().await.unwrap(), vec![info]);

    // Messages leave metadata alone; setting it again replaces it whole.
    store.append(&k, &[Message::user("hi")]).await.unwrap();
    assert_eq!(store.metadata(&k).await.unwrap(), meta);
    let cleared = SessionMeta {
        tier: Some(Tier::Fast),
        ..SessionMeta::default()
    };
    store.set_metadata(&k, &cleared).await.unwrap();
    assert_eq!(store.metadata(&k).await.unwrap(), cleared);
}

async fn every_voice_reply_mode_round_trips_and_none_leaves_it_to_the_config(db: Db) {
    let store = db.open().await;
    let k = key("telegram:42");
    for voice in [
        Some(VoiceReply::Off),
        Some(VoiceReply::Auto),
        Some(VoiceReply::Always),
        None,
    ] {
        let meta = SessionMeta {
            agent: Some("coder".into()),
            voice,
            ..SessionMeta::default()
        };
        store.set_metadata(&k, &meta).await.unwrap();
        assert_eq!(store.metadata(&k).await.unwrap(), meta, "{voice:?}");
        let listed = store.list().await.unwrap();
        assert_eq!(
            listed.iter().map(|s| s.meta.voice).collect::<Vec<_>>(),
            [voice]
        );
    }
}

async fn a_voice_mode_this_version_does_not_know_reads_as_unset(db: Db) {
    let store = db.open().await;
    let k = key("telegram:42");
    let meta = SessionMeta {
        tier: Some(Tier::Fast),
        voice: Some(VoiceReply::Always),
        ..SessionMeta::default()
    };
    store.set_metadata(&k, &meta).await.unwrap();
    store.close().await;
    // A newer Flynn wrote a mode this one does not have.
    db.execute("UPDATE sessions SET voice = 'whisper'").await;

    let store = db.open().await;
    let unset = SessionMeta {
        voice: None,
        ..meta
    };
    assert_eq!(store.metadata(&k).await.unwrap(), unset);
    assert_eq!(store.info(&k).await.unwrap().unwrap().meta, unset);
}

async fn a_taint_is_kept_apart_from_the_rest_of_the_metadata_until_cleared(db: Db) {
    let store = db.open().await;
    let k = key("telegram:42");
    store
        .set_taint(&k, Some("web.fetch in turn 3"))
        .await
        .unwrap();
    // Other metadata written later does not wipe it.
    store
        .set_metadata(
            &k,
            &SessionMeta {
                tier: Some(Tier::Fast),
                ..SessionMeta::default()
            },
        )
        .await
        .unwrap();
    store.close().await;
    let store = db.open().await;
    assert_eq!(
        store.metadata(&k).await.unwrap(),
        SessionMeta {
            tier: Some(Tier::Fast),
            taint: Some("web.fetch in turn 3".into()),
            ..SessionMeta::default()
        }
    );
    store.set_taint(&k, None).await.unwrap();
    assert_eq!(store.metadata(&k).await.unwrap().taint, None);
    store.set_taint(&k, Some("webhook ci")).await.unwrap();
    assert!(store.clear(&k).await.unwrap());
    assert_eq!(store.metadata(&k).await.unwrap(), SessionMeta::default());
}

async fn a_reset_forgets_metadata(db: Db) {
    let store = db.open().await;
    let k = key("cli:default");
    store
        .set_metadata(
            &k,
            &SessionMeta {
                agent: Some("coder".into()),
                ..SessionMeta::default()
            },
        )
        .await
        .unwrap();
    assert!(store.clear(&k).await.unwrap());
    assert_eq!(store.metadata(&k).await.unwrap(), SessionMeta::default());
    assert_eq!(store.info(&k).await.unwrap(), None);
}

async fn setting_metadata_makes_the_session_the_most_recently_changed(db: Db) {
    let store = db.open().await;
    store
        .append(&key("cli:a"), &[Message::user("a")])
        .await
        .unwrap();
    store
        .append(&key("cli:b"), &[Message::user("b")])
        .await
        .unwrap();
    store
        .set_metadata(
            &key("cli:a"),
            &SessionMeta {
                title: Some("A".into()),
                ..SessionMeta::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .list()
            .await
            .unwrap()
            .iter()
            .map(|s| (s.key.to_string(), s.meta.title.clone()))
            .collect::<Vec<_>>(),
        vec![
            ("cli:a".to_owned(), Some("A".to_owned())),
            ("cli:b".to_owned(), None)
        ]
    );
}

#[tokio::test]
async fn the_first_message_gives_a_session_its_title_and_a_later_one_does_not() {
    use flynn_protocol::{ContentBlock, Principal};
    use flynn_sessions::TurnOrigin;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.db");
    let store = SqliteStore::open(&path).await.unwrap();
    let origin = TurnOrigin {
        agent: "main".into(),
        owner_pid: 1,
        external_id: None,
        principal: Principal::Owner,
    };
    let text = |t: &str| vec![ContentBlock::Text { text: t.into() }];
    let k = key("web:2bc6baf3295b");
    store
        .accept(
            &k,
            &text("  plan the trip to Lyon\nwith the train times"),
            &origin,
        )
        .await
        .unwrap();
    store
        .accept(&k, &text("and a hotel near the station"), &origin)
        .await
        .unwrap();
    store.close().await;

    let store = SqliteStore::open(&path).await.unwrap();
    let listed = store.list().await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|s| (s.key.to_string(), s.meta.title.clone()))
            .collect::<Vec<_>>(),
        [(
            "web:2bc6baf3295b".to_owned(),
            Some("plan the trip to Lyon".to_owned())
        )]
    );
    // A title set on purpose stays; an image alone gives none.
    let other = key("cli:photo");
    let image = vec![ContentBlock::Image {
        source: flynn_protocol::ImageSource::Base64 {
            media_type: "image/png".into(),
            data: "iVBORw0KGgo=".into(),
        },
    }];
    store.accept(&other, &image, &origin).await.unwrap();
    assert_eq!(store.metadata(&other).await.unwrap().title, None);
    let meta = SessionMeta {
        title: Some("Holiday".into()),
        ..SessionMeta::default()
    };
    store.set_metadata(&k, &meta).await.unwrap();
    store.accept(&k, &text("one more"), &origin).await.unwrap();
    assert_eq!(
        store.metadata(&k).await.unwrap().title.as_deref(),
        Some("Holiday")
    );
}

crate::on_both!(
    metadata_round_trips_through_the_file_and_shows_in_list_and_info,
    every_voice_reply_mode_round_trips_and_none_leaves_it_to_the_config,
    a_voice_mode_this_version_does_not_know_reads_as_unset,
    a_taint_is_kept_apart_from_the_rest_of_the_metadata_until_cleared,
    a_reset_forgets_metadata,
    setting_metadata_makes_the_session_the_most_recently_changed,
);
