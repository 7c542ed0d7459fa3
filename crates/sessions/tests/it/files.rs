//! Files turns send to their chats: kept with their bytes, found by turn,
//! in the outbox until marked sent, pruned, and gone with their session.

use flynn_protocol::{ContentBlock, MediaFile, MediaKind};
use flynn_sessions::{StoredFile, TurnOrigin, TurnStatus};

use crate::{Db, key};

fn file(id: &str, name: &str, kind: MediaKind, size: u64) -> MediaFile {
    MediaFile {
        id: id.to_owned(),
        name: name.to_owned(),
        media_type: "image/png".to_owned(),
        size,
        kind,
        caption: Some("the chart".to_owned()),
    }
}

fn origin(external_id: Option<&str>) -> TurnOrigin {
    TurnOrigin {
        agent: "main".into(),
        owner_pid: 1,
        external_id: external_id.map(str::to_owned),
        principal: Default::default(),
    }
}

fn ids(files: &[StoredFile]) -> Vec<&str> {
    files.iter().map(|f| f.file.id.as_str()).collect()
}

async fn files_are_kept_found_by_turn_and_sent_once(db: Db) {
    let store = db.open().await;
    let chat = key("telegram:4242");
    let web = key("web:ann");
    let text = vec![ContentBlock::text("send me the chart")];
    let asked = store
        .accept_and_start(&chat, &text, &origin(Some("update-1")))
        .await
        .unwrap();
    let other = store
        .accept_and_start(&web, &text, &origin(None))
        .await
        .unwrap();
    // Bytes of every value, NUL included, come back as they went in.
    let png: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let chart = file("0195a1", "chart.png", MediaKind::Image, png.len() as u64);
    let notes = MediaFile {
        caption: None,
        media_type: "text/plain".into(),
        ..file("0195a2", "notes\u{0}.txt", MediaKind::Document, 3)
    };
    store
        .keep_file(&chat, Some(asked.id), &chart, &png)
        .await
        .unwrap();
    store
        .keep_file(&chat, Some(asked.id), &notes, b"abc")
        .await
        .unwrap();
    let web_file = file("0195a3", "web.png", MediaKind::Voice, 1);
    store
        .keep_file(&web, Some(other.id), &web_file, b"x")
        .await
        .unwrap();

    let (kept, data) = store.file("0195a1").await.unwrap().unwrap();
    assert_eq!(data, png);
    assert_eq!(kept.file, chart);
    assert_eq!(
        (kept.session.clone(), kept.turn, kept.sent),
        (chat.clone(), Some(asked.id), false)
    );
    assert!(kept.created_at > 0);
    assert_eq!(store.file("0195ff").await.unwrap(), None);

    let of_turn = store.files_of_turns(&chat, &[asked.id]).await.unwrap();
    assert_eq!(ids(&of_turn), ["0195a1", "0195a2"]);
    assert_eq!(of_turn[1].file.kind, MediaKind::Document);
    // The other session's turn is not this session's.
    assert!(
        store
            .files_of_turns(&chat, &[other.id])
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.files_of_turns(&chat, &[]).await.unwrap().is_empty());

    // Only a chat message's files wait to be sent (the web chat shows its
    // own as they come).
    assert_eq!(
        ids(&store.unsent_files(0).await.unwrap()),
        ["0195a1", "0195a2"]
    );
    assert!(store.unsent_files(i64::MAX).await.unwrap().is_empty());
    store.mark_file_sent("0195a1").await.unwrap();
    store.mark_file_sent("0195a1").await.unwrap();
    store.mark_file_sent("no-such-file").await.unwrap();
    assert_eq!(ids(&store.unsent_files(0).await.unwrap()), ["0195a2"]);
    assert!(store.file("0195a1").await.unwrap().unwrap().0.sent);
    store
        .finish_turn(asked.id, TurnStatus::Completed)
        .await
        .unwrap();

    // Pruning takes what was kept before the cut-off.
    let last = store.file("0195a3").await.unwrap().unwrap().0.created_at;
    assert_eq!(store.prune_files(kept.created_at).await.unwrap(), 0);
    assert_eq!(store.prune_files(last + 1).await.unwrap(), 3);
    assert_eq!(store.file("0195a2").await.unwrap(), None);
}

async fn a_sessions_files_go_with_it(db: Db) {
    let store = db.open().await;
    let chat = key("discord:77");
    let turn = store
        .accept_and_start(&chat, &[ContentBlock::text("hi")], &origin(Some("m1")))
        .await
        .unwrap();
    store
        .keep_file(
            &chat,
            Some(turn.id),
            &file("0195b1", "a.png", MediaKind::Image, 1),
            b"a",
        )
        .await
        .unwrap();
    assert!(store.clear(&chat).await.unwrap());
    assert_eq!(store.file("0195b1").await.unwrap(), None);
    assert!(store.unsent_files(0).await.unwrap().is_empty());
}

crate::on_both!(
    files_are_kept_found_by_turn_and_sent_once,
    a_sessions_files_go_with_it,
);
