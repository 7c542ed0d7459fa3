#![cfg(feature = "whatsapp")]
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The WhatsApp adapter against the fake Cloud API, with real HTTP both
//! ways: the adapter calls the fake's Graph API, and the fake posts signed
//! notifications to the adapter's webhook served on a local port.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use flynn_channels::whatsapp::{BUTTONS_PROMPT, WhatsAppAdapter};
use flynn_channels::{
    Action, Attachment, AttachmentKind, Backoff, Button, ButtonStyle, ChannelAdapter, ChannelError,
    ChannelState, Conversation, Delivery, Disposition, FileKind, Inbound, InboundEvent,
    InboundMessage, MessageId, OutgoingFile, Registry, Sender, Target, WebhookRequest, outbound,
};
use flynn_protocol::config::WhatsAppConfig;
use flynn_testkit::whatsapp::{
    self as fake, Failure, FakeWhatsApp, HookAnswer, HookRequest, HookResponse, Notification,
    Route, Signing, WebhookEndpoint,
};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);
const ALICE: &str = "4915112345678";
const WINDOW_MESSAGE: &str = "outside WhatsApp's 24-hour window; the person must write first";

fn config(fake: &FakeWhatsApp, token: &str) -> WhatsAppConfig {
    serde_json::from_value(json!({
        "access_token": token,
        "phone_number_id": fake::PHONE_NUMBER_ID,
        "app_secret": fake::APP_SECRET,
        "verify_token": fake::VERIFY_TOKEN,
        "api_url": fake.base_url(),
        "api_version": fake::API_VERSION,
    }))
    .unwrap()
}

/// A gateway request as the adapter receives it: the part of the path
/// after `/channels/whatsapp`.
fn webhook_request(hook: HookRequest) -> WebhookRequest {
    let mut headers = http::HeaderMap::new();
    for (name, value) in &hook.headers {
        headers.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    WebhookRequest {
        method: hook.method.parse().unwrap(),
        path: hook
            .path
            .strip_prefix("/channels/whatsapp")
            .unwrap_or(&hook.path)
            .to_owned(),
        query: hook.query,
        headers,
        body: hook.body,
    }
}

fn hook_response(response: flynn_channels::WebhookResponse) -> HookResponse {
    HookResponse {
        status: response.status,
        content_type: response.content_type.to_owned(),
        body: response.body,
    }
}

struct Harness {
    fake: Arc<FakeWhatsApp>,
    adapter: Arc<WhatsAppAdapter>,
    deliveries: mpsc::Receiver<Delivery>,
    endpoint: WebhookEndpoint,
    /// Seconds the adapter's clock runs ahead of the real one.
    ahead: Arc<AtomicU64>,
}

impl Harness {
    async fn start() -> Harness {
        let fake = Arc::new(FakeWhatsApp::start().await);
        let ahead = Arc::new(AtomicU64::new(0));
        let clock = ahead.clone();
        let adapter = Arc::new(
            WhatsAppAdapter::new(&config(&fake, fake::ACCESS_TOKEN))
                .unwrap()
                .with_clock(move || {
                    SystemTime::now() + Duration::from_secs(clock.load(Ordering::SeqCst))
                }),
        );
        let (sink, deliveries) = Inbound::detached("whatsapp");
        let endpoint = WebhookEndpoint::serve({
            let adapter = adapter.clone();
            move |hook: HookRequest| {
                let adapter = adapter.clone();
                let sink = sink.clone();
                async move { hook_response(adapter.webhook(webhook_request(hook), &sink).await) }
            }
        })
        .await;
        Harness {
            fake,
            adapter,
            deliveries,
            endpoint,
            ahead,
        }
    }

    fn url(&self) -> String {
        format!("{}/channels/whatsapp/webhook", self.endpoint.base_url())
    }

    /// Posts `notification` signed with the app secret, in the background
    /// (its answer waits for the deliveries to be settled).
    fn post(&self, notification: &Notification) -> JoinHandle<HookAnswer> {
        let (fake, url, notification) = (self.fake.clone(), self.url(), notification.clone());
        tokio::spawn(async move { fake.post(&url, &notification, Signing::AppSecret).await })
    }

    async fn next(&mut self) -> Delivery {
        tokio::time::timeout(WAIT, self.deliveries.recv())
            .await
            .expect("no delivery within 10 s")
            .expect("the sink closed")
    }

    /// Posts `notification`, takes its one delivery and settles it
    /// `Accepted`; returns the event and the webhook's status.
    async fn deliver(&mut self, notification: &Notification) -> (InboundEvent, u16) {
        let post = self.post(notification);
        let delivery = self.next().await;
        let event = delivery.event.clone();
        delivery.settle(Disposition::Accepted);
        (event, answered(post).await.status)
    }

    fn no_delivery(&mut self) {
        assert!(
            self.deliveries.try_recv().is_err(),
            "something was delivered"
        );
    }
}

async fn answered(post: JoinHandle<HookAnswer>) -> HookAnswer {
    tokio::time::timeout(WAIT, post)
        .await
        .expect("the webhook did not answer within 10 s")
        .unwrap()
}

fn target(number: &str) -> Target {
    Target {
        conversation: Conversation::direct(number),
        reply: None,
    }
}

fn confirmation() -> Vec<Button> {
    vec![
        Button {
            label: "Approve".to_owned(),
            data: "y:call_1".to_owned(),
            style: ButtonStyle::Primary,
        },
        Button {
            label: "Deny".to_owned(),
            data: "n:call_1".to_owned(),
            style: ButtonStyle::Danger,
        },
    ]
}

fn message(event: InboundEvent) -> InboundMessage {
    match event {
        InboundEvent::Message(message) => message,
        other => panic!("expected a message, got {other:?}"),
    }
}

fn no_violations(fake: &FakeWhatsApp) {
    assert_eq!(fake.violations(), Vec::<String>::new());
}

fn message_posts(fake: &FakeWhatsApp) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.path.ends_with("/messages"))
        .count()
}

#[tokio::test]
async fn connect_checks_the_number_and_the_registry_routes_its_webhook() {
    let fake = Arc::new(FakeWhatsApp::start().await);
    let adapter = Arc::new(WhatsAppAdapter::new(&config(&fake, fake::ACCESS_TOKEN)).unwrap());
    let (registry, mut deliveries) = Registry::new(Backoff::default());
    registry.start(adapter).await;
    let connected = tokio::time::timeout(WAIT, async {
        loop {
            let status = registry.status().remove(0);
            if status.state == ChannelState::Connected {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("not connected within 10 s");
    assert_eq!(
        connected.detail.as_deref(),
        Some("+15550783881 (Flynn Test)")
    );
    let check = &fake.requests()[0];
    assert_eq!(
        (
            check.method.as_str(),
            check.path.as_str(),
            check.query.as_str()
        ),
        (
            "GET",
            "/v23.0/106540352242922",
            "fields=display_phone_number%2Cverified_name"
        )
    );
    assert_eq!(
        check.header("authorization"),
        Some("Bearer EAAFakeWhatsAppAccessToken")
    );

    // The gateway hands webhook requests to the registry by name.
    let endpoint = WebhookEndpoint::serve({
        let registry = registry.clone();
        move |hook: HookRequest| {
            let registry = registry.clone();
            async move {
                hook_response(
                    registry
                        .webhook("whatsapp", webhook_request(hook))
                        .await
                        .unwrap(),
                )
            }
        }
    })
    .await;
    let url = format!("{}/channels/whatsapp/webhook", endpoint.base_url());
    let note = fake.text_message(ALICE, "Alice", "hello");
    let post = tokio::spawn({
        let fake = fake.clone();
        async move { fake.post(&url, &note, Signing::AppSecret).await }
    });
    let delivery = tokio::time::timeout(WAIT, deliveries.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(delivery.channel, "whatsapp");
    assert_eq!(message(delivery.event.clone()).text, "hello");
    delivery.settle(Disposition::Accepted);
    assert_eq!(answered(post).await.status, 200);
    assert_eq!(registry.status()[0].received, 1);
    registry.shutdown().await;
    assert_eq!(registry.status(), vec![]);
    no_violations(&fake);
}

#[tokio::test]
async fn a_refused_token_is_unauthorized() {
    let fake = FakeWhatsApp::start().await;
    let adapter = WhatsAppAdapter::new(&config(&fake, "EAAexpired")).unwrap();
    let (sink, _deliveries) = Inbound::detached("whatsapp");
    let error = adapter
        .connect(sink, CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ChannelError::Unauthorized {
            channel: "whatsapp".to_owned(),
            detail: "Invalid OAuth access token - Cannot parse access token (code 190, fbtrace_id AFake00000001)".to_owned(),
        }
    );
    // A wrong token is the caller's setting, not a protocol violation.
    no_violations(&fake);
}

#[tokio::test]
async fn a_direct_message_round_trip() {
    let mut h = Harness::start().await;
    let note = h.fake.text_message(ALICE, "Alice", "What is on today?");
    let post = h.post(&note);
    let delivery = h.next().await;
    let expected = InboundMessage {
        id: note.wamid.clone().unwrap(),
        conversation: Conversation::direct(ALICE),
        sender: Sender {
            id: ALICE.to_owned(),
            name: Some("Alice".to_owned()),
        },
        mentioned: true,
        text: "What is on today?".to_owned(),
        attachments: vec![],
        reply: None,
    };
    let inbound = message(delivery.event.clone());
    assert_eq!(inbound, expected);
    assert_eq!(inbound.conversation.peer(), ALICE);
    // Not acknowledged before the daemon settles it: the webhook has not
    // answered Meta yet.
    assert!(!post.is_finished());
    delivery.settle(Disposition::Accepted);
    let answer = answered(post).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "ok"));

    h.adapter.mark_read(&inbound).await.unwrap();
    assert_eq!(h.fake.read_receipts(), vec![inbound.id.clone()]);

    let sent = outbound::send(
        h.adapter.as_ref(),
        &target(ALICE),
        "**Busy**: _three_ meetings, ~~no~~ `lunch`",
        &[],
    )
    .await
    .unwrap();
    let messages = h.fake.sent();
    assert_eq!(sent.parts, vec![MessageId(messages[0].id.clone())]);
    assert_eq!(
        messages[0].body,
        json!({
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": ALICE,
            "type": "text",
            "text": {"body": "*Busy*: _three_ meetings, ~no~ `lunch`", "preview_url": false},
        })
    );
    let request = h.fake.requests().pop().unwrap();
    assert_eq!(
        request.header("authorization"),
        Some("Bearer EAAFakeWhatsAppAccessToken")
    );
    no_violations(&h.fake);
}

#[tokio::test]
async fn every_chat_is_direct_and_mentions_the_bot() {
    // The Cloud API delivers one-to-one chats only: there are no groups to
    // gate on mentions, so every message is direct and counts as
    // addressed to the bot, each person in a session of their own.
    let mut h = Harness::start().await;
    let bob = "14155550100";
    let from_alice = h.fake.text_message(ALICE, "Alice", "hi");
    let from_bob = h.fake.text_message(bob, "Bob", "hey @flynn");
    let (alice, _) = h.deliver(&from_alice).await;
    let (bob_said, _) = h.deliver(&from_bob).await;
    let (alice, bob_said) = (message(alice), message(bob_said));
    assert_eq!(
        (
            alice.conversation.kind,
            alice.mentioned,
            alice.conversation.peer()
        ),
        (flynn_channels::ChatKind::Direct, true, ALICE.to_owned())
    );
    assert_eq!(
        (
            bob_said.conversation.kind,
            bob_said.mentioned,
            bob_said.conversation.peer(),
            bob_said.text.as_str()
        ),
        (
            flynn_channels::ChatKind::Direct,
            true,
            bob.to_owned(),
            "hey @flynn"
        )
    );
    no_violations(&h.fake);
}

#[tokio::test]
async fn a_long_answer_is_cut_into_messages_whatsapp_accepts() {
    let h = Harness::start().await;
    h.fake.customer_wrote(ALICE);
    let prose = "Flynn keeps **every** answer readable, even a long one. ".repeat(80);
    let code: String = (0..120)
        .map(|i| format!("let value_{i} = compute({i});\n"))
        .collect();
    let markdown = format!("{prose}\n\n```rust\n{code}```\n\n{prose}");
    assert!(markdown.chars().count() > 10_000);
    let sent = outbound::send(h.adapter.as_ref(), &target(ALICE), &markdown, &[])
        .await
        .unwrap();
    let messages = h.fake.sent();
    assert!(messages.len() >= 3, "{} messages", messages.len());
    assert_eq!(sent.parts.len(), messages.len());
    for message in &messages {
        let text = message.text();
        assert!(
            text.chars().count() <= 4096,
            "{} chars",
            text.chars().count()
        );
        assert_eq!(text.matches("```").count() % 2, 0, "unbalanced: {text}");
        assert!(!text.contains("**"), "markdown left: {text}");
    }
    let lines: Vec<String> = messages
        .iter()
        .flat_map(|m| {
            m.text()
                .replace("```", "\n")
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|l| l.starts_with("let value_"))
        .collect();
    assert_eq!(lines, code.lines().map(str::to_owned).collect::<Vec<_>>());
    no_violations(&h.fake);
}

#[tokio::test]
async fn a_confirmation_round_trip() {
    let mut h = Harness::start().await;
    h.fake.customer_wrote(ALICE);
    let sent = outbound::send(
        h.adapter.as_ref(),
        &target(ALICE),
        "Run `rm -rf build/`?",
        &confirmation(),
    )
    .await
    .unwrap();
    let question = h.fake.sent().remove(0);
    assert_eq!(sent.parts, vec![MessageId(question.id.clone())]);
    assert_eq!(
        question.body["interactive"],
        json!({
            "type": "button",
            "body": {"text": "Run `rm -rf build/`?"},
            "action": {"buttons": [
                {"type": "reply", "reply": {"id": "y:call_1", "title": "Approve"}},
                {"type": "reply", "reply": {"id": "n:call_1", "title": "Deny"}},
            ]},
        })
    );

    let press = h
        .fake
        .button_reply(ALICE, "Alice", &question.id, "y:call_1", "Approve");
    let (event, status) = h.deliver(&press).await;
    assert_eq!(status, 200);
    let action = Action {
        id: press.wamid.clone().unwrap(),
        conversation: Conversation::direct(ALICE),
        sender: Sender {
            id: ALICE.to_owned(),
            name: Some("Alice".to_owned()),
        },
        data: "y:call_1".to_owned(),
        message: Some(MessageId(question.id.clone())),
        reply: None,
    };
    assert_eq!(event, InboundEvent::Action(action.clone()));
    // WhatsApp has no callback answer: the press is marked read.
    h.adapter.answer_action(&action, "Approved").await.unwrap();
    assert_eq!(h.fake.read_receipts(), vec![action.id]);
    assert_eq!(h.fake.sent().len(), 1, "the note is not sent as a message");
    no_violations(&h.fake);
}

#[tokio::test]
async fn a_confirmation_longer_than_an_interactive_body_is_text_then_buttons() {
    let h = Harness::start().await;
    h.fake.customer_wrote(ALICE);
    let long = format!("Plan:\n{}\nApprove?", "- step\n".repeat(200));
    let formatted = h.adapter.format(&long);
    assert!(formatted.chars().count() > 1024);
    // The buttons' message fails once after the text went out: the retry
    // must not send the text again.
    h.fake.fail_later(Route::Messages, 1, Failure::service(503));
    let sent = outbound::send(h.adapter.as_ref(), &target(ALICE), &long, &confirmation())
        .await
        .unwrap();
    let messages = h.fake.sent();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].body["type"], "text");
    assert_eq!(messages[0].text(), formatted);
    assert_eq!(messages[1].body["type"], "interactive");
    assert_eq!(messages[1].text(), BUTTONS_PROMPT);
    assert_eq!(
        messages[1].buttons(),
        vec![
            ("y:call_1".to_owned(), "Approve".to_owned()),
            ("n:call_1".to_owned(), "Deny".to_owned())
        ]
    );
    // The answer is the message that carries the buttons.
    assert_eq!(sent.parts, vec![MessageId(messages[1].id.clone())]);
    assert_eq!(message_posts(&h.fake), 3);
    no_violations(&h.fake);
}

#[tokio::test]
async fn button_titles_are_cut_and_a_fourth_button_is_refused() {
    let h = Harness::start().await;
    h.fake.customer_wrote(ALICE);
    let mut buttons = confirmation();
    buttons[0].label = "Approve for this whole session".to_owned();
    h.adapter
        .send(&target(ALICE), "Run it?", &buttons)
        .await
        .unwrap();
    assert_eq!(h.fake.sent()[0].buttons()[0].1, "Approve for this wh…");
    let four: Vec<Button> = (0..4)
        .map(|i| Button {
            label: format!("Option {i}"),
            data: format!("o:{i}"),
            style: ButtonStyle::Primary,
        })
        .collect();
    let error = h
        .adapter
        .send(&target(ALICE), "Pick", &four)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        ChannelError::Rejected {
            channel: "whatsapp".to_owned(),
            detail: "WhatsApp messages carry at most 3 reply buttons, not 4".to_owned(),
        }
    );
    assert_eq!(message_posts(&h.fake), 1);
    no_violations(&h.fake);
}

#[tokio::test]
async fn rate_limits_and_outages_are_retried() {
    let h = Harness::start().await;
    h.fake.customer_wrote(ALICE);

    // Meta sends no Retry-After: the shared backoff (0.5 s first) applies.
    h.fake.fail_next(Route::Messages, Failure::throughput());
    let started = Instant::now();
    outbound::send(h.adapter.as_ref(), &target(ALICE), "one", &[])
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(message_posts(&h.fake), 2);

    // A proxy's 502 page, then Meta's own 503: retried after 0.5 and 1 s.
    h.fake.fail_next(
        Route::Messages,
        Failure::raw(502, "<html>Bad Gateway</html>"),
    );
    h.fake.fail_next(Route::Messages, Failure::service(503));
    let started = Instant::now();
    outbound::send(h.adapter.as_ref(), &target(ALICE), "two", &[])
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(message_posts(&h.fake), 5);
    let texts: Vec<String> = h.fake.sent().iter().map(|m| m.text().to_owned()).collect();
    assert_eq!(texts, vec!["one", "two"]);

    // How each arrives at the caller.
    h.fake.fail_next(Route::Messages, Failure::too_many_calls());
    assert_eq!(
        h.adapter
            .send(&target(ALICE), "three", &[])
            .await
            .unwrap_err(),
        ChannelError::RateLimited {
            channel: "whatsapp".to_owned(),
            retry_after: None
        }
    );
    h.fake.fail_next(
        Route::Messages,
        Failure::graph(500, 131000, "Something went wrong"),
    );
    assert!(matches!(
        h.adapter
            .send(&target(ALICE), "three", &[])
            .await
            .unwrap_err(),
        ChannelError::Unavailable { .. }
    ));
    no_violations(&h.fake);
}

#[tokio::test]
async fn a_retry_leads_to_redelivery_with_the_same_id() {
    let mut h = Harness::start().await;
    let note = h.fake.text_message(ALICE, "Alice", "remember this");
    let post = h.post(&note);
    let first = h.next().await;
    let first_id = message(first.event.clone()).id;
    first.settle(Disposition::Retry("the store is busy".to_owned()));
    // 503: Meta keeps the notification and posts it again.
    assert_eq!(answered(post).await.status, 503);

    let again = h.post(&note);
    let second = h.next().await;
    assert_eq!(message(second.event.clone()).id, first_id);
    second.settle(Disposition::Accepted);
    assert_eq!(answered(again).await.status, 200);
    no_violations(&h.fake);
}

#[tokio::test]
async fn a_batch_is_acknowledged_only_when_every_message_is() {
    let mut h = Harness::start().await;
    let first = h.fake.text_message(ALICE, "Alice", "one");
    let second = h.fake.text_message(ALICE, "Alice", "two");
    let post = h.post(&first.clone().and(second.clone()));
    let a = h.next().await;
    assert_eq!(message(a.event.clone()).id, first.wamid.clone().unwrap());
    a.settle(Disposition::Accepted);
    let b = h.next().await;
    assert_eq!(message(b.event.clone()).id, second.wamid.clone().unwrap());
    b.settle(Disposition::Retry("shutting down".to_owned()));
    assert_eq!(answered(post).await.status, 503);
    no_violations(&h.fake);
}

#[tokio::test]
async fn a_duplicate_delivery_carries_the_same_id() {
    let mut h = Harness::start().await;
    let note = h.fake.text_message(ALICE, "Alice", "once");
    let post = h.post(&note);
    let first = h.next().await;
    let id = message(first.event.clone()).id;
    first.settle(Disposition::Accepted);
    assert_eq!(answered(post).await.status, 200);
    // Meta sometimes posts the same notification twice.
    let post = h.post(&note);
    let second = h.next().await;
    assert_eq!(message(second.event.clone()).id, id);
    second.settle(Disposition::Duplicate);
    assert_eq!(answered(post).await.status, 200);
    no_violations(&h.fake);
}

#[tokio::test]
async fn the_verification_handshake_echoes_the_challenge_for_the_right_token() {
    let h = Harness::start().await;
    let answer = h
        .fake
        .verify(&h.url(), fake::VERIFY_TOKEN, "1158201444")
        .await;
    assert_eq!(
        answer,
        HookAnswer {
            status: 200,
            content_type: Some("text/plain; charset=utf-8".to_owned()),
            body: "1158201444".to_owned(),
        }
    );
    let wrong = h.fake.verify(&h.url(), "guessed-token", "1158201444").await;
    assert_eq!(wrong.status, 403);
    assert!(!wrong.body.contains("1158201444"));
}

#[tokio::test]
async fn unsigned_forged_and_malformed_notifications_deliver_nothing() {
    let mut h = Harness::start().await;
    let note = h.fake.text_message(ALICE, "Alice", "trust me");
    for signing in [
        Signing::Forged,
        Signing::Missing,
        Signing::Secret(fake::VERIFY_TOKEN.to_owned()),
    ] {
        let answer = h.fake.post(&h.url(), &note, signing.clone()).await;
        assert_eq!(answer.status, 401, "{signing:?}");
    }
    let answer = h.fake.post_raw(&h.url(), b"{\"object\": ").await;
    assert_eq!(answer.status, 400);
    // Each was answered before anything could reach the daemon.
    h.no_delivery();
    no_violations(&h.fake);
}

#[tokio::test]
async fn status_updates_and_unsupported_types_deliver_nothing() {
    let mut h = Harness::start().await;
    h.fake.customer_wrote(ALICE);
    let id = h.adapter.send(&target(ALICE), "hello", &[]).await.unwrap();
    for status in ["sent", "delivered", "read", "failed"] {
        let answer = h
            .fake
            .post(
                &h.url(),
                &h.fake.status_update(&id.0, ALICE, status),
                Signing::AppSecret,
            )
            .await;
        assert_eq!(answer.status, 200, "{status}");
    }
    let mut sticker = h.fake.text_message(ALICE, "Alice", "");
    let message = &mut sticker.body["entry"][0]["changes"][0]["value"]["messages"][0];
    message["type"] = json!("sticker");
    message["sticker"] = json!({"id": "123", "mime_type": "image/webp", "animated": false});
    let answer = h.fake.post(&h.url(), &sticker, Signing::AppSecret).await;
    assert_eq!(answer.status, 200);
    h.no_delivery();
    no_violations(&h.fake);
}

fn media_downloads(fake: &FakeWhatsApp) -> Vec<fake::GraphRequest> {
    fake.requests()
        .into_iter()
        .filter(|r| r.path == "/whatsapp_business/attachments/")
        .collect()
}

const LIMIT: u64 = 20 * 1024 * 1024;

#[tokio::test]
async fn images_and_documents_arrive_named_and_are_downloaded_on_request() {
    let mut h = Harness::start().await;
    let photo = vec![0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3];
    let pdf = b"%PDF-1.7 fake".to_vec();
    let photo_id = h.fake.add_media("image/jpeg", photo.clone());
    let pdf_id = h.fake.add_media("application/pdf", pdf.clone());
    let image = h
        .fake
        .image_message(ALICE, "Alice", &photo_id, Some("the whiteboard"));
    let document = h
        .fake
        .document_message(ALICE, "Alice", &pdf_id, "report.pdf", None);
    // Both in one notification, as Meta batches them.
    let post = h.post(&image.clone().and(document.clone()));
    let mut got = Vec::new();
    for _ in 0..2 {
        let delivery = h.next().await;
        got.push(message(delivery.event.clone()));
        delivery.settle(Disposition::Accepted);
    }
    assert_eq!(answered(post).await.status, 200);
    // Delivered before anything is fetched: the daemon decides first.
    assert_eq!(media_downloads(&h.fake).len(), 0);
    assert_eq!(got[0].id, image.wamid.unwrap());
    assert_eq!(got[0].text, "the whiteboard");
    assert_eq!(
        got[0].attachments,
        vec![Attachment {
            kind: AttachmentKind::Image,
            name: None,
            media_type: "image/jpeg".to_owned(),
            size: None,
            source: photo_id.clone(),
        }]
    );
    assert_eq!(got[1].id, document.wamid.unwrap());
    assert_eq!(got[1].text, "");
    assert_eq!(
        got[1].attachments,
        vec![Attachment {
            kind: AttachmentKind::File,
            name: Some("report.pdf".to_owned()),
            media_type: "application/pdf".to_owned(),
            size: None,
            source: pdf_id.clone(),
        }]
    );
    let first = h
        .adapter
        .download(&got[0].attachments[0], LIMIT)
        .await
        .unwrap();
    let second = h
        .adapter
        .download(&got[1].attachments[0], LIMIT)
        .await
        .unwrap();
    assert_eq!((first.to_vec(), second.to_vec()), (photo, pdf));
    let downloads = media_downloads(&h.fake);
    assert_eq!(downloads.len(), 2);
    assert!(
        downloads
            .iter()
            .all(|r| r.header("authorization") == Some("Bearer EAAFakeWhatsAppAccessToken"))
    );
    no_violations(&h.fake);
}

#[tokio::test]
async fn a_failed_download_is_transient_and_a_huge_file_is_refused() {
    let mut h = Harness::start().await;
    let id = h.fake.add_media("image/png", vec![1, 2, 3]);
    let image = h.fake.image_message(ALICE, "Alice", &id, None);
    let (event, status) = h.deliver(&image).await;
    assert_eq!(status, 200);
    let attachment = message(event).attachments.remove(0);
    // A passing outage: an error worth trying again.
    h.fake.fail_next(Route::Download, Failure::service(503));
    let error = h.adapter.download(&attachment, LIMIT).await.unwrap_err();
    assert!(error.is_transient(), "{error}");
    assert_eq!(
        h.adapter
            .download(&attachment, LIMIT)
            .await
            .unwrap()
            .to_vec(),
        vec![1, 2, 3]
    );

    // Over 20 MB: refused once the Graph API names the size, before the
    // bytes are fetched.
    let big = h.fake.add_media("video/mp4", vec![0u8; 21 * 1024 * 1024]);
    let document = h
        .fake
        .document_message(ALICE, "Alice", &big, "film.mp4", Some("watch"));
    let (event, _) = h.deliver(&document).await;
    let inbound = message(event);
    assert_eq!(inbound.text, "watch");
    let before = media_downloads(&h.fake).len();
    let refused = h
        .adapter
        .download(&inbound.attachments[0], LIMIT)
        .await
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "whatsapp refused the request: the file has 21.0 MB, over the 20 MB limit"
    );
    assert_eq!(media_downloads(&h.fake).len(), before);
    no_violations(&h.fake);
}

/// The bearer token goes with a media download only to Meta's media
/// hosts or the configured Graph API host, not to whatever URL the media
/// object names.
#[tokio::test]
async fn a_media_url_on_another_host_gets_no_token() {
    let mut h = Harness::start().await;
    let elsewhere = FakeWhatsApp::start().await;
    h.fake.serve_media_from(&elsewhere.base_url());
    let id = h.fake.add_media("image/png", vec![1, 2, 3]);
    let image = h.fake.image_message(ALICE, "Alice", &id, Some("look"));
    let (event, status) = h.deliver(&image).await;
    assert_eq!(status, 200);
    let inbound = message(event);
    let refused = h
        .adapter
        .download(&inbound.attachments[0], LIMIT)
        .await
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!(
            "whatsapp refused the request: the media URL is on 127.0.0.1:{}, not on Meta's servers; not sending the access token there",
            elsewhere.addr().port()
        )
    );
    assert_eq!(elsewhere.requests(), vec![]);
    no_violations(&h.fake);
}

#[tokio::test]
async fn answers_stop_twenty_four_hours_after_the_last_message() {
    let mut h = Harness::start().await;
    let never_seen = target("447700900123");
    assert_eq!(h.adapter.can_send(&never_seen), Ok(()));

    let (event, _) = h.deliver(&h.fake.text_message(ALICE, "Alice", "hi")).await;
    let inbound = message(event);
    assert_eq!(h.adapter.can_send(&target(ALICE)), Ok(()));
    h.ahead.store(23 * 3600, Ordering::SeqCst);
    assert_eq!(h.adapter.can_send(&target(ALICE)), Ok(()));

    h.ahead.store(25 * 3600, Ordering::SeqCst);
    let refused = ChannelError::Rejected {
        channel: "whatsapp".to_owned(),
        detail: WINDOW_MESSAGE.to_owned(),
    };
    assert_eq!(h.adapter.can_send(&target(ALICE)), Err(refused.clone()));
    let before = message_posts(&h.fake);
    assert_eq!(
        h.adapter.send(&target(ALICE), "late", &[]).await,
        Err(refused)
    );
    assert_eq!(
        message_posts(&h.fake),
        before,
        "refused without calling Meta"
    );
    // Writing again opens a new window.
    h.fake.advance_clock(Duration::from_secs(25 * 3600));
    let (again, _) = h
        .deliver(&h.fake.text_message(ALICE, "Alice", "back"))
        .await;
    assert_ne!(message(again).id, inbound.id);
    assert_eq!(h.adapter.can_send(&target(ALICE)), Ok(()));
    no_violations(&h.fake);
}

#[tokio::test]
async fn the_apis_re_engagement_error_reads_the_same() {
    let h = Harness::start().await;
    // Alice wrote before the adapter started, more than a day ago: only
    // Meta knows.
    h.fake.customer_wrote(ALICE);
    h.fake.advance_clock(Duration::from_secs(25 * 3600));
    assert_eq!(h.adapter.can_send(&target(ALICE)), Ok(()));
    let error = h
        .adapter
        .send(&target(ALICE), "hello?", &[])
        .await
        .unwrap_err();
    let ChannelError::Rejected { detail, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(detail.starts_with(WINDOW_MESSAGE), "{detail}");
    assert!(detail.contains("code 131047"), "{detail}");
    // The fake lists it: the real API would have refused it too.
    let violations = h.fake.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].contains("has not written within 24 hours"));
}

// ------------------------------------------------------------ files out

fn outgoing(kind: FileKind, name: &str, media_type: &str, data: &[u8]) -> OutgoingFile {
    OutgoingFile {
        kind,
        name: name.to_owned(),
        media_type: media_type.to_owned(),
        data: Bytes::copy_from_slice(data),
        caption: None,
    }
}

const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";

/// The uploads as `(type, file name, bytes)`.
fn uploads(fake: &FakeWhatsApp) -> Vec<(String, Option<String>, Vec<u8>)> {
    fake.uploaded()
        .into_iter()
        .map(|u| (u.mime_type, u.file_name, u.data.to_vec()))
        .collect()
}

#[tokio::test]
async fn a_png_is_uploaded_and_sent_as_an_image_with_its_caption() {
    let h = Harness::start().await;
    h.fake.customer_wrote(ALICE);
    let mut chart = outgoing(FileKind::Image, "charts/chart.png", "image/png", PNG);
    chart.caption = Some("Sales by month".to_owned());

    let id = h.adapter.send_file(&target(ALICE), &chart).await.unwrap();

    assert_eq!(
        uploads(&h.fake),
        vec![(
            "image/png".to_owned(),
            Some("chart.png".to_owned()),
            PNG.to_vec()
        )]
    );
    let media = h.fake.uploaded()[0].id.clone();
    let sent = h.fake.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(id, MessageId(sent[0].id.clone()));
    assert_eq!(
        sent[0].body,
        json!({
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": ALICE,
            "type": "image",
            "image": {"id": media, "caption": "Sales by month"},
        })
    );
    // The upload as Meta documents it.
    let upload = h
        .fake
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/media"))
        .unwrap();
    assert_eq!(
        upload.path,
        format!("/{}/{}/media", fake::API_VERSION, fake::PHONE_NUMBER_ID)
    );
    assert_eq!(
        upload.body,
        json!({
            "messaging_product": "whatsapp",
            "type": "image/png",
            "file": {"filename": "chart.png", "content_type": "image/png", "size": PNG.len()},
        })
    );
    no_violations(&h.fake);
}

#[tokio::test]
async fn documents_pictures_whatsapp_does_not_show_and_voice_notes_go_as_meta_documents_them() {
    let h = Harness::start().await;
    h.fake.customer_wrote(ALICE);
    let mut report = outgoing(
        FileKind::Document,
        "Q3 report.pdf",
        "application/pdf",
        b"%PDF-1.7\n",
    );
    report.caption = Some("The report".to_owned());
    let mut sticker = outgoing(
        FileKind::Image,
        "cat.webp",
        "image/webp",
        b"RIFF\0\0\0\0WEBPVP8 ",
    );
    sticker.caption = Some("A cat".to_owned());
    let mut big = vec![0u8; 5 * 1024 * 1024 + 1];
    big[..PNG.len()].copy_from_slice(PNG);
    let large = outgoing(FileKind::Image, "poster.png", "image/png", &big);
    let voice = outgoing(
        FileKind::Voice,
        "answer.ogg",
        "audio/ogg; codecs=opus",
        b"OggS\0\x02opus",
    );
    let mut song = outgoing(FileKind::Audio, "song.mp3", "audio/mpeg", b"ID3\x04\0");
    song.caption = Some("Listen".to_owned());
    for file in [&report, &sticker, &large, &voice, &song] {
        h.adapter.send_file(&target(ALICE), file).await.unwrap();
    }

    let media: Vec<String> = h.fake.uploaded().into_iter().map(|u| u.id).collect();
    let kinds: Vec<String> = h.fake.uploaded().into_iter().map(|u| u.mime_type).collect();
    assert_eq!(
        kinds,
        vec![
            "application/pdf",
            "image/webp",
            "image/png",
            "audio/ogg",
            "audio/mpeg"
        ]
    );
    let sent: Vec<(String, serde_json::Value)> = h
        .fake
        .sent()
        .iter()
        .map(|m| (m.kind().to_owned(), m.media().clone()))
        .collect();
    assert_eq!(
        sent,
        vec![
            (
                "document".to_owned(),
                json!({"id": media[0], "filename": "Q3 report.pdf", "caption": "The report"})
            ),
            (
                "document".to_owned(),
                json!({"id": media[1], "filename": "cat.webp", "caption": "A cat"})
            ),
            (
                "document".to_owned(),
                json!({"id": media[2], "filename": "poster.png"})
            ),
            ("audio".to_owned(), json!({"id": media[3], "voice": true})),
            ("audio".to_owned(), json!({"id": media[4]})),
            // Audio takes no caption: it follows as text.
            ("text".to_owned(), serde_json::Value::Null),
        ]
    );
    assert_eq!(h.fake.sent()[5].text(), "Listen");
    no_violations(&h.fake);
}

#[tokio::test]
async fn files_whatsapp_cannot_take_are_refused_before_anything_is_sent() {
    let mut h = Harness::start().await;
    h.fake.customer_wrote(ALICE);
    assert_eq!(h.adapter.upload_limit(FileKind::Image), 100 * 1024 * 1024);
    assert_eq!(
        h.adapter.upload_limit(FileKind::Document),
        100 * 1024 * 1024
    );
    assert_eq!(h.adapter.upload_limit(FileKind::Audio), 16 * 1024 * 1024);
    assert_eq!(h.adapter.upload_limit(FileKind::Voice), 16 * 1024 * 1024);

    let long = vec![0u8; 16 * 1024 * 1024 + 1];
    assert_eq!(
        h.adapter
            .send_file(
                &target(ALICE),
                &outgoing(FileKind::Voice, "long.ogg", "audio/ogg", &long)
            )
            .await,
        Err(ChannelError::Rejected {
            channel: "whatsapp".into(),
            detail: "the file has 16.0 MB, over the 16 MB limit".into(),
        })
    );
    let error = h
        .adapter
        .send_file(
            &target(ALICE),
            &outgoing(FileKind::Image, "dance.gif", "image/gif", b"GIF89a"),
        )
        .await
        .unwrap_err();
    let ChannelError::Rejected { detail, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(
        detail.starts_with("WhatsApp does not take image/gif files ('dance.gif'): it takes"),
        "{detail}"
    );
    // Outside the 24-hour window, as for text.
    let (event, _) = h.deliver(&h.fake.text_message(ALICE, "Alice", "hi")).await;
    let _ = message(event);
    h.ahead.store(25 * 3600, Ordering::SeqCst);
    assert_eq!(
        h.adapter
            .send_file(
                &target(ALICE),
                &outgoing(FileKind::Image, "chart.png", "image/png", PNG)
            )
            .await,
        Err(ChannelError::Rejected {
            channel: "whatsapp".into(),
            detail: WINDOW_MESSAGE.into(),
        })
    );
    assert!(h.fake.uploaded().is_empty());
    assert_eq!(message_posts(&h.fake), 0);
    no_violations(&h.fake);
}

#[tokio::test]
async fn a_rate_limited_upload_and_send_are_retried() {
    let h = Harness::start().await;
    h.fake.customer_wrote(ALICE);
    h.fake.fail_next(Route::Upload, Failure::too_many_calls());
    h.fake.fail_next(Route::Messages, Failure::throughput());
    h.adapter
        .send_file(
            &target(ALICE),
            &outgoing(FileKind::Image, "chart.png", "image/png", PNG),
        )
        .await
        .unwrap();
    let uploads = h
        .fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/media"))
        .count();
    assert_eq!((uploads, message_posts(&h.fake)), (2, 2));
    // One file uploaded, one message sent.
    assert_eq!(h.fake.uploaded().len(), 1);
    assert_eq!(h.fake.sent().len(), 1);
    assert_eq!(h.fake.sent()[0].kind(), "image");
    no_violations(&h.fake);
}

#[tokio::test]
async fn the_fake_refuses_media_meta_refuses() {
    let h = Harness::start().await;
    h.fake.customer_wrote(ALICE);
    let http = reqwest::Client::new();
    let base = format!(
        "{}/{}/{}",
        h.fake.base_url(),
        fake::API_VERSION,
        fake::PHONE_NUMBER_ID
    );
    let upload = |media_type: &'static str, data: &'static [u8]| {
        let form = reqwest::multipart::Form::new()
            .text("messaging_product", "whatsapp")
            .text("type", media_type)
            .part(
                "file",
                reqwest::multipart::Part::bytes(data)
                    .file_name("f")
                    .mime_str(media_type)
                    .unwrap(),
            );
        http.post(format!("{base}/media"))
            .bearer_auth(fake::ACCESS_TOKEN)
            .multipart(form)
            .send()
    };
    let code = |response: reqwest::Response| async move {
        let body: serde_json::Value = response.json().await.unwrap();
        body["error"]["code"].as_i64()
    };
    // A type Meta does not list.
    assert_eq!(
        code(upload("image/gif", b"GIF89a").await.unwrap()).await,
        Some(100)
    );
    // A WebP uploads, but is no `image` message; an unknown id is refused.
    let webp: serde_json::Value = upload("image/webp", b"RIFF")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let webp = webp["id"].as_str().unwrap().to_owned();
    let send = |kind: &str, object: serde_json::Value| {
        http.post(format!("{base}/messages"))
            .bearer_auth(fake::ACCESS_TOKEN)
            .json(
                &json!({"messaging_product": "whatsapp", "to": ALICE, "type": kind, kind: object}),
            )
            .send()
    };
    assert_eq!(
        code(send("image", json!({"id": webp})).await.unwrap()).await,
        Some(131053)
    );
    assert_eq!(
        code(send("document", json!({"id": "123456"})).await.unwrap()).await,
        Some(131009)
    );
    // Audio takes no caption.
    let ogg: serde_json::Value = upload("audio/ogg", b"OggS")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        code(
            send("audio", json!({"id": ogg["id"], "caption": "hi"}))
                .await
                .unwrap()
        )
        .await,
        Some(100)
    );
    assert_eq!(
        code(
            send("document", json!({"id": webp, "filename": "cat.webp"}))
                .await
                .unwrap()
        )
        .await,
        None
    );
    assert_eq!(h.fake.sent().len(), 1);
    assert_eq!(h.fake.violations().len(), 4, "{:#?}", h.fake.violations());
}
