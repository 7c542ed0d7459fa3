//! The channel router: deliveries from an in-memory adapter through the
//! access rules into sessions, answers and confirmations back.

use std::sync::Arc;
use std::time::Duration;

use flynn_channels::{
    Action, Attachment, AttachmentKind, Backoff, Conversation, Disposition, InboundEvent,
    InboundMessage, MessageId, Registry, Sender,
};
use flynn_chat::ChannelRouter;
use flynn_protocol::Message;
use flynn_protocol::config::{ChannelsConfig, DmPolicy, SenderRateLimit};
use flynn_sessions::{Conversations, Pairing};
use flynn_testkit::chat::{MemoryChannel, Out, telegram_channels};

use crate::{Harness, ScriptedModel, Setup, confirm_shell, key, tool_use};

pub(crate) async fn router(
    h: &Harness,
    adapter: Arc<MemoryChannel>,
    config: &ChannelsConfig,
) -> ChannelRouter {
    let (registry, deliveries) = Registry::new(Backoff::default());
    let router = ChannelRouter::new(h.manager.clone(), registry.clone(), config);
    router.spawn(deliveries);
    registry.start(adapter).await;
    router
}

pub(crate) fn dm(id: &str, from: &str, text: &str) -> InboundEvent {
    InboundEvent::Message(InboundMessage {
        id: id.into(),
        conversation: Conversation::direct(from),
        sender: Sender {
            id: from.into(),
            name: Some(format!("user{from}")),
        },
        mentioned: true,
        text: text.into(),
        attachments: vec![],
        reply: None,
    })
}

/// A direct message from `from` with a file.
fn dm_with_file(id: &str, from: &str, text: &str, file: &str, data: &'static str) -> InboundEvent {
    let InboundEvent::Message(mut message) = dm(id, from, text) else {
        unreachable!("dm makes a message");
    };
    message.attachments = vec![Attachment {
        kind: AttachmentKind::File,
        name: Some(file.into()),
        media_type: "text/plain".into(),
        size: Some(data.len() as u64),
        // The memory platform's file ids are the files' contents.
        source: data.into(),
    }];
    InboundEvent::Message(message)
}

fn in_group(id: &str, from: &str, text: &str, mentioned: bool) -> InboundEvent {
    InboundEvent::Message(InboundMessage {
        id: id.into(),
        conversation: Conversation::group("-100"),
        sender: Sender {
            id: from.into(),
            name: None,
        },
        mentioned,
        text: text.into(),
        attachments: vec![],
        reply: None,
    })
}

pub(crate) fn sent_texts(out: &[Out]) -> Vec<String> {
    out.iter()
        .filter_map(|o| match o {
            Out::Send { text, .. } => Some(text.clone()),
            _ => None,
        })
        .collect()
}

/// The text a message shows last (its send, then its edits).
fn final_text(out: &[Out], id: &str) -> Option<String> {
    out.iter()
        .filter_map(|o| match o {
            Out::Send { id: i, text, .. } | Out::Edit { id: i, text, .. } if i == id => {
                Some(text.clone())
            }
            _ => None,
        })
        .next_back()
}

#[tokio::test]
async fn a_direct_message_is_answered_once_even_when_delivered_twice() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| c.allow_from = vec!["42".into()]);
    let _router = router(&h, adapter.clone(), &config).await;

    assert_eq!(
        adapter.deliver(dm("u1", "42", "hello")).await,
        Disposition::Accepted
    );
    let out = adapter
        .until(|out| final_text(out, "m0").as_deref() == Some("re: hello"))
        .await;
    assert!(matches!(&out[0], Out::Send { chat, .. } if chat == "42"));
    // The platform delivers it again: stored once, answered once.
    assert_eq!(
        adapter.deliver(dm("u1", "42", "hello")).await,
        Disposition::Duplicate
    );
    assert_eq!(model.requests().len(), 1);
    let history = h.history(&key("telegram:42")).await;
    assert_eq!(history.len(), 2);
    assert_eq!(history[0], Message::user("hello"));
}

#[tokio::test]
async fn groups_need_a_mention_and_an_allowed_sender() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| c.allow_from = vec!["42".into()]);
    let _router = router(&h, adapter.clone(), &config).await;

    assert!(matches!(
        adapter.deliver(in_group("g1", "42", "chatting", false)).await,
        Disposition::Ignored(why) if why.contains("mention")
    ));
    // A stranger in the group gets nothing, not even a pairing code.
    assert!(matches!(
        adapter.deliver(in_group("g2", "7", "hey bot", true)).await,
        Disposition::Ignored(why) if why.contains("not allowed")
    ));
    assert_eq!(
        adapter
            .deliver(in_group("g3", "42", "what's up", true))
            .await,
        Disposition::Accepted
    );
    let out = adapter.until(|out| !sent_texts(out).is_empty()).await;
    assert!(matches!(&out[0], Out::Send { chat, .. } if chat == "-100"));
    adapter
        .until(|out| final_text(out, "m0").as_deref() == Some("re: what's up"))
        .await;
    assert_eq!(model.requests().len(), 1);
}

/// `in_group`, in another group.
fn in_group_of(group: &str, id: &str, from: &str, text: &str, mentioned: bool) -> InboundEvent {
    let InboundEvent::Message(mut message) = in_group(id, from, text, mentioned) else {
        unreachable!("in_group makes a message");
    };
    message.conversation = Conversation::group(group);
    InboundEvent::Message(message)
}

#[tokio::test]
async fn a_group_of_its_own_may_go_without_mentions() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let adapter = MemoryChannel::new(4096);
    let config: ChannelsConfig = serde_json::from_value(serde_json::json!({
        "telegram": {
            "bot_token": "1:x",
            "allow_from": ["42"],
            "groups": {"-200": {"requireMention": false}, "-300": {"require_mention": true}},
        }
    }))
    .unwrap();
    let _router = router(&h, adapter.clone(), &config).await;
    // The family group answers without a mention…
    assert_eq!(
        adapter
            .deliver(in_group_of("-200", "f1", "42", "dinner at 7?", false))
            .await,
        Disposition::Accepted
    );
    adapter
        .until(|out| final_text(out, "m0").as_deref() == Some("re: dinner at 7?"))
        .await;
    // …the others keep the channel's rule (and -300's own).
    for group in ["-100", "-300"] {
        assert!(matches!(
            adapter.deliver(in_group_of(group, &format!("x{group}"), "42", "chatting", false)).await,
            Disposition::Ignored(why) if why.contains("mention")
        ));
    }
    // `*` sets every group's rule, a group's own entry wins over it.
    let config: ChannelsConfig = serde_json::from_value(serde_json::json!({
        "telegram": {
            "bot_token": "1:x",
            "groups": {"*": {"require_mention": false}, "-300": {"require_mention": true}},
        }
    }))
    .unwrap();
    let access = config.access().remove(0).1;
    assert!(!access.mention_required("-100"));
    assert!(access.mention_required("-300"));
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test]
async fn an_unknown_sender_is_paired_and_then_answered() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let adapter = MemoryChannel::new(4096);
    let router = router(&h, adapter.clone(), &telegram_channels(|_| {})).await;

    assert!(matches!(
        adapter.deliver(dm("p1", "99", "hi")).await,
        Disposition::Ignored(_)
    ));
    let out = adapter.until(|out| !sent_texts(out).is_empty()).await;
    let pending = h.store.pairing_pending(0).await.unwrap().remove(0);
    assert_eq!(
        (pending.sender.as_str(), pending.name.as_deref()),
        ("99", Some("user99"))
    );
    let code = pending.code;
    let told = &sent_texts(&out)[0];
    assert!(
        told.contains(&code) && told.contains(&format!("flynn pairing approve telegram {code}")),
        "{told}"
    );
    assert!(model.requests().is_empty(), "nothing reached the model");
    // Writing again while the code waits: no second code.
    assert!(matches!(
        adapter.deliver(dm("p1b", "99", "hello?")).await,
        Disposition::Ignored(_)
    ));

    let approved = h
        .store
        .pairing_approve("telegram", &code, pending.created_at + 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(approved.sender, "99");
    assert_eq!(
        adapter.deliver(dm("p2", "99", "hi again")).await,
        Disposition::Accepted
    );
    adapter
        .until(|out| {
            sent_texts(out).iter().any(|t| t.contains("re: hi again"))
                || out
                    .iter()
                    .any(|o| matches!(o, Out::Edit { text, .. } if text == "re: hi again"))
        })
        .await;
    // The message sent before approval never went to the model.
    assert_eq!(model.requests().len(), 1);
    // Once everything the router sent is out: one code, then the answer.
    router.close(Duration::from_secs(10)).await;
    let codes = sent_texts(&adapter.out())
        .iter()
        .filter(|t| t.contains("flynn pairing approve"))
        .count();
    assert_eq!(codes, 1);
}

#[tokio::test]
async fn the_allowlist_policy_gives_strangers_nothing() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| c.dm_policy = DmPolicy::Allowlist);
    let router = router(&h, adapter.clone(), &config).await;
    assert!(matches!(
        adapter.deliver(dm("a1", "5", "hi")).await,
        Disposition::Ignored(_)
    ));
    // Whatever the router sends goes out in its tasks: all done now.
    router.close(Duration::from_secs(10)).await;
    assert!(adapter.out().is_empty());
    assert!(h.store.pairing_pending(0).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_sender_over_the_rate_limit_is_told_once() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| {
        c.allow_from = vec!["*".into()];
        c.rate_limit = SenderRateLimit {
            messages: 2,
            per_secs: 3600,
        };
    });
    let _router = router(&h, adapter.clone(), &config).await;
    for (i, expected) in [true, true, false, false].into_iter().enumerate() {
        let got = adapter
            .deliver(dm(&format!("r{i}"), "1", &format!("m{i}")))
            .await;
        assert_eq!(got == Disposition::Accepted, expected, "{i}: {got:?}");
    }
    let out = adapter
        .until(|out| sent_texts(out).iter().any(|t| t.contains("faster")))
        .await;
    let warnings = sent_texts(&out)
        .iter()
        .filter(|t| t.contains("faster"))
        .count();
    assert_eq!(warnings, 1);
}

#[tokio::test]
async fn a_long_answer_is_cut_to_the_platforms_limit() {
    let long = "word ".repeat(100);
    let model = ScriptedModel::replies("m", vec![Message::assistant(long.trim())]);
    let h = Harness::new(vec![model], Setup::default()).await;
    let adapter = MemoryChannel::new(120);
    let config = telegram_channels(|c| c.allow_from = vec!["1".into()]);
    let _router = router(&h, adapter.clone(), &config).await;
    adapter.deliver(dm("l1", "1", "talk")).await;
    let out = adapter
        .until(|out| {
            let shown: String = (0..10)
                .filter_map(|i| final_text(out, &format!("m{i}")))
                .collect::<Vec<_>>()
                .join(" ");
            shown.split_whitespace().count() == 100
        })
        .await;
    for o in &out {
        if let Out::Send { text, .. } | Out::Edit { text, .. } = o {
            assert!(
                text.chars().count() <= 120,
                "{} chars",
                text.chars().count()
            );
        }
    }
    assert!(sent_texts(&out).len() >= 5);
}

#[tokio::test]
async fn a_confirmation_is_answered_with_a_button_by_the_owner() {
    let model = ScriptedModel::replies(
        "m",
        vec![tool_use("t1", "touch ran.txt"), Message::assistant("Done.")],
    );
    let h = Harness::new(
        vec![model],
        Setup {
            tools: confirm_shell(),
            ..Setup::default()
        },
    )
    .await;
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| {
        c.allow_from = vec!["13".into()];
        c.owners = vec!["42".into()];
    });
    let _router = router(&h, adapter.clone(), &config).await;
    adapter.deliver(dm("c1", "42", "touch a file")).await;
    let out = adapter
        .until(|out| {
            out.iter()
                .any(|o| matches!(o, Out::Send { buttons, .. } if !buttons.is_empty()))
        })
        .await;
    let (ask_id, text, buttons) = out
        .iter()
        .find_map(|o| match o {
            Out::Send {
                id, text, buttons, ..
            } if !buttons.is_empty() => Some((id.clone(), text.clone(), buttons.clone())),
            _ => None,
        })
        .unwrap();
    assert!(
        text.contains("shell.exec") && text.contains("touch ran.txt"),
        "{text}"
    );
    assert_eq!(buttons.len(), 2);
    let approve = buttons[0].strip_prefix("Approve=").unwrap().to_owned();
    assert!(buttons[1].starts_with("Deny=n:"));
    let press = |id: &str, from: &str, data: &str| {
        InboundEvent::Action(Action {
            id: id.into(),
            conversation: Conversation::direct("42"),
            sender: Sender {
                id: from.into(),
                name: Some(format!("user{from}")),
            },
            data: data.into(),
            message: Some(MessageId(ask_id.clone())),
            reply: None,
        })
    };
    // A guest (let in, but not the owner) presses it: nothing happens
    // but a note.
    adapter.deliver(press("x1", "13", &approve)).await;
    adapter
        .until(|out| out.iter().any(|o| matches!(o, Out::Answer { action, note } if action == "x1" && note.contains("not allowed"))))
        .await;
    assert!(!h.dir.path().join("ran.txt").exists());

    assert_eq!(
        adapter.deliver(press("x2", "42", &approve)).await,
        Disposition::Accepted
    );
    let out = adapter
        .until(|out| {
            out.iter()
                .any(|o| matches!(o, Out::Edit { text, .. } if text == "Done."))
        })
        .await;
    assert!(h.dir.path().join("ran.txt").exists());
    assert!(out.iter().any(
        |o| matches!(o, Out::Answer { action, note } if action == "x2" && note == "Approved")
    ));
    // The question lost its buttons and says who answered.
    let last = out
        .iter()
        .filter_map(|o| match o {
            Out::Edit { id, text, buttons } if *id == ask_id => Some((text, buttons)),
            _ => None,
        })
        .next_back()
        .unwrap();
    assert!(
        last.0.contains("Approved by user42") && last.1.is_empty(),
        "{last:?}"
    );
    // Pressed again (a redelivery, or a second tap): answered, nothing runs.
    assert_eq!(
        adapter.deliver(press("x2", "42", &approve)).await,
        Disposition::Duplicate
    );
    adapter.deliver(press("x3", "42", &approve)).await;
    adapter
        .until(|out| out.iter().any(|o| matches!(o, Out::Answer { action, note } if action == "x3" && note.contains("no longer waiting"))))
        .await;
}

#[tokio::test]
async fn a_delivery_during_shutdown_is_left_for_the_platform_to_redeliver() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| c.allow_from = vec!["42".into()]);
    let _router = router(&h, adapter.clone(), &config).await;
    h.manager.drain(Duration::from_millis(10)).await;
    assert!(matches!(
        adapter.deliver(dm("s1", "42", "hello?")).await,
        Disposition::Retry(_)
    ));
    assert!(h.store.list().await.unwrap().is_empty(), "nothing stored");
}

#[cfg(unix)]
#[tokio::test]
async fn a_file_from_a_chat_is_saved_privately_in_the_inbox() {
    use std::os::unix::fs::PermissionsExt;
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| c.allow_from = vec!["42".into()]);
    let _router = router(&h, adapter.clone(), &config).await;

    assert_eq!(
        adapter
            .deliver(dm_with_file("u1", "42", "see this", "notes.txt", "hello"))
            .await,
        Disposition::Accepted
    );
    adapter
        .until(|out| final_text(out, "m0").is_some_and(|t| t.starts_with("re: ")))
        .await;
    let inbox = h.dir.path().join("inbox");
    let saved: Vec<String> = std::fs::read_dir(inbox.join("telegram"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(saved.len(), 1, "{saved:?}");
    assert!(saved[0].ends_with("-notes.txt"), "{saved:?}");
    let file = inbox.join("telegram").join(&saved[0]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello");
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        (mode(&inbox), mode(&inbox.join("telegram")), mode(&file)),
        (0o700, 0o700, 0o600)
    );
    let history = h.history(&key("telegram:42")).await;
    assert_eq!(
        history[0],
        Message::user(format!(
            "see this\n[file notes.txt (text/plain, 5 bytes) saved at inbox/telegram/{}]",
            saved[0]
        ))
    );
}

/// A symbolic link at `inbox/<channel>` (a sandboxed command can make one
/// in the workspace) would send a stranger's file anywhere the daemon can
/// write; the file is refused and the message still arrives, saying why.
#[cfg(unix)]
#[tokio::test]
async fn a_symlinked_inbox_is_refused_and_the_message_still_arrives() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(h.dir.path().join("inbox")).unwrap();
    std::os::unix::fs::symlink(outside.path(), h.dir.path().join("inbox/telegram")).unwrap();
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| c.allow_from = vec!["42".into()]);
    let _router = router(&h, adapter.clone(), &config).await;

    assert_eq!(
        adapter
            .deliver(dm_with_file(
                "u1",
                "42",
                "open this",
                "x.desktop",
                "[Desktop Entry]"
            ))
            .await,
        Disposition::Accepted
    );
    adapter
        .until(|out| final_text(out, "m0").is_some_and(|t| t.starts_with("re: ")))
        .await;
    let written: Vec<_> = std::fs::read_dir(outside.path()).unwrap().collect();
    assert!(written.is_empty(), "{written:?}");
    let history = h.history(&key("telegram:42")).await;
    assert_eq!(
        history[0],
        Message::user(
            "open this\n[a file came with this message but could not be saved: inbox/telegram \
             is a symbolic link, not a directory; chat files are saved only into real \
             directories in the workspace (remove it, and Flynn creates the directory)]"
        )
    );

    // The same with the link one level up.
    std::fs::remove_file(h.dir.path().join("inbox/telegram")).unwrap();
    std::fs::remove_dir(h.dir.path().join("inbox")).unwrap();
    std::os::unix::fs::symlink(outside.path(), h.dir.path().join("inbox")).unwrap();
    assert_eq!(
        adapter
            .deliver(dm_with_file(
                "u2",
                "42",
                "and this",
                "y.desktop",
                "[Desktop Entry]"
            ))
            .await,
        Disposition::Accepted
    );
    adapter
        .until(|out| final_text(out, "m1").is_some_and(|t| t.starts_with("re: ")))
        .await;
    let written: Vec<_> = std::fs::read_dir(outside.path()).unwrap().collect();
    assert!(written.is_empty(), "{written:?}");
    let history = h.history(&key("telegram:42")).await;
    assert_eq!(
        history[2],
        Message::user(
            "and this\n[a file came with this message but could not be saved: inbox is a \
             symbolic link, not a directory; chat files are saved only into real directories \
             in the workspace (remove it, and Flynn creates the directory)]"
        )
    );
}

#[tokio::test]
async fn a_slow_compact_blocks_neither_other_chats_nor_its_own_lane() {
    // The summariser (the fast tier) stalls for the compaction's timeout.
    let main = ScriptedModel::echo("m");
    let fast = ScriptedModel::new("f", vec![crate::Script::Hang("thinking".into())]);
    let mut models = crate::tiers(&["m/one"]);
    models.tiers.fast = vec!["f/cheap".parse().unwrap()];
    let mut setup = Setup {
        models,
        ..Setup::default()
    };
    setup.compaction.timeout_secs = 5;
    let h = Harness::new(vec![main.clone(), fast.clone()], setup).await;
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| c.allow_from = vec!["*".into()]);
    let _router = router(&h, adapter.clone(), &config).await;
    let a = key("telegram:A");
    for i in 0..6 {
        h.send(&a, &format!("message {i}")).await.0.unwrap();
    }

    let compacting = {
        let adapter = adapter.clone();
        tokio::spawn(async move { adapter.deliver(dm("c1", "A", "/compact")).await })
    };
    tokio::time::timeout(Duration::from_secs(10), async {
        while fast.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the summariser is asked");

    // Another chat is answered while the summariser stalls.
    let other = tokio::time::timeout(Duration::from_secs(2), adapter.deliver(dm("b1", "B", "hi")))
        .await
        .expect("a message to another session is not held up by /compact");
    assert_eq!(other, Disposition::Accepted);
    adapter
        .until(|out| {
            out.iter().any(
                |o| matches!(o, Out::Send { text, .. } | Out::Edit { text, .. } if text == "re: hi"),
            )
        })
        .await;

    // The compacting session still accepts: its message waits behind
    // the compaction, and runs once it is done.
    let queued = tokio::time::timeout(
        Duration::from_secs(2),
        adapter.deliver(dm("a1", "A", "after")),
    )
    .await
    .expect("the compacting lane still accepts");
    assert_eq!(queued, Disposition::Accepted);
    assert_eq!(compacting.await.unwrap(), Disposition::Accepted);
    assert_eq!(
        adapter.deliver(dm("a2", "A", "/status")).await,
        Disposition::Accepted
    );
    adapter
        .until(|out| {
            sent_texts(out)
                .iter()
                .any(|t| t.contains("Compacting (1 messages waiting)"))
        })
        .await;
    let out = adapter
        .until(|out| {
            out.iter().any(
                |o| matches!(o, Out::Send { text, .. } | Out::Edit { text, .. } if text == "re: after"),
            )
        })
        .await;
    let said = sent_texts(&out);
    let compacted = said
        .iter()
        .position(|t| t.starts_with("Compacted "))
        .expect("the compaction's reply");
    let answered = out
        .iter()
        .position(
            |o| matches!(o, Out::Send { text, .. } | Out::Edit { text, .. } if text == "re: after"),
        )
        .unwrap();
    let compacted_at = out
        .iter()
        .position(|o| matches!(o, Out::Send { text, .. } if text == &said[compacted]))
        .unwrap();
    assert!(compacted_at < answered, "{out:#?}");
}

#[tokio::test]
async fn a_redelivered_reset_runs_once_and_keeps_what_came_after_it() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| c.allow_from = vec!["42".into()]);
    let _router = router(&h, adapter.clone(), &config).await;

    assert_eq!(
        adapter.deliver(dm("c1", "42", "/reset")).await,
        Disposition::Accepted
    );
    assert_eq!(
        adapter.deliver(dm("u2", "42", "remember me")).await,
        Disposition::Accepted
    );
    adapter
        .until(|out| {
            out.iter().any(|o| {
                matches!(o, Out::Send { text, .. } | Out::Edit { text, .. } if text == "re: remember me")
            })
        })
        .await;
    // The platform delivers the /reset again (a retry, out of order).
    assert_eq!(
        adapter.deliver(dm("c1", "42", "/reset")).await,
        Disposition::Duplicate
    );
    let history = h.history(&key("telegram:42")).await;
    assert_eq!(
        history,
        vec![
            Message::user("remember me"),
            Message::assistant("re: remember me")
        ]
    );
}

/// `/voice on` in a daemon with no speech engine is stored, and the chat
/// is told nothing will be spoken until `voice.tts` is set.
#[tokio::test]
async fn voice_on_without_a_speech_engine_says_so() {
    let model = ScriptedModel::echo("m");
    let h = Harness::new(vec![model.clone()], Setup::default()).await;
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| c.owners = vec!["42".into()]);
    let _router = router(&h, adapter.clone(), &config).await;
    assert_eq!(
        adapter.deliver(dm("v1", "42", "/voice on")).await,
        Disposition::Accepted
    );
    let out = adapter
        .until(|out| {
            sent_texts(out)
                .iter()
                .any(|t| t.starts_with("Voice replies"))
        })
        .await;
    let said = sent_texts(&out)
        .into_iter()
        .find(|t| t.starts_with("Voice replies"))
        .unwrap();
    assert!(said.contains("voice.tts is not set"), "{said}");
    assert_eq!(
        h.manager.voice_reply(&key("telegram:42")).await.unwrap(),
        flynn_protocol::config::VoiceReply::Always
    );
}
