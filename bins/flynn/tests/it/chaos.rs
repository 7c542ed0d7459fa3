//! Chaos: messages in flight on Telegram (polling) and WhatsApp
//! (webhooks), the daemon killed with SIGKILL at random points and
//! started again, round after round. At the end every message accepted
//! was answered, or its chat told that its turn was interrupted, exactly
//! once; none was lost and none answered twice; every session still works.
//!
//! `FLYNN_CHAOS_ROUNDS` (default 1) and `FLYNN_CHAOS_MESSAGES` (messages
//! per round, default 20) size the run; `cargo xtask chaos` runs 10 rounds
//! of 100 against the release build.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flynn_testkit::telegram::{self as tg, FakeTelegram, Incoming, TgUser};
use flynn_testkit::whatsapp::{self as wa, FakeWhatsApp, Signing};
use flynn_testkit::{FakeOpenAi, Reply};

use crate::daemon::Daemon;
use crate::{Env, stderr};

const TELEGRAM_CHATS: [i64; 3] = [4242, 4243, 4244];
const WHATSAPP_NUMBERS: [&str; 3] = ["15550000001", "15550000002", "15550000003"];

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator (xorshift), so a failing run can be
/// repeated with the same kill points (`FLYNN_CHAOS_SEED`).
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound.max(1)
    }
}

/// The chats send far faster than a person, so the per-sender rate limit
/// (which drops a flood on purpose) is off.
fn config(model: &FakeOpenAi, telegram: &FakeTelegram, whatsapp: &FakeWhatsApp) -> String {
    let owners_tg: Vec<String> = TELEGRAM_CHATS
        .iter()
        .map(|id| format!("\"{id}\""))
        .collect();
    let owners_wa: Vec<String> = WHATSAPP_NUMBERS
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect();
    format!(
        "version: 1
gateway:
  rate_limit_per_minute: 100000
providers:
  openai: {{kind: openai, base_url: {model}, api_key: sk-x}}
models:
  tiers:
    default: [openai/gpt-4o-mini]
channels:
  telegram:
    bot_token: \"{tg_token}\"
    api_url: {tg_api}
    owners: [{owners_tg}]
    rate_limit: {{messages: 0}}
  whatsapp:
    access_token: {wa_token}
    phone_number_id: \"{phone}\"
    app_secret: {secret}
    verify_token: {verify}
    api_url: {wa_api}
    owners: [{owners_wa}]
    rate_limit: {{messages: 0}}
",
        model = model.base_url(),
        tg_token = tg::TOKEN,
        tg_api = telegram.api_url(),
        owners_tg = owners_tg.join(", "),
        wa_token = wa::ACCESS_TOKEN,
        phone = wa::PHONE_NUMBER_ID,
        secret = wa::APP_SECRET,
        verify = wa::VERIFY_TOKEN,
        wa_api = whatsapp.base_url(),
        owners_wa = owners_wa.join(", "),
    )
}

/// What each chat was sent, in order, by chat.
fn outbox(telegram: &FakeTelegram, whatsapp: &FakeWhatsApp) -> BTreeMap<String, Vec<String>> {
    let mut sent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for message in telegram.sent() {
        sent.entry(format!("telegram:{}", message.chat_id))
            .or_default()
            .push(message.plain);
    }
    for message in whatsapp.sent() {
        sent.entry(format!("whatsapp:{}", message.to))
            .or_default()
            .push(message.text().to_owned());
    }
    sent
}

const NOTE: &str = "⚠ Interrupted";

/// Answers and interruption notes per chat: each inbound message ends in
/// one of them. (Telegram streams an answer into a message it edits, so a
/// turn cut off mid-answer leaves that partial message and then a note;
/// the partial message is not counted.)
fn answers(telegram: &FakeTelegram, whatsapp: &FakeWhatsApp) -> BTreeMap<String, usize> {
    outbox(telegram, whatsapp)
        .into_iter()
        .map(|(chat, texts)| {
            let ends = texts
                .iter()
                .filter(|t| t.starts_with(NOTE) || is_answer(t))
                .count();
            (chat, ends)
        })
        .collect()
}

/// Messages from the chat in `chat`'s history, and answers or notes
/// after them (a turn cut off mid-answer has its partial answer and its
/// note), as the daemon at `url` has them stored.
fn history(env: &Env, url: &str, chat: &str) -> (usize, usize) {
    let output = env.run(&["sessions", "show", "--json", "--gateway", url, chat]);
    let shown: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let messages = shown["messages"].as_array().cloned().unwrap_or_default();
    let text = |m: &serde_json::Value| {
        m["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let users = messages
        .iter()
        .filter(|m| m["role"] == "user" && text(m).contains("round "))
        .count();
    let ends = messages
        .iter()
        .filter(|m| m["role"] == "assistant" && !text(m).is_empty())
        .count();
    (users, ends)
}

/// A whole answer of the model: `answer <n>`.
fn is_answer(text: &str) -> bool {
    text.strip_prefix("answer ")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_at_random_points_no_accepted_message_is_lost_or_answered_twice() {
    let rounds = setting("FLYNN_CHAOS_ROUNDS", 1);
    let per_round = setting("FLYNN_CHAOS_MESSAGES", 20);
    let mut rng = Rng(setting("FLYNN_CHAOS_SEED", 0x5eed_f1a5) as u64 | 1);
    let model = FakeOpenAi::start().await;
    // More answers than turns: a turn interrupted and run again asks twice.
    for n in 0..rounds * per_round * 3 {
        model.push(Reply::Text(format!("answer {n}")));
    }
    let telegram = FakeTelegram::start().await;
    let whatsapp = Arc::new(FakeWhatsApp::start().await);
    for number in WHATSAPP_NUMBERS {
        whatsapp.customer_wrote(number);
    }
    let env = Env::new();
    let file = env.path().join("config.yaml");
    std::fs::write(&file, config(&model, &telegram, &whatsapp)).unwrap();
    let env = env.var("FLYNN_CONFIG", file.to_string_lossy());

    // Where WhatsApp posts: the daemon's address changes at each start,
    // and Meta retries a delivery until it gets a 200, as here.
    let hook: Arc<Mutex<Option<String>>> = Arc::default();
    let mut posting = Vec::new();
    let mut sent: BTreeMap<String, usize> = BTreeMap::new();
    let started = Instant::now();
    for round in 0..rounds {
        let daemon = Daemon::start(&env);
        *hook.lock().unwrap() = Some(format!("{}/channels/whatsapp/webhook", daemon.url));
        for n in 0..per_round {
            let text = format!("round {round} message {n}");
            if n % 2 == 0 {
                let chat = TELEGRAM_CHATS[n / 2 % TELEGRAM_CHATS.len()];
                telegram.push(Incoming::private(&TgUser::new(chat, "Owner"), &text));
                *sent.entry(format!("telegram:{chat}")).or_default() += 1;
            } else {
                let number = WHATSAPP_NUMBERS[n / 2 % WHATSAPP_NUMBERS.len()];
                let notification = whatsapp.text_message(number, "Owner", &text);
                *sent.entry(format!("whatsapp:{number}")).or_default() += 1;
                let (whatsapp, hook) = (whatsapp.clone(), hook.clone());
                posting.push(tokio::spawn(async move {
                    loop {
                        let url = hook.lock().unwrap().clone();
                        if let Some(url) = url {
                            let (whatsapp, notification) = (whatsapp.clone(), notification.clone());
                            // The fake panics when the connection breaks:
                            // that is a failed delivery, tried again.
                            let posted = tokio::spawn(async move {
                                whatsapp.post(&url, &notification, Signing::AppSecret).await
                            })
                            .await;
                            if let Ok(answer) = posted
                                && answer.status == 200
                            {
                                return;
                            }
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }));
            }
        }
        // Kill somewhere between the first messages arriving and most
        // turns having finished.
        let wait = Duration::from_millis(50 + rng.below(1500));
        tokio::time::sleep(wait).await;
        *hook.lock().unwrap() = None;
        drop(daemon); // SIGKILL
    }

    // The last start: everything accepted is answered or reported, and
    // every WhatsApp delivery is taken.
    let mut daemon = Daemon::start(&env);
    *hook.lock().unwrap() = Some(format!("{}/channels/whatsapp/webhook", daemon.url));
    let deadline = Instant::now()
        + Duration::from_secs(60)
        + Duration::from_millis(100) * u32::try_from(rounds * per_round).unwrap_or(u32::MAX);
    loop {
        let stored: BTreeMap<String, (usize, usize)> = sent
            .keys()
            .map(|chat| (chat.clone(), history(&env, &daemon.url, chat)))
            .collect();
        let settled = posting.iter().all(tokio::task::JoinHandle::is_finished)
            && sent.iter().all(|(chat, n)| {
                stored
                    .get(chat)
                    .is_some_and(|(users, ends)| users == n && ends >= n)
            });
        if settled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every message was stored once and answered: sent {sent:?}, (stored, answered) {stored:?}, deliveries still posting {}\n{}",
            posting.iter().filter(|p| !p.is_finished()).count(),
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Stopped, nothing more can be sent: the counts are final.
    daemon.stop(Duration::from_secs(60));
    let got = answers(&telegram, &whatsapp);
    let texts = outbox(&telegram, &whatsapp);
    // No chat got more answers and notes than it sent messages, no answer
    // of the model reached a chat twice, and anything else sent is the
    // partial message of a turn cut off mid-answer.
    let mut seen = std::collections::BTreeSet::new();
    for (chat, texts) in &texts {
        assert!(
            got[chat] <= sent[chat],
            "{chat} was answered twice: {} answers and notes for {} messages: {texts:#?}",
            got[chat],
            sent[chat]
        );
        for text in texts {
            if is_answer(text) {
                assert!(
                    seen.insert(text.clone()),
                    "{chat} got {text} twice: {texts:#?}"
                );
            } else {
                assert!(
                    text.starts_with(NOTE) || text.starts_with("answer"),
                    "{chat} got {text:?}, neither an answer, a note nor a partial answer"
                );
            }
        }
    }
    // A turn that finished just as the daemon was killed has its answer
    // in the history but not in the chat (nothing re-sends it yet): count
    // them, and hold them to 1 % of the messages (one, in runs of up to a
    // hundred).
    let total: usize = sent.values().sum();
    let unsent: usize = sent.iter().map(|(chat, n)| n - got[chat]).sum();
    eprintln!(
        "chaos: {unsent} of {total} answers finished as the daemon died and did not reach their chat"
    );
    assert!(
        unsent * 100 <= total.max(100),
        "{unsent} of {total} answers did not reach their chat: {texts:#?}"
    );
    assert_eq!(telegram.violations(), Vec::<String>::new());
    assert_eq!(whatsapp.violations(), Vec::<String>::new());
    eprintln!(
        "chaos: {rounds} rounds, {} messages, {} chats, {:.1} s",
        rounds * per_round,
        sent.len(),
        started.elapsed().as_secs_f64()
    );

    // Every session still works.
    let daemon = Daemon::start(&env);
    // (The model still has answers left from the start.)
    for chat in TELEGRAM_CHATS {
        let output = env.run(&[
            "send",
            "--gateway",
            &daemon.url,
            "--session",
            &format!("telegram:{chat}"),
            "are you there?",
        ]);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
}
