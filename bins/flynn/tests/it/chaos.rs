//! Chaos: messages in flight on Telegram (polling), WhatsApp (webhooks),
//! Slack (Socket Mode), Discord (its gateway, resumed after each start)
//! and the gateway (`agent.send` over WebSocket), the
//! daemon killed with SIGKILL at random points and started again, round
//! after round. At the end every message accepted was stored once and
//! answered, or its chat told that its turn was interrupted; none was
//! lost; an answer reached its chat twice at most once in 500 messages
//! (a kill between the platform taking it and the outbox's mark); every
//! session still works. (A gateway client is not told after a restart:
//! it reads the history, where the answer or the note is.)
//!
//! `FLYNN_CHAOS_ROUNDS` (default 1) and `FLYNN_CHAOS_MESSAGES` (messages
//! per round, default 20) size the run, `FLYNN_CHAOS_SEED` picks the kill
//! points, and `FLYNN_CHAOS_LOG` (a `FLYNN_LOG` filter) sets the daemons'
//! log level and writes their logs to a file; `cargo xtask chaos` runs 10
//! rounds of 100 against the release build.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flynn_testkit::discord::{DiscordUser, FakeDiscord};
use flynn_testkit::slack::{self as sl, FakeSlack};
use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};
use flynn_testkit::whatsapp::{FakeWhatsApp, Signing};
use flynn_testkit::{FakeOpenAi, Reply};

use jsonrpsee::core::client::SubscriptionClientT;
use jsonrpsee::ws_client::WsClientBuilder;

use crate::daemon::Daemon;
use crate::setup::{TestConfig, owners};
use crate::{Env, stderr};

const TELEGRAM_CHATS: [i64; 3] = [4242, 4243, 4244];
const WHATSAPP_NUMBERS: [&str; 3] = ["15550000001", "15550000002", "15550000003"];
/// The Discord owners, each writing in a DM with the bot.
const DISCORD_OWNERS: [u64; 2] = [200_000_000_000_000_001, 200_000_000_000_000_002];
const GATEWAY_SESSIONS: [&str; 2] = ["api:chaos-1", "api:chaos-2"];
const TOKEN: &str = "chaos-gateway-token-0123456789abcdef";

/// Sends `text` to `session` with `agent.send`: `true` once the daemon
/// said it is stored (the subscription's id came back), `false` if the
/// connection broke first (it may or may not have been stored).
async fn agent_send(url: &str, session: &str, text: &str) -> bool {
    let mut headers = jsonrpsee::ws_client::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let ws = url.replacen("http://", "ws://", 1);
    let Ok(client) = WsClientBuilder::default()
        .set_headers(headers)
        .build(format!("{ws}/rpc"))
        .await
    else {
        return false;
    };
    let mut params = jsonrpsee::core::params::ObjectParams::new();
    params.insert("session", session).unwrap();
    params.insert("message", text).unwrap();
    let subscribed: Result<jsonrpsee::core::client::Subscription<serde_json::Value>, _> = client
        .subscribe("agent.send", params, "agent.unsubscribe")
        .await;
    subscribed.is_ok()
}

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
/// (which drops a flood on purpose) is off, and a session may have more
/// messages waiting than the 32 that would refuse more (killed rounds
/// leave their turns for the next start).
fn config(
    model: &FakeOpenAi,
    telegram: &FakeTelegram,
    whatsapp: &FakeWhatsApp,
    slack: &FakeSlack,
    discord: &FakeDiscord,
) -> TestConfig {
    let unlimited = "rate_limit: {messages: 0}";
    TestConfig::new(model)
        .section("gateway:\n  rate_limit_per_minute: 100000")
        .section("sessions:\n  queue_limit: 1000")
        .telegram(
            telegram,
            &format!("{}\n{unlimited}", owners(TELEGRAM_CHATS)),
        )
        .whatsapp(
            whatsapp,
            &format!("{}\n{unlimited}", owners(WHATSAPP_NUMBERS)),
        )
        .slack(slack, &format!("{}\n{unlimited}", owners([sl::OWNER])))
        .discord(discord, &format!("{}\n{unlimited}", owners(DISCORD_OWNERS)))
}

/// What each chat was sent, in order, by chat.
fn outbox(
    telegram: &FakeTelegram,
    whatsapp: &FakeWhatsApp,
    slack: &FakeSlack,
    discord: &Discord,
) -> BTreeMap<String, Vec<String>> {
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
    for message in slack.messages() {
        sent.entry(format!("slack:{}", message.channel))
            .or_default()
            .push(message.text);
    }
    // A streamed answer is one message edited as it grows: its text as
    // it stands.
    for channel in &discord.dms {
        for message in discord.fake.messages_in(*channel) {
            sent.entry(format!("discord:{channel}"))
                .or_default()
                .push(message.content);
        }
    }
    sent
}

/// The fake Discord and a DM channel per owner.
struct Discord {
    fake: FakeDiscord,
    owners: Vec<DiscordUser>,
    dms: Vec<u64>,
}

impl Discord {
    async fn start() -> Self {
        let fake = FakeDiscord::start().await;
        let owners: Vec<DiscordUser> = DISCORD_OWNERS
            .iter()
            .map(|id| DiscordUser::person(*id, &format!("owner{id}"), None))
            .collect();
        let dms = owners.iter().map(|owner| fake.dm_channel(owner)).collect();
        Discord { fake, owners, dms }
    }
}

const NOTE: &str = "⚠ Interrupted";
/// What the outbox sends for a turn that failed while the daemon died.
const FAILED_NOTE: &str = "⚠️ Flynn restarted before it could send";

/// Different answers and interruption notes per chat: each inbound
/// message ends in one of them. (Telegram streams an answer into a message it edits, so a
/// turn cut off mid-answer leaves that partial message and then a note;
/// the partial message is not counted.)
fn answers(
    telegram: &FakeTelegram,
    whatsapp: &FakeWhatsApp,
    slack: &FakeSlack,
    discord: &Discord,
) -> BTreeMap<String, usize> {
    outbox(telegram, whatsapp, slack, discord)
        .into_iter()
        .map(|(chat, texts)| {
            let ends = texts
                .iter()
                .filter(|t| t.starts_with(NOTE) || t.starts_with(FAILED_NOTE) || is_answer(t))
                .collect::<std::collections::BTreeSet<_>>()
                .len();
            (chat, ends)
        })
        .collect()
}

/// Messages from the chat in `chat`'s history, and answers or notes
/// after them (a turn cut off mid-answer has its partial answer and its
/// note), as the daemon at `url` has them stored.
fn history(env: &Env, url: &str, chat: &str) -> (usize, usize) {
    let (users, ends) = stored_messages(env, url, chat);
    (users.len(), ends)
}

/// The messages from the chat in `chat`'s history, and the count of
/// answers and notes.
fn stored_messages(env: &Env, url: &str, chat: &str) -> (Vec<String>, usize) {
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
        .map(text)
        .collect();
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
    let slack = FakeSlack::start().await;
    // Slack sends an event again a while after it went unacknowledged
    // (the fake's 3 s stands for Slack's minutes), at most three times: a
    // daemon killed every second or two would use them all up in 9 s.
    slack.set_redelivery_after(Duration::from_secs(10));
    let discord = Discord::start().await;
    let env = Env::new()
        .with_config(&config(&model, &telegram, &whatsapp, &slack, &discord.fake))
        .var("FLYNN_GATEWAY_TOKEN", TOKEN)
        .var(
            "FLYNN_LOG",
            std::env::var("FLYNN_CHAOS_LOG").unwrap_or_else(|_| "info".to_owned()),
        );

    // Where WhatsApp posts: the daemon's address changes at each start,
    // and Meta retries a delivery until it gets a 200, as here.
    let hook: Arc<Mutex<Option<String>>> = Arc::default();
    let mut posting = Vec::new();
    // Gateway messages in flight, and per session (stored for sure, sent).
    let mut gateway = Vec::new();
    let mut api: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut sent: BTreeMap<String, usize> = BTreeMap::new();
    let mut texts_sent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // Each killed daemon's log, written out if the run fails.
    let mut logs: Vec<String> = Vec::new();
    let started = Instant::now();

    // An installation that has run before: Discord's gateway session and
    // each DM's last message are saved, so after a kill the adapter
    // resumes the session, or reads back what a lost session missed.
    // (Discord itself never sends again what came to a session that is
    // gone, in a channel the bot has no mark for.)
    {
        let mut daemon = Daemon::start(&env);
        for (owner, dm) in discord.owners.iter().zip(&discord.dms) {
            let text = "round - warm-up";
            discord.fake.post(*dm, owner, text).send();
            *sent.entry(format!("discord:{dm}")).or_default() += 1;
            texts_sent
                .entry(format!("discord:{dm}"))
                .or_default()
                .push(text.to_owned());
        }
        let dms = discord.dms.clone();
        discord
            .fake
            .wait_until("the answers to the warm-up", |fake| {
                dms.iter()
                    .all(|dm| fake.messages_in(*dm).iter().any(|m| is_answer(&m.content)))
                    .then_some(())
            })
            .await;
        daemon.stop(Duration::from_secs(30));
    }

    for round in 0..rounds {
        let daemon = Daemon::start(&env);
        *hook.lock().unwrap() = Some(format!("{}/channels/whatsapp/webhook", daemon.url));
        for n in 0..per_round {
            let text = format!("round {round} message {n}");
            if n % 5 == 4 {
                let i = n / 5 % discord.dms.len();
                let dm = discord.dms[i];
                discord.fake.post(dm, &discord.owners[i], &text).send();
                *sent.entry(format!("discord:{dm}")).or_default() += 1;
                texts_sent
                    .entry(format!("discord:{dm}"))
                    .or_default()
                    .push(text.clone());
            } else if n % 5 == 3 {
                let session = GATEWAY_SESSIONS[n / 5 % GATEWAY_SESSIONS.len()];
                let (url, text) = (daemon.url.clone(), text.clone());
                gateway.push(tokio::spawn(async move {
                    (session, agent_send(&url, session, &text).await)
                }));
            } else if n % 5 == 0 {
                let chat = TELEGRAM_CHATS[n / 5 % TELEGRAM_CHATS.len()];
                telegram.push(Incoming::private(&TgUser::new(chat, "Owner"), &text));
                *sent.entry(format!("telegram:{chat}")).or_default() += 1;
                texts_sent
                    .entry(format!("telegram:{chat}"))
                    .or_default()
                    .push(text.clone());
            } else if n % 5 == 2 {
                // Slack holds an unacknowledged event and sends it again
                // to the next connection.
                let event = slack.message_event(sl::DM, sl::OWNER, &text);
                slack.push_event(event, &format!("Ev{round}x{n}"));
                *sent.entry(format!("slack:{}", sl::DM)).or_default() += 1;
                texts_sent
                    .entry(format!("slack:{}", sl::DM))
                    .or_default()
                    .push(text.clone());
            } else {
                let number = WHATSAPP_NUMBERS[n / 5 % WHATSAPP_NUMBERS.len()];
                let notification = whatsapp.text_message(number, "Owner", &text);
                *sent.entry(format!("whatsapp:{number}")).or_default() += 1;
                texts_sent
                    .entry(format!("whatsapp:{number}"))
                    .or_default()
                    .push(text.clone());
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
        logs.push(format!("== round {round}\n{}", daemon.log()));
        drop(daemon); // SIGKILL
        for sending in gateway.drain(..) {
            let (session, stored) = sending.await.unwrap();
            let counts = api.entry(session.to_owned()).or_default();
            counts.0 += usize::from(stored);
            counts.1 += 1;
        }
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
        let reached = answers(&telegram, &whatsapp, &slack, &discord);
        // A gateway message is stored once if the daemon said so, at most
        // once if the connection broke first; each has its answer or note.
        let through_gateway: BTreeMap<String, (usize, usize)> = api
            .keys()
            .map(|session| (session.clone(), history(&env, &daemon.url, session)))
            .collect();
        let gateway_settled = api.iter().all(|(session, (acked, tried))| {
            through_gateway
                .get(session)
                .is_some_and(|(users, ends)| acked <= users && users <= tried && ends >= users)
        });
        let settled = gateway_settled
            && posting.iter().all(tokio::task::JoinHandle::is_finished)
            && sent.iter().all(|(chat, n)| {
                stored
                    .get(chat)
                    .is_some_and(|(users, ends)| users == n && ends >= n)
                    && reached.get(chat).is_some_and(|got| got >= n)
            });
        if settled {
            break;
        }
        if Instant::now() >= deadline {
            let status = reqwest::Client::new()
                .post(format!("{}/rpc", daemon.url))
                .bearer_auth(TOKEN)
                .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "agent.status", "params": {}}))
                .send()
                .await;
            let status = match status {
                Ok(answer) => answer.text().await.unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            eprintln!("chaos: agent.status {status}");
            let file = std::env::temp_dir().join(format!("flynn-chaos-{}.log", std::process::id()));
            logs.push(format!("== the last start\n{}", daemon.log()));
            let _ = std::fs::write(&file, logs.join("\n"));
            eprintln!("chaos: the daemons' logs are in {}", file.display());
            for (chat, texts) in &texts_sent {
                let (users, _) = stored_messages(&env, &daemon.url, chat);
                let missing: Vec<&String> = texts.iter().filter(|t| !users.contains(t)).collect();
                let mut twice = users.clone();
                twice.sort();
                twice.dedup();
                eprintln!(
                    "chaos: {chat}: not stored {missing:?}; stored more than once: {}",
                    users.len() - twice.len()
                );
            }
        }
        assert!(
            Instant::now() < deadline,
            "not every message was stored once and answered in its chat: sent {sent:?}, (stored, answered) {stored:?}, answers and notes in the chats {reached:?}, gateway (acknowledged, sent) {api:?} against (stored, answered) {through_gateway:?}, deliveries still posting {}\n{}",
            posting.iter().filter(|p| !p.is_finished()).count(),
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Stopped, nothing more can be sent: the counts are final.
    daemon.stop(Duration::from_secs(60));
    if std::env::var_os("FLYNN_CHAOS_LOG").is_some() {
        let file = std::env::temp_dir().join(format!("flynn-chaos-{}.log", std::process::id()));
        logs.push(format!("== the last start\n{}", daemon.log()));
        let _ = std::fs::write(&file, logs.join("\n"));
        eprintln!("chaos: the daemons' logs are in {}", file.display());
    }
    let texts = outbox(&telegram, &whatsapp, &slack, &discord);
    // Per chat: its answers and notes, each counted once, and the ones
    // that came twice. Anything else sent is the partial message of a
    // turn cut off mid-answer.
    let mut twice = 0usize;
    let mut unsent = 0usize;
    for (chat, texts) in &texts {
        let mut ends = std::collections::BTreeSet::new();
        for text in texts {
            if is_answer(text) || text.starts_with(NOTE) || text.starts_with(FAILED_NOTE) {
                if !ends.insert(text.clone()) {
                    eprintln!("chaos: {chat} got {text:?} twice");
                    twice += 1;
                }
            } else {
                assert!(
                    text.starts_with("answer"),
                    "{chat} got {text:?}, neither an answer, a note nor a partial answer"
                );
            }
        }
        let expected = sent.get(chat).copied().unwrap_or_default();
        assert!(
            ends.len() <= expected,
            "{chat} got {} different answers and notes for {expected} messages: {texts:#?}",
            ends.len()
        );
        unsent += expected - ends.len();
    }
    // A turn that finished just as the daemon was killed has its answer
    // sent by the outbox at the next start: every message reached its
    // chat. An answer reaches its chat twice only if the daemon died
    // between the platform taking it and the outbox's mark (a few
    // microseconds after the reply): allowed once in 500 messages.
    let total: usize = sent.values().sum();
    let (acked, tried) = api
        .values()
        .fold((0, 0), |(a, t), (acked, tried)| (a + acked, t + tried));
    eprintln!(
        "chaos: {total} chat messages, {unsent} answers did not reach their chat, {twice} reached it twice; gateway: {tried} sent, {acked} acknowledged as stored, all stored at most once and answered"
    );
    assert_eq!(
        unsent, 0,
        "{unsent} of {total} answers did not reach their chat: {texts:#?}"
    );
    assert!(
        twice <= (total / 500).max(1),
        "{twice} of {total} answers reached their chat twice: {texts:#?}"
    );
    assert_eq!(telegram.violations(), Vec::<String>::new());
    assert_eq!(whatsapp.violations(), Vec::<String>::new());
    assert_eq!(slack.violations(), Vec::<String>::new());
    assert_eq!(discord.fake.violations(), Vec::<String>::new());
    eprintln!(
        "chaos: {rounds} rounds, {} messages, {} chats, {:.1} s",
        rounds * per_round,
        sent.len(),
        started.elapsed().as_secs_f64()
    );

    // Every session still works.
    let daemon = Daemon::start(&env);
    // (The model still has answers left from the start.)
    let chats = TELEGRAM_CHATS
        .iter()
        .map(|chat| format!("telegram:{chat}"))
        .chain(discord.dms.iter().map(|dm| format!("discord:{dm}")));
    for chat in chats {
        let output = env.run(&[
            "send",
            "--gateway",
            &daemon.url,
            "--session",
            &chat,
            "are you there?",
        ]);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
}
