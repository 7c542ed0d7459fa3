#![cfg(feature = "telegram")]
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The Telegram adapter against the fake Bot API, over real HTTP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flynn_channels::telegram::TelegramAdapter;
use flynn_channels::{
    Action, AttachmentKind, Backoff, Button, ButtonStyle, ChannelAdapter, ChannelError,
    ChannelState, ChatKind, Conversation, Delivery, Disposition, Inbound, InboundEvent,
    InboundMessage, MessageId, Registry, Sender, Target, WebhookRequest, outbound,
};
use flynn_protocol::config::TelegramConfig;
use flynn_testkit::telegram::{
    BOT_USERNAME, CallbackAnswer, ChatActionSent, Failure, FakeTelegram, Incoming, SentButton,
    TgUser, WebhookPost,
};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);
const SECRET: &str = "flynn-webhook_secret-42";
const GROUP: i64 = -1_001_234_567_890;

fn alice() -> TgUser {
    TgUser::new(111, "Alice")
        .last_name("Smith")
        .username("alice")
}

fn carol() -> TgUser {
    TgUser::new(333, "Carol").last_name("Jones")
}

fn polling_config(fake: &FakeTelegram) -> TelegramConfig {
    serde_json::from_value(json!({"bot_token": fake.token(), "api_url": fake.api_url()})).unwrap()
}

fn webhook_config(fake: &FakeTelegram) -> TelegramConfig {
    serde_json::from_value(json!({
        "bot_token": fake.token(),
        "api_url": fake.api_url(),
        "mode": "webhook",
        "webhook_url": "https://flynn.example.org/channels/telegram/webhook",
        "webhook_secret": SECRET,
    }))
    .unwrap()
}

fn to(conversation: Conversation) -> Target {
    Target {
        conversation,
        reply: None,
    }
}

/// An adapter connected to the fake, its deliveries on `rx`.
struct Running {
    adapter: Arc<TelegramAdapter>,
    sink: Inbound,
    rx: mpsc::Receiver<Delivery>,
    stop: CancellationToken,
    task: JoinHandle<Result<(), ChannelError>>,
}

fn start(config: &TelegramConfig) -> Running {
    let adapter = Arc::new(TelegramAdapter::new(config).unwrap());
    let (sink, rx) = Inbound::detached("telegram");
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let adapter = Arc::clone(&adapter);
        let sink = sink.clone();
        let stop = stop.clone();
        async move { adapter.connect(sink, stop).await }
    });
    Running {
        adapter,
        sink,
        rx,
        stop,
        task,
    }
}

impl Running {
    async fn next(&mut self) -> Delivery {
        tokio::time::timeout(WAIT, self.rx.recv())
            .await
            .expect("a delivery within the wait")
            .expect("the sink is open")
    }

    async fn finish(self) -> Result<(), ChannelError> {
        self.stop.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("connect returns once stopped")
            .unwrap()
    }
}

fn message(delivery: &Delivery) -> InboundMessage {
    match &delivery.event {
        InboundEvent::Message(message) => message.clone(),
        other => panic!("expected a message, got {other:?}"),
    }
}

fn webhook_request(post: WebhookPost) -> WebhookRequest {
    let mut headers = http::HeaderMap::new();
    for (name, value) in &post.headers {
        headers.insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    WebhookRequest {
        method: http::Method::POST,
        // The gateway hands the adapter what follows /channels/telegram.
        path: post
            .path
            .strip_prefix("/channels/telegram")
            .unwrap()
            .to_owned(),
        query: String::new(),
        headers,
        body: bytes::Bytes::from(post.body),
    }
}

/// Queues a message for `getUpdates`; returns its `update_id` and the id
/// the adapter gives it: `<chat id>:<message id>`.
fn push(fake: &FakeTelegram, incoming: Incoming) -> (i64, String) {
    let update = fake.update(incoming);
    let id = format!(
        "{}:{}",
        update["message"]["chat"]["id"], update["message"]["message_id"]
    );
    (fake.push_update(update), id)
}

#[tokio::test]
async fn a_direct_message_is_delivered_acknowledged_after_settling_and_answered() {
    let fake = FakeTelegram::start().await;
    let mut running = start(&polling_config(&fake));
    let (update_id, id) = push(&fake, Incoming::private(&alice(), "hello there"));

    let delivery = running.next().await;
    assert_eq!(
        delivery.event,
        InboundEvent::Message(InboundMessage {
            id: id.clone(),
            conversation: Conversation::direct("111"),
            sender: Sender {
                id: "111".into(),
                name: Some("@alice".into()),
            },
            mentioned: true,
            text: "hello there".into(),
            attachments: Vec::new(),
            reply: None,
        })
    );
    // Not confirmed while the daemon has not answered.
    assert_eq!(fake.pending_updates(), vec![update_id]);
    assert!(fake.confirmed_offset() <= update_id);
    delivery.settle(Disposition::Accepted);
    assert!(
        fake.wait(WAIT, |f| f.confirmed_offset() == update_id + 1
            && f.pending_updates().is_empty())
            .await
    );

    let adapter: &dyn ChannelAdapter = &*running.adapter;
    let sent = outbound::send(
        adapter,
        &to(Conversation::direct("111")),
        "**Hi** Alice, see `x < y` & [docs](https://example.org/a?b=1&c=2)",
        &[],
    )
    .await
    .unwrap();
    let messages = fake.sent();
    assert_eq!(messages.len(), 1);
    let reply = &messages[0];
    assert_eq!(sent.parts, vec![MessageId(reply.message_id.to_string())]);
    assert_eq!(reply.chat_id, 111);
    assert_eq!(reply.thread_id, None);
    assert_eq!(reply.parse_mode.as_deref(), Some("HTML"));
    assert!(reply.preview_disabled);
    assert_eq!(
        reply.text,
        "<b>Hi</b> Alice, see <code>x &lt; y</code> &amp; <a href=\"https://example.org/a?b=1&amp;c=2\">docs</a>"
    );
    assert_eq!(reply.plain, "Hi Alice, see x < y & docs");
    assert!(reply.keyboard.is_empty());

    running
        .adapter
        .typing(&to(Conversation::direct("111")))
        .await
        .unwrap();
    assert_eq!(
        fake.chat_actions(),
        vec![ChatActionSent {
            chat_id: 111,
            action: "typing".into(),
            thread_id: None,
        }]
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
    running.finish().await.unwrap();
    // connect asked for the right updates and long polled.
    let poll = &fake.calls("getUpdates")[0];
    assert_eq!(poll["timeout"], 25);
    assert_eq!(
        poll["allowed_updates"],
        json!(["message", "callback_query"])
    );
}

#[tokio::test]
async fn group_messages_are_mentioned_only_when_they_address_the_bot() {
    let fake = FakeTelegram::start().await;
    let mut running = start(&polling_config(&fake));
    let group = Conversation::group(GROUP.to_string());

    let cases = [
        ("good morning all", false, "good morning all"),
        (
            "@flynn_bot what's the weather?",
            true,
            "what's the weather?",
        ),
        ("@Flynn_Bot: hi", true, "hi"),
        (
            "ask @alice_smith, not me",
            false,
            "ask @alice_smith, not me",
        ),
        ("/reset@flynn_bot", true, "/reset"),
    ];
    for (text, mentioned, cleaned) in cases {
        let (_, id) = push(&fake, Incoming::group(GROUP, "Team", &carol(), text));
        let delivery = running.next().await;
        assert_eq!(
            message(&delivery),
            InboundMessage {
                id: id.clone(),
                conversation: group.clone(),
                sender: Sender {
                    id: "333".into(),
                    name: Some("Carol Jones".into()),
                },
                mentioned,
                text: cleaned.into(),
                attachments: Vec::new(),
                reply: None,
            },
            "for {text:?}"
        );
        delivery.settle(if mentioned {
            Disposition::Accepted
        } else {
            Disposition::Ignored("no mention".into())
        });
    }

    // A reply to one of the bot's messages addresses it.
    let handle = Arc::clone(&running.adapter);
    let adapter: &dyn ChannelAdapter = &*handle;
    let sent = outbound::send(adapter, &to(group.clone()), "Sunny.", &[])
        .await
        .unwrap();
    let bot_message: i64 = sent.parts[0].0.parse().unwrap();
    fake.push(Incoming::group(GROUP, "Team", &carol(), "thanks").replying_to(bot_message));
    let delivery = running.next().await;
    let reply = message(&delivery);
    assert!(reply.mentioned);
    assert_eq!(reply.text, "thanks");
    delivery.settle(Disposition::Accepted);

    // A forum topic is a conversation of its own, and answers go there.
    let (_, id) = push(
        &fake,
        Incoming::group(GROUP, "Team", &carol(), "@flynn_bot in here").in_topic(42),
    );
    let delivery = running.next().await;
    let topic = message(&delivery);
    assert_eq!(topic.id, id);
    assert_eq!(
        topic.conversation,
        Conversation {
            chat: GROUP.to_string(),
            thread: Some("42".into()),
            kind: ChatKind::Group,
        }
    );
    assert_eq!(topic.conversation.peer(), format!("{GROUP}:42"));
    assert_eq!(topic.text, "in here");
    delivery.settle(Disposition::Accepted);
    outbound::send(adapter, &to(topic.conversation.clone()), "Here.", &[])
        .await
        .unwrap();
    let last = fake.sent().pop().unwrap();
    assert_eq!((last.chat_id, last.thread_id), (GROUP, Some(42)));

    assert!(fake.wait(WAIT, |f| f.pending_updates().is_empty()).await);
    assert_eq!(fake.violations(), Vec::<String>::new());
    running.finish().await.unwrap();
}

#[tokio::test]
async fn a_long_answer_is_split_into_messages_telegram_accepts() {
    let fake = FakeTelegram::start().await;
    fake.update(Incoming::private(&alice(), "register the chat"));
    let adapter = TelegramAdapter::new(&polling_config(&fake)).unwrap();

    let mut markdown = String::new();
    for i in 0..40 {
        markdown.push_str(&format!(
            "Paragraph {i}: **bold** words & more words, with `code` and <angle> brackets.\n\n"
        ));
    }
    markdown.push_str("```rust\n");
    for i in 0..150 {
        markdown.push_str(&format!("let value_{i} = compute(&input[{i}]) < limit;\n"));
    }
    markdown.push_str("```\n\n");
    for i in 0..25 {
        markdown.push_str(&format!(
            "Closing thought {i} with _emphasis_ & detail.\n\n"
        ));
    }
    assert!(markdown.len() > 10_000);

    let sent = outbound::send(&adapter, &to(Conversation::direct("111")), &markdown, &[])
        .await
        .unwrap();
    let messages = fake.sent();
    assert_eq!(fake.violations(), Vec::<String>::new());
    assert!(messages.len() >= 3, "only {} messages", messages.len());
    assert_eq!(sent.parts.len(), messages.len());
    for message in &messages {
        assert!(message.plain.encode_utf16().count() <= 4096);
        assert_eq!(message.parse_mode.as_deref(), Some("HTML"));
    }
    // The code block spans a cut: closed in one message, reopened with
    // its language in the next, and no line is lost.
    let with_code = messages
        .iter()
        .filter(|m| m.text.contains("<pre><code class=\"language-rust\">"))
        .count();
    assert!(
        with_code >= 2,
        "the code block is in {with_code} message(s)"
    );
    let everything: String = messages.iter().map(|m| m.plain.as_str()).collect();
    for i in 0..150 {
        assert!(everything.contains(&format!("let value_{i} = compute(&input[{i}]) < limit;")));
    }
    assert!(everything.contains("Closing thought 24"));
}

#[tokio::test]
async fn a_confirmation_shows_buttons_and_the_press_comes_back_as_an_action() {
    let fake = FakeTelegram::start().await;
    let mut running = start(&polling_config(&fake));
    fake.update(Incoming::private(&alice(), "register the chat"));
    let target = to(Conversation::direct("111"));
    let buttons = [
        Button {
            label: "Approve".into(),
            data: "y:call_1".into(),
            style: ButtonStyle::Primary,
        },
        Button {
            label: "Deny".into(),
            data: "n:call_1".into(),
            style: ButtonStyle::Danger,
        },
    ];
    let handle = Arc::clone(&running.adapter);
    let adapter: &dyn ChannelAdapter = &*handle;
    let mut sent = outbound::send(adapter, &target, "Run `rm -rf build`?", &buttons)
        .await
        .unwrap();
    let message_id: i64 = sent.parts[0].0.parse().unwrap();
    assert_eq!(
        fake.message(message_id).unwrap().keyboard,
        vec![vec![
            SentButton {
                text: "Approve".into(),
                callback_data: Some("y:call_1".into()),
                url: None,
                style: Some("primary".into()),
            },
            SentButton {
                text: "Deny".into(),
                callback_data: Some("n:call_1".into()),
                url: None,
                style: Some("danger".into()),
            },
        ]]
    );

    let callback_id = fake.push_callback(&alice(), message_id, "y:call_1");
    let delivery = running.next().await;
    let InboundEvent::Action(action) = delivery.event.clone() else {
        panic!("expected an action, got {:?}", delivery.event);
    };
    assert_eq!(
        action,
        Action {
            id: callback_id.clone(),
            conversation: Conversation::direct("111"),
            sender: Sender {
                id: "111".into(),
                name: Some("@alice".into()),
            },
            data: "y:call_1".into(),
            message: Some(MessageId(message_id.to_string())),
            reply: None,
        }
    );
    delivery.settle(Disposition::Accepted);
    running
        .adapter
        .answer_action(&action, "Approved")
        .await
        .unwrap();
    assert_eq!(
        fake.callback_answers(),
        vec![CallbackAnswer {
            callback_query_id: callback_id,
            text: Some("Approved".into()),
            show_alert: false,
        }]
    );

    // The answer replaces the question; the buttons go.
    outbound::show(
        adapter,
        &target,
        &mut sent,
        "Run `rm -rf build`? Approved.",
        &[],
    )
    .await
    .unwrap();
    let edited = fake.message(message_id).unwrap();
    assert_eq!(edited.edits, 1);
    assert!(edited.keyboard.is_empty());
    assert_eq!(edited.plain, "Run rm -rf build? Approved.");
    // Telegram refuses an edit that changes nothing; the adapter counts it
    // as done.
    running
        .adapter
        .edit(&target, &sent.parts[0], &edited.text, &[])
        .await
        .unwrap();
    assert_eq!(fake.message(message_id).unwrap().edits, 1);

    assert!(fake.wait(WAIT, |f| f.pending_updates().is_empty()).await);
    assert_eq!(fake.violations(), Vec::<String>::new());
    running.finish().await.unwrap();
}

#[tokio::test]
async fn rate_limits_are_waited_out_and_outages_retried() {
    let fake = FakeTelegram::start().await;
    fake.update(Incoming::private(&alice(), "register the chat"));
    let adapter = TelegramAdapter::new(&polling_config(&fake)).unwrap();
    let target = to(Conversation::direct("111"));

    fake.fail_next("sendMessage", Failure::RateLimited { retry_after: 1 });
    assert_eq!(
        adapter.send(&target, "one", &[]).await,
        Err(ChannelError::RateLimited {
            channel: "telegram".into(),
            retry_after: Some(Duration::from_secs(1)),
        })
    );
    fake.fail_next("sendMessage", Failure::RateLimited { retry_after: 1 });
    let started = Instant::now();
    outbound::send(&adapter, &target, "two", &[]).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "waited {:?}",
        started.elapsed()
    );

    fake.fail_next("sendMessage", Failure::Status(502));
    assert!(matches!(
        adapter.send(&target, "three", &[]).await,
        Err(ChannelError::Unavailable { .. })
    ));
    fake.fail_next("sendMessage", Failure::Status(502));
    outbound::send(&adapter, &target, "four", &[])
        .await
        .unwrap();

    fake.fail_next(
        "sendMessage",
        Failure::Error {
            code: 403,
            description: "Forbidden: bot was blocked by the user".into(),
        },
    );
    assert_eq!(
        outbound::send(&adapter, &target, "five", &[]).await,
        Err(ChannelError::Rejected {
            channel: "telegram".into(),
            detail: "Forbidden: bot was blocked by the user".into(),
        })
    );

    let texts: Vec<String> = fake.sent().into_iter().map(|m| m.plain).collect();
    assert_eq!(texts, vec!["two", "four"]);
    // one, two twice, three, four twice, five: nothing retried that
    // should not be.
    assert_eq!(fake.calls("sendMessage").len(), 7);
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_refused_request_is_rejected_and_the_fake_names_it() {
    let fake = FakeTelegram::start().await;
    let adapter = TelegramAdapter::new(&polling_config(&fake)).unwrap();
    assert_eq!(
        adapter
            .send(&to(Conversation::direct("999")), "anyone?", &[])
            .await,
        Err(ChannelError::Rejected {
            channel: "telegram".into(),
            detail: "Bad Request: chat not found".into(),
        })
    );
    assert_eq!(
        fake.violations(),
        vec!["POST /bot<token>/sendMessage: 400 Bad Request: chat not found".to_owned()]
    );
}

#[tokio::test]
async fn an_update_the_daemon_could_not_take_comes_again_with_the_same_id() {
    let fake = FakeTelegram::start().await;
    let mut running = start(&polling_config(&fake));
    let (update_id, id) = push(&fake, Incoming::private(&alice(), "remember this"));

    let first = running.next().await;
    let first_event = first.event.clone();
    first.settle(Disposition::Retry("the disk is full".into()));
    let second = running.next().await;
    assert_eq!(second.event, first_event);
    assert_eq!(message(&second).id, id);
    assert_eq!(fake.pending_updates(), vec![update_id]);
    second.settle(Disposition::Accepted);
    assert!(
        fake.wait(WAIT, |f| f.confirmed_offset() == update_id + 1)
            .await
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
    running.finish().await.unwrap();
}

#[tokio::test]
async fn webhook_deliveries_need_the_secret_and_are_answered_after_settling() {
    let fake = FakeTelegram::start().await;
    let running = start(&webhook_config(&fake));
    assert!(fake.wait(WAIT, |f| f.webhook().is_some()).await);
    let webhook = fake.webhook().unwrap();
    assert_eq!(
        webhook.url,
        "https://flynn.example.org/channels/telegram/webhook"
    );
    assert_eq!(webhook.secret_token.as_deref(), Some(SECRET));
    assert_eq!(
        webhook.allowed_updates,
        Some(vec!["message".to_owned(), "callback_query".to_owned()])
    );
    let Running {
        adapter,
        sink,
        mut rx,
        stop,
        task,
    } = running;

    let update = fake.update(Incoming::private(&alice(), "via webhook"));
    let id = format!(
        "{}:{}",
        update["message"]["chat"]["id"], update["message"]["message_id"]
    );
    let post = |secret: Option<&str>| {
        let request = webhook_request(fake.webhook_post(&update, secret));
        let adapter = Arc::clone(&adapter);
        let sink = sink.clone();
        tokio::spawn(async move { adapter.webhook(request, &sink).await })
    };
    let next = |rx: &mut mpsc::Receiver<Delivery>| {
        let received = rx.try_recv();
        received.ok()
    };

    // Forged or missing secret: refused, nothing delivered.
    for secret in [Some("not-the-secret"), None] {
        let answer = post(secret).await.unwrap();
        assert_eq!(answer.status, 401);
        assert!(next(&mut rx).is_none());
    }

    // The right secret: delivered, answered 200 once stored.
    let answer = post(Some(SECRET));
    let delivery = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message(&delivery).id, id);
    assert_eq!(message(&delivery).text, "via webhook");
    assert!(!answer.is_finished());
    delivery.settle(Disposition::Accepted);
    assert_eq!(answer.await.unwrap().status, 200);

    // Telegram posting it again (its 200 got lost): the same id.
    let answer = post(Some(SECRET));
    let delivery = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(message(&delivery).id, id);
    delivery.settle(Disposition::Duplicate);
    assert_eq!(answer.await.unwrap().status, 200);

    // Not stored: 503, so that Telegram posts it again.
    let answer = post(Some(SECRET));
    let delivery = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    delivery.settle(Disposition::Retry("shutting down".into()));
    assert_eq!(answer.await.unwrap().status, 503);

    // Not JSON: 400.
    let mut broken = webhook_request(fake.webhook_post(&update, Some(SECRET)));
    broken.body = bytes::Bytes::from_static(b"{\"update_id\": 1,");
    assert_eq!(adapter.webhook(broken, &sink).await.status, 400);
    assert!(next(&mut rx).is_none());

    // Other paths are not this channel's.
    let mut elsewhere = webhook_request(fake.webhook_post(&update, Some(SECRET)));
    elsewhere.path = "/other".into();
    assert_eq!(adapter.webhook(elsewhere, &sink).await.status, 404);

    assert_eq!(fake.calls("getUpdates").len(), 0);
    assert_eq!(fake.violations(), Vec::<String>::new());
    stop.cancel();
    tokio::time::timeout(WAIT, task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
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

const LIMIT: u64 = 20 * 1024 * 1024;

#[tokio::test]
async fn photos_and_documents_arrive_named_and_are_downloaded_on_request() {
    let fake = FakeTelegram::start().await;
    let mut running = start(&polling_config(&fake));

    let photo: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    fake.push(Incoming::private(&alice(), "what is this?").photo(photo.clone()));
    let delivery = running.next().await;
    let with_photo = message(&delivery);
    // Delivered before anything is fetched: the daemon decides first.
    assert_eq!(fetches(&fake), (0, 0));
    assert_eq!(with_photo.text, "what is this?");
    let [attachment] = with_photo.attachments.as_slice() else {
        panic!("one attachment: {:?}", with_photo.attachments);
    };
    assert_eq!(
        (
            attachment.kind,
            attachment.name.as_deref(),
            attachment.media_type.as_str(),
            attachment.size
        ),
        (
            AttachmentKind::Image,
            None,
            "image/jpeg",
            Some(photo.len() as u64)
        )
    );
    delivery.settle(Disposition::Accepted);
    let data = running.adapter.download(attachment, LIMIT).await.unwrap();
    assert_eq!(data.to_vec(), photo);
    assert_eq!(fetches(&fake), (1, 1));

    let pdf = b"%PDF-1.7\n% a small document\n".to_vec();
    fake.push(Incoming::private(&alice(), "").document(
        "report.pdf",
        "application/pdf",
        pdf.clone(),
    ));
    let delivery = running.next().await;
    let with_document = message(&delivery);
    assert_eq!(with_document.text, "");
    let [attachment] = with_document.attachments.as_slice() else {
        panic!("one attachment: {:?}", with_document.attachments);
    };
    assert_eq!(
        (
            attachment.kind,
            attachment.name.as_deref(),
            attachment.media_type.as_str()
        ),
        (AttachmentKind::File, Some("report.pdf"), "application/pdf")
    );
    delivery.settle(Disposition::Accepted);
    let data = running.adapter.download(attachment, LIMIT).await.unwrap();
    assert_eq!(data.to_vec(), pdf);

    // Over the Bot API's 20 MB by its declared size: refused without a
    // `getFile`.
    fake.push(
        Incoming::private(&alice(), "a big one")
            .document("huge.bin", "application/octet-stream", vec![1, 2, 3])
            .declared_size(25 * 1024 * 1024),
    );
    let delivery = running.next().await;
    let too_big = message(&delivery);
    assert_eq!(too_big.text, "a big one");
    delivery.settle(Disposition::Accepted);
    let refused = running
        .adapter
        .download(&too_big.attachments[0], LIMIT)
        .await
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "telegram refused the request: the file has 25.0 MB, over the 20 MB limit"
    );
    assert_eq!(fetches(&fake), (2, 2));

    assert!(fake.wait(WAIT, |f| f.pending_updates().is_empty()).await);
    assert_eq!(fake.violations(), Vec::<String>::new());
    running.finish().await.unwrap();
}

#[tokio::test]
async fn bots_and_service_messages_are_skipped_and_confirmed() {
    let fake = FakeTelegram::start().await;
    let mut running = start(&polling_config(&fake));
    let other_bot = TgUser::new(555, "Other").username("other_bot").bot();
    fake.push(Incoming::group(
        GROUP,
        "Team",
        &other_bot,
        "@flynn_bot beep",
    ));
    fake.push(Incoming::group(GROUP, "Team", &carol(), "").field(
        "new_chat_members",
        json!([{"id": 777, "is_bot": false, "first_name": "Dan"}]),
    ));
    let update = fake.update(Incoming::private(&alice(), "a real one"));
    let real_id = format!(
        "{}:{}",
        update["message"]["chat"]["id"], update["message"]["message_id"]
    );
    let real = fake.push_update(update);

    let delivery = running.next().await;
    assert_eq!(message(&delivery).id, real_id);
    delivery.settle(Disposition::Accepted);
    assert!(fake.wait(WAIT, |f| f.confirmed_offset() == real + 1).await);
    assert!(running.rx.try_recv().is_err());
    assert_eq!(fake.violations(), Vec::<String>::new());
    running.finish().await.unwrap();
}

#[tokio::test]
async fn a_webhook_left_set_is_deleted_before_polling() {
    let fake = FakeTelegram::start().await;
    fake.set_webhook("https://old.example.org/hook", None);
    let mut running = start(&polling_config(&fake));
    fake.push(Incoming::private(&alice(), "still there?"));
    let delivery = running.next().await;
    assert_eq!(message(&delivery).text, "still there?");
    delivery.settle(Disposition::Accepted);
    assert_eq!(fake.webhook(), None);
    let methods: Vec<String> = fake
        .requests()
        .iter()
        .take(3)
        .map(|r| r.path.rsplit('/').next().unwrap().to_owned())
        .collect();
    assert_eq!(methods, vec!["getMe", "deleteWebhook", "getUpdates"]);
    assert_eq!(fake.violations(), Vec::<String>::new());
    running.finish().await.unwrap();
}

#[tokio::test]
async fn stop_ends_a_long_poll_promptly() {
    let fake = FakeTelegram::start().await;
    let running = start(&polling_config(&fake));
    assert!(fake.wait_for_calls("getUpdates", 1, WAIT).await);
    let started = Instant::now();
    running.finish().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "stopping took {:?}",
        started.elapsed()
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn polling_resumes_after_bad_gateways_under_a_registry() {
    let fake = FakeTelegram::start().await;
    for _ in 0..3 {
        fake.fail_next("getUpdates", Failure::Status(502));
    }
    let (registry, mut rx) = Registry::new(Backoff {
        first: Duration::from_millis(50),
        max: Duration::from_millis(200),
        stable_after: Duration::from_secs(60),
        unauthorized: Duration::from_secs(300),
    });
    registry
        .start(Arc::new(
            TelegramAdapter::new(&polling_config(&fake)).unwrap(),
        ))
        .await;
    // Three failed polls end the connection; the registry connects again.
    assert!(fake.wait_for_calls("getMe", 2, WAIT).await);
    let (update_id, id) = push(&fake, Incoming::private(&alice(), "are you back?"));
    let delivery = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(delivery.channel, "telegram");
    assert_eq!(message(&delivery).id, id);
    delivery.settle(Disposition::Accepted);
    assert!(
        fake.wait(WAIT, |f| f.confirmed_offset() == update_id + 1)
            .await
    );

    let status = registry.status().pop().unwrap();
    assert_eq!(status.state, ChannelState::Connected);
    assert_eq!(
        status.detail.as_deref(),
        Some(format!("@{BOT_USERNAME}").as_str())
    );
    assert_eq!(status.restarts, 1);
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("Bad Gateway"),
        "{status:?}"
    );
    registry.shutdown().await;
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_wrong_token_is_refused_credentials() {
    let fake = FakeTelegram::start().await;
    let mut config = polling_config(&fake);
    config.bot_token = "42:not-the-right-token".into();
    let adapter = TelegramAdapter::new(&config).unwrap();
    let (sink, _rx) = Inbound::detached("telegram");
    let outcome = adapter.connect(sink, CancellationToken::new()).await;
    assert!(
        matches!(outcome, Err(ChannelError::Unauthorized { .. })),
        "{outcome:?}"
    );
    assert_eq!(
        fake.violations(),
        vec!["POST /bot42:not-the-right-token/getMe: 401 Unauthorized".to_owned()]
    );
}
