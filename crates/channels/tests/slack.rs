#![cfg(feature = "slack")]
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The Slack adapter against the fake workspace, over real HTTP and a
//! real Socket Mode WebSocket; the Events API through the adapter's
//! webhook with posts the fake signs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flynn_channels::slack::{SECTION_MAX, SlackAdapter};
use flynn_channels::{
    Action, AttachmentKind, Button, ButtonStyle, ChannelAdapter, ChannelError, ChatKind,
    Conversation, Delivery, Disposition, FileKind, Inbound, InboundEvent, InboundMessage,
    MessageId, OutgoingFile, Sender, Target, WebhookRequest, outbound,
};
use flynn_protocol::config::SlackConfig;
use flynn_testkit::slack::{
    self as fake, BOT_USER_ID, DM, Failure, FakeSlack, GENERAL, OTHER, OWNER, SignedPost, Signing,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);
/// How long an acknowledgement that must not come is waited for.
const QUIET: Duration = Duration::from_millis(300);

fn config(fake: &FakeSlack, mode: &str, bot_token: &str) -> SlackConfig {
    serde_json::from_value(json!({
        "bot_token": bot_token,
        "mode": mode,
        "app_token": fake::APP_TOKEN,
        "signing_secret": fake::SIGNING_SECRET,
        "api_url": fake.api_url(),
    }))
    .unwrap()
}

/// An adapter connected in Socket Mode, with its deliveries.
struct Running {
    adapter: Arc<SlackAdapter>,
    deliveries: mpsc::Receiver<Delivery>,
    stop: CancellationToken,
    task: JoinHandle<Result<(), ChannelError>>,
}

impl Running {
    async fn next(&mut self) -> Delivery {
        tokio::time::timeout(WAIT, self.deliveries.recv())
            .await
            .expect("a delivery within 10 s")
            .expect("the sink is open")
    }

    async fn stop(self) {
        self.stop.cancel();
        let result = tokio::time::timeout(WAIT, self.task)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(result, Ok(()));
    }
}

async fn socket(fake: &FakeSlack) -> Running {
    let adapter = Arc::new(SlackAdapter::new(&config(fake, "socket", fake::BOT_TOKEN)).unwrap());
    let (sink, deliveries) = Inbound::detached("slack");
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let adapter = adapter.clone();
        let stop = stop.clone();
        async move { adapter.connect(sink, stop).await }
    });
    assert!(fake.wait_sockets(1, WAIT).await, "Socket Mode connected");
    Running {
        adapter,
        deliveries,
        stop,
        task,
    }
}

fn message(delivery: &Delivery) -> InboundMessage {
    match &delivery.event {
        InboundEvent::Message(message) => message.clone(),
        other => panic!("expected a message, got {other:?}"),
    }
}

fn action(delivery: &Delivery) -> Action {
    match &delivery.event {
        InboundEvent::Action(action) => action.clone(),
        other => panic!("expected an action, got {other:?}"),
    }
}

fn ts(event: &Value) -> String {
    event["ts"].as_str().unwrap().to_owned()
}

fn target(conversation: Conversation) -> Target {
    Target {
        conversation,
        reply: None,
    }
}

fn no_violations(fake: &FakeSlack) {
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_direct_message_round_trip() {
    let fake = FakeSlack::start().await;
    let mut slack = socket(&fake).await;
    let event = fake.message_event(DM, OWNER, "Hello &amp; welcome");
    let envelope = fake.push_event(event.clone(), "Ev01");

    let delivery = slack.next().await;
    assert_eq!(
        message(&delivery),
        InboundMessage {
            id: format!("{DM}:{}", ts(&event)),
            conversation: Conversation::direct(DM),
            sender: Sender {
                id: OWNER.into(),
                name: None
            },
            mentioned: true,
            text: "Hello & welcome".into(),
            attachments: vec![],
            reply: None,
        }
    );
    assert!(
        !fake.wait_acked(&envelope, QUIET).await,
        "acknowledged before the daemon settled it"
    );
    delivery.settle(Disposition::Accepted);
    assert!(fake.wait_acked(&envelope, WAIT).await);

    let to = target(Conversation::direct(DM));
    let sent = outbound::send(slack.adapter.as_ref(), &to, "**Hi** there, <friend>", &[])
        .await
        .unwrap();
    let posted = fake.messages();
    assert_eq!(posted.len(), 1);
    assert_eq!(sent.parts, vec![MessageId(posted[0].ts.clone())]);
    assert_eq!(posted[0].channel, DM);
    assert_eq!(posted[0].text, "*Hi* there, &lt;friend&gt;");
    assert_eq!(posted[0].thread_ts, None);
    assert_eq!(posted[0].unfurl_links, Some(false));
    assert_eq!(posted[0].blocks, None);
    let call = &fake.calls("chat.postMessage")[0];
    assert_eq!(
        call.header("authorization"),
        Some(format!("Bearer {}", fake::BOT_TOKEN).as_str())
    );
    no_violations(&fake);
    slack.stop().await;
}

#[tokio::test]
async fn group_messages_open_threads_and_carry_mentions() {
    let fake = FakeSlack::start().await;
    let mut slack = socket(&fake).await;

    let plain = fake.message_event(GENERAL, OTHER, "lunch anyone?");
    fake.push_event(plain.clone(), "Ev01");
    let got = message(&slack.next().await);
    assert_eq!(got.id, format!("{GENERAL}:{}", ts(&plain)));
    assert_eq!(
        got.conversation,
        Conversation {
            chat: GENERAL.into(),
            thread: Some(ts(&plain)),
            kind: ChatKind::Group
        }
    );
    assert!(!got.mentioned);
    assert_eq!(got.text, "lunch anyone?");

    let mut named = fake.message_event(GENERAL, OWNER, &format!("<@{BOT_USER_ID}> what is up?"));
    named["user_profile"] =
        json!({"display_name": "", "real_name": "Owner Person", "name": "owner"});
    fake.push_event(named.clone(), "Ev02");
    let got = message(&slack.next().await);
    assert!(got.mentioned);
    assert_eq!(got.text, "what is up?");
    assert_eq!(got.sender.name.as_deref(), Some("Owner Person"));
    assert_eq!(got.conversation.thread, Some(ts(&named)));
    no_violations(&fake);
    slack.stop().await;
}

#[tokio::test]
async fn a_message_and_its_app_mention_carry_one_id() {
    let fake = FakeSlack::start().await;
    let mut slack = socket(&fake).await;
    let event = fake.message_event(GENERAL, OWNER, &format!("hey <@{BOT_USER_ID}> hi"));
    let first = fake.push_event(event.clone(), "Ev01");
    let second = fake.push_event(fake.app_mention_for(&event), "Ev02");

    let a = slack.next().await;
    let a_message = message(&a);
    a.settle(Disposition::Accepted);
    let b = slack.next().await;
    let b_message = message(&b);
    b.settle(Disposition::Duplicate);
    assert_eq!(a_message, b_message);
    assert_eq!(a_message.id, format!("{GENERAL}:{}", ts(&event)));
    assert_eq!(a_message.text, "hey hi");
    assert!(fake.wait_acked(&first, WAIT).await);
    assert!(fake.wait_acked(&second, WAIT).await);
    no_violations(&fake);
    slack.stop().await;
}

#[tokio::test]
async fn a_thread_reply_is_answered_in_its_thread() {
    let fake = FakeSlack::start().await;
    let mut slack = socket(&fake).await;
    let parent = fake.next_ts();
    let mut event = fake.message_event(GENERAL, OWNER, &format!("<@{BOT_USER_ID}> and then?"));
    event["thread_ts"] = json!(parent);
    fake.push_event(event, "Ev01");
    let got = message(&slack.next().await);
    assert_eq!(got.conversation.thread.as_deref(), Some(parent.as_str()));
    assert_eq!(got.conversation.peer(), format!("{GENERAL}:{parent}"));

    outbound::send(
        slack.adapter.as_ref(),
        &target(got.conversation),
        "Then this.",
        &[],
    )
    .await
    .unwrap();
    let posted = fake.messages();
    assert_eq!(posted[0].thread_ts.as_deref(), Some(parent.as_str()));
    assert_eq!(posted[0].channel, GENERAL);

    // Replies in a thread the bot answered in need no new mention;
    // replies in other threads do.
    let mut reply = fake.message_event(GENERAL, OWNER, "and after that?");
    reply["thread_ts"] = json!(parent);
    fake.push_event(reply, "Ev02");
    let got = message(&slack.next().await);
    assert!(got.mentioned);
    assert_eq!(got.text, "and after that?");
    let mut elsewhere = fake.message_event(GENERAL, OWNER, "unrelated");
    elsewhere["thread_ts"] = json!(fake.next_ts());
    fake.push_event(elsewhere, "Ev03");
    assert!(!message(&slack.next().await).mentioned);
    no_violations(&fake);
    slack.stop().await;
}

#[tokio::test]
async fn a_long_answer_is_sent_in_several_messages_within_the_limit() {
    let fake = FakeSlack::start().await;
    let adapter = SlackAdapter::new(&config(&fake, "socket", fake::BOT_TOKEN)).unwrap();
    let mut markdown = String::new();
    for i in 0..100 {
        markdown.push_str(&format!(
            "Paragraph {i} says **something** about `code` & more.\n\n"
        ));
    }
    markdown.push_str("```rust\n");
    for i in 0..120 {
        markdown.push_str(&format!(
            "let value_{i} = compute({i}) < limit; // step {i}\n"
        ));
    }
    markdown.push_str("```\n\nDone.");
    assert!(markdown.len() > 10_000);

    let to = target(Conversation::direct(DM));
    let sent = outbound::send(&adapter, &to, &markdown, &[]).await.unwrap();
    let posted = fake.messages();
    assert!(posted.len() >= 3, "{} messages", posted.len());
    assert_eq!(sent.parts.len(), posted.len());
    for message in &posted {
        assert!(message.text.chars().count() <= 4000);
        assert_eq!(
            message.text.matches("```").count() % 2,
            0,
            "{}",
            message.text
        );
    }
    let all: String = posted.iter().map(|m| m.text.as_str()).collect();
    assert!(all.contains("let value_119 = compute(119) &lt; limit;"));
    assert!(all.ends_with("Done."));
    no_violations(&fake);
}

#[tokio::test]
async fn a_confirmation_is_asked_pressed_and_answered() {
    let fake = FakeSlack::start().await;
    let mut slack = socket(&fake).await;
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
    let conversation = Conversation {
        chat: GENERAL.into(),
        thread: Some(fake.next_ts()),
        kind: ChatKind::Group,
    };
    let to = target(conversation.clone());
    let question = "Run `rm -rf build`?";
    let sent = outbound::send(slack.adapter.as_ref(), &to, question, &buttons)
        .await
        .unwrap();
    let posted = &fake.messages()[0];
    assert_eq!(posted.text, "Run `rm -rf build`?");
    assert_eq!(
        posted.blocks,
        Some(json!([
            {"type": "section", "text": {"type": "mrkdwn", "text": "Run `rm -rf build`?"}},
            {"type": "actions", "elements": [
                {"type": "button", "action_id": "flynn_0", "style": "primary", "value": "y:call_1",
                 "text": {"type": "plain_text", "text": "Approve", "emoji": true}},
                {"type": "button", "action_id": "flynn_1", "style": "danger", "value": "n:call_1",
                 "text": {"type": "plain_text", "text": "Deny", "emoji": true}},
            ]},
        ]))
    );

    let envelope = fake.press_button(OWNER, &posted.ts, "y:call_1");
    let delivery = slack.next().await;
    let press = action(&delivery);
    assert_eq!(press.data, "y:call_1");
    assert_eq!(press.conversation, conversation);
    assert_eq!(press.sender.id, OWNER);
    assert_eq!(press.message, Some(sent.parts[0].clone()));
    assert!(press.reply.as_deref().unwrap().contains("/actions/"));
    delivery.settle(Disposition::Accepted);
    assert!(fake.wait_acked(&envelope, WAIT).await);

    slack
        .adapter
        .answer_action(&press, "Approved")
        .await
        .unwrap();
    assert_eq!(
        fake.action_responses(),
        vec![json!({"response_type": "ephemeral", "replace_original": false, "text": "Approved"})]
    );
    slack
        .adapter
        .edit(&to, &sent.parts[0], "Run `rm -rf build`? Approved.", &[])
        .await
        .unwrap();
    let edited = &fake.messages()[0];
    assert_eq!(edited.blocks, None);
    assert_eq!(edited.edits, 1);
    assert_eq!(edited.text, "Run `rm -rf build`? Approved.");
    no_violations(&fake);
    slack.stop().await;
}

#[tokio::test]
async fn buttons_under_a_long_text_fit_block_kit() {
    let fake = FakeSlack::start().await;
    let adapter = SlackAdapter::new(&config(&fake, "socket", fake::BOT_TOKEN)).unwrap();
    let text = "All of this. ".repeat(300);
    let buttons = [Button {
        label: "A label longer than Slack's seventy-five characters for a button, which it refuses"
            .into(),
        data: "y:call_2".into(),
        style: ButtonStyle::Primary,
    }];
    outbound::send(&adapter, &target(Conversation::direct(DM)), &text, &buttons)
        .await
        .unwrap();
    let blocks = fake.messages()[0].blocks.clone().unwrap();
    let sections = blocks.as_array().unwrap().len() - 1;
    assert_eq!(sections, text.trim_end().len().div_ceil(SECTION_MAX));
    no_violations(&fake);
}

#[tokio::test]
async fn a_rate_limit_is_waited_out_for_retry_after() {
    let fake = FakeSlack::start().await;
    let adapter = SlackAdapter::new(&config(&fake, "socket", fake::BOT_TOKEN)).unwrap();
    fake.fail_next(
        "chat.postMessage",
        Failure::RateLimited {
            retry_after_secs: 1,
        },
    );
    let to = target(Conversation::direct(DM));
    let direct = adapter.send(&to, "x", &[]).await;
    assert_eq!(
        direct,
        Err(ChannelError::RateLimited {
            channel: "slack".into(),
            retry_after: Some(Duration::from_secs(1))
        })
    );

    fake.fail_next(
        "chat.postMessage",
        Failure::RateLimited {
            retry_after_secs: 1,
        },
    );
    let started = Instant::now();
    outbound::send(&adapter, &to, "after the wait", &[])
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(fake.calls("chat.postMessage").len(), 3);
    assert_eq!(fake.messages().len(), 1);
    no_violations(&fake);
}

#[tokio::test]
async fn server_errors_and_slacks_error_codes_are_classified() {
    let fake = FakeSlack::start().await;
    let adapter = SlackAdapter::new(&config(&fake, "socket", fake::BOT_TOKEN)).unwrap();
    let to = target(Conversation::direct(DM));
    fake.fail_next("chat.postMessage", Failure::Status(502));
    fake.fail_next("chat.postMessage", Failure::Error("ratelimited".into()));
    outbound::send(&adapter, &to, "eventually", &[])
        .await
        .unwrap();
    assert_eq!(fake.calls("chat.postMessage").len(), 3);
    assert_eq!(fake.messages().len(), 1);

    fake.fail_next("chat.postMessage", Failure::Error("token_revoked".into()));
    assert!(matches!(
        adapter.send(&to, "x", &[]).await,
        Err(ChannelError::Unauthorized { .. })
    ));
    let unknown = target(Conversation::group("C0NOWHERE"));
    assert_eq!(
        adapter.send(&unknown, "x", &[]).await,
        Err(ChannelError::Rejected {
            channel: "slack".into(),
            detail: "chat.postMessage: channel_not_found".into()
        })
    );
    assert_eq!(
        adapter
            .edit(&to, &MessageId("1.000001".into()), "x", &[])
            .await,
        Err(ChannelError::Rejected {
            channel: "slack".into(),
            detail: "chat.update: message_not_found".into()
        })
    );
    // The fake flags both: the adapter passed on what it was asked.
    assert_eq!(fake.violations().len(), 2);
}

#[tokio::test]
async fn a_retry_disposition_leads_to_redelivery_with_the_same_id() {
    let fake = FakeSlack::start().await;
    fake.set_redelivery_after(Duration::from_millis(500));
    let mut slack = socket(&fake).await;
    let envelope = fake.push_event(fake.message_event(DM, OWNER, "store me"), "Ev01");

    let first = slack.next().await;
    let id = message(&first).id;
    first.settle(Disposition::Retry("the disk is full".into()));
    let again = slack.next().await;
    assert_eq!(message(&again).id, id);
    assert_eq!(fake.times_sent(&envelope), 2);
    assert!(fake.acks().is_empty());
    again.settle(Disposition::Accepted);
    assert!(fake.wait_acked(&envelope, WAIT).await);
    no_violations(&fake);
    slack.stop().await;
}

#[tokio::test]
async fn a_duplicate_delivery_carries_the_same_id() {
    let fake = FakeSlack::start().await;
    let mut slack = socket(&fake).await;
    let event = fake.message_event(DM, OWNER, "once");
    let first = fake.push_event(event.clone(), "Ev01");
    let second = fake.push_event(event, "Ev01");
    let a = slack.next().await;
    let a_id = message(&a).id;
    a.settle(Disposition::Accepted);
    let b = slack.next().await;
    assert_eq!(message(&b).id, a_id);
    b.settle(Disposition::Duplicate);
    assert!(fake.wait_acked(&first, WAIT).await);
    assert!(fake.wait_acked(&second, WAIT).await);
    no_violations(&fake);
    slack.stop().await;
}

#[tokio::test]
async fn bot_messages_and_edits_are_acknowledged_without_delivery() {
    let fake = FakeSlack::start().await;
    let mut slack = socket(&fake).await;
    let mut own = fake.message_event(DM, BOT_USER_ID, "my own answer");
    own["bot_id"] = json!(fake::BOT_ID);
    let own = fake.push_event(own, "Ev01");
    let mut edit = fake.message_event(DM, OWNER, "edited");
    edit["subtype"] = json!("message_changed");
    let edit = fake.push_event(edit, "Ev02");
    let real = fake.message_event(DM, OWNER, "real");
    fake.push_event(real.clone(), "Ev03");
    assert!(fake.wait_acked(&own, WAIT).await);
    assert!(fake.wait_acked(&edit, WAIT).await);
    assert_eq!(
        message(&slack.next().await).id,
        format!("{DM}:{}", ts(&real))
    );
    no_violations(&fake);
    slack.stop().await;
}

#[tokio::test]
async fn a_disconnect_envelope_leads_to_a_fresh_connection() {
    let fake = FakeSlack::start().await;
    let mut slack = socket(&fake).await;
    fake.send_disconnect("warning");
    fake.send_disconnect("refresh_requested");
    assert!(fake.wait_sockets(2, WAIT).await);
    assert_eq!(fake.connections_opened(), 2);

    let envelope = fake.push_event(fake.message_event(DM, OWNER, "still there?"), "Ev01");
    let delivery = slack.next().await;
    assert_eq!(message(&delivery).text, "still there?");
    delivery.settle(Disposition::Accepted);
    assert!(fake.wait_acked(&envelope, WAIT).await);
    no_violations(&fake);
    slack.stop().await;
}

#[tokio::test]
async fn a_dropped_socket_is_opened_again() {
    let fake = FakeSlack::start().await;
    let mut slack = socket(&fake).await;
    fake.drop_socket();
    assert!(fake.wait_sockets(2, WAIT).await);
    assert_eq!(fake.connections_opened(), 2);
    let envelope = fake.push_event(fake.message_event(DM, OWNER, "back?"), "Ev01");
    let delivery = slack.next().await;
    delivery.settle(Disposition::Accepted);
    assert!(fake.wait_acked(&envelope, WAIT).await);
    no_violations(&fake);
    slack.stop().await;
}

#[tokio::test]
async fn shared_files_arrive_named_and_are_downloaded_on_request_with_the_bot_token() {
    let fake = FakeSlack::start().await;
    let mut slack = socket(&fake).await;
    let png = b"\x89PNG\r\n\x1a\n fake image bytes";
    let image = fake.add_file("chart.png", "image/png", png);
    let pdf = fake.add_file("report.pdf", "application/pdf", b"%PDF-1.7");
    let mut event = fake.message_event(DM, OWNER, "look");
    event["subtype"] = json!("file_share");
    event["files"] = json!([image, pdf]);
    fake.push_event(event, "Ev01");

    let got = message(&slack.next().await);
    let downloads = |fake: &FakeSlack| -> Vec<_> {
        fake.requests()
            .into_iter()
            .filter(|r| r.path.starts_with("/files-pri/"))
            .collect()
    };
    // Delivered before anything is fetched: the daemon decides first.
    assert_eq!(downloads(&fake).len(), 0);
    assert_eq!(got.text, "look");
    assert_eq!(got.attachments.len(), 2);
    assert_eq!(got.attachments[0].kind, AttachmentKind::Image);
    assert_eq!(got.attachments[0].name.as_deref(), Some("chart.png"));
    assert_eq!(got.attachments[0].media_type, "image/png");
    assert_eq!(got.attachments[1].kind, AttachmentKind::File);
    let limit = 20 * 1024 * 1024;
    let first = slack
        .adapter
        .download(&got.attachments[0], limit)
        .await
        .unwrap();
    let second = slack
        .adapter
        .download(&got.attachments[1], limit)
        .await
        .unwrap();
    assert_eq!((&first[..], &second[..]), (&png[..], &b"%PDF-1.7"[..]));
    let downloads = downloads(&fake);
    assert_eq!(downloads.len(), 2);
    for download in downloads {
        assert_eq!(
            download.header("authorization"),
            Some(format!("Bearer {}", fake::BOT_TOKEN).as_str())
        );
    }
    no_violations(&fake);
    slack.stop().await;
}

#[tokio::test]
async fn slash_commands_become_chat_commands() {
    let fake = FakeSlack::start().await;
    let mut slack = socket(&fake).await;
    let payload = fake.slash_command(OWNER, DM, "/flynn", "reset");
    let envelope = fake.push_envelope("slash_commands", payload.clone());
    let delivery = slack.next().await;
    let got = message(&delivery);
    assert_eq!(got.text, "/reset");
    assert_eq!(got.id, payload["trigger_id"].as_str().unwrap());
    assert_eq!(got.conversation, Conversation::direct(DM));
    assert!(got.mentioned);
    assert!(!fake.wait_acked(&envelope, QUIET).await);
    delivery.settle(Disposition::Accepted);
    assert!(fake.wait_acked(&envelope, WAIT).await);
    // The design notes' `/flynn-status`, registered as its own command.
    let payload = fake.slash_command(OWNER, DM, "/flynn-status", "");
    fake.push_envelope("slash_commands", payload);
    let delivery = slack.next().await;
    assert_eq!(message(&delivery).text, "/status");
    delivery.settle(Disposition::Accepted);
    no_violations(&fake);
    slack.stop().await;
}

#[tokio::test]
async fn a_refused_bot_token_is_unauthorized() {
    let fake = FakeSlack::start().await;
    let adapter = SlackAdapter::new(&config(&fake, "socket", "xoxb-revoked")).unwrap();
    let (sink, _deliveries) = Inbound::detached("slack");
    let result = tokio::time::timeout(WAIT, adapter.connect(sink, CancellationToken::new()))
        .await
        .unwrap();
    assert_eq!(
        result,
        Err(ChannelError::Unauthorized {
            channel: "slack".into(),
            detail: "auth.test: invalid_auth".into()
        })
    );
    assert_eq!(fake.connections_opened(), 0);
    no_violations(&fake);

    let mut bad = config(&fake, "socket", fake::BOT_TOKEN);
    bad.app_token = Some(fake::BOT_TOKEN.into());
    assert!(matches!(
        SlackAdapter::new(&bad),
        Err(ChannelError::Unauthorized { .. })
    ));
    let mut bad = config(&fake, "events", fake::BOT_TOKEN);
    bad.signing_secret = None;
    assert!(matches!(
        SlackAdapter::new(&bad),
        Err(ChannelError::Unauthorized { .. })
    ));
}

// ------------------------------------------------------------ Events API

fn request(post: SignedPost) -> WebhookRequest {
    let mut headers = http::HeaderMap::new();
    for (name, value) in &post.headers {
        headers.append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    WebhookRequest {
        method: http::Method::POST,
        path: post.path,
        query: String::new(),
        headers,
        body: post.body.into(),
    }
}

/// An Events API adapter, connected (so it knows the bot), and its sink.
async fn events(
    fake: &FakeSlack,
) -> (
    Arc<SlackAdapter>,
    Inbound,
    mpsc::Receiver<Delivery>,
    CancellationToken,
) {
    let adapter = Arc::new(SlackAdapter::new(&config(fake, "events", fake::BOT_TOKEN)).unwrap());
    let (sink, deliveries) = Inbound::detached("slack");
    let stop = CancellationToken::new();
    tokio::spawn({
        let (adapter, sink, stop) = (adapter.clone(), sink.clone(), stop.clone());
        async move { adapter.connect(sink, stop).await }
    });
    (adapter, sink, deliveries, stop)
}

/// Posts to the webhook while settling whatever it delivers with
/// `disposition`; the answer and what was delivered.
async fn post(
    adapter: &SlackAdapter,
    sink: &Inbound,
    deliveries: &mut mpsc::Receiver<Delivery>,
    post: SignedPost,
    disposition: Disposition,
) -> (u16, String, Vec<InboundEvent>) {
    let answer = adapter.webhook(request(post), sink);
    tokio::pin!(answer);
    let mut delivered = Vec::new();
    let response = loop {
        tokio::select! {
            response = &mut answer => break response,
            Some(delivery) = deliveries.recv() => {
                delivered.push(delivery.event.clone());
                delivery.settle(disposition.clone());
            }
        }
    };
    while let Ok(delivery) = deliveries.try_recv() {
        delivered.push(delivery.event.clone());
    }
    let body = String::from_utf8(response.body.to_vec()).unwrap();
    (response.status, body, delivered)
}

#[tokio::test]
async fn events_api_delivers_signed_events_and_refuses_the_rest() {
    let fake = FakeSlack::start().await;
    let (adapter, sink, mut deliveries, stop) = events(&fake).await;
    let event = fake.message_event(DM, OWNER, "over HTTP");
    let body = fake::event_callback(event.clone(), "Ev0HTTP");

    let forged = fake::events_post(&body, Signing::Forged);
    let (status, _, delivered) = post(
        &adapter,
        &sink,
        &mut deliveries,
        forged,
        Disposition::Accepted,
    )
    .await;
    assert_eq!((status, delivered.len()), (401, 0));
    let stale = fake::events_post(&body, Signing::Stale);
    let (status, _, delivered) = post(
        &adapter,
        &sink,
        &mut deliveries,
        stale,
        Disposition::Accepted,
    )
    .await;
    assert_eq!((status, delivered.len()), (401, 0));

    let valid = fake::events_post(&body, Signing::Valid);
    let (status, _, delivered) = post(
        &adapter,
        &sink,
        &mut deliveries,
        valid,
        Disposition::Accepted,
    )
    .await;
    assert_eq!(status, 200);
    let [InboundEvent::Message(got)] = delivered.as_slice() else {
        panic!("one message expected, got {delivered:?}");
    };
    assert_eq!(got.id, format!("{DM}:{}", ts(&event)));
    assert_eq!(got.text, "over HTTP");
    assert!(got.mentioned);

    let challenge = json!({"token": "unused", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"});
    let (status, answer, delivered) = post(
        &adapter,
        &sink,
        &mut deliveries,
        fake::events_post(&challenge, Signing::Valid),
        Disposition::Accepted,
    )
    .await;
    assert_eq!(status, 200);
    assert!(delivered.is_empty());
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["challenge"], challenge["challenge"]);
    let (status, _, _) = post(
        &adapter,
        &sink,
        &mut deliveries,
        fake::events_post(&challenge, Signing::Forged),
        Disposition::Accepted,
    )
    .await;
    assert_eq!(status, 401);
    no_violations(&fake);
    stop.cancel();
}

#[tokio::test]
async fn events_api_answers_503_on_retry_and_slacks_retry_carries_the_same_id() {
    let fake = FakeSlack::start().await;
    let (adapter, sink, mut deliveries, stop) = events(&fake).await;
    let body = fake::event_callback(fake.message_event(DM, OWNER, "again"), "Ev0RETRY");
    let (status, _, first) = post(
        &adapter,
        &sink,
        &mut deliveries,
        fake::events_post(&body, Signing::Valid),
        Disposition::Retry("busy".into()),
    )
    .await;
    assert_eq!(status, 503);
    let (status, _, second) = post(
        &adapter,
        &sink,
        &mut deliveries,
        fake::events_post(&body, Signing::Valid).retry(1),
        Disposition::Accepted,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(first.len(), 1);
    assert_eq!(first, second);
    no_violations(&fake);
    stop.cancel();
}

#[tokio::test]
async fn events_api_button_presses_and_slash_commands_arrive() {
    let fake = FakeSlack::start().await;
    let (adapter, sink, mut deliveries, stop) = events(&fake).await;
    let buttons = [Button {
        label: "Approve".into(),
        data: "y:call_9".into(),
        style: ButtonStyle::Primary,
    }];
    let sent = adapter
        .send(&target(Conversation::direct(DM)), "Go?", &buttons)
        .await
        .unwrap();
    let press = fake.button_press(OWNER, &sent.0, "y:call_9");
    let (status, _, delivered) = post(
        &adapter,
        &sink,
        &mut deliveries,
        fake::interactive_post(&press, Signing::Valid),
        Disposition::Accepted,
    )
    .await;
    assert_eq!(status, 200);
    let [InboundEvent::Action(got)] = delivered.as_slice() else {
        panic!("one action expected, got {delivered:?}");
    };
    assert_eq!(got.data, "y:call_9");
    assert_eq!(got.id, press["trigger_id"].as_str().unwrap());
    assert_eq!(got.conversation, Conversation::direct(DM));

    let command = fake.slash_command(OWNER, DM, "/flynn", "model fast");
    let (status, _, delivered) = post(
        &adapter,
        &sink,
        &mut deliveries,
        fake::command_post(&command, Signing::Valid),
        Disposition::Accepted,
    )
    .await;
    assert_eq!(status, 200);
    let [InboundEvent::Message(got)] = delivered.as_slice() else {
        panic!("one message expected, got {delivered:?}");
    };
    assert_eq!(got.text, "/model fast");
    let (status, _, delivered) = post(
        &adapter,
        &sink,
        &mut deliveries,
        fake::interactive_post(&press, Signing::Stale),
        Disposition::Accepted,
    )
    .await;
    assert_eq!((status, delivered.len()), (401, 0));
    no_violations(&fake);
    stop.cancel();
}

// ------------------------------------------------------------ files out

fn sender(fake: &FakeSlack) -> SlackAdapter {
    SlackAdapter::new(&config(fake, "socket", fake::BOT_TOKEN)).unwrap()
}

fn outgoing(kind: FileKind, name: &str, media_type: &str, data: &[u8]) -> OutgoingFile {
    OutgoingFile {
        kind,
        name: name.to_owned(),
        media_type: media_type.to_owned(),
        data: Bytes::copy_from_slice(data),
        caption: None,
    }
}

fn in_chat(chat: &str, thread: Option<&str>, kind: ChatKind) -> Target {
    Target {
        conversation: Conversation {
            chat: chat.to_owned(),
            thread: thread.map(str::to_owned),
            kind,
        },
        reply: None,
    }
}

const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";

#[tokio::test]
async fn a_picture_is_uploaded_and_shared_with_its_caption() {
    let fake = FakeSlack::start().await;
    let adapter = sender(&fake);
    let mut chart = outgoing(FileKind::Image, "plots/chart.png", "image/png", PNG);
    chart.caption = Some("Sales <by> month & more".to_owned());

    let id = adapter
        .send_file(&in_chat(DM, None, ChatKind::Direct), &chart)
        .await
        .unwrap();

    assert_eq!(
        fake.shared_files(),
        vec![fake::SharedFile {
            id: id.0.clone(),
            filename: "chart.png".into(),
            title: "chart.png".into(),
            data: PNG.to_vec(),
            content_type: Some("image/png".into()),
            channel: DM.into(),
            thread_ts: None,
            initial_comment: Some("Sales &lt;by&gt; month &amp; more".into()),
        }]
    );
    // The three documented steps, in order, and nothing posted otherwise.
    let paths: Vec<String> = fake.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths.len(), 3, "{paths:?}");
    assert_eq!(paths[0], "/api/files.getUploadURLExternal");
    assert!(paths[1].starts_with("/upload/v1/"), "{paths:?}");
    assert_eq!(paths[2], "/api/files.completeUploadExternal");
    let announce = &fake.calls("files.getUploadURLExternal")[0];
    assert_eq!(
        announce.body,
        json!({"filename": "chart.png", "length": PNG.len().to_string()})
    );
    assert_eq!(
        fake.calls("files.completeUploadExternal")[0].body,
        json!({
            "files": [{"id": id.0, "title": "chart.png"}],
            "channel_id": DM,
            "initial_comment": "Sales &lt;by&gt; month &amp; more",
        })
    );
    // The upload URL carries no token.
    assert_eq!(fake.requests()[1].header("authorization"), None);
    assert!(fake.messages().is_empty());
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_document_in_a_thread_lands_in_the_thread() {
    let fake = FakeSlack::start().await;
    let adapter = sender(&fake);
    let thread = fake.next_ts();
    let mut report = outgoing(
        FileKind::Document,
        "Q3 report.pdf",
        "application/pdf",
        b"%PDF-1.7\n",
    );
    report.caption = Some("The report".to_owned());
    adapter
        .send_file(&in_chat(GENERAL, Some(&thread), ChatKind::Group), &report)
        .await
        .unwrap();
    let voice = outgoing(FileKind::Voice, "note.ogg", "audio/ogg", b"OggS\0voice");
    adapter
        .send_file(&in_chat(GENERAL, Some(&thread), ChatKind::Group), &voice)
        .await
        .unwrap();

    let shared: Vec<(String, String, Option<String>, Option<String>)> = fake
        .shared_files()
        .into_iter()
        .map(|f| (f.filename, f.channel, f.thread_ts, f.initial_comment))
        .collect();
    assert_eq!(
        shared,
        vec![
            (
                "Q3 report.pdf".to_owned(),
                GENERAL.to_owned(),
                Some(thread.clone()),
                Some("The report".to_owned())
            ),
            (
                "note.ogg".to_owned(),
                GENERAL.to_owned(),
                Some(thread.clone()),
                None
            ),
        ]
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_file_over_the_limit_is_refused_before_anything_is_sent() {
    let fake = FakeSlack::start().await;
    let adapter = sender(&fake);
    assert_eq!(adapter.upload_limit(FileKind::Document), 100 * 1024 * 1024);
    assert_eq!(adapter.upload_limit(FileKind::Image), 100 * 1024 * 1024);
    let big = Bytes::from(vec![0u8; 100 * 1024 * 1024 + 1]);
    let file = OutgoingFile {
        kind: FileKind::Document,
        name: "big.bin".into(),
        media_type: "application/octet-stream".into(),
        data: big,
        caption: None,
    };
    assert_eq!(
        adapter
            .send_file(&in_chat(DM, None, ChatKind::Direct), &file)
            .await,
        Err(ChannelError::Rejected {
            channel: "slack".into(),
            detail: "the file has 100.0 MB, over the 100 MB limit".into(),
        })
    );
    assert_eq!(fake.requests(), Vec::new());
}

#[tokio::test]
async fn rate_limits_and_a_failed_upload_are_retried_with_a_new_url() {
    let fake = FakeSlack::start().await;
    let adapter = sender(&fake);
    fake.fail_next(
        "files.getUploadURLExternal",
        Failure::RateLimited {
            retry_after_secs: 1,
        },
    );
    fake.fail_next(fake::UPLOAD, Failure::Status(503));
    fake.fail_next(
        "files.completeUploadExternal",
        Failure::Error("ratelimited".into()),
    );
    let started = Instant::now();
    let id = adapter
        .send_file(
            &in_chat(DM, None, ChatKind::Direct),
            &outgoing(FileKind::Image, "chart.png", "image/png", PNG),
        )
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    // Announced three times (the limit, the failed upload, the one that
    // worked), uploaded twice, completed twice, shared once.
    assert_eq!(fake.calls("files.getUploadURLExternal").len(), 3);
    assert_eq!(fake.calls("files.completeUploadExternal").len(), 2);
    let shared = fake.shared_files();
    assert_eq!(shared.len(), 1);
    assert_eq!(shared[0].id, id.0);
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn the_fake_refuses_what_slack_refuses() {
    let fake = FakeSlack::start().await;
    let http = reqwest::Client::new();
    let api = |method: &str| format!("{}/{method}", fake.api_url());
    let call = |method: &'static str, body: Value| {
        http.post(api(method))
            .bearer_auth(fake::BOT_TOKEN)
            .json(&body)
            .send()
    };
    let form = |method: &'static str, body: &'static str| {
        http.post(api(method))
            .bearer_auth(fake::BOT_TOKEN)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
    };
    let error = |response: reqwest::Response| async move {
        let body: Value = response.json().await.unwrap();
        body["error"].as_str().unwrap_or("ok").to_owned()
    };
    // A JSON body to getUploadURLExternal; a missing length.
    let answer = call(
        "files.getUploadURLExternal",
        json!({"filename": "a.txt", "length": 3}),
    )
    .await
    .unwrap();
    assert_eq!(error(answer).await, "invalid_arguments");
    let answer = form("files.getUploadURLExternal", "filename=a.txt")
        .await
        .unwrap();
    assert_eq!(error(answer).await, "invalid_arguments");
    // An announced file: the wrong length is refused, then completing it
    // unuploaded is refused, as is an unknown id.
    let answer: Value = form("files.getUploadURLExternal", "filename=a.txt&length=3")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (url, id) = (
        answer["upload_url"].as_str().unwrap().to_owned(),
        answer["file_id"].as_str().unwrap().to_owned(),
    );
    let upload = http.post(&url).body("toolong").send().await.unwrap();
    assert_eq!(upload.status().as_u16(), 400);
    let complete = |id: &str| {
        call(
            "files.completeUploadExternal",
            json!({"files": [{"id": id}], "channel_id": DM}),
        )
    };
    assert_eq!(error(complete(&id).await.unwrap()).await, "file_not_found");
    assert_eq!(
        error(complete("F0NOSUCH").await.unwrap()).await,
        "file_not_found"
    );
    // Uploaded once; a second upload to the same URL is refused.
    let upload = http.post(&url).body("abc").send().await.unwrap();
    assert_eq!(
        (upload.status().as_u16(), upload.text().await.unwrap()),
        (200, "OK - 3".to_owned())
    );
    let again = http.post(&url).body("abc").send().await.unwrap();
    assert_eq!(again.status().as_u16(), 404);
    // Shared in an unknown channel, then properly.
    let answer = call(
        "files.completeUploadExternal",
        json!({"files": [{"id": id}], "channel_id": "C0NOWHERE"}),
    )
    .await
    .unwrap();
    assert_eq!(error(answer).await, "channel_not_found");
    assert_eq!(error(complete(&id).await.unwrap()).await, "ok");
    assert_eq!(fake.shared_files().len(), 1);
    assert_eq!(fake.shared_files()[0].data, b"abc");
    assert_eq!(fake.violations().len(), 7, "{:#?}", fake.violations());
}
