//! Chat channels through the real daemon (`flynn start`) and their fakes:
//! WhatsApp with a stranger paired by the owner, Telegram with a
//! confirmation answered by a button.

use std::time::{Duration, Instant};

#[cfg(feature = "whatsapp")]
use flynn_testkit::whatsapp::{self as wa, FakeWhatsApp, Signing};
use flynn_testkit::{FakeOpenAi, Reply};

use crate::daemon::Daemon;
use crate::setup::TestConfig;
#[cfg(feature = "discord")]
use crate::setup::owners;
use crate::{Env, stderr, stdout};

#[cfg(feature = "whatsapp")]
const NUMBER: &str = "15551234567";

#[cfg(feature = "whatsapp")]
fn config(model: &FakeOpenAi, whatsapp: &FakeWhatsApp) -> TestConfig {
    TestConfig::new(model).whatsapp(whatsapp, "")
}

/// What the last model call was sent as the newest message, as JSON text.
fn last_said(model: &FakeOpenAi) -> String {
    let asked = model
        .requests()
        .into_iter()
        .rfind(|r| r.path.ends_with("/chat/completions"))
        .expect("a model call");
    asked.body["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .map(|last| last["content"].to_string())
        .unwrap_or_default()
}

/// Model calls (doctor's model-list probes left out).
fn chats(model: &FakeOpenAi) -> usize {
    model
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .count()
}

#[cfg(feature = "whatsapp")]
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

/// A WhatsApp voice note (an `audio` message of `audio/ogg; codecs=opus`)
/// is transcribed before its turn, as on Telegram.
#[cfg(feature = "whatsapp")]
#[tokio::test]
async fn a_whatsapp_voice_note_is_transcribed_before_its_turn() {
    use flynn_testkit::FakeStt;

    let model = FakeOpenAi::start().await;
    model.push(Reply::Text("Noted: milk.".into()));
    let stt = FakeStt::start();
    stt.push("Add milk to the shopping list.");
    let whatsapp = FakeWhatsApp::start().await;
    let config = TestConfig::new(&model)
        .whatsapp(&whatsapp, &format!("owners: [\"{NUMBER}\"]"))
        .section(&format!("voice:\n  stt:\n    base_url: {}", stt.base_url()));
    let env = Env::new().with_config(&config);
    let mut daemon = Daemon::start(&env);
    let hook = format!("{}/channels/whatsapp/webhook", daemon.url);
    whatsapp.customer_wrote(NUMBER);
    let media = whatsapp.add_media("audio/ogg; codecs=opus", b"OggS\0opus".to_vec());
    let note = whatsapp.voice_message(NUMBER, "Owner", &media);
    let posted = whatsapp.post(&hook, &note, Signing::AppSecret).await;
    assert_eq!(posted.status, 200, "{posted:?}");
    assert_eq!(sent_to(&whatsapp, NUMBER, 1).await, ["Noted: milk."]);
    let said = last_said(&model);
    assert!(
        said.contains("[voice note, transcribed] Add milk to the shopping list."),
        "{said}"
    );
    let heard = stt.requests();
    assert_eq!(
        (
            heard.len(),
            heard[0].media_type.as_deref(),
            heard[0].audio.as_slice()
        ),
        (1, Some("audio/ogg; codecs=opus"), b"OggS\0opus".as_slice())
    );
    assert_eq!(stt.violations(), Vec::<String>::new());
    assert_eq!(whatsapp.violations(), Vec::<String>::new());
    daemon.stop(Duration::from_secs(20));
}

#[cfg(feature = "whatsapp")]
#[tokio::test]
async fn a_stranger_on_whatsapp_is_paired_then_answered_through_the_daemon() {
    let model = FakeOpenAi::start().await;
    model.push(Reply::Text("Four.".into()));
    let whatsapp = FakeWhatsApp::start().await;
    let env = Env::new().with_config(&config(&model, &whatsapp));
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
        format!(
            "Approved Alice ({NUMBER}) on whatsapp as a guest: they can talk to Flynn now, in their own session and memory. (`--owner` approves an owner.)\n"
        ),
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
    // A chat's deliveries are handled in order, and its turns too: once
    // the next message is answered, a second turn for the redelivery
    // would have asked the model before it.
    model.push(Reply::Text("Six.".into()));
    let next = whatsapp.text_message(NUMBER, "Alice", "and 3 + 3?");
    assert_eq!(
        whatsapp.post(&hook, &next, Signing::AppSecret).await.status,
        200
    );
    let texts = sent_to(&whatsapp, NUMBER, 3).await;
    assert_eq!(texts[1..], ["Four.", "Six."]);
    assert_eq!(chats(&model), 2);
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
        format!(
            "guest:whatsapp:{NUMBER}: what is 2 + 2?\nassistant: Four.\nguest:whatsapp:{NUMBER}: and 3 + 3?\nassistant: Six.\n"
        ),
        "{}",
        daemon.log()
    );
}

/// A voice note on Telegram is transcribed (`voice.stt`) before its turn:
/// the model reads its words, marked as a voice note, and answers. One the
/// service cannot transcribe is answered at once when it is all the
/// message has, and reaches the model as a note when there is more.
#[cfg(feature = "telegram")]
#[tokio::test]
async fn a_telegram_voice_note_is_transcribed_before_its_turn() {
    use flynn_testkit::FakeStt;
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};

    let model = FakeOpenAi::start().await;
    model.push(Reply::Text("Booked for eight.".into()));
    model.push(Reply::Text("Sorry, I could not hear that one.".into()));
    let stt = FakeStt::start();
    stt.require_key("sk-stt");
    stt.push("Book a table for two at eight.");
    let telegram = FakeTelegram::start().await;
    let config = TestConfig::new(&model)
        .telegram(&telegram, "owners: [\"4242\"]")
        .section(&format!(
            "voice:\n  stt:\n    base_url: {}\n    api_key: sk-stt\n    language: en",
            stt.base_url()
        ));
    let env = Env::new().with_config(&config);
    let mut daemon = Daemon::start(&env);
    let owner = TgUser::new(4242, "Owner");
    let answered = |text: &str| {
        telegram
            .sent()
            .iter()
            .any(|m| m.chat_id == 4242 && m.plain == text)
    };

    telegram.push(Incoming::private(&owner, "").voice(b"OggS\0an opus page".to_vec()));
    crate::setup::wait_until(
        "the answer to the voice note",
        Duration::from_secs(20),
        &daemon,
        || answered("Booked for eight."),
    );
    let said = last_said(&model);
    assert!(
        said.contains("[voice note, transcribed] Book a table for two at eight."),
        "{said}"
    );
    let heard = stt.requests();
    assert_eq!(heard.len(), 1);
    assert_eq!(
        (
            heard[0].file_name.as_str(),
            heard[0].media_type.as_deref(),
            heard[0].language.as_deref(),
            heard[0].key.as_deref()
        ),
        ("voice.ogg", Some("audio/ogg"), Some("en"), Some("sk-stt"))
    );
    assert_eq!(heard[0].audio, b"OggS\0an opus page");

    // The service fails on a voice note alone: the sender is told at
    // once, and no turn runs.
    let asked_before = chats(&model);
    stt.fail_next(
        500,
        "The server had an error while processing your request.",
    );
    telegram.push(Incoming::private(&owner, "").voice(b"OggS\0another".to_vec()));
    crate::setup::wait_until(
        "the note about the lost voice note",
        Duration::from_secs(20),
        &daemon,
        || {
            answered(
                "I couldn't make out your voice note (127.0.0.1/whisper-1 answered 500: The server had an error while processing your request.). Please send it again, or type it.",
            )
        },
    );
    assert_eq!(
        chats(&model),
        asked_before,
        "no turn for a voice note unheard"
    );

    // With a caption, the turn runs and the model is told the note was
    // lost, to say so in its answer.
    stt.fail_next(503, "Service unavailable");
    telegram.push(Incoming::private(&owner, "and also this").voice(b"OggS\0third".to_vec()));
    crate::setup::wait_until(
        "the answer to the captioned voice note",
        Duration::from_secs(20),
        &daemon,
        || answered("Sorry, I could not hear that one."),
    );
    let said = last_said(&model);
    assert!(
        said.contains("and also this")
            && said.contains("could not be transcribed")
            && said.contains("answered 503"),
        "{said}"
    );
    assert_eq!(stt.violations(), Vec::<String>::new());
    assert_eq!(telegram.violations(), Vec::<String>::new());
    daemon.stop(Duration::from_secs(20));
}

/// "Send me the chart": `media.send` delivers a workspace file to the
/// Telegram chat as a photo with its caption, after the answer; a PDF
/// goes as a document; a file outside the workspace is refused to the
/// model and nothing is sent.
#[cfg(feature = "telegram")]
#[tokio::test]
async fn media_send_delivers_workspace_files_to_telegram_natively() {
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};
    use serde_json::json;

    let model = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start().await;
    let env = Env::new();
    let workspace = env.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let png = [&b"\x89PNG\r\n\x1a\n"[..], &[7u8; 600][..]].concat();
    std::fs::write(workspace.join("chart.png"), &png).unwrap();
    std::fs::write(workspace.join("report.pdf"), b"%PDF-1.7 a report").unwrap();
    std::fs::write(env.path().join("secret.txt"), b"not for chats").unwrap();
    let config = TestConfig::new(&model)
        .section(&format!("tools:\n  workspace: {}", workspace.display()))
        .telegram(&telegram, "owners: [\"4242\"]");
    let env = env.with_config(&config);
    let mut daemon = Daemon::start(&env);
    let owner = TgUser::new(4242, "Owner");

    model.push(Reply::ToolCalls(vec![(
        "media_send".into(),
        json!({"path": "chart.png", "caption": "Sales by month"}),
    )]));
    model.push(Reply::ToolCalls(vec![(
        "media_send".into(),
        json!({"path": "report.pdf"}),
    )]));
    model.push(Reply::Text("Here is the chart, and the report.".into()));
    telegram.push(Incoming::private(&owner, "send me the chart"));
    crate::setup::wait_until(
        "the chart and the report",
        Duration::from_secs(20),
        &daemon,
        || telegram.files_sent().len() == 2,
    );
    let files = telegram.files_sent();
    assert_eq!(
        (
            files[0].method.as_str(),
            files[0].file_name.as_str(),
            files[0].content_type.as_deref(),
            files[0].caption.as_deref(),
            files[0].chat_id
        ),
        (
            "sendPhoto",
            "chart.png",
            Some("image/png"),
            Some("Sales by month"),
            4242
        )
    );
    assert_eq!(files[0].data, png);
    assert_eq!(
        (
            files[1].method.as_str(),
            files[1].file_name.as_str(),
            files[1].content_type.as_deref(),
            files[1].caption.as_deref()
        ),
        ("sendDocument", "report.pdf", Some("application/pdf"), None)
    );
    assert_eq!(files[1].data, b"%PDF-1.7 a report");
    // The answer reads above the files it speaks of.
    let answer = telegram
        .sent()
        .into_iter()
        .find(|m| m.plain == "Here is the chart, and the report.")
        .expect("the answer");
    assert!(answer.message_id < files[0].message_id);
    let said = model
        .requests()
        .iter()
        .rfind(|r| r.path.ends_with("/chat/completions"))
        .map(|r| r.body["messages"].to_string())
        .unwrap_or_default();
    assert!(
        said.contains("sent chart.png to the chat as an image (image/png, 608 bytes)"),
        "{said}"
    );

    // A path out of the workspace is refused; the model reads why.
    model.push(Reply::ToolCalls(vec![(
        "media_send".into(),
        json!({"path": "../secret.txt"}),
    )]));
    model.push(Reply::Text("I cannot send that file.".into()));
    telegram.push(Incoming::private(&owner, "send me the secret"));
    crate::setup::wait_until("the refusal", Duration::from_secs(20), &daemon, || {
        telegram
            .sent()
            .iter()
            .any(|m| m.plain == "I cannot send that file.")
    });
    let said = model
        .requests()
        .iter()
        .rfind(|r| r.path.ends_with("/chat/completions"))
        .map(|r| r.body["messages"].to_string())
        .unwrap_or_default();
    assert!(said.contains("outside the workspace"), "{said}");
    assert_eq!(telegram.files_sent().len(), 2, "nothing more was sent");
    assert_eq!(telegram.violations(), Vec::<String>::new());
    daemon.stop(Duration::from_secs(20));
}

/// The voice round trip, with real local speech: espeak-ng speaks a
/// sentence and opusenc makes it a voice note, the Telegram fake delivers
/// it, the transcription fake hears it, and with `voice.reply: auto` the
/// answer comes back as text and as a voice note espeak-ng speaks
/// (`voice.tts` a local program). A typed message is answered in text
/// only, unless the model says something with `voice.say`.
#[cfg(feature = "telegram")]
#[tokio::test]
async fn a_telegram_voice_note_is_answered_with_a_voice_note() {
    use flynn_testkit::FakeStt;
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};
    use serde_json::json;

    let spoken = voice_note("Book a table for two at eight.");
    let model = FakeOpenAi::start().await;
    model.push(Reply::Text("**Booked** for eight.".into()));
    let stt = FakeStt::start();
    stt.push("Book a table for two at eight.");
    let telegram = FakeTelegram::start().await;
    let config = TestConfig::new(&model)
        .telegram(&telegram, "owners: [\"4242\"]")
        .section(&format!(
            "voice:\n  stt:\n    base_url: {}\n  tts:\n    provider: command\n    command: espeak-ng --stdout\n  reply: auto",
            stt.base_url()
        ));
    let env = Env::new().with_config(&config);
    let mut daemon = Daemon::start(&env);
    let owner = TgUser::new(4242, "Owner");

    telegram.push(Incoming::private(&owner, "").voice(spoken.clone()));
    crate::setup::wait_until(
        "the spoken answer",
        Duration::from_secs(30),
        &daemon,
        || !telegram.files_sent().is_empty(),
    );
    assert_eq!(
        stt.requests()[0].audio,
        spoken,
        "the note reached the transcriber"
    );
    assert!(
        telegram
            .sent()
            .iter()
            .any(|m| m.plain == "Booked for eight."),
        "the text answer too: {:?}",
        telegram.sent()
    );
    let voice = &telegram.files_sent()[0];
    assert_eq!(
        (
            voice.method.as_str(),
            voice.content_type.as_deref(),
            voice.chat_id
        ),
        ("sendVoice", Some("audio/ogg"), 4242)
    );
    assert!(voice.data.starts_with(b"OggS") && voice.data.windows(8).any(|w| w == b"OpusHead"));

    // Typed: text only.
    model.push(Reply::Text("Nothing spoken.".into()));
    telegram.push(Incoming::private(&owner, "and typed?"));
    crate::setup::wait_until("the typed answer", Duration::from_secs(20), &daemon, || {
        telegram.sent().iter().any(|m| m.plain == "Nothing spoken.")
    });
    assert_eq!(
        telegram.files_sent().len(),
        1,
        "no voice for a typed message"
    );
    // ... unless the model speaks with voice.say.
    model.push(Reply::ToolCalls(vec![(
        "voice_say".into(),
        json!({"text": "Good night."}),
    )]));
    model.push(Reply::Text("Said it.".into()));
    telegram.push(Incoming::private(&owner, "say good night"));
    crate::setup::wait_until("the said note", Duration::from_secs(30), &daemon, || {
        telegram.files_sent().len() == 2
    });
    assert_eq!(telegram.files_sent()[1].method, "sendVoice");
    // `/voice on`: this chat's typed messages are answered aloud too.
    telegram.push(Incoming::private(&owner, "/voice on"));
    crate::setup::wait_until("the /voice reply", Duration::from_secs(20), &daemon, || {
        telegram
            .sent()
            .iter()
            .any(|m| m.plain.starts_with("Voice replies: on"))
    });
    model.push(Reply::Text("Spoken now.".into()));
    telegram.push(Incoming::private(&owner, "typed again"));
    crate::setup::wait_until(
        "the spoken typed answer",
        Duration::from_secs(30),
        &daemon,
        || telegram.files_sent().len() == 3,
    );
    assert!(telegram.sent().iter().any(|m| m.plain == "Spoken now."));
    assert_eq!(telegram.files_sent()[2].method, "sendVoice");
    assert_eq!(telegram.violations(), Vec::<String>::new());
    assert_eq!(stt.violations(), Vec::<String>::new());
    daemon.stop(Duration::from_secs(20));
}

/// `text` spoken by espeak-ng and encoded by opusenc: a real Ogg Opus
/// voice note.
#[cfg(feature = "telegram")]
fn voice_note(text: &str) -> Vec<u8> {
    let script = format!("espeak-ng --stdout '{text}' | opusenc --quiet - -");
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .expect("sh runs");
    assert!(
        out.status.success() && out.stdout.starts_with(b"OggS"),
        "espeak-ng and opusenc are needed: run scripts/install-test-deps.sh ({})",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[cfg(feature = "telegram")]
#[tokio::test]
async fn on_telegram_a_confirmation_is_approved_with_its_button_and_groups_need_a_mention() {
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};
    use serde_json::json;

    let model = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start().await;
    let env = Env::new();
    let workspace = env.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let owner = TgUser::new(4242, "Owner");
    let config = TestConfig::new(&model)
        .section(&format!("tools:\n  workspace: {}", workspace.display()))
        .telegram(&telegram, "owners: [\"4242\"]\nallow_from: [\"777\"]");
    let env = env.with_config(&config);
    let daemon = Daemon::start(&env);
    let wait = |check: &dyn Fn(&FakeTelegram) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !check(&telegram) {
            assert!(
                Instant::now() < deadline,
                "timed out; sent: {:#?}\n{}",
                telegram.sent(),
                daemon.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };

    // In a group, a message without a mention is not for Flynn.
    telegram.push(Incoming::group(-100777, "Team", &owner, "lunch at noon?"));
    model.push(Reply::ToolCalls(vec![(
        "file_write".into(),
        json!({"path": "note.txt", "content": "from telegram"}),
    )]));
    model.push(Reply::Text("Wrote **note.txt**.".into()));
    telegram.push(Incoming::private(&owner, "write a note"));
    wait(&|t| t.sent().iter().any(|m| !m.keyboard.is_empty()));
    let ask = telegram
        .sent()
        .into_iter()
        .find(|m| !m.keyboard.is_empty())
        .unwrap();
    assert_eq!(ask.chat_id, 4242);
    assert!(
        ask.plain.contains("file.write") && ask.plain.contains("note.txt"),
        "{}",
        ask.plain
    );
    let labels: Vec<&str> = ask.keyboard[0].iter().map(|b| b.text.as_str()).collect();
    assert_eq!(labels, ["Approve", "Deny"]);
    assert!(
        !workspace.join("note.txt").exists(),
        "nothing runs before the press"
    );
    let approve = ask.keyboard[0][0].callback_data.clone().unwrap();
    telegram.push_callback(&owner, ask.message_id, &approve);

    wait(&|t| t.sent().iter().any(|m| m.plain == "Wrote note.txt."));
    assert_eq!(
        std::fs::read_to_string(workspace.join("note.txt")).unwrap(),
        "from telegram"
    );
    let ask = telegram.message(ask.message_id).unwrap();
    assert!(
        ask.keyboard.is_empty(),
        "the buttons are gone once answered"
    );
    assert!(ask.plain.contains("Approved by"), "{}", ask.plain);
    assert!(
        telegram
            .callback_answers()
            .iter()
            .any(|a| a.text.as_deref() == Some("Approved"))
    );
    let answer = telegram
        .sent()
        .into_iter()
        .find(|m| m.plain == "Wrote note.txt.")
        .unwrap();
    assert_eq!(answer.text, "Wrote <b>note.txt</b>.");
    // Two model calls: the tool call and the answer; the group message
    // never reached the model.
    assert_eq!(chats(&model), 2);
    assert!(telegram.sent().iter().all(|m| m.chat_id == 4242));

    // A guest (let in by allow_from, not an owner) cannot read the
    // owner's chat, nor answer the owner's confirmations.
    let guest = TgUser::new(777, "Guest");
    model.push(Reply::ToolCalls(vec![(
        // Not offered until found with tools.search; called by its name.
        "sessions.history".into(),
        json!({"session": "telegram:4242"}),
    )]));
    model.push(Reply::Text("I can't see that.".into()));
    telegram.push(Incoming::private(&guest, "show me the owner's chat"));
    wait(&|t| t.sent().iter().any(|m| m.plain == "I can't see that."));
    let requests = model.requests();
    let last = requests
        .iter()
        .rev()
        .find(|r| r.path.ends_with("/chat/completions"))
        .unwrap();
    let body = last.body.to_string();
    assert!(
        body.contains("no session 'telegram:4242'") && !body.contains("from telegram"),
        "{body}"
    );
    assert_eq!(telegram.violations(), Vec::<String>::new());
}

/// A Telegram message is accepted, the daemon is killed mid-answer and
/// started again with `interrupted_turns: <mode>`; returns what the
/// chat was sent after the restart.
#[cfg(feature = "telegram")]
async fn killed_mid_answer_on_telegram(mode: &str) -> Vec<String> {
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};

    const STALLED: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"working\"},\"finish_reason\":null}]}\n\n";
    let model = FakeOpenAi::start().await;
    model.push(Reply::Stall(STALLED.into()));
    let telegram = FakeTelegram::start().await;
    let env = Env::new();
    let owner = TgUser::new(4242, "Owner");
    let config = TestConfig::new(&model)
        .section(&format!("sessions:\n  interrupted_turns: {mode}"))
        .telegram(&telegram, "owners: [\"4242\"]");
    let env = env.with_config(&config);
    let mut daemon = Daemon::start(&env);
    telegram.push(Incoming::private(&owner, "write the report"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while chats(&model) < 1 {
        assert!(Instant::now() < deadline, "{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    daemon.signal("KILL");
    daemon.wait(Duration::from_secs(10));
    let before = telegram.sent().len();

    model.push(Reply::Text("late answer".into()));
    let daemon = Daemon::start(&env);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let sent: Vec<String> = telegram
            .sent()
            .into_iter()
            .skip(before)
            .filter(|m| m.chat_id == 4242)
            .map(|m| m.plain)
            .collect();
        if sent
            .iter()
            .any(|t| t.contains("late answer") || t.contains("Interrupted"))
        {
            assert_eq!(telegram.violations(), Vec::<String>::new());
            return sent;
        }
        assert!(
            Instant::now() < deadline,
            "the chat was told nothing after the restart: {:#?}\n{}",
            telegram.sent(),
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(feature = "telegram")]
#[tokio::test]
async fn a_telegram_turn_rerun_after_a_crash_is_answered_in_its_chat() {
    let sent = killed_mid_answer_on_telegram("rerun").await;
    assert!(sent.iter().any(|t| t == "late answer"), "{sent:?}");
}

#[cfg(feature = "telegram")]
#[tokio::test]
async fn a_telegram_turn_cut_off_by_a_crash_is_reported_in_its_chat() {
    let sent = killed_mid_answer_on_telegram("report").await;
    assert!(
        sent.iter().any(|t| t.contains("Interrupted")
            && t.contains("write the report")
            && t.contains("send the message again")),
        "{sent:?}"
    );
}

/// The outbox: a turn whose answer was stored but not yet sent when the
/// daemon died (here the sending task stops at an injected fault, then
/// the daemon is killed) has the answer sent at the next start, once.
#[cfg(feature = "telegram")]
#[tokio::test]
async fn a_telegram_answer_stored_as_the_daemon_died_is_sent_at_the_next_start() {
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};

    let model = FakeOpenAi::start().await;
    model.push(Reply::Text("the stored answer".into()));
    let telegram = FakeTelegram::start().await;
    let env = Env::new();
    let config = TestConfig::new(&model).telegram(&telegram, "owners: [\"4242\"]");
    let env = env.with_config(&config).var("FLYNN_FAULTS", "answer.send");
    let answers = || {
        telegram
            .sent()
            .into_iter()
            .filter(|m| m.chat_id == 4242 && m.plain == "the stored answer")
            .count()
    };
    let mut daemon = Daemon::start(&env);
    telegram.push(Incoming::private(&TgUser::new(4242, "Owner"), "hello"));
    // The answer is stored, and its sending task has stopped.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shown = env.run(&[
            "sessions",
            "show",
            "--json",
            "--gateway",
            &daemon.url,
            "telegram:4242",
        ]);
        let stored = stdout(&shown).contains("the stored answer");
        if stored && daemon.log().contains("injected fault at answer.send") {
            break;
        }
        assert!(Instant::now() < deadline, "{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(answers(), 0, "{:#?}", telegram.sent());
    daemon.signal("KILL");
    daemon.wait(Duration::from_secs(10));

    let mut daemon = Daemon::start(&env);
    let deadline = Instant::now() + Duration::from_secs(30);
    while answers() == 0 {
        assert!(
            Instant::now() < deadline,
            "the stored answer never reached the chat: {:#?}\n{}",
            telegram.sent(),
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.stop(Duration::from_secs(30));
    assert_eq!(answers(), 1, "{:#?}", telegram.sent());
    // Sent once: the next start has nothing left to send.
    let mut daemon = Daemon::start(&env);
    telegram.push(Incoming::private(&TgUser::new(4242, "Owner"), "again"));
    model.push(Reply::Text("a later answer".into()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !daemon.log().contains("injected fault at answer.send") {
        assert!(Instant::now() < deadline, "{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    daemon.stop(Duration::from_secs(30));
    assert_eq!(answers(), 1, "{:#?}", telegram.sent());
    assert!(
        !daemon.log().contains("did not send"),
        "the answer was sent again: {}",
        daemon.log()
    );
    assert_eq!(telegram.violations(), Vec::<String>::new());
}

/// The outbox keeps files too: a chart a turn sent, whose answer and
/// file had not reached the chat when the daemon died, is sent after the
/// answer at the next start, once; a start after that sends nothing more.
#[cfg(feature = "telegram")]
#[tokio::test]
async fn a_file_a_turn_sent_as_the_daemon_died_is_sent_at_the_next_start() {
    use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};
    use serde_json::json;

    let model = FakeOpenAi::start().await;
    model.push(Reply::ToolCalls(vec![(
        "media_send".into(),
        json!({"path": "chart.png", "caption": "Sales by month"}),
    )]));
    model.push(Reply::Text("Here is the chart.".into()));
    let telegram = FakeTelegram::start().await;
    let env = Env::new();
    let workspace = env.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let png = [&b"\x89PNG\r\n\x1a\n"[..], &[9u8; 300][..]].concat();
    std::fs::write(workspace.join("chart.png"), &png).unwrap();
    let config = TestConfig::new(&model)
        .section(&format!("tools:\n  workspace: {}", workspace.display()))
        .telegram(&telegram, "owners: [\"4242\"]");
    let env = env.with_config(&config).var("FLYNN_FAULTS", "answer.send");
    let mut daemon = Daemon::start(&env);
    telegram.push(Incoming::private(
        &TgUser::new(4242, "Owner"),
        "send me the chart",
    ));
    crate::setup::wait_until(
        "the answer stored and its sending stopped",
        Duration::from_secs(30),
        &daemon,
        || daemon.log().contains("injected fault at answer.send"),
    );
    // The workspace file changes: the chat still gets what was sent.
    std::fs::write(workspace.join("chart.png"), b"changed").unwrap();
    assert!(telegram.files_sent().is_empty());
    daemon.signal("KILL");
    daemon.wait(Duration::from_secs(10));

    let mut daemon = Daemon::start(&env);
    crate::setup::wait_until(
        "the chart sent by the next start",
        Duration::from_secs(30),
        &daemon,
        || telegram.files_sent().len() == 1,
    );
    daemon.stop(Duration::from_secs(30));
    let files = telegram.files_sent();
    assert_eq!(
        (
            files[0].method.as_str(),
            files[0].file_name.as_str(),
            files[0].caption.as_deref()
        ),
        ("sendPhoto", "chart.png", Some("Sales by month"))
    );
    assert_eq!(files[0].data, png);
    let answer = telegram
        .sent()
        .into_iter()
        .find(|m| m.plain == "Here is the chart.")
        .expect("the answer");
    assert!(answer.message_id < files[0].message_id);

    // Sent once: the next start sends neither again.
    let mut daemon = Daemon::start(&env);
    telegram.push(Incoming::private(&TgUser::new(4242, "Owner"), "thanks"));
    model.push(Reply::Text("You are welcome.".into()));
    crate::setup::wait_until("the next turn", Duration::from_secs(30), &daemon, || {
        daemon.log().contains("injected fault at answer.send")
    });
    daemon.stop(Duration::from_secs(30));
    assert_eq!(
        telegram.files_sent().len(),
        1,
        "{:#?}",
        telegram.files_sent()
    );
    let answers = telegram
        .sent()
        .into_iter()
        .filter(|m| m.plain == "Here is the chart.")
        .count();
    assert_eq!(answers, 1, "{:#?}", telegram.sent());
    assert_eq!(telegram.violations(), Vec::<String>::new());
}

/// Discord sends a voice message as an `audio/ogg` attachment: it is
/// transcribed before its turn, as a voice note anywhere else; with
/// `voice.reply: auto` the answer comes back as Discord's own voice
/// message (its flag, length and waveform), spoken by espeak-ng.
#[cfg(feature = "discord")]
#[tokio::test]
async fn a_discord_voice_message_is_transcribed_and_answered_with_one() {
    use flynn_testkit::FakeStt;
    use flynn_testkit::discord::{DiscordUser, FakeDiscord};

    let model = FakeOpenAi::start().await;
    model.push(Reply::Text("Calling Ann at six.".into()));
    let stt = FakeStt::start();
    stt.push("Remind me to call Ann at six.");
    let discord = FakeDiscord::start().await;
    let owner = DiscordUser::person(200_000_000_000_000_001, "owner", None);
    let dm = discord.dm_channel(&owner);
    let config = TestConfig::new(&model)
        .discord(&discord, &owners([owner.id]))
        .section(&format!(
            "voice:\n  stt:\n    base_url: {}\n  tts:\n    provider: command\n    command: espeak-ng --stdout\n  reply: auto",
            stt.base_url()
        ));
    let env = Env::new().with_config(&config);
    let mut daemon = Daemon::start(&env);
    discord
        .post(dm, &owner, "")
        .attach(
            "voice-message.ogg",
            "audio/ogg",
            voice_note("Remind me to call Ann at six."),
        )
        .send();
    crate::setup::wait_until(
        "the answer to the voice message",
        Duration::from_secs(20),
        &daemon,
        || {
            discord
                .messages_in(dm)
                .iter()
                .any(|m| m.content == "Calling Ann at six.")
        },
    );
    let heard = stt.requests();
    assert_eq!(
        (
            heard.len(),
            heard[0].file_name.as_str(),
            heard[0].media_type.as_deref()
        ),
        (1, "voice-message.ogg", Some("audio/ogg"))
    );
    crate::setup::wait_until(
        "the spoken answer",
        Duration::from_secs(30),
        &daemon,
        || !discord.files().is_empty(),
    );
    let spoken = &discord.files()[0];
    assert_eq!(
        (
            spoken.channel,
            spoken.filename.as_str(),
            spoken.content.as_str()
        ),
        (dm, "voice-message.ogg", "")
    );
    assert!(spoken.data.starts_with(b"OggS"), "an Ogg file");
    let voice = spoken.voice.as_ref().expect("sent as a voice message");
    // "Calling Ann at six." takes espeak-ng about a second and a half.
    assert!(
        (0.5..5.0).contains(&voice.duration_secs),
        "{}",
        voice.duration_secs
    );
    assert!(
        (5..=50).contains(&voice.waveform.len()) && voice.waveform.contains(&255),
        "{:?}",
        voice.waveform
    );
    assert_eq!(stt.violations(), Vec::<String>::new());
    assert_eq!(discord.violations(), Vec::<String>::new());
    daemon.stop(Duration::from_secs(20));
}

/// Slack: an audio clip (a file of an `audio/` type) is transcribed
/// before its turn; the answer's chart comes back as a file shared in the
/// DM, through Slack's upload flow.
#[cfg(feature = "slack")]
#[tokio::test]
async fn on_slack_an_audio_clip_is_heard_and_a_chart_comes_back() {
    use flynn_testkit::FakeStt;
    use flynn_testkit::slack::{self as sl, FakeSlack};
    use serde_json::json;

    let model = FakeOpenAi::start().await;
    let stt = FakeStt::start();
    stt.push("Send me the sales chart.");
    let slack = FakeSlack::start().await;
    let env = Env::new();
    let workspace = env.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let png = [&b"\x89PNG\r\n\x1a\n"[..], &[3u8; 300][..]].concat();
    std::fs::write(workspace.join("chart.png"), &png).unwrap();
    let config = TestConfig::new(&model)
        .section(&format!("tools:\n  workspace: {}", workspace.display()))
        .section(&format!("voice:\n  stt:\n    base_url: {}", stt.base_url()))
        .slack(&slack, &format!("owners: [\"{}\"]", sl::OWNER));
    let env = env.with_config(&config);
    let mut daemon = Daemon::start(&env);
    model.push(Reply::ToolCalls(vec![(
        "media_send".into(),
        json!({"path": "chart.png", "caption": "Sales"}),
    )]));
    model.push(Reply::Text("Here is the chart.".into()));

    let clip = slack.add_file(
        "audio_message.webm",
        "audio/webm",
        b"\x1a\x45\xdf\xa3 a clip",
    );
    let mut event = slack.message_event(sl::DM, sl::OWNER, "");
    event["subtype"] = json!("file_share");
    event["files"] = json!([clip]);
    slack.push_event(event, "EvClip1");
    crate::setup::wait_until(
        "the chart in the DM",
        Duration::from_secs(20),
        &daemon,
        || !slack.shared_files().is_empty(),
    );
    let heard = stt.requests();
    assert_eq!(
        (
            heard.len(),
            heard[0].file_name.as_str(),
            &heard[0].audio[..]
        ),
        (1, "audio_message.webm", &b"\x1a\x45\xdf\xa3 a clip"[..])
    );
    let first = model
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/chat/completions"))
        .unwrap();
    assert!(
        first.body["messages"]
            .to_string()
            .contains("[voice note, transcribed] Send me the sales chart."),
        "{}",
        first.body
    );
    let shared = &slack.shared_files()[0];
    assert_eq!(
        (
            shared.filename.as_str(),
            shared.channel.as_str(),
            shared.initial_comment.as_deref()
        ),
        ("chart.png", sl::DM, Some("Sales"))
    );
    assert_eq!(shared.data, png);
    assert!(
        slack
            .messages()
            .iter()
            .any(|m| m.text.contains("Here is the chart."))
    );
    assert_eq!(slack.violations(), Vec::<String>::new());
    assert_eq!(stt.violations(), Vec::<String>::new());
    daemon.stop(Duration::from_secs(20));
}

/// Discord, after a crash: the notes of interrupted turns reach the DM
/// one at a time, in order, each keyed by its turn (a message `nonce`
/// with `enforce_nonce`). A note the chat got from a daemon killed
/// before it could mark it sent (here the mark stops at an injected
/// fault) is sent again by the next start's outbox, and Discord hands
/// back the message it already has instead of posting it twice.
#[cfg(feature = "discord")]
#[tokio::test]
async fn a_discord_note_sent_before_a_crash_is_not_posted_again() {
    use flynn_testkit::discord::{DiscordUser, FakeDiscord};
    use jsonrpsee::core::client::ClientT;
    use jsonrpsee::ws_client::WsClientBuilder;

    const STALLED: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"working\"},\"finish_reason\":null}]}\n\n";
    const TOKEN: &str = "discord-notes-test-token-0123456789abcdef";
    let model = FakeOpenAi::start().await;
    model.push(Reply::Stall(STALLED.into()));
    let discord = FakeDiscord::start().await;
    let owner = DiscordUser::person(200_000_000_000_000_001, "owner", None);
    let dm = discord.dm_channel(&owner);
    let env = Env::new();
    let config = TestConfig::new(&model)
        .section("sessions:\n  interrupted_turns: report")
        .discord(&discord, &owners([owner.id]));
    let env = env.with_config(&config).var("FLYNN_GATEWAY_TOKEN", TOKEN);
    let session = format!("discord:{dm}");
    let notes = || -> Vec<String> {
        discord
            .messages_in(dm)
            .into_iter()
            .map(|m| m.content)
            .filter(|text| text.starts_with("⚠ Interrupted"))
            .collect()
    };

    // Three messages: the first stalls its turn, two wait behind it.
    let mut daemon = Daemon::start(&env);
    discord.post(dm, &owner, "first question").send();
    let deadline = Instant::now() + Duration::from_secs(30);
    while chats(&model) < 1 {
        assert!(Instant::now() < deadline, "{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    discord.post(dm, &owner, "second question").send();
    discord.post(dm, &owner, "third question").send();
    let mut headers = jsonrpsee::ws_client::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let client = WsClientBuilder::default()
        .set_headers(headers)
        .build(format!(
            "{}/rpc",
            daemon.url.replacen("http://", "ws://", 1)
        ))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut params = jsonrpsee::core::params::ObjectParams::new();
        params.insert("session", &session).unwrap();
        let status: serde_json::Value = client.request("agent.status", params).await.unwrap();
        if status["open_turns"].as_array().map_or(0, Vec::len) == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "{status}\n{}", daemon.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(client);
    daemon.signal("KILL");
    daemon.wait(Duration::from_secs(10));

    // The next start sends the first note, and dies before marking it.
    let env = env.var("FLYNN_FAULTS", "answer.mark");
    let mut daemon = Daemon::start(&env);
    let deadline = Instant::now() + Duration::from_secs(30);
    while notes().is_empty() || !daemon.log().contains("injected fault at answer.mark") {
        assert!(
            Instant::now() < deadline,
            "{:#?}\n{}",
            notes(),
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    daemon.signal("KILL");
    daemon.wait(Duration::from_secs(10));
    assert_eq!(notes().len(), 1, "one note at a time: {:#?}", notes());

    // The one after sends all three; the first is not posted again.
    let env = env.var("FLYNN_FAULTS", "");
    let mut daemon = Daemon::start(&env);
    let deadline = Instant::now() + Duration::from_secs(30);
    while daemon
        .log()
        .matches("sent what the last run left unsent")
        .count()
        < 3
    {
        assert!(
            Instant::now() < deadline,
            "{:#?}\n{}",
            notes(),
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    daemon.stop(Duration::from_secs(30));
    let notes = notes();
    assert_eq!(notes.len(), 3, "{notes:#?}");
    for (note, question) in notes.iter().zip(["first", "second", "third"]) {
        assert!(
            note.contains(&format!("\"{question} question\"")),
            "{notes:#?}"
        );
    }
    // (The stalled answer's first words were streamed into a message of
    // their own, with no nonce.)
    let creates = discord
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with(&format!("/channels/{dm}/messages")))
        .filter(|r| {
            r.body["content"]
                .as_str()
                .is_some_and(|t| t.starts_with("⚠ Interrupted"))
        })
        .collect::<Vec<_>>();
    assert_eq!(
        creates.len(),
        4,
        "the first note is sent twice, created once"
    );
    assert!(
        creates
            .iter()
            .all(|r| r.body["enforce_nonce"] == true && r.body["nonce"].is_string()),
        "{creates:#?}"
    );
    assert_eq!(creates[0].body["nonce"], creates[1].body["nonce"]);
    assert_eq!(discord.violations(), Vec::<String>::new());
}
