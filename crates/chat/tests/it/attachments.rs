//! Files from chats are downloaded only after the access checks: the
//! real Telegram adapter against its fake Bot API (which records every
//! `getFile` and file download), through the router into sessions.

use std::sync::Arc;
use std::time::Duration;

use flynn_channels::telegram::TelegramAdapter;
use flynn_channels::{Backoff, Registry};
use flynn_chat::ChannelRouter;
use flynn_protocol::config::{ChannelsConfig, TelegramConfig};
use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};
use serde_json::json;

use crate::{Harness, ScriptedModel, Setup};

const WAIT: Duration = Duration::from_secs(10);
const GROUP: i64 = -1_001_234_567_890;

fn alice() -> TgUser {
    TgUser::new(111, "Alice").username("alice")
}

fn mallory() -> TgUser {
    TgUser::new(666, "Mallory")
}

/// Telegram against `fake`, `alice` allowed.
fn config(fake: &FakeTelegram) -> ChannelsConfig {
    let telegram: TelegramConfig = serde_json::from_value(json!({
        "bot_token": fake.token(),
        "api_url": fake.api_url(),
        "allow_from": ["111"],
    }))
    .unwrap();
    ChannelsConfig {
        telegram: Some(telegram),
        ..ChannelsConfig::default()
    }
}

/// The daemon's side: the router with the real adapter, connected.
async fn daemon(h: &Harness, fake: &FakeTelegram) -> (ChannelRouter, Registry) {
    let config = config(fake);
    let (registry, deliveries) = Registry::new(Backoff::default());
    let router = ChannelRouter::new(h.manager.clone(), registry.clone(), &config);
    router.spawn(deliveries);
    let Some(telegram) = config.telegram.as_ref() else {
        unreachable!("configured above");
    };
    registry
        .start(Arc::new(TelegramAdapter::new(telegram).unwrap()))
        .await;
    (router, registry)
}

/// `getFile` calls and file downloads the fake served.
fn fetches(fake: &FakeTelegram) -> (usize, usize) {
    let downloads = fake
        .requests()
        .iter()
        .filter(|r| r.path.starts_with("/file/bot"))
        .count();
    (fake.calls("getFile").len(), downloads)
}

/// Waits until the daemon settled update `id` (the adapter confirms an
/// update to Telegram only after the router's verdict).
async fn settled(fake: &FakeTelegram, id: i64) {
    assert!(
        fake.wait(WAIT, |f| f.confirmed_offset() > id).await,
        "update {id} was not settled; pending {:?}",
        fake.pending_updates()
    );
}

fn pdf() -> Vec<u8> {
    b"%PDF-1.7\n% quarterly numbers\n".to_vec()
}

#[tokio::test]
async fn a_strangers_file_is_never_downloaded_but_an_allowed_senders_is() {
    let fake = FakeTelegram::start().await;
    let h = Harness::new(vec![ScriptedModel::new("m", vec![])], Setup::default()).await;
    let (_router, registry) = daemon(&h, &fake).await;

    // A stranger sends a document: a pairing code comes back, and the
    // file is never asked for.
    let stranger = fake.push(Incoming::private(&mallory(), "read this").document(
        "invoice.pdf",
        "application/pdf",
        pdf(),
    ));
    settled(&fake, stranger).await;
    assert!(
        fake.wait(WAIT, |f| f
            .sent()
            .iter()
            .any(
                |m| m.text.contains("pairing") || m.text.contains("I don't know you")
            ))
        .await,
        "no pairing code was sent: {:?}",
        fake.sent()
    );
    assert_eq!(fetches(&fake), (0, 0));

    // The allowed sender's document is fetched once and saved.
    let allowed = fake.push(Incoming::private(&alice(), "read this").document(
        "report.pdf",
        "application/pdf",
        pdf(),
    ));
    settled(&fake, allowed).await;
    assert!(
        fake.wait(WAIT, |f| f
            .sent()
            .iter()
            .any(|m| m.text.contains("re: read this")))
            .await,
        "no answer: {:?}",
        fake.sent()
    );
    assert_eq!(fetches(&fake), (1, 1));
    let inbox = h.dir.path().join("inbox").join("telegram");
    let saved: Vec<_> = std::fs::read_dir(&inbox)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(saved.len(), 1, "{saved:?}");
    assert_eq!(std::fs::read(&saved[0]).unwrap(), pdf());
    assert_eq!(fake.violations(), Vec::<String>::new());
    registry.shutdown().await;
}

#[tokio::test]
async fn a_group_file_without_a_mention_is_not_downloaded() {
    let fake = FakeTelegram::start().await;
    let h = Harness::new(vec![ScriptedModel::new("m", vec![])], Setup::default()).await;
    let (_router, registry) = daemon(&h, &fake).await;

    // Even from an allowed sender: a group message that does not address
    // the bot is dropped before anything is fetched.
    let unaddressed =
        fake.push(Incoming::group(GROUP, "Team", &alice(), "our numbers").photo(pdf()));
    settled(&fake, unaddressed).await;
    assert_eq!(fetches(&fake), (0, 0));

    // Addressed, the same photo is fetched.
    let addressed =
        fake.push(Incoming::group(GROUP, "Team", &alice(), "@flynn_bot our numbers").photo(pdf()));
    settled(&fake, addressed).await;
    assert_eq!(fetches(&fake), (1, 1));
    assert_eq!(fake.violations(), Vec::<String>::new());
    registry.shutdown().await;
}

#[tokio::test]
async fn a_file_over_the_limit_is_named_and_not_downloaded() {
    let fake = FakeTelegram::start().await;
    let model = ScriptedModel::new("m", vec![]);
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let (_router, registry) = daemon(&h, &fake).await;

    let big = fake.push(
        Incoming::private(&alice(), "a big one")
            .document("huge.bin", "application/octet-stream", vec![1, 2, 3])
            .declared_size(25 * 1024 * 1024),
    );
    settled(&fake, big).await;
    assert!(
        fake.wait(WAIT, |f| f
            .sent()
            .iter()
            .any(|m| m.text.contains("re: a big one")))
            .await,
        "no answer: {:?}",
        fake.sent()
    );
    assert_eq!(fetches(&fake), (0, 0));
    let asked = model.requests.lock().unwrap().clone();
    let last = crate::last_user_text(&asked.last().unwrap().messages);
    assert_eq!(
        last,
        "a big one\n[attachment huge.bin skipped: it has 25 MB, over the 20 MB a chat file may have]"
    );
    registry.shutdown().await;
}
