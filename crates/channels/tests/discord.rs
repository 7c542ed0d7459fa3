#![cfg(feature = "discord")]
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The Discord adapter against the strict fake: gateway over a real
//! WebSocket, REST over real HTTP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use flynn_channels::discord::DiscordAdapter;
use flynn_channels::{
    Action, AttachmentKind, Backoff, Button, ButtonStyle, ChannelAdapter, ChannelError,
    ChannelState, ChatKind, Conversation, Delivery, Disposition, FileKind, InboundEvent,
    InboundMessage, MessageId, OutgoingFile, Registry, Sender, Target, limits, outbound,
};
use flynn_protocol::config::DiscordConfig;
use flynn_testkit::discord::{
    BOT_ID, DiscordUser, Failure, FakeDiscord, FakeDiscordOptions, intents,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);

fn config(fake: &FakeDiscord, token: &str) -> DiscordConfig {
    // The gateway's TLS connector takes the process's crypto provider, as
    // in the binaries (which install this one).
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    serde_json::from_value(json!({
        "bot_token": token,
        "api_url": fake.api_url(),
        "gateway_url": fake.gateway_url(),
    }))
    .unwrap()
}

fn alice() -> DiscordUser {
    DiscordUser::person(200_000_000_000_000_001, "alice", Some("Alice Liddell"))
}

fn bob() -> DiscordUser {
    DiscordUser::person(200_000_000_000_000_002, "bob", None)
}

/// An adapter connected to a fake, its deliveries, and its task.
struct Harness {
    fake: FakeDiscord,
    adapter: Arc<DiscordAdapter>,
    rx: mpsc::Receiver<Delivery>,
    stop: CancellationToken,
    task: JoinHandle<Result<(), ChannelError>>,
}

impl Harness {
    async fn start() -> Harness {
        Harness::start_with(FakeDiscordOptions::default()).await
    }

    async fn start_with(options: FakeDiscordOptions) -> Harness {
        Harness::start_configured(options, |_| {}).await
    }

    async fn start_configured(
        options: FakeDiscordOptions,
        configure: impl FnOnce(&mut DiscordConfig),
    ) -> Harness {
        let fake = FakeDiscord::start_with(options).await;
        let mut config = config(&fake, &fake.token());
        configure(&mut config);
        let adapter = Arc::new(DiscordAdapter::new(&config).unwrap());
        let (sink, rx) = flynn_channels::Inbound::detached("discord");
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let adapter = Arc::clone(&adapter);
            let stop = stop.clone();
            async move { adapter.connect(sink, stop).await }
        });
        fake.wait_connected().await;
        fake.wait_until("the slash commands", |f| {
            (!f.commands().is_empty()).then_some(())
        })
        .await;
        Harness {
            fake,
            adapter,
            rx,
            stop,
            task,
        }
    }

    async fn next(&mut self) -> Delivery {
        tokio::time::timeout(WAIT, self.rx.recv())
            .await
            .expect("a delivery within 10 s")
            .expect("the adapter is running")
    }

    async fn next_message(&mut self) -> (InboundMessage, Delivery) {
        let delivery = self.next().await;
        match &delivery.event {
            InboundEvent::Message(message) => (message.clone(), delivery),
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// After a reconnect: a new message in `dm` arrives, and the bot
    /// never identified again (the session was resumed); then finishes.
    async fn still_answers_in_the_first_session(mut self, dm: u64) {
        self.fake.post(dm, &alice(), "still there?").send();
        let (message, delivery) = self.next_message().await;
        assert_eq!(message.text, "still there?");
        delivery.settle(Disposition::Accepted);
        assert_eq!(self.fake.identifies(), 1);
        self.finish().await;
    }

    /// Stops the adapter, checks it left cleanly and the fake saw no
    /// violation.
    async fn finish(self) {
        self.stop.cancel();
        let outcome = tokio::time::timeout(WAIT, self.task)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(outcome, Ok(()));
        // Not 1000 / 1001, which would end the session: a restart
        // resumes it.
        self.fake
            .wait_until("the close frame", |f| {
                (f.gateway_frames().last() == Some(&json!({"close": 4000}))).then_some(())
            })
            .await;
        assert_eq!(self.fake.violations(), Vec::<String>::new());
    }
}

/// An adapter keeping its gateway state in `state`, started against an
/// already running fake (a daemon started again).
struct Running {
    rx: mpsc::Receiver<Delivery>,
    stop: CancellationToken,
    task: JoinHandle<Result<(), ChannelError>>,
}

impl Running {
    async fn start(fake: &FakeDiscord, state: &std::path::Path) -> Running {
        let adapter = Arc::new(
            DiscordAdapter::new(&config(fake, &fake.token()))
                .unwrap()
                .with_state_file(state.to_path_buf()),
        );
        let (sink, rx) = flynn_channels::Inbound::detached("discord");
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move { adapter.connect(sink, stop).await }
        });
        fake.wait_connected().await;
        Running { rx, stop, task }
    }

    async fn next_message(&mut self) -> (InboundMessage, Delivery) {
        let delivery = tokio::time::timeout(WAIT, self.rx.recv())
            .await
            .expect("a delivery within 10 s")
            .expect("the adapter is running");
        match &delivery.event {
            InboundEvent::Message(message) => (message.clone(), delivery),
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// Stops the adapter; the session is left to be resumed.
    async fn stop(self, fake: &FakeDiscord) {
        self.stop.cancel();
        let outcome = tokio::time::timeout(WAIT, self.task)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(outcome, Ok(()));
        fake.wait_until("the connection to end", |f| {
            (!f.is_connected()).then_some(())
        })
        .await;
        assert_eq!(
            fake.gateway_frames().last(),
            Some(&json!({"close": 4000})),
            "closed without ending the session"
        );
    }
}

fn target(chat: u64, kind: ChatKind) -> Target {
    Target {
        conversation: Conversation {
            chat: chat.to_string(),
            thread: None,
            kind,
        },
        reply: None,
    }
}

fn posts_to(fake: &FakeDiscord, path: &str) -> Vec<Value> {
    fake.requests()
        .into_iter()
        .filter(|r| r.path == path)
        .map(|r| r.body)
        .collect()
}

#[tokio::test]
async fn a_direct_message_round_trip() {
    let mut h = Harness::start().await;
    // Connected with the intents Flynn needs, and the commands registered.
    let identify = h
        .fake
        .gateway_frames()
        .into_iter()
        .find(|f| f["op"] == 2)
        .unwrap();
    assert_eq!(
        identify["d"]["intents"],
        intents::GUILD_MESSAGES | intents::DIRECT_MESSAGES | intents::MESSAGE_CONTENT
    );
    let names: Vec<Value> = h
        .fake
        .commands()
        .iter()
        .map(|c| c["name"].clone())
        .collect();
    assert_eq!(
        names,
        vec![json!("reset"), json!("status"), json!("cancel")]
    );

    let dm = h.fake.dm_channel(&alice());
    let id = h.fake.post(dm, &alice(), "What's on my calendar?").send();
    let (message, delivery) = h.next_message().await;
    assert_eq!(
        message,
        InboundMessage {
            id: id.to_string(),
            conversation: Conversation::direct(dm.to_string()),
            sender: Sender {
                id: alice().id.to_string(),
                name: Some("Alice Liddell".into()),
            },
            mentioned: true,
            text: "What's on my calendar?".into(),
            attachments: Vec::new(),
            reply: None,
        }
    );
    delivery.settle(Disposition::Accepted);

    let to = target(dm, ChatKind::Direct);
    let sent = outbound::send(
        &*h.adapter,
        &to,
        "**Two** meetings, one with @everyone",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(sent.parts.len(), 1);
    let messages = h.fake.messages_in(dm);
    assert_eq!(messages.len(), 1);
    assert_eq!(sent.parts[0], MessageId(messages[0].id.to_string()));
    assert_eq!(
        messages[0].content,
        "**Two** meetings, one with @\u{200b}everyone"
    );
    assert_eq!(messages[0].allowed_mentions, json!({"parse": []}));
    assert_eq!(messages[0].components, json!([]));

    // Typing shows in the same channel.
    h.adapter.typing(&to).await.unwrap();
    assert_eq!(
        posts_to(&h.fake, &format!("/api/v10/channels/{dm}/typing")).len(),
        1
    );
    // The bot's own message came back on the gateway and was not delivered.
    assert!(h.rx.try_recv().is_err());
    h.finish().await;
}

#[tokio::test]
async fn servers_outside_allowed_guild_ids_are_not_answered() {
    let mut h = Harness::start_configured(FakeDiscordOptions::default(), |c| {
        c.allowed_guild_ids = vec!["999".into()];
    })
    .await;
    let channel = h.fake.guild_channel();
    h.fake
        .post(
            channel,
            &bob(),
            &format!("<@{BOT_ID}> hello from the server"),
        )
        .send();
    // A direct message after it is the next delivery: the server's was
    // skipped.
    // A slash command there is answered, only to its sender, and not
    // delivered.
    h.fake.slash_command(channel, &bob(), "status");
    let answer = h
        .fake
        .wait_until("the answer to the command", |f| {
            f.callbacks().first().cloned()
        })
        .await;
    assert_eq!(answer.kind, 4);
    assert_eq!(
        answer.data["content"],
        "Flynn does not answer in this server."
    );
    let dm = h.fake.dm_channel(&alice());
    h.fake.post(dm, &alice(), "hello in private").send();
    let (message, delivery) = h.next_message().await;
    assert_eq!(message.text, "hello in private");
    delivery.settle(Disposition::Accepted);
    h.finish().await;

    let wrong = DiscordConfig {
        allowed_guild_ids: vec!["my server".into()],
        ..config(&FakeDiscord::start().await, "t0k3n")
    };
    let error = DiscordAdapter::new(&wrong).err().unwrap().to_string();
    assert!(error.contains("'my server' is not a server id"), "{error}");
}

#[tokio::test]
async fn group_messages_say_whether_the_bot_was_addressed() {
    let mut h = Harness::start().await;
    let channel = h.fake.guild_channel();

    h.fake.post(channel, &bob(), "lunch anyone?").send();
    let (message, delivery) = h.next_message().await;
    assert_eq!(
        message.conversation,
        Conversation::group(channel.to_string())
    );
    assert_eq!(
        message.sender,
        Sender {
            id: bob().id.to_string(),
            name: Some("bob".into())
        }
    );
    assert!(!message.mentioned);
    assert_eq!(message.text, "lunch anyone?");
    delivery.settle(Disposition::Ignored("no mention".into()));

    h.fake
        .post(
            channel,
            &bob(),
            &format!("<@{BOT_ID}> summarise the thread"),
        )
        .send();
    let (message, delivery) = h.next_message().await;
    assert!(message.mentioned);
    assert_eq!(message.text, "summarise the thread");
    delivery.settle(Disposition::Accepted);

    // A reply to one of the bot's messages addresses it too.
    let sent = h
        .adapter
        .send(&target(channel, ChatKind::Group), "Here it is.", &[])
        .await
        .unwrap();
    h.fake
        .post(channel, &alice(), "thanks!")
        .reply_to(sent.0.parse().unwrap())
        .send();
    let (message, delivery) = h.next_message().await;
    assert!(message.mentioned);
    assert_eq!(message.text, "thanks!");
    delivery.settle(Disposition::Accepted);

    // Another bot's message is not handed on; a thread is its own chat.
    h.fake
        .post(
            channel,
            &DiscordUser::bot(300, "otherbot"),
            &format!("<@{BOT_ID}> ping"),
        )
        .send();
    let thread = h.fake.thread(channel);
    h.fake.post(thread, &alice(), "in the thread").send();
    let (message, delivery) = h.next_message().await;
    assert_eq!(
        message.conversation,
        Conversation::group(thread.to_string())
    );
    assert_eq!(message.text, "in the thread");
    delivery.settle(Disposition::Accepted);
    h.finish().await;
}

#[tokio::test]
async fn a_long_answer_is_cut_into_messages_discord_accepts() {
    let h = Harness::start().await;
    let dm = h.fake.dm_channel(&alice());
    let mut markdown = String::from("# Report\n\n");
    for i in 0..60 {
        markdown.push_str(&format!(
            "Paragraph {i}: the quick brown fox jumps over the lazy dog, again and again.\n\n"
        ));
    }
    markdown.push_str("```rust\n");
    for i in 0..120 {
        markdown.push_str(&format!("let value_{i} = compute({i}) * 2; // step {i}\n"));
    }
    markdown.push_str("```\nDone.");
    assert!(markdown.chars().count() > 9_000);

    let sent = outbound::send(&*h.adapter, &target(dm, ChatKind::Direct), &markdown, &[])
        .await
        .unwrap();
    let messages = h.fake.messages_in(dm);
    assert!(messages.len() >= 5, "{} messages", messages.len());
    assert_eq!(sent.parts.len(), messages.len());
    for message in &messages {
        assert!(message.content.chars().count() <= limits::DISCORD.0);
        assert_eq!(
            message.content.matches("```").count() % 2,
            0,
            "{}",
            message.content
        );
    }
    let joined: String = messages.iter().map(|m| m.content.as_str()).collect();
    assert!(joined.contains("let value_119 = compute(119) * 2;"));
    assert!(joined.ends_with("Done."));
    h.finish().await;
}

/// A message sent again with the same key (after a crash between the
/// send and its mark) is the one Discord already has: each part carries a
/// nonce of at most 25 characters with `enforce_nonce`, the same for the
/// same key and part, another for another key.
#[tokio::test]
async fn a_message_sent_once_per_key_is_created_once() {
    let h = Harness::start().await;
    let dm = h.fake.dm_channel(&alice());
    let to = target(dm, ChatKind::Direct);
    let long = "word ".repeat(600);
    let first = outbound::send_once(&*h.adapter, &to, &long, &[], "discord:1 turn 7")
        .await
        .unwrap();
    assert_eq!(first.parts.len(), 2);
    let again = outbound::send_once(&*h.adapter, &to, &long, &[], "discord:1 turn 7")
        .await
        .unwrap();
    assert_eq!(again.parts, first.parts);
    assert_eq!(h.fake.messages_in(dm).len(), 2);
    let other = outbound::send_once(&*h.adapter, &to, &long, &[], "discord:1 turn 8")
        .await
        .unwrap();
    assert_eq!(h.fake.messages_in(dm).len(), 4);
    assert!(other.parts.iter().all(|id| !first.parts.contains(id)));
    // A plain send carries no nonce and is always created.
    outbound::send(&*h.adapter, &to, "plain", &[])
        .await
        .unwrap();
    assert_eq!(h.fake.messages_in(dm).len(), 5);

    let bodies = posts_to(&h.fake, &format!("/api/v10/channels/{dm}/messages"));
    let nonces: Vec<&str> = bodies
        .iter()
        .filter_map(|body| body["nonce"].as_str())
        .collect();
    assert_eq!(nonces.len(), 6, "{bodies:#?}");
    assert!(nonces.iter().all(|n| !n.is_empty() && n.len() <= 25));
    assert_eq!(
        &nonces[..2],
        &nonces[2..4],
        "the same key gives the same nonces"
    );
    assert_ne!(nonces[0], nonces[1], "each part has its own");
    assert!(!nonces[4..].iter().any(|n| nonces[..2].contains(n)));
    assert!(
        bodies[..6].iter().all(|body| body["enforce_nonce"] == true),
        "{bodies:#?}"
    );
    assert!(bodies[6]["nonce"].is_null() && bodies[6]["enforce_nonce"].is_null());

    // An answer streamed into a message before a crash: sent again whole
    // with the same key, the message it has is brought up to date.
    let mut draft = outbound::Sent::default();
    outbound::show_once(
        &*h.adapter,
        &to,
        &mut draft,
        "Thinking it over …",
        &[],
        "turn 9",
    )
    .await
    .unwrap();
    let whole = outbound::send_once(&*h.adapter, &to, "The answer is 42.", &[], "turn 9")
        .await
        .unwrap();
    assert_eq!(whole.parts, draft.parts);
    let messages = h.fake.messages_in(dm);
    assert_eq!(messages.len(), 6);
    let last = messages.last().unwrap();
    assert_eq!(last.content, "The answer is 42.");
    assert_eq!(last.edits, 1);
    h.finish().await;
}

#[tokio::test]
async fn a_confirmation_is_pressed_and_answered() {
    let mut h = Harness::start().await;
    let channel = h.fake.guild_channel();
    let to = target(channel, ChatKind::Group);
    let buttons = [
        Button {
            label: "Approve".into(),
            data: "y:call_7".into(),
            style: ButtonStyle::Primary,
        },
        Button {
            label: "Deny".into(),
            data: "n:call_7".into(),
            style: ButtonStyle::Danger,
        },
    ];
    let sent = outbound::send(&*h.adapter, &to, "Run `rm -rf build`?", &buttons)
        .await
        .unwrap();
    let message = h.fake.messages_in(channel)[0].clone();
    assert_eq!(
        message.components,
        json!([{"type": 1, "components": [
            {"type": 2, "style": 1, "label": "Approve", "custom_id": "y:call_7"},
            {"type": 2, "style": 4, "label": "Deny", "custom_id": "n:call_7"},
        ]}])
    );

    let press = h
        .fake
        .press_button(channel, &alice(), message.id, "y:call_7");
    let delivery = h.next().await;
    let InboundEvent::Action(action) = delivery.event.clone() else {
        panic!("expected an action, got {:?}", delivery.event);
    };
    assert_eq!(action.id, press.id.to_string());
    assert_eq!(action.data, "y:call_7");
    assert_eq!(action.message, Some(sent.parts[0].clone()));
    assert_eq!(
        action.conversation,
        Conversation::group(channel.to_string())
    );
    assert_eq!(action.sender.id, alice().id.to_string());
    delivery.settle(Disposition::Accepted);
    h.adapter.answer_action(&action, "").await.unwrap();
    let callbacks = h.fake.callbacks();
    assert_eq!(callbacks.len(), 1);
    assert_eq!((callbacks[0].kind, callbacks[0].accepted), (6, true));
    assert!(callbacks[0].after < Duration::from_secs(3));

    // The buttons go once the question is settled.
    h.adapter
        .edit(&to, &sent.parts[0], "Run `rm -rf build`? Approved.", &[])
        .await
        .unwrap();
    let message = h.fake.messages_in(channel)[0].clone();
    assert_eq!(message.components, json!([]));
    assert_eq!(message.edits, 1);
    h.finish().await;
}

#[tokio::test]
async fn an_unanswered_press_is_deferred_in_time_and_a_late_note_follows_up() {
    let mut h = Harness::start().await;
    let channel = h.fake.guild_channel();
    let buttons = [Button {
        label: "Approve".into(),
        data: "y:call_9".into(),
        style: ButtonStyle::Primary,
    }];
    let sent = h
        .adapter
        .send(&target(channel, ChatKind::Group), "Go?", &buttons)
        .await
        .unwrap();
    h.fake
        .press_button(channel, &alice(), sent.0.parse().unwrap(), "y:call_9");
    let delivery = h.next().await;
    let InboundEvent::Action(action) = delivery.event.clone() else {
        panic!("expected an action");
    };
    delivery.settle(Disposition::Accepted);
    let callback = h
        .fake
        .wait_until("the adapter's own deferred update", |f| {
            f.callbacks().first().cloned()
        })
        .await;
    assert_eq!((callback.kind, callback.accepted), (6, true));
    assert!(
        callback.after >= Duration::from_millis(2400),
        "{:?}",
        callback.after
    );
    assert!(
        callback.after < Duration::from_secs(3),
        "{:?}",
        callback.after
    );

    h.adapter.answer_action(&action, "Approved").await.unwrap();
    assert_eq!(h.fake.callbacks().len(), 1, "one callback per interaction");
    let followups = h
        .fake
        .messages_in(channel)
        .into_iter()
        .filter(|m| m.interaction == Some(action.id.parse().unwrap()))
        .collect::<Vec<_>>();
    assert_eq!(followups.len(), 1);
    assert_eq!(
        (followups[0].content.as_str(), followups[0].flags),
        // Ephemeral, no link previews.
        ("Approved", 64 | 4)
    );
    h.finish().await;
}

#[tokio::test]
async fn rate_limits_wait_for_the_hint_and_outages_are_retried() {
    let h = Harness::start().await;
    let dm = h.fake.dm_channel(&alice());
    let to = target(dm, ChatKind::Direct);
    let path = format!("/api/v10/channels/{dm}/messages");

    // The adapter reports the hint as Discord gives it.
    h.fake.fail_next(Failure::RateLimited {
        retry_after: 0.5,
        global: false,
    });
    assert_eq!(
        h.adapter.send(&to, "one", &[]).await,
        Err(ChannelError::RateLimited {
            channel: "discord".into(),
            retry_after: Some(Duration::from_millis(500)),
        })
    );
    h.fake.fail_next(Failure::Status(502));
    assert!(matches!(
        h.adapter.send(&to, "two", &[]).await,
        Err(ChannelError::Unavailable { .. })
    ));
    assert!(h.fake.messages_in(dm).is_empty());

    // outbound::retrying honours it.
    h.fake.fail_next(Failure::RateLimited {
        retry_after: 0.5,
        global: false,
    });
    let started = Instant::now();
    outbound::send(&*h.adapter, &to, "after the limit", &[])
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    h.fake.fail_next(Failure::Status(502));
    h.fake.fail_next(Failure::Status(503));
    outbound::send(&*h.adapter, &to, "after the outage", &[])
        .await
        .unwrap();
    let contents: Vec<String> = h
        .fake
        .messages_in(dm)
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(contents, vec!["after the limit", "after the outage"]);
    // 2 direct calls, 2 for the limit, 3 for the outage.
    assert_eq!(posts_to(&h.fake, &path).len(), 7);
    h.finish().await;
}

#[tokio::test]
async fn a_refused_delivery_is_sent_again_by_resuming_the_session() {
    let mut h = Harness::start().await;
    let dm = h.fake.dm_channel(&alice());
    let first = h.fake.post(dm, &alice(), "first").send();
    let (message, delivery) = h.next_message().await;
    assert_eq!(message.id, first.to_string());
    delivery.settle(Disposition::Accepted);

    let second = h.fake.post(dm, &alice(), "second").send();
    let (message, delivery) = h.next_message().await;
    assert_eq!(message.id, second.to_string());
    delivery.settle(Disposition::Retry("storage is busy".into()));

    let (again, delivery) = h.next_message().await;
    assert_eq!(again, message, "the same message, with the same id");
    delivery.settle(Disposition::Accepted);
    let resumes = h.fake.resumes();
    assert_eq!(resumes.len(), 1);
    assert_eq!(resumes[0].replayed.len(), 1, "{resumes:?}");
    assert_eq!(resumes[0].seq + 1, resumes[0].replayed[0]);
    assert_eq!(h.fake.identifies(), 1);
    // The connection was closed to resume, not to end the session.
    assert!(h.fake.gateway_frames().contains(&json!({"close": 4000})));

    // And the flow goes on.
    h.fake.post(dm, &alice(), "third").send();
    let (message, delivery) = h.next_message().await;
    assert_eq!(message.text, "third");
    delivery.settle(Disposition::Accepted);
    h.finish().await;
}

#[tokio::test]
async fn a_duplicate_delivery_carries_the_same_id() {
    let mut h = Harness::start().await;
    let dm = h.fake.dm_channel(&alice());
    let id = h.fake.post(dm, &alice(), "hello").send();
    let (first, delivery) = h.next_message().await;
    delivery.settle(Disposition::Accepted);
    h.fake.redeliver_message(id);
    let (second, delivery) = h.next_message().await;
    assert_eq!(second, first);
    delivery.settle(Disposition::Duplicate);
    h.fake.post(dm, &alice(), "next").send();
    let (next, delivery) = h.next_message().await;
    assert_eq!(next.text, "next");
    delivery.settle(Disposition::Accepted);
    h.finish().await;
}

#[tokio::test]
async fn a_slash_command_is_deferred_after_settling_and_answered_in_place() {
    let mut h = Harness::start().await;
    let dm = h.fake.dm_channel(&alice());
    let pushed = h.fake.slash_command(dm, &alice(), "reset");
    let (message, delivery) = h.next_message().await;
    assert_eq!(message.id, pushed.id.to_string());
    assert_eq!(message.text, "/reset");
    assert_eq!(message.conversation, Conversation::direct(dm.to_string()));
    assert_eq!(message.sender.id, alice().id.to_string());
    assert!(message.mentioned);
    let reply = message.reply.clone().expect("the interaction's context");
    assert!(reply.contains(&pushed.token));
    // Nothing is acknowledged before the daemon settles.
    assert!(h.fake.callbacks().is_empty());
    delivery.settle(Disposition::Accepted);
    let callback = h
        .fake
        .wait_until("the deferred response", |f| f.callbacks().first().cloned())
        .await;
    assert_eq!((callback.kind, callback.accepted), (5, true));
    assert!(callback.after < Duration::from_secs(3));

    let to = Target {
        conversation: message.conversation.clone(),
        reply: Some(reply),
    };
    let first = h
        .adapter
        .send(&to, "Started a new conversation.", &[])
        .await
        .unwrap();
    let second = h.adapter.send(&to, "Anything else?", &[]).await.unwrap();
    h.adapter
        .edit(&to, &first, "Started a new conversation. ✓", &[])
        .await
        .unwrap();
    let webhook = format!("/api/v10/webhooks/{}/{}", BOT_ID, pushed.token);
    let paths: Vec<(String, String)> = h
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/api/v10/webhooks/"))
        .map(|r| (r.method, r.path))
        .collect();
    assert_eq!(
        paths,
        vec![
            ("PATCH".to_owned(), format!("{webhook}/messages/@original")),
            ("POST".to_owned(), webhook.clone()),
            (
                "PATCH".to_owned(),
                format!("{webhook}/messages/{}", first.0)
            ),
        ]
    );
    let messages = h.fake.messages_in(dm);
    let shown: Vec<(&str, Option<u64>)> = messages
        .iter()
        .map(|m| (m.content.as_str(), m.interaction))
        .collect();
    assert_eq!(
        shown,
        vec![
            ("Started a new conversation. ✓", Some(pushed.id)),
            ("Anything else?", Some(pushed.id)),
        ]
    );
    assert_eq!(second.0, messages[1].id.to_string());
    h.finish().await;
}

/// A link in an answer (an injected model can write one with a secret in
/// it) must not make Discord's crawler fetch it: every message Flynn
/// creates or edits, streaming partial edits and interaction answers
/// included, carries SUPPRESS_EMBEDS.
#[tokio::test]
async fn links_in_answers_are_never_unfurled() {
    let mut h = Harness::start().await;
    let dm = h.fake.dm_channel(&alice());
    let to = target(dm, ChatKind::Direct);
    let id = h
        .adapter
        .send(&to, "See https://attacker.example/?d=", &[])
        .await
        .unwrap();
    h.adapter
        .edit(&to, &id, "See https://attacker.example/?d=secret", &[])
        .await
        .unwrap();
    let buttons = [Button {
        label: "Approve".into(),
        data: "y:1".into(),
        style: ButtonStyle::Primary,
    }];
    h.adapter
        .edit(&to, &id, "See https://attacker.example/?d=secret", &buttons)
        .await
        .unwrap();

    let pushed = h.fake.slash_command(dm, &alice(), "status");
    let (message, delivery) = h.next_message().await;
    delivery.settle(Disposition::Accepted);
    h.fake
        .wait_until("the deferred response", |f| f.callbacks().first().cloned())
        .await;
    let to = Target {
        conversation: message.conversation.clone(),
        reply: message.reply.clone(),
    };
    let first = h
        .adapter
        .send(&to, "https://attacker.example/a", &[])
        .await
        .unwrap();
    h.adapter
        .send(&to, "https://attacker.example/b", &[])
        .await
        .unwrap();
    h.adapter
        .edit(&to, &first, "https://attacker.example/c", &[])
        .await
        .unwrap();

    let channel = format!("/api/v10/channels/{dm}/messages");
    let webhook = format!("/api/v10/webhooks/{}/{}", BOT_ID, pushed.token);
    let sent: Vec<(String, Value)> = h
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with(&channel) || r.path.starts_with(&webhook))
        .map(|r| (r.method, r.body["flags"].clone()))
        .collect();
    let expected: Vec<(String, Value)> = ["POST", "PATCH", "PATCH", "PATCH", "POST", "PATCH"]
        .into_iter()
        .map(|method| (method.to_owned(), json!(4)))
        .collect();
    assert_eq!(sent, expected);
    let flags: Vec<u64> = h.fake.messages_in(dm).iter().map(|m| m.flags).collect();
    assert_eq!(flags, [4, 4, 4]);
    h.finish().await;
}

#[tokio::test]
async fn a_dropped_connection_is_resumed_and_missed_events_arrive_once() {
    let mut h = Harness::start().await;
    let dm = h.fake.dm_channel(&alice());
    h.fake.post(dm, &alice(), "before").send();
    let (message, delivery) = h.next_message().await;
    assert_eq!(message.text, "before");
    delivery.settle(Disposition::Accepted);
    let session = h.fake.session_id().unwrap();

    h.fake.hold_connections(true);
    h.fake.drop_connection();
    let missed = h.fake.post(dm, &alice(), "while away").send();
    assert!(!h.fake.is_connected());
    h.fake.hold_connections(false);

    let (message, delivery) = h.next_message().await;
    assert_eq!(message.id, missed.to_string());
    delivery.settle(Disposition::Accepted);
    let resumes = h.fake.resumes();
    assert_eq!(resumes.len(), 1);
    assert_eq!(resumes[0].session_id, session);
    assert_eq!(resumes[0].replayed, vec![resumes[0].seq + 1]);
    assert_eq!(h.fake.identifies(), 1);
    let resume = h
        .fake
        .gateway_frames()
        .into_iter()
        .find(|f| f["op"] == 6)
        .unwrap();
    assert_eq!(resume["d"]["session_id"], json!(session));
    assert_eq!(resume["d"]["seq"], json!(resumes[0].seq));

    h.fake.post(dm, &alice(), "after").send();
    let (message, delivery) = h.next_message().await;
    assert_eq!(message.text, "after", "the missed message came once");
    delivery.settle(Disposition::Accepted);
    h.finish().await;
}

#[tokio::test]
async fn a_message_sent_while_stopped_arrives_once_after_a_restart_by_resuming() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("channels").join("discord.json");
    let fake = FakeDiscord::start().await;
    let dm = fake.dm_channel(&alice());

    let mut first = Running::start(&fake, &state).await;
    fake.post(dm, &alice(), "before").send();
    let (message, delivery) = first.next_message().await;
    assert_eq!(message.text, "before");
    delivery.settle(Disposition::Accepted);
    let session = fake.session_id().unwrap();
    first.stop(&fake).await;

    let missed = fake.post(dm, &alice(), "while stopped").send();
    let mut second = Running::start(&fake, &state).await;
    let (message, delivery) = second.next_message().await;
    assert_eq!(message.id, missed.to_string());
    assert_eq!(message.text, "while stopped");
    delivery.settle(Disposition::Accepted);
    let resumes = fake.resumes();
    assert_eq!(resumes.len(), 1, "{resumes:?}");
    assert_eq!(resumes[0].session_id, session);
    assert_eq!(resumes[0].replayed, vec![resumes[0].seq + 1]);
    assert_eq!(fake.identifies(), 1, "resumed, not identified again");
    assert_eq!(fake.history_reads(), Vec::new(), "nothing to backfill");

    fake.post(dm, &alice(), "after").send();
    let (message, delivery) = second.next_message().await;
    assert_eq!(message.text, "after", "the missed message came once");
    delivery.settle(Disposition::Accepted);
    second.stop(&fake).await;
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn an_expired_session_identifies_again_and_the_missed_message_is_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("discord.json");
    let fake = FakeDiscord::start().await;
    let dm = fake.dm_channel(&alice());
    let room = fake.guild_channel();

    let mut first = Running::start(&fake, &state).await;
    let before = fake.post(dm, &alice(), "before").send();
    let (_, delivery) = first.next_message().await;
    delivery.settle(Disposition::Accepted);
    let in_room = fake
        .post(room, &bob(), &format!("<@{BOT_ID}> in the room"))
        .send();
    let (_, delivery) = first.next_message().await;
    delivery.settle(Disposition::Accepted);
    let expired = fake.session_id().unwrap();
    first.stop(&fake).await;

    fake.expire_session();
    let missed = fake.post(dm, &alice(), "while the session expired").send();
    let missed_in_room = fake
        .post(room, &bob(), &format!("<@{BOT_ID}> are you there?"))
        .send();
    let mut second = Running::start(&fake, &state).await;
    let (message, delivery) = second.next_message().await;
    delivery.settle(Disposition::Accepted);
    let (other, delivery) = second.next_message().await;
    delivery.settle(Disposition::Accepted);
    let mut got = vec![
        (message.id, message.text, message.conversation.kind),
        (other.id, other.text, other.conversation.kind),
    ];
    got.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want = vec![
        (
            missed.to_string(),
            "while the session expired".to_owned(),
            ChatKind::Direct,
        ),
        (
            missed_in_room.to_string(),
            "are you there?".to_owned(),
            ChatKind::Group,
        ),
    ];
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, want);
    assert_eq!(
        fake.identifies(),
        2,
        "the refused RESUME fell back to IDENTIFY"
    );
    let resume = fake
        .gateway_frames()
        .into_iter()
        .find(|f| f["op"] == 6)
        .expect("a RESUME was tried first");
    assert_eq!(resume["d"]["session_id"], json!(expired));
    assert_ne!(fake.session_id(), Some(expired));
    let mut reads: Vec<(u64, Option<u64>)> = fake
        .history_reads()
        .iter()
        .map(|r| (r.channel, r.after))
        .collect();
    reads.sort();
    let mut expected = vec![(dm, Some(before)), (room, Some(in_room))];
    expected.sort();
    assert_eq!(reads, expected);

    fake.post(dm, &alice(), "after").send();
    let (message, delivery) = second.next_message().await;
    assert_eq!(message.text, "after", "each missed message came once");
    delivery.settle(Disposition::Accepted);
    second.stop(&fake).await;
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_flood_past_the_queue_is_replayed_by_resuming_not_held_or_lost() {
    const FLOOD: usize = 300;
    let mut h = Harness::start().await;
    let dm = h.fake.dm_channel(&alice());
    h.fake.post(dm, &alice(), "0").send();
    // The daemon holds the first delivery while the flood arrives.
    let (_, held) = h.next_message().await;
    for i in 1..=FLOOD {
        h.fake.post(dm, &alice(), &i.to_string()).send();
    }
    let last = h.fake.sequence();
    h.fake.request_heartbeat();
    h.fake
        .wait_until("the adapter to have read the flood", |f| {
            f.gateway_frames()
                .iter()
                .any(|frame| frame["op"] == 1 && frame["d"] == json!(last))
                .then_some(())
        })
        .await;
    held.settle(Disposition::Accepted);
    for i in 1..=FLOOD {
        let (message, delivery) = h.next_message().await;
        assert_eq!(message.text, i.to_string(), "in order, once each");
        delivery.settle(Disposition::Accepted);
    }
    // What did not fit behind the held delivery was not kept in memory:
    // Discord sent it again.
    let resumes = h.fake.resumes();
    assert_eq!(resumes.len(), 1, "{resumes:?}");
    assert_eq!(
        resumes[0].replayed.len(),
        FLOOD - flynn_channels::discord::MAX_QUEUED
    );
    assert_eq!(h.fake.identifies(), 1);
    h.finish().await;
}

#[tokio::test]
async fn a_reconnect_request_is_followed_by_a_resume() {
    let h = Harness::start().await;
    let dm = h.fake.dm_channel(&alice());
    h.fake.request_reconnect();
    h.fake
        .wait_until("a resume", |f| (!f.resumes().is_empty()).then_some(()))
        .await;
    assert!(h.fake.gateway_frames().contains(&json!({"close": 4000})));
    h.still_answers_in_the_first_session(dm).await;
}

#[tokio::test]
async fn an_ignored_slash_command_is_answered_privately() {
    let mut h = Harness::start().await;
    let channel = h.fake.guild_channel();
    let pushed = h.fake.slash_command(channel, &bob(), "status");
    let (message, delivery) = h.next_message().await;
    assert_eq!(
        message.conversation,
        Conversation::group(channel.to_string())
    );
    assert_eq!(message.text, "/status");
    delivery.settle(Disposition::Ignored("sender not allowed".into()));
    let callback = h
        .fake
        .wait_until("the answer", |f| f.callbacks().first().cloned())
        .await;
    assert_eq!(callback.interaction, pushed.id);
    assert_eq!((callback.kind, callback.accepted), (4, true));
    assert_eq!(callback.data["flags"], 64 | 4);
    assert_eq!(
        callback.data["content"],
        "Flynn did not take this command: sender not allowed"
    );
    h.finish().await;
}

#[tokio::test]
async fn heartbeats_are_sent_and_acknowledged() {
    let h = Harness::start_with(FakeDiscordOptions {
        heartbeat_interval_ms: 100,
        ..FakeDiscordOptions::default()
    })
    .await;
    let dm = h.fake.dm_channel(&alice());
    h.fake.post(dm, &alice(), "hi").send();
    let beats = h
        .fake
        .wait_until("three heartbeats", |f| {
            let beats: Vec<Value> = f
                .gateway_frames()
                .into_iter()
                .filter(|f| f["op"] == 1)
                .collect();
            (beats.len() >= 3).then_some(beats)
        })
        .await;
    // Each carries the last sequence number (null only before READY).
    assert!(
        beats.iter().all(|b| b["d"].is_u64() || b["d"].is_null()),
        "{beats:?}"
    );
    assert!(beats.last().is_some_and(|b| b["d"].is_u64()), "{beats:?}");
    assert_eq!(h.fake.identifies(), 1);
    assert!(
        h.fake.resumes().is_empty(),
        "acknowledged heartbeats keep the connection"
    );
    h.finish().await;
}

#[tokio::test]
async fn unacknowledged_heartbeats_drop_the_connection_and_resume_it() {
    let h = Harness::start_with(FakeDiscordOptions {
        heartbeat_interval_ms: 200,
        ..FakeDiscordOptions::default()
    })
    .await;
    let dm = h.fake.dm_channel(&alice());
    let session = h.fake.session_id().unwrap();
    h.fake.withhold_heartbeat_acks(true);
    h.fake
        .wait_until("a resume after the heartbeats went unanswered", |f| {
            (!f.resumes().is_empty()).then_some(())
        })
        .await;
    h.fake.withhold_heartbeat_acks(false);
    assert_eq!(h.fake.resumes()[0].session_id, session);
    // Dropped, not closed: a close frame would be an answer to nothing.
    assert!(
        !h.fake
            .gateway_frames()
            .iter()
            .any(|f| f.get("close").is_some()),
        "{:?}",
        h.fake.gateway_frames()
    );
    h.still_answers_in_the_first_session(dm).await;
}

#[tokio::test]
async fn attachments_arrive_named_and_are_downloaded_on_request_without_the_token() {
    let mut h = Harness::start().await;
    let dm = h.fake.dm_channel(&alice());
    let png = vec![0x89, b'P', b'N', b'G', 1, 2, 3];
    h.fake
        .post(dm, &alice(), "look")
        .attach("chart.png", "image/png", png.clone())
        .attach("notes.pdf", "application/pdf", b"%PDF-1.7".to_vec())
        .send();
    let (message, delivery) = h.next_message().await;
    let cdn = |h: &Harness| -> Vec<_> {
        h.fake
            .requests()
            .into_iter()
            .filter(|r| r.path.starts_with("/attachments/"))
            .collect()
    };
    // Delivered before anything is fetched: the daemon decides first.
    assert_eq!(cdn(&h).len(), 0);
    let kinds: Vec<(AttachmentKind, Option<&str>, &str, Option<u64>)> = message
        .attachments
        .iter()
        .map(|a| (a.kind, a.name.as_deref(), a.media_type.as_str(), a.size))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (
                AttachmentKind::Image,
                Some("chart.png"),
                "image/png",
                Some(png.len() as u64)
            ),
            (
                AttachmentKind::File,
                Some("notes.pdf"),
                "application/pdf",
                Some(8)
            ),
        ]
    );
    delivery.settle(Disposition::Accepted);
    let limit = 20 * 1024 * 1024;
    let image = h
        .adapter
        .download(&message.attachments[0], limit)
        .await
        .unwrap();
    let pdf = h
        .adapter
        .download(&message.attachments[1], limit)
        .await
        .unwrap();
    assert_eq!((&image[..], &pdf[..]), (&png[..], &b"%PDF-1.7"[..]));
    // Over the limit asked for: refused before the CDN is asked.
    let refused = h
        .adapter
        .download(&message.attachments[1], 4)
        .await
        .unwrap_err();
    assert!(
        matches!(refused, ChannelError::Rejected { .. }),
        "{refused}"
    );
    let fetched = cdn(&h);
    assert_eq!(fetched.len(), 2);
    assert!(fetched.iter().all(|r| r.header("authorization").is_none()));
    h.finish().await;
}

#[tokio::test]
async fn an_invalid_token_is_reported_as_unauthorized() {
    let fake = FakeDiscord::start().await;
    let adapter = DiscordAdapter::new(&config(&fake, "not-the-token")).unwrap();
    let (sink, _rx) = flynn_channels::Inbound::detached("discord");
    let outcome = tokio::time::timeout(WAIT, adapter.connect(sink, CancellationToken::new()))
        .await
        .unwrap();
    assert!(
        matches!(&outcome, Err(ChannelError::Unauthorized { detail, .. }) if detail.contains("4004")),
        "{outcome:?}"
    );
    // REST says the same with 401.
    let dm = fake.dm_channel(&alice());
    let sent = adapter.send(&target(dm, ChatKind::Direct), "hi", &[]).await;
    assert!(
        matches!(sent, Err(ChannelError::Unauthorized { .. })),
        "{sent:?}"
    );
    assert_eq!(fake.violations(), Vec::<String>::new());

    // The registry shows it as refused credentials.
    let (registry, _deliveries) = Registry::new(Backoff::default());
    registry
        .start(Arc::new(
            DiscordAdapter::new(&config(&fake, "still-wrong")).unwrap(),
        ))
        .await;
    let status = fake_wait(|| {
        registry
            .status()
            .into_iter()
            .find(|s| s.state == ChannelState::Retrying)
    })
    .await;
    assert!(status.unauthorized, "{status:?}");
    registry.shutdown().await;
}

#[tokio::test]
async fn missing_message_content_intent_says_what_to_switch_on() {
    let fake = FakeDiscord::start_with(FakeDiscordOptions {
        privileged_intents: 0,
        ..FakeDiscordOptions::default()
    })
    .await;
    let adapter = DiscordAdapter::new(&config(&fake, &fake.token())).unwrap();
    let (sink, _rx) = flynn_channels::Inbound::detached("discord");
    let outcome = tokio::time::timeout(WAIT, adapter.connect(sink, CancellationToken::new()))
        .await
        .unwrap();
    assert!(
        matches!(&outcome, Err(ChannelError::Rejected { detail, .. }) if detail.contains("4014") && detail.contains("Message Content Intent")),
        "{outcome:?}"
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_registry_reports_the_bot_by_name() {
    let fake = FakeDiscord::start().await;
    let (registry, _deliveries) = Registry::new(Backoff::default());
    registry
        .start(Arc::new(
            DiscordAdapter::new(&config(&fake, &fake.token())).unwrap(),
        ))
        .await;
    let status = fake_wait(|| {
        registry
            .status()
            .into_iter()
            .find(|s| s.state == ChannelState::Connected)
    })
    .await;
    assert_eq!(status.detail.as_deref(), Some("flynn-test"));
    registry.shutdown().await;
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn bad_targets_and_config_are_refused_before_any_request() {
    let fake = FakeDiscord::start().await;
    let adapter = DiscordAdapter::new(&config(&fake, &fake.token())).unwrap();
    let sent = adapter
        .send(
            &Target {
                conversation: Conversation::direct("../../users/@me"),
                reply: None,
            },
            "hi",
            &[],
        )
        .await;
    assert!(
        matches!(sent, Err(ChannelError::Rejected { .. })),
        "{sent:?}"
    );
    let unknown = adapter.send(&target(42, ChatKind::Group), "hi", &[]).await;
    assert!(
        matches!(&unknown, Err(ChannelError::Rejected { detail, .. }) if detail.contains("Unknown Channel (code 10003)")),
        "{unknown:?}"
    );
    // The fake flags the unknown channel: Discord would have refused it.
    assert_eq!(fake.violations().len(), 1);
    assert!(fake.requests().iter().all(|r| !r.path.contains("..")));
    let action = Action {
        id: "1".into(),
        conversation: Conversation::direct("1"),
        sender: Sender {
            id: "2".into(),
            name: None,
        },
        data: "y:1".into(),
        message: None,
        reply: None,
    };
    assert!(adapter.answer_action(&action, "").await.is_err());

    let mut bad = config(&fake, "");
    assert!(matches!(
        DiscordAdapter::new(&bad),
        Err(ChannelError::Unauthorized { .. })
    ));
    bad = config(&fake, "token");
    bad.gateway_url = Some("http://example.com".into());
    assert!(matches!(
        DiscordAdapter::new(&bad),
        Err(ChannelError::Rejected { .. })
    ));
}

/// Polls a registry's status (it has no change signal) until `check`
/// finds what it wants.
async fn fake_wait<T>(mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting on the registry"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ------------------------------------------------------------ files out

/// An adapter that only sends (no gateway connection).
fn sender(fake: &FakeDiscord) -> DiscordAdapter {
    DiscordAdapter::new(&config(fake, &fake.token())).unwrap()
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

/// The first bytes of a PNG file (enough for the fakes and the tests).
const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";

#[tokio::test]
async fn a_picture_goes_as_an_attachment_with_its_caption_as_plain_text() {
    let fake = FakeDiscord::start().await;
    let adapter = sender(&fake);
    let channel = fake.guild_channel();
    let mut chart = outgoing(FileKind::Image, "chart.png", "image/png", PNG);
    chart.caption = Some("Sales *by* month @everyone".to_owned());

    let id = adapter
        .send_file(&target(channel, ChatKind::Group), &chart)
        .await
        .unwrap();

    let files = fake.files();
    assert_eq!(files.len(), 1, "{files:?}");
    let file = &files[0];
    assert_eq!(id, MessageId(file.message.to_string()));
    assert_eq!(
        (
            file.channel,
            file.filename.as_str(),
            file.content_type.as_deref()
        ),
        (channel, "chart.png", Some("image/png"))
    );
    assert_eq!(&file.data[..], PNG);
    // Markdown shows as typed; the mention pings nobody.
    assert_eq!(file.content, "Sales \\*by\\* month @\u{200b}everyone");
    // The message as Discord returns it, with the attachment's CDN URL.
    let messages = fake.messages_in(channel);
    assert_eq!(messages.len(), 1);
    let attachment = &messages[0].attachments[0];
    assert_eq!(attachment["filename"], "chart.png");
    assert_eq!(attachment["size"], PNG.len());
    assert_eq!(attachment["content_type"], "image/png");
    assert_eq!(attachment["id"], file.id.to_string());
    assert_eq!(messages[0].allowed_mentions, json!({"parse": []}));
    // The upload as sent: the message in payload_json, the file in files[0].
    let upload = fake
        .requests()
        .into_iter()
        .find(|r| r.path == format!("/api/v10/channels/{channel}/messages"))
        .unwrap();
    assert!(
        upload
            .header("content-type")
            .is_some_and(|t| t.starts_with("multipart/form-data; boundary=")),
        "{:?}",
        upload.header("content-type")
    );
    assert_eq!(
        upload.body,
        json!({
            "content": "Sales \\*by\\* month @\u{200b}everyone",
            "allowed_mentions": {"parse": []},
            "flags": 4,
            "attachments": [{"id": 0, "filename": "chart.png"}],
        })
    );
    // The bytes are what the CDN serves back.
    let url = attachment["url"].as_str().unwrap();
    let fetched = adapter
        .download(
            &flynn_channels::Attachment {
                kind: AttachmentKind::Image,
                name: Some("chart.png".into()),
                media_type: "image/png".into(),
                size: None,
                source: url.to_owned(),
            },
            1024,
        )
        .await
        .unwrap();
    assert_eq!(&fetched[..], PNG);
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn documents_and_voice_notes_go_into_a_thread_as_attachments() {
    let fake = FakeDiscord::start().await;
    let adapter = sender(&fake);
    let parent = fake.guild_channel();
    let thread = fake.thread(parent);
    // A thread is a channel of its own: the conversation's chat is its id.
    let to = Target {
        conversation: Conversation {
            chat: thread.to_string(),
            thread: None,
            kind: ChatKind::Group,
        },
        reply: None,
    };
    let mut report = outgoing(
        FileKind::Document,
        "reports/Q3 report.pdf",
        "application/pdf",
        b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n",
    );
    report.caption = Some("The Q3 report".to_owned());
    adapter.send_file(&to, &report).await.unwrap();
    let voice = outgoing(
        FileKind::Voice,
        "answer.ogg",
        "audio/ogg",
        b"OggS\0\x02voice",
    );
    adapter.send_file(&to, &voice).await.unwrap();

    let sent: Vec<(u64, String, Option<String>, String)> = fake
        .files()
        .into_iter()
        .map(|f| (f.channel, f.filename, f.content_type, f.content))
        .collect();
    assert_eq!(
        sent,
        vec![
            (
                thread,
                "Q3 report.pdf".to_owned(),
                Some("application/pdf".to_owned()),
                "The Q3 report".to_owned()
            ),
            (
                thread,
                "answer.ogg".to_owned(),
                Some("audio/ogg".to_owned()),
                String::new()
            ),
        ]
    );
    assert!(fake.messages_in(parent).is_empty());
    assert_eq!(fake.violations(), Vec::<String>::new());
}

/// A small Ogg Opus stream: its head, its tags, and `frames` 20 ms
/// frames of `len` bytes on one page.
fn ogg_opus(frames: usize, len: usize) -> Vec<u8> {
    let page = |granule: u64, packets: &[Vec<u8>]| {
        let mut page = b"OggS\0\0".to_vec();
        page.extend_from_slice(&granule.to_le_bytes());
        page.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        page.push(packets.len() as u8);
        page.extend(packets.iter().map(|p| p.len() as u8));
        for packet in packets {
            page.extend_from_slice(packet);
        }
        page
    };
    let head = b"OpusHead\x01\x01\0\0\x80\xbb\0\0\0\0\0".to_vec();
    let mut frame = vec![31u8 << 3];
    frame.resize(len, 0x55);
    let mut ogg = page(0, &[head]);
    ogg.extend(page(0, &[b"OpusTags\0\0\0\0\0\0\0\0".to_vec()]));
    ogg.extend(page(frames as u64 * 960, &vec![frame; frames]));
    ogg
}

/// An Ogg Opus voice note goes as Discord's voice message (its flag, its
/// length, a waveform, no text); where the channel allows none, as an
/// audio file.
#[tokio::test]
async fn an_ogg_opus_voice_note_goes_as_a_voice_message_where_allowed() {
    let fake = FakeDiscord::start().await;
    let adapter = sender(&fake);
    let open = fake.guild_channel();
    let closed = fake.guild_channel();
    fake.forbid_voice_messages(closed);
    let note = outgoing(
        FileKind::Voice,
        "answer.ogg",
        "audio/ogg",
        &ogg_opus(75, 40),
    );
    adapter
        .send_file(&target(open, ChatKind::Group), &note)
        .await
        .unwrap();
    adapter
        .send_file(&target(closed, ChatKind::Group), &note)
        .await
        .unwrap();

    /// A file's channel, name, and voice message length and points.
    type Shown<'a> = (u64, &'a str, Option<(f64, usize)>);
    let files = fake.files();
    let sent: Vec<Shown<'_>> = files
        .iter()
        .map(|f| {
            (
                f.channel,
                f.filename.as_str(),
                f.voice
                    .as_ref()
                    .map(|v| (v.duration_secs, v.waveform.len())),
            )
        })
        .collect();
    // 75 frames of 20 ms: 1.5 s, a point per 100 ms.
    assert_eq!(
        sent,
        vec![
            (open, "voice-message.ogg", Some((1.5, 15))),
            (closed, "answer.ogg", None),
        ]
    );
    assert_eq!(files[0].data, ogg_opus(75, 40));
    assert_eq!(fake.messages_in(open)[0].flags, 1 << 13);
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_file_over_the_upload_limit_is_refused_before_anything_is_sent() {
    let fake = FakeDiscord::start().await;
    let adapter = sender(&fake);
    let channel = fake.guild_channel();
    for kind in [
        FileKind::Image,
        FileKind::Document,
        FileKind::Audio,
        FileKind::Voice,
    ] {
        assert_eq!(adapter.upload_limit(kind), 10 * 1024 * 1024, "{kind:?}");
    }
    let big = vec![0u8; 10 * 1024 * 1024 + 1];
    let error = adapter
        .send_file(
            &target(channel, ChatKind::Group),
            &outgoing(
                FileKind::Document,
                "big.bin",
                "application/octet-stream",
                &big,
            ),
        )
        .await;
    assert_eq!(
        error,
        Err(ChannelError::Rejected {
            channel: "discord".into(),
            detail: "the file has 10.0 MB, over the 10 MB limit".into(),
        })
    );
    assert_eq!(fake.requests(), Vec::new());
}

#[tokio::test]
async fn a_rate_limited_upload_is_sent_again_after_the_hint() {
    let fake = FakeDiscord::start().await;
    let adapter = sender(&fake);
    let channel = fake.guild_channel();
    fake.fail_next(Failure::RateLimited {
        retry_after: 0.2,
        global: false,
    });
    fake.fail_next(Failure::Status(502));
    let started = Instant::now();
    adapter
        .send_file(
            &target(channel, ChatKind::Group),
            &outgoing(FileKind::Image, "chart.png", "image/png", PNG),
        )
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
    let path = format!("/api/v10/channels/{channel}/messages");
    assert_eq!(posts_to(&fake, &path).len(), 3);
    assert_eq!(fake.files().len(), 1);
    assert_eq!(fake.violations(), Vec::<String>::new());
}

/// A multipart body by hand: `(name, filename, content type, data)`.
fn form(parts: &[(&str, Option<&str>, &str, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "flynn-test-boundary";
    let mut body = Vec::new();
    for (name, filename, content_type, data) in parts {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let disposition = match filename {
            Some(file) => format!("form-data; name=\"{name}\"; filename=\"{file}\""),
            None => format!("form-data; name=\"{name}\""),
        };
        body.extend_from_slice(
            format!("Content-Disposition: {disposition}\r\nContent-Type: {content_type}\r\n\r\n")
                .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[tokio::test]
async fn the_fake_refuses_uploads_discord_refuses() {
    let fake = FakeDiscord::start().await;
    let channel = fake.guild_channel();
    let url = format!("{}/api/v10/channels/{channel}/messages", fake.api_url());
    let http = reqwest::Client::new();
    let post = |(content_type, body): (String, Vec<u8>)| {
        http.post(&url)
            .header("authorization", format!("Bot {}", fake.token()))
            .header("user-agent", "DiscordBot (https://example.invalid, 1)")
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let answer = |response: reqwest::Response| async move {
        let status = response.status().as_u16();
        (status, response.json::<Value>().await.unwrap())
    };
    let payload = br#"{"content":"hi","attachments":[{"id":0,"filename":"a.png"}]}"#;

    // Over the limit: 413, code 40005.
    let big = vec![7u8; 10 * 1024 * 1024 + 1];
    let (status, body) = answer(
        post(form(&[
            ("payload_json", None, "application/json", payload),
            ("files[0]", Some("a.png"), "image/png", &big),
        ]))
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(
        (status, body),
        (
            413,
            json!({"message": "Request entity too large", "code": 40005})
        )
    );
    // An attachment naming no file part.
    let (status, body) = answer(
        post(form(&[
            (
                "payload_json",
                None,
                "application/json",
                br#"{"content":"hi","attachments":[{"id":1,"filename":"a.png"}]}"#,
            ),
            ("files[0]", Some("a.png"), "image/png", PNG),
        ]))
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["code"], 50035);
    assert_eq!(
        body["errors"]["attachments"]["0"]["id"]["_errors"][0]["code"],
        "ATTACHMENT_NOT_FOUND"
    );
    // payload_json that is not JSON.
    let (status, body) = answer(
        post(form(&[
            ("payload_json", None, "application/json", b"{content: hi"),
            ("files[0]", Some("a.png"), "image/png", PNG),
        ]))
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((status, body["code"].clone()), (400, json!(50109)));
    // A body cut short (no closing boundary).
    let (content_type, mut body) = form(&[("payload_json", None, "application/json", payload)]);
    body.truncate(body.len() - 30);
    let (status, _) = answer(post((content_type, body)).await.unwrap()).await;
    assert_eq!(status, 400);

    assert!(fake.files().is_empty());
    assert_eq!(fake.violations().len(), 4, "{:?}", fake.violations());
}
