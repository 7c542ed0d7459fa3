//! What the chat channels keep: platform message ids (a redelivery is
//! refused), pairing codes and approved senders.

use flynn_protocol::ContentBlock;
use flynn_sessions::pairing::{CODE_LEN, MAX_PENDING};
use flynn_sessions::{Error, PairingError, TurnOrigin};

use crate::{Db, key};

fn origin(external_id: &str) -> TurnOrigin {
    TurnOrigin {
        agent: "main".into(),
        owner_pid: 100,
        external_id: Some(external_id.to_owned()),
        principal: Default::default(),
    }
}

async fn a_message_delivered_twice_is_accepted_once_per_session(db: Db) {
    let store = db.open().await;
    let telegram = key("telegram:42");
    let content = vec![ContentBlock::text("hi")];
    let first = store
        .accept(&telegram, &content, &origin("update-7"))
        .await
        .unwrap();
    assert_eq!(first.origin.external_id.as_deref(), Some("update-7"));
    match store.accept(&telegram, &content, &origin("update-7")).await {
        Err(Error::Duplicate {
            session,
            external_id,
            turn,
        }) => {
            assert_eq!(session, "telegram:42");
            assert_eq!(external_id, "update-7");
            assert_eq!(turn, first.id);
        }
        other => panic!("expected a duplicate, got {other:?}"),
    }
    // Another id, another session with the same id, and messages without
    // an id are all accepted.
    store
        .accept(&telegram, &content, &origin("update-8"))
        .await
        .unwrap();
    store
        .accept(&key("discord:9"), &content, &origin("update-7"))
        .await
        .unwrap();
    let plain = TurnOrigin {
        external_id: None,
        principal: Default::default(),
        ..origin("x")
    };
    store.accept(&telegram, &content, &plain).await.unwrap();
    store.accept(&telegram, &content, &plain).await.unwrap();
    assert_eq!(store.open_turns(Some(&telegram)).await.unwrap().len(), 4);
}

async fn the_id_survives_reopening_the_store(db: Db) {
    let k = key("slack:C1:1700.1");
    {
        let store = db.open().await;
        store
            .accept(&k, &[ContentBlock::text("a")], &origin("Ev1"))
            .await
            .unwrap();
        store.close().await;
    }
    let store = db.open().await;
    assert!(matches!(
        store
            .accept(&k, &[ContentBlock::text("a")], &origin("Ev1"))
            .await,
        Err(Error::Duplicate { .. })
    ));
    let turn = &store.open_turns(Some(&k)).await.unwrap()[0];
    assert_eq!(turn.origin.external_id.as_deref(), Some("Ev1"));
}

const HOUR: i64 = 3_600_000;

async fn an_unknown_sender_keeps_one_code_until_it_is_approved(db: Db) {
    let store = db.open().await;
    assert!(!store.peer_approved("telegram", "42").await.unwrap());
    let ticket = store
        .pairing_request("telegram", "42", Some("@alice"), 1_000, HOUR)
        .await
        .unwrap();
    assert!(ticket.fresh);
    assert_eq!(ticket.code.len(), CODE_LEN);
    assert_eq!(ticket.expires_at, 1_000 + HOUR);
    let again = store
        .pairing_request("telegram", "42", Some("@alice"), 2_000, HOUR)
        .await
        .unwrap();
    assert_eq!(
        (again.code.as_str(), again.fresh),
        (ticket.code.as_str(), false)
    );

    let pending = store.pairing_pending(3_000).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (
            pending[0].channel.as_str(),
            pending[0].sender.as_str(),
            pending[0].name.as_deref()
        ),
        ("telegram", "42", Some("@alice"))
    );

    // Wrong channel, unknown code: refused with what to do.
    let wrong = store
        .pairing_approve("discord", &ticket.code, 4_000)
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(wrong, PairingError::Unknown { .. }));
    assert!(wrong.to_string().contains("flynn pairing list"), "{wrong}");

    // Codes are typed by people: case and spaces do not matter.
    let typed = format!("  {} ", ticket.code.to_lowercase());
    let peer = store
        .pairing_approve("telegram", &typed, 4_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((peer.sender.as_str(), peer.approved_at), ("42", 4_000));
    assert!(store.peer_approved("telegram", "42").await.unwrap());
    assert!(!store.peer_approved("discord", "42").await.unwrap());
    assert!(store.pairing_pending(5_000).await.unwrap().is_empty());
    // Used up.
    assert!(matches!(
        store
            .pairing_approve("telegram", &ticket.code, 5_000)
            .await
            .unwrap(),
        Err(PairingError::Unknown { .. })
    ));
    assert_eq!(store.approved_peers().await.unwrap(), vec![peer]);

    assert!(store.revoke_peer("telegram", "42").await.unwrap());
    assert!(!store.revoke_peer("telegram", "42").await.unwrap());
    assert!(!store.peer_approved("telegram", "42").await.unwrap());
}

async fn codes_expire_and_the_sender_gets_a_new_one(db: Db) {
    let store = db.open().await;
    let first = store
        .pairing_request("slack", "U1", None, 0, HOUR)
        .await
        .unwrap();
    assert!(store.pairing_pending(HOUR).await.unwrap().is_empty());
    let late = store
        .pairing_approve("slack", &first.code, HOUR)
        .await
        .unwrap()
        .unwrap_err();
    // Expired codes are swept by the next request; until then the
    // approval says what happened.
    assert!(
        matches!(
            late,
            PairingError::Expired { .. } | PairingError::Unknown { .. }
        ),
        "{late:?}"
    );
    let second = store
        .pairing_request("slack", "U1", None, HOUR + 1, HOUR)
        .await
        .unwrap();
    assert!(second.fresh);
    assert!(!store.peer_approved("slack", "U1").await.unwrap());
}

async fn an_expired_code_is_refused_as_expired(db: Db) {
    let store = db.open().await;
    let ticket = store
        .pairing_request("whatsapp", "15551234567", None, 0, 10)
        .await
        .unwrap();
    let late = store
        .pairing_approve("whatsapp", &ticket.code, 10)
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(late, PairingError::Expired { .. }), "{late:?}");
    assert!(late.to_string().contains("write again"), "{late}");
    assert!(
        !store
            .peer_approved("whatsapp", "15551234567")
            .await
            .unwrap()
    );
}

async fn a_full_channel_refuses_new_codes_and_keeps_the_first_ones(db: Db) {
    let store = db.open().await;
    // The real request comes first, then a flood of accounts.
    let real = store
        .pairing_request("discord", "u0", Some("Alice"), 0, HOUR)
        .await
        .unwrap();
    for i in 1..MAX_PENDING {
        let sender = format!("u{i}");
        store
            .pairing_request("discord", &sender, None, i64::try_from(i).unwrap(), HOUR)
            .await
            .unwrap();
    }
    let refused = store
        .pairing_request("discord", "flood", None, 500, HOUR)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &refused,
            flynn_sessions::Error::Pairing(PairingError::Full { channel, pending, frees_at })
                if channel == "discord" && *pending == MAX_PENDING && *frees_at == HOUR
        ),
        "{refused:?}"
    );
    assert_eq!(
        refused.to_string(),
        format!(
            "discord has {MAX_PENDING} pairing codes waiting, the most it keeps; no new code until one is approved or expires (`flynn pairing list` shows them)"
        )
    );
    // A sender who has a code still sees it; other channels are not full.
    let again = store
        .pairing_request("discord", "u0", Some("Alice"), 600, HOUR)
        .await
        .unwrap();
    assert_eq!(
        (again.code.as_str(), again.fresh),
        (real.code.as_str(), false)
    );
    store
        .pairing_request("telegram", "other", None, 0, HOUR)
        .await
        .unwrap();
    let pending = store.pairing_pending(1_000).await.unwrap();
    let discord: Vec<_> = pending.iter().filter(|p| p.channel == "discord").collect();
    assert_eq!(discord.len(), MAX_PENDING);
    assert!(discord.iter().all(|p| p.sender != "flood"));

    // The owner approves the real request: it was never evicted, and its
    // slot goes to the next stranger.
    let peer = store
        .pairing_approve("discord", &real.code, 1_000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(peer.sender, "u0");
    let next = store
        .pairing_request("discord", "late", None, 1_100, HOUR)
        .await
        .unwrap();
    assert!(next.fresh);
}

crate::on_both!(
    the_id_survives_reopening_the_store,
    a_message_delivered_twice_is_accepted_once_per_session,
    an_unknown_sender_keeps_one_code_until_it_is_approved,
    codes_expire_and_the_sender_gets_a_new_one,
    an_expired_code_is_refused_as_expired,
    a_full_channel_refuses_new_codes_and_keeps_the_first_ones,
);
