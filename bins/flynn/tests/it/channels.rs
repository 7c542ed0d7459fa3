//! A chat channel through the real daemon: the owner configures WhatsApp,
//! starts `flynn start`, a stranger writes and is paired, then talks to
//! Flynn; `flynn doctor` reports the channel.
#![cfg(feature = "whatsapp")]

use std::time::{Duration, Instant};

use flynn_testkit::whatsapp::{self as wa, FakeWhatsApp, Signing};
use flynn_testkit::{FakeOpenAi, Reply};

use crate::daemon::Daemon;
use crate::{Env, stderr, stdout};

const NUMBER: &str = "15551234567";

fn config(model: &FakeOpenAi, whatsapp: &FakeWhatsApp) -> String {
    format!(
        "version: 1
providers:
  openai:
    kind: openai
    base_url: {model}
    api_key: sk-x
models:
  tiers:
    default: [openai/gpt-4o-mini]
channels:
  whatsapp:
    access_token: {token}
    phone_number_id: \"{phone}\"
    app_secret: {secret}
    verify_token: {verify}
    api_url: {api}
",
        model = model.base_url(),
        token = wa::ACCESS_TOKEN,
        phone = wa::PHONE_NUMBER_ID,
        secret = wa::APP_SECRET,
        verify = wa::VERIFY_TOKEN,
        api = whatsapp.base_url(),
    )
}

/// Model calls (doctor's model-list probes left out).
fn chats(model: &FakeOpenAi) -> usize {
    model
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .count()
}

/// Waits until the fake has sent `count` messages to `to`; returns them.
async fn sent_to(fake: &FakeWhatsApp, to: &str, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let texts: Vec<String> = fake
            .sent()
            .iter()
            .filter(|m| m.to == to)
            .map(|m| m.text().to_owned())
            .collect();
        if texts.len() >= count {
            return texts;
        }
        assert!(Instant::now() < deadline, "only {texts:?} was sent to {to}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_stranger_on_whatsapp_is_paired_then_answered_through_the_daemon() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::Text("Four.".into()));
    let whatsapp = FakeWhatsApp::start().await;
    let env = Env::new();
    let file = env.path().join("config.yaml");
    std::fs::write(&file, config(&model, &whatsapp)).unwrap();
    let env = env.var("FLYNN_CONFIG", file.to_string_lossy());
    let daemon = Daemon::start(&env);
    let hook = format!("{}/channels/whatsapp/webhook", daemon.url);

    // The owner checks the set-up.
    let doctor = env.run(&["doctor", "--gateway", &daemon.url]);
    let report = stdout(&doctor);
    assert!(
        report.contains("OK    channel   whatsapp: connected as +15550783881 (Flynn Test)"),
        "{report}\n{}",
        stderr(&doctor)
    );
    // Meta checks the webhook when it is saved.
    let handshake = whatsapp
        .verify(&hook, wa::VERIFY_TOKEN, "challenge-1")
        .await;
    assert_eq!(
        (handshake.status, handshake.body.as_str()),
        (200, "challenge-1")
    );

    // A stranger writes: stored nowhere, given a code.
    whatsapp.customer_wrote(NUMBER);
    let first = whatsapp.text_message(NUMBER, "Alice", "hi");
    let answer = whatsapp.post(&hook, &first, Signing::AppSecret).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let told = sent_to(&whatsapp, NUMBER, 1).await.remove(0);
    let code = told
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("no code in {told}"))
        .to_owned();
    assert_eq!(code.len(), 6, "{told}");
    assert_eq!(chats(&model), 0);

    // A forged delivery is refused and goes nowhere.
    let forged = whatsapp
        .post(
            &hook,
            &whatsapp.text_message(NUMBER, "Alice", "forged"),
            Signing::Forged,
        )
        .await;
    assert_eq!(forged.status, 401);

    // The owner approves through the daemon.
    let listed = env.run(&["pairing", "list", "--gateway", &daemon.url]);
    assert!(stdout(&listed).contains(&code), "{}", stdout(&listed));
    let approved = env.run(&[
        "pairing",
        "approve",
        "whatsapp",
        &code,
        "--gateway",
        &daemon.url,
    ]);
    assert_eq!(
        stdout(&approved),
        format!("Approved Alice ({NUMBER}) on whatsapp: they can talk to Flynn now.\n"),
        "{}",
        stderr(&approved)
    );

    let question = whatsapp.text_message(NUMBER, "Alice", "what is 2 + 2?");
    assert_eq!(
        whatsapp
            .post(&hook, &question, Signing::AppSecret)
            .await
            .status,
        200
    );
    let texts = sent_to(&whatsapp, NUMBER, 2).await;
    assert_eq!(texts[1], "Four.");
    // Meta delivers the same message again: answered once.
    assert_eq!(
        whatsapp
            .post(&hook, &question, Signing::AppSecret)
            .await
            .status,
        200
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(chats(&model), 1);
    assert_eq!(sent_to(&whatsapp, NUMBER, 2).await.len(), 2);
    assert_eq!(whatsapp.violations(), Vec::<String>::new());

    let sessions = env.run(&[
        "sessions",
        "show",
        &format!("whatsapp:{NUMBER}"),
        "--gateway",
        &daemon.url,
    ]);
    assert_eq!(
        stdout(&sessions),
        "user: what is 2 + 2?\nassistant: Four.\n",
        "{}",
        daemon.log()
    );
}
