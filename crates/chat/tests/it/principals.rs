//! Principals through the real runtime and the channel router: the owner,
//! guests and what each may reach.

use std::path::Path;

use flynn_channels::{Action, Conversation, InboundEvent, MessageId, Sender};
use flynn_memory::{Memory as MemoryFiles, Namespace, WriteMode};
use flynn_orchestrator::{MemoryRuntime, Submitted, TurnRequest};
use flynn_protocol::config::{
    AgentConfig, AgentRoute, AgentsConfig, ToolPolicyConfig, ToolProfile,
};
use flynn_protocol::{ContentBlock, Message, Principal, Role};
use flynn_sessions::{Conversations, Turns};
use serde_json::{Value, json};

use flynn_testkit::chat::{MemoryChannel, Out, telegram_channels};

use crate::router::{dm, router, sent_texts};
use crate::{Harness, ScriptedModel, Setup, confirm_shell, key, tool_use};

fn calls(calls: &[(&str, &str, Value)]) -> Message {
    Message {
        role: Role::Assistant,
        content: calls
            .iter()
            .map(|(id, name, input)| ContentBlock::ToolUse {
                id: (*id).into(),
                name: (*name).into(),
                input: input.clone(),
            })
            .collect(),
    }
}

/// Every tool result the model was given, by call id.
fn results(model: &ScriptedModel) -> Vec<(String, String, bool)> {
    model
        .requests()
        .iter()
        .flat_map(|r| r.messages.to_vec())
        .flat_map(|m| m.content)
        .filter_map(|block| match block {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error,
            } => Some((tool_use_id, content, is_error)),
            _ => None,
        })
        .collect()
}

fn result(model: &ScriptedModel, id: &str) -> (String, bool) {
    let mut found = results(model)
        .into_iter()
        .filter(|(call, _, _)| call == id)
        .map(|(_, content, is_error)| (content, is_error));
    found
        .next()
        .unwrap_or_else(|| panic!("no result for {id}: {:#?}", results(model)))
}

async fn memory_in(dir: &Path) -> MemoryRuntime {
    let memory = MemoryFiles::open(dir.join("memory"), &dir.join("memory-index.db"), None)
        .await
        .unwrap();
    MemoryRuntime {
        memory,
        auto_extract: false,
        max_context_tokens: 2000,
        context_hits: 5,
    }
}

/// Every text the router sent or edited a message to.
fn shown(out: &[Out]) -> Vec<String> {
    out.iter()
        .filter_map(|o| match o {
            Out::Send { text, .. } | Out::Edit { text, .. } => Some(text.clone()),
            Out::Answer { .. } => None,
        })
        .collect()
}

/// Waits for the router to have shown a text containing `needle`.
async fn sent_containing(adapter: &MemoryChannel, needle: &str) -> Vec<Out> {
    adapter
        .until(|out| shown(out).iter().any(|t| t.contains(needle)))
        .await
}

#[tokio::test]
async fn a_guest_cannot_read_list_or_message_the_owners_sessions_or_memory() {
    let dir = tempfile::tempdir().unwrap();
    let memory = memory_in(dir.path()).await;
    memory
        .memory
        .write(
            &Namespace::user(),
            "- The owner banks with Acmebank.",
            WriteMode::Append,
        )
        .await
        .unwrap();
    memory
        .memory
        .write(
            &Namespace::global(),
            "- The family dog is called Rexhund.",
            WriteMode::Append,
        )
        .await
        .unwrap();
    let model = ScriptedModel::replies(
        "m",
        vec![
            Message::assistant("Noted."),
            calls(&[
                ("l1", "sessions.list", json!({})),
                ("h1", "sessions.history", json!({"session": "telegram:1"})),
                (
                    "s1",
                    "sessions.send",
                    json!({"session": "telegram:1", "message": "hello owner"}),
                ),
                ("r1", "memory.read", json!({"namespace": "global"})),
                (
                    "r2",
                    "memory.read",
                    json!({"namespace": "sessions/telegram_1"}),
                ),
                ("f1", "memory.search", json!({"query": "Acmebank Rexhund"})),
                (
                    "w1",
                    "memory.write",
                    json!({"namespace": "user", "content": "- Likes tea."}),
                ),
                ("x1", "shell.exec", json!({"command": "id"})),
            ]),
            Message::assistant("Nothing for you."),
        ],
    );
    let h = Harness::in_dir(
        dir,
        vec![model.clone()],
        Setup {
            memory: Some(memory.clone()),
            ..Setup::default()
        },
    )
    .await;
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| {
        c.owners = vec!["1".into()];
        c.allow_from = vec!["2".into()];
    });
    let _router = router(&h, adapter.clone(), &config).await;

    adapter
        .deliver(dm("o1", "1", "my secret plan is Zanzibar"))
        .await;
    sent_containing(&adapter, "Noted.").await;
    adapter
        .deliver(dm("g1", "2", "show me the owner's chats"))
        .await;
    sent_containing(&adapter, "Nothing for you.").await;

    let requests = model.requests();
    let owner_prompt = requests[0].system.clone().unwrap_or_default();
    assert!(
        owner_prompt.contains("Acmebank") && owner_prompt.contains("Rexhund"),
        "the owner's prompt carries the owner's memory: {owner_prompt}"
    );
    let guest_prompt = requests[1].system.clone().unwrap_or_default();
    assert!(
        !guest_prompt.contains("Acmebank") && !guest_prompt.contains("Rexhund"),
        "a guest's prompt never carries user.md or global.md: {guest_prompt}"
    );

    let (listed, _) = result(&model, "l1");
    assert!(
        listed.contains("telegram:2") && !listed.contains("telegram:1"),
        "{listed}"
    );
    let (history, is_error) = result(&model, "h1");
    assert!(is_error && !history.contains("Zanzibar"), "{history}");
    let (sent, is_error) = result(&model, "s1");
    assert!(is_error, "{sent}");
    let (global, is_error) = result(&model, "r1");
    assert!(
        is_error && global.contains("not reachable") && global.contains("people/telegram-2"),
        "{global}"
    );
    let (other_session, is_error) = result(&model, "r2");
    assert!(is_error, "{other_session}");
    let (found, _) = result(&model, "f1");
    assert!(
        found.starts_with("no memory matches") && !found.contains(".md:"),
        "{found}"
    );
    let (written, is_error) = result(&model, "w1");
    assert!(
        !is_error && written.contains("people/telegram-2"),
        "{written}"
    );
    let (shell, is_error) = result(&model, "x1");
    assert!(is_error, "the messaging profile runs nothing: {shell}");

    // Nothing reached the owner's session, and each message says who sent it.
    let owner = h.store.history(&key("telegram:1")).await.unwrap();
    assert_eq!(owner.len(), 2, "{owner:#?}");
    assert_eq!(owner[0].principal, Some(Principal::Owner));
    let guest = h.store.history(&key("telegram:2")).await.unwrap();
    assert_eq!(guest[0].principal, Some(Principal::guest("telegram", "2")));
    assert_eq!(guest[1].principal, None, "the agent's answer has no sender");
    // The guest's note went to its own file, not the owner's.
    let user = memory
        .memory
        .read(&Namespace::user())
        .await
        .unwrap()
        .unwrap();
    assert!(!user.content.contains("tea"), "{}", user.content);
}

#[tokio::test]
async fn a_guest_switches_only_to_routed_agents_and_listed_models_and_cannot_trust() {
    let model = ScriptedModel::replies("m", vec![]);
    let mut public = AgentConfig::new("public");
    public.models = vec!["default".into()];
    let h = Harness::new(
        vec![model],
        Setup {
            agents: AgentsConfig {
                list: vec![AgentConfig::new("main"), public],
                routes: vec![AgentRoute {
                    channel: "telegram".into(),
                    sender: "*".into(),
                    agent: "public".into(),
                }],
                ..AgentsConfig::default()
            },
            ..Setup::default()
        },
    )
    .await;
    let adapter = MemoryChannel::new(4096);
    let config = telegram_channels(|c| {
        c.owners = vec!["1".into()];
        c.allow_from = vec!["2".into()];
    });
    let _router = router(&h, adapter.clone(), &config).await;

    adapter.deliver(dm("g1", "2", "/agent main")).await;
    sent_containing(&adapter, "can't switch to the agent 'main'").await;
    adapter.deliver(dm("g2", "2", "/agent")).await;
    let out = sent_containing(&adapter, "Agents you can talk to here").await;
    let listing = sent_texts(&out)
        .into_iter()
        .find(|t| t.starts_with("Agents you can talk to here"))
        .unwrap();
    assert_eq!(
        listing,
        "Agents you can talk to here:\n- public (this session)"
    );
    adapter.deliver(dm("g3", "2", "/model m/one")).await;
    sent_containing(&adapter, "'m/one' is not a model you can pick here").await;
    adapter.deliver(dm("g4", "2", "/model default")).await;
    sent_containing(&adapter, "This session now uses").await;
    adapter.deliver(dm("g5", "2", "/trust")).await;
    sent_containing(&adapter, "Only the owner can vouch").await;
    let meta = h.store.metadata(&key("telegram:2")).await.unwrap();
    assert_eq!(meta.agent, None, "the guest's /agent changed nothing");

    // The owner may.
    adapter.deliver(dm("o1", "1", "/agent main")).await;
    sent_containing(&adapter, "now talks to the agent 'main'").await;
    adapter.deliver(dm("o2", "1", "/model m/one")).await;
    adapter
        .until(|out| {
            sent_texts(out)
                .iter()
                .filter(|t| t.contains("This session now uses"))
                .count()
                == 2
        })
        .await;
    let meta = h.store.metadata(&key("telegram:1")).await.unwrap();
    assert_eq!(meta.agent.as_deref(), Some("main"));
}

/// A guest restriction that lets every tool of the agent through.
fn every_tool() -> ToolPolicyConfig {
    ToolPolicyConfig {
        profile: Some(ToolProfile::Full),
        ..ToolPolicyConfig::default()
    }
}

fn press(id: &str, from: &str, data: &str, chat: &str) -> InboundEvent {
    InboundEvent::Action(Action {
        id: id.into(),
        conversation: Conversation::direct(chat),
        sender: Sender {
            id: from.into(),
            name: None,
        },
        data: data.into(),
        message: Some(MessageId("m".into())),
        reply: None,
    })
}

#[tokio::test]
async fn a_guests_confirmation_is_asked_of_the_owner_and_the_guest_cannot_approve_it() {
    let model = ScriptedModel::replies(
        "m",
        vec![
            Message::assistant("Hello."),
            tool_use("t1", "touch guest.txt"),
            Message::assistant("Done."),
        ],
    );
    let h = Harness::new(
        vec![model],
        Setup {
            tools: confirm_shell(),
            ..Setup::default()
        },
    )
    .await;
    let adapter = MemoryChannel::new(8192);
    let config = telegram_channels(|c| {
        c.owners = vec!["1".into()];
        c.allow_from = vec!["2".into()];
        c.guest_tools = Some(every_tool());
    });
    let _router = router(&h, adapter.clone(), &config).await;
    adapter.deliver(dm("o1", "1", "hi")).await;
    sent_containing(&adapter, "Hello.").await;
    adapter.deliver(dm("g1", "2", "touch a file")).await;
    let out = adapter
        .until(|out| {
            out.iter()
                .any(|o| matches!(o, Out::Send { buttons, .. } if !buttons.is_empty()))
        })
        .await;
    let (chat, text, buttons) = out
        .iter()
        .find_map(|o| match o {
            Out::Send {
                chat,
                text,
                buttons,
                ..
            } if !buttons.is_empty() => Some((chat.clone(), text.clone(), buttons.clone())),
            _ => None,
        })
        .unwrap();
    assert_eq!(chat, "1", "asked in the owner's chat, not the guest's");
    assert!(
        text.contains("touch guest.txt") && text.contains("guest user2 (2)"),
        "{text}"
    );
    let approve = buttons[0].strip_prefix("Approve=").unwrap().to_owned();
    let token = approve.strip_prefix("y:").unwrap();
    assert!(
        token.len() >= 24,
        "tokens are random, not a counter: {token}"
    );

    // The guest presses the owner's button (it could learn the data): refused.
    adapter.deliver(press("p1", "2", &approve, "2")).await;
    adapter
        .until(|out| out.iter().any(|o| matches!(o, Out::Answer { action, note } if action == "p1" && note.contains("not allowed"))))
        .await;
    assert!(!h.dir.path().join("guest.txt").exists());

    adapter.deliver(press("p2", "1", &approve, "1")).await;
    sent_containing(&adapter, "Done.").await;
    assert!(h.dir.path().join("guest.txt").exists());
}

#[tokio::test]
async fn a_guests_confirmation_is_denied_when_no_owner_can_be_asked() {
    let model = ScriptedModel::replies(
        "m",
        vec![
            tool_use("t1", "touch guest.txt"),
            Message::assistant("Could not."),
        ],
    );
    let h = Harness::new(
        vec![model.clone()],
        Setup {
            tools: confirm_shell(),
            ..Setup::default()
        },
    )
    .await;
    let adapter = MemoryChannel::new(8192);
    // An existing config: no owners, so every sender is a guest.
    let config = telegram_channels(|c| {
        c.allow_from = vec!["2".into()];
        c.guest_tools = Some(every_tool());
    });
    let _router = router(&h, adapter.clone(), &config).await;
    adapter.deliver(dm("g1", "2", "touch a file")).await;
    let out = sent_containing(&adapter, "Could not.").await;
    assert!(
        !out.iter()
            .any(|o| matches!(o, Out::Send { buttons, .. } if !buttons.is_empty())),
        "the guest was never asked: {out:#?}"
    );
    let (denied, is_error) = result(&model, "t1");
    assert!(
        is_error && denied.contains("channels.telegram.owners"),
        "{denied}"
    );
    assert!(!h.dir.path().join("guest.txt").exists());
}

#[tokio::test]
async fn agents_reach_only_the_agents_they_may_delegate_to_and_never_widen_their_tools() {
    let model = ScriptedModel::replies(
        "m",
        vec![
            calls(&[(
                "a1",
                "agents.spawn",
                json!({"task": "read a file", "agent": "main", "tools": true}),
            )]),
            Message::assistant("Refused."),
            calls(&[(
                "a2",
                "agents.spawn",
                json!({"task": "run id", "agent": "helper", "tools": true}),
            )]),
            tool_use("t1", "id"),
            Message::assistant("The helper could not run it."),
            Message::assistant("Done."),
        ],
    );
    let mut public = AgentConfig::new("public");
    public.tools = Some(ToolPolicyConfig {
        profile: Some(ToolProfile::Messaging),
        ..ToolPolicyConfig::default()
    });
    public.can_delegate = vec!["helper".into()];
    let h = Harness::new(
        vec![model.clone()],
        Setup {
            agents: AgentsConfig {
                list: vec![public, AgentConfig::new("main"), AgentConfig::new("helper")],
                ..AgentsConfig::default()
            },
            ..Setup::default()
        },
    )
    .await;
    let (outcome, _) = h.send(&key("cli:p"), "get main to read a file").await;
    assert_eq!(outcome.unwrap().reply, "Refused.");
    let (refusal, is_error) = result(&model, "a1");
    assert!(
        is_error && refusal.contains("can_delegate") && refusal.contains("'main'"),
        "{refusal}"
    );

    // A listed agent runs, but within the starting agent's tools: the
    // helper (full profile) cannot run shell.exec for a messaging agent.
    let (outcome, _) = h.send(&key("cli:p"), "get the helper to run id").await;
    assert_eq!(outcome.unwrap().reply, "Done.");
    let (shell, is_error) = result(&model, "t1");
    assert!(is_error, "{shell}");
}

#[tokio::test]
async fn a_turns_principal_survives_in_the_store_for_a_rerun() {
    let model = ScriptedModel::replies("m", vec![Message::assistant("Hi.")]);
    let h = Harness::new(vec![model], Setup::default()).await;
    let mut request = TurnRequest::text(key("telegram:7"), "hello");
    request.principal = Principal::guest("telegram", "7");
    let Submitted::Turn(handle) = h.manager.submit(request).await.unwrap() else {
        panic!("a turn");
    };
    let turn = handle.turn;
    handle.outcome().await.unwrap();
    let record = h.store.turn(turn).await.unwrap().unwrap();
    assert_eq!(record.origin.principal, Principal::guest("telegram", "7"));
}
