//! The protocol's behaviour through `flynn-client`, typed as the CLI and
//! the TUI use it; HTTP POST and malformed calls through raw jsonrpsee
//! clients, since those are about the wire.

use std::time::Duration;

use flynn_api::{
    CancelParams, HistoryParams, NoParams, Notification, PairingApproveParams, PairingRevokeParams,
    ProvidersParams, ResolveParams, SessionParams, StatusParams, SubscribeParams, UsageParams,
    codes, methods,
};
use flynn_core::protocol::{AgentEvent, EventEnvelope, Resolution, Role, RunState, Tier};
use flynn_testkit::{FakeOpenAi, Reply};
use futures::StreamExt;
use jsonrpsee::core::client::{ClientT, SubscriptionClientT};
use serde_json::{Value, json};

use crate::harness::*;

/// Each event's kind, `run_state:<state>` for run states.
fn kinds_of(events: &[EventEnvelope]) -> Vec<String> {
    events
        .iter()
        .map(|envelope| {
            let value = serde_json::to_value(&envelope.event).unwrap();
            match &envelope.event {
                AgentEvent::RunState { state } => {
                    format!(
                        "run_state:{}",
                        serde_json::to_value(state).unwrap().as_str().unwrap()
                    )
                }
                _ => value["type"].as_str().unwrap().to_owned(),
            }
        })
        .collect()
}

fn history(session: &str) -> HistoryParams {
    HistoryParams {
        session: key(session),
        before: None,
        after: None,
        limit: None,
    }
}

/// A first chunk, then nothing: a model that hangs mid-answer.
const STALLED: &str = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"thinking...\"},\"finish_reason\":null}]}\n\n";

/// Events of `turn` up to its first content delta.
async fn until_it_streams(turn: &mut flynn_client::Turn) {
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), turn.next())
            .await
            .expect("the turn streams in time")
            .expect("the turn goes on")
            .unwrap();
        if let Notification::Event(envelope) = next
            && matches!(envelope.event, AgentEvent::ContentDelta { .. })
        {
            return;
        }
    }
}

/// The rest of `turn`, to its end.
async fn rest_of(turn: &mut flynn_client::Turn) -> Vec<EventEnvelope> {
    let mut events = Vec::new();
    while let Some(next) = tokio::time::timeout(Duration::from_secs(10), turn.next())
        .await
        .expect("the turn went on in time")
    {
        if let Notification::Event(envelope) = next.unwrap() {
            events.push(*envelope);
        }
    }
    events
}

#[tokio::test]
async fn a_turn_streams_its_events_with_envelopes_and_history_reads_by_cursor() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Hello from the fake.".into()));
    fake.push(Reply::Text("Second answer.".into()));
    let mut harness = Harness::start(&fake).await;
    let client = harness.client().await;
    let alice = key("web:alice");

    let events = follow(&client, send_params(&alice, "hi")).await;
    let kinds = kinds_of(&events);
    assert_eq!(kinds.first().map(String::as_str), Some("run_state:start"));
    assert_eq!(kinds.last().map(String::as_str), Some("run_state:complete"));
    assert!(kinds.contains(&"done".to_owned()), "{kinds:?}");
    assert_eq!(text_of(&events), "Hello from the fake.");
    // Envelopes: this session, one turn, increasing sequence numbers.
    let turn = events[0].turn;
    assert!(turn.is_some());
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert!(seqs.windows(2).all(|w| w[1] > w[0]), "{seqs:?}");
    for event in &events {
        assert_eq!(event.session, alice);
        assert_eq!(event.turn, turn);
        assert!(event.time_ms > 0);
    }

    let first = client
        .call::<methods::SessionsHistory>(&history("web:alice"))
        .await
        .unwrap();
    assert_eq!(first.messages.len(), 2);
    assert_eq!(first.messages[0].message.role, Role::User);
    assert!(!first.more_before);
    let cursor = first.cursor.unwrap();

    follow(&client, send_params(&alice, "again")).await;
    let since = client
        .call::<methods::SessionsHistory>(&HistoryParams {
            after: Some(cursor),
            ..history("web:alice")
        })
        .await
        .unwrap();
    assert_eq!(
        since.messages.len(),
        2,
        "only what came after the cursor: {since:?}"
    );
    assert_eq!(since.messages[1].message.text(), "Second answer.");
    let page = client
        .call::<methods::SessionsHistory>(&HistoryParams {
            limit: Some(1),
            ..history("web:alice")
        })
        .await
        .unwrap();
    assert_eq!(page.messages.len(), 1);
    assert!(page.more_before);

    let sessions = client
        .call::<methods::SessionsList>(&NoParams {})
        .await
        .unwrap();
    assert_eq!(sessions[0].key, alice);
    assert_eq!(sessions[0].message_count, 4);
    // Titled by its first message, not the later one.
    assert_eq!(sessions[0].title.as_deref(), Some("hi"));
    let usage = client
        .call::<methods::UsageSummary>(&UsageParams::default())
        .await
        .unwrap();
    assert_eq!(usage.total.calls, 2);
    assert_eq!(usage.tiers[0].tier, Tier::Default);

    let reset = client
        .call::<methods::SessionsReset>(&SessionParams {
            session: alice.clone(),
        })
        .await
        .unwrap();
    assert!(reset.existed);
    let sessions = client
        .call::<methods::SessionsList>(&NoParams {})
        .await
        .unwrap();
    assert!(sessions.is_empty());
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    harness.stop().await;
}

#[tokio::test]
async fn two_clients_on_one_session_see_the_same_events_in_the_same_order() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("one two three four".into()));
    let mut harness = Harness::start(&fake).await;
    let watcher_a = harness.client().await;
    let watcher_b = harness.client().await;
    let sender = harness.client().await;
    let mut subs = Vec::new();
    for client in [&watcher_a, &watcher_b] {
        subs.push(
            client
                .subscribe::<methods::SessionsSubscribe>(&SubscribeParams {
                    sessions: vec![key("tg:42")],
                })
                .await
                .unwrap(),
        );
    }
    let sent = follow(&sender, send_params(&key("tg:42"), "count")).await;
    let mut seen = Vec::new();
    for sub in &mut subs {
        seen.push(until_turn_ends(sub).await);
    }
    assert_eq!(seen[0], seen[1], "both watchers saw the same events");
    assert_eq!(seen[0], sent, "and the same as the sender");
    assert!(text_of(&seen[0]).contains("one two three four"));
    harness.stop().await;
}

#[tokio::test]
async fn http_post_serves_the_methods_and_commands_answer_at_once() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("over http".into()));
    let mut harness = Harness::start(&fake).await;
    let http = harness.http();
    let result = call(
        &http,
        "sessions.send",
        json!({"session": "api:1", "message": "hi"}),
    )
    .await;
    assert_eq!(result["outcome"]["reply"], "over http");
    assert_eq!(result["turn"], 1);
    let status = call(
        &http,
        "sessions.send",
        json!({"session": "api:1", "message": "/status"}),
    )
    .await;
    assert_eq!(status["command"], "status");
    assert!(
        status["outcome"]["reply"]
            .as_str()
            .unwrap()
            .contains("api:1")
    );

    let version = call(&http, "system.version", empty()).await;
    assert_eq!(version["protocol"], flynn_gateway::PROTOCOL_VERSION);
    let health = call(&http, "system.health", empty()).await;
    assert_eq!(health["status"], "ok");
    // A store of its own (SQLite): no cluster, no nodes.
    let cluster = call(&http, "cluster.status", empty()).await;
    assert_eq!(cluster, json!({"nodes": []}));
    let tools = call(&http, "tools.list", empty()).await;
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"file.read") && names.contains(&"shell.exec"),
        "{names:?}"
    );
    let config = call(&http, "config.get", json!({"path": "models.tiers.default"})).await;
    assert_eq!(config, json!(["fake/m"]));

    // A tool called directly runs in the agent's workspace.
    std::fs::write(harness._home.path().join("note.txt"), "remember the milk").unwrap();
    let read = call(
        &http,
        "tools.invoke",
        json!({"name": "file.read", "input": {"path": "note.txt"}}),
    )
    .await;
    assert_eq!(read["ok"], true);
    assert!(
        read["output"]
            .as_str()
            .unwrap()
            .contains("remember the milk")
    );
    harness.stop().await;
}

#[tokio::test]
async fn bad_calls_get_json_rpc_errors_naming_the_problem() {
    let fake = FakeOpenAi::start().await;
    let mut harness = Harness::start(&fake).await;
    let client = harness.ws().await;
    let error = client
        .request::<Value, _>("agent.fly", params(empty()))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("Method not found"), "{error}");
    let error = client
        .request::<Value, _>("sessions.history", params(json!({"session": "no colon"})))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("invalid session key 'no colon'"), "{text}");
    let error = client
        .request::<Value, _>(
            "sessions.reset",
            params(json!({"session": "a:b", "extra": 1})),
        )
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("unknown field `extra`"),
        "{error}"
    );
    // An unknown agent is refused before anything is stored.
    let error = client
        .subscribe::<Value, _>(
            "agent.send",
            params(json!({"session": "a:b", "message": "hi", "agent": "nobody"})),
            "agent.unsubscribe",
        )
        .await
        .unwrap_err();
    assert!(error.to_string().contains("nobody"), "{error}");
    // The connection is still usable.
    let health = call(&client, "system.health", empty()).await;
    assert_eq!(health["status"], "ok");
    harness.stop().await;
}

#[tokio::test]
async fn a_remote_client_approves_one_tool_call_and_denies_another() {
    let fake = FakeOpenAi::start().await;
    let mut config = config(&fake);
    config.tools.hooks = vec![confirm("file.write")];
    let mut harness = Harness::with(Options {
        config,
        tools: Vec::new(),
        config_file: None,
    })
    .await;
    let client = harness.client().await;
    let approver = harness.client().await;
    let session = key("web:w");

    for (approve, expected_ok) in [(true, true), (false, false)] {
        fake.push(Reply::ToolCalls(vec![(
            "file_write".into(),
            json!({"path": "out.txt", "content": "written"}),
        )]));
        fake.push(Reply::Text("done".into()));
        let mut turn = client
            .follow(&send_params(&session, "write it"))
            .await
            .unwrap();
        let mut events = Vec::new();
        while let Some(next) = tokio::time::timeout(Duration::from_secs(10), turn.next())
            .await
            .unwrap()
        {
            let Notification::Event(envelope) = next.unwrap() else {
                continue;
            };
            if let AgentEvent::ConfirmationRequested { id, .. } = &envelope.event {
                let pending = approver
                    .call::<methods::ConfirmationsList>(&NoParams {})
                    .await
                    .unwrap();
                assert_eq!(pending.len(), 1, "{pending:?}");
                assert_eq!(pending[0].tool, "file.write");
                let resolved = approver
                    .call::<methods::ConfirmationsResolve>(&ResolveParams {
                        session: session.clone(),
                        id: id.clone(),
                        approve,
                        input_digest: None,
                        reason: Some("not today".into()),
                    })
                    .await
                    .unwrap();
                assert_eq!(
                    resolved.resolution,
                    if approve {
                        Resolution::Approved
                    } else {
                        Resolution::Denied
                    }
                );
            }
            events.push(*envelope);
        }
        assert_eq!(
            events.last().map(|e| &e.event),
            Some(&AgentEvent::RunState {
                state: RunState::Complete
            })
        );
        let (ok, output) = events
            .iter()
            .find_map(|e| match &e.event {
                AgentEvent::ToolEnd { ok, output, .. } => Some((*ok, output.clone())),
                _ => None,
            })
            .unwrap();
        assert_eq!(ok, expected_ok, "{output}");
        if !approve {
            assert!(output.contains("not today"), "{output}");
        }
        let pending = approver
            .call::<methods::ConfirmationsList>(&NoParams {})
            .await
            .unwrap();
        assert!(pending.is_empty(), "{pending:?}");
    }
    assert_eq!(
        std::fs::read_to_string(harness._home.path().join("out.txt")).unwrap(),
        "written"
    );
    let error = approver
        .call::<methods::ConfirmationsResolve>(&ResolveParams {
            session: session.clone(),
            id: "call_9".into(),
            approve: true,
            input_digest: None,
            reason: None,
        })
        .await
        .unwrap_err();
    let rpc = error.rpc().expect("a protocol error");
    assert_eq!(rpc.code, codes::NOT_FOUND, "{rpc:?}");
    assert!(rpc.message.contains("waits for confirmation"), "{rpc:?}");
    harness.stop().await;
}

#[tokio::test]
async fn cancel_stops_a_running_turn() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Stall(STALLED.into()));
    let mut harness = Harness::start(&fake).await;
    let client = harness.client().await;
    let session = key("web:c");
    let mut turn = client
        .follow(&send_params(&session, "long job"))
        .await
        .unwrap();
    until_it_streams(&mut turn).await;
    let status = client
        .call::<methods::AgentStatus>(&StatusParams {
            session: Some(session.clone()),
        })
        .await
        .unwrap();
    assert_eq!(status.running.len(), 1, "{status:?}");
    let cancelled = client
        .call::<methods::AgentCancel>(&CancelParams {
            session: session.clone(),
            turn: None,
        })
        .await
        .unwrap();
    assert!(cancelled.cancelled);
    let rest = rest_of(&mut turn).await;
    assert_eq!(
        kinds_of(&rest).last().map(String::as_str),
        Some("run_state:cancelled")
    );
    // /metrics tells how long the stop took.
    let metrics = reqwest::Client::new()
        .get(harness.url("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("flynn_cancel_latency_seconds_count 1\n"),
        "{metrics}"
    );
    let under_a_second = metrics
        .lines()
        .find(|l| l.starts_with("flynn_cancel_latency_seconds_bucket{le=\"1\"}"))
        .unwrap();
    assert!(under_a_second.ends_with(" 1"), "{under_a_second}");
    harness.stop().await;
}

#[tokio::test]
async fn reset_stops_the_running_turn_drops_the_waiting_one_and_starts_afresh() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Stall(STALLED.into()));
    let mut harness = Harness::start(&fake).await;
    let client = harness.client().await;
    let session = key("web:r");
    let mut running = client
        .follow(&send_params(&session, "long job"))
        .await
        .unwrap();
    until_it_streams(&mut running).await;
    let mut waiting = client
        .follow(&send_params(&session, "next job"))
        .await
        .unwrap();

    let reset = client
        .call::<methods::SessionsReset>(&SessionParams {
            session: session.clone(),
        })
        .await
        .unwrap();
    assert!(reset.existed);
    // Both turns ended before the history went: nothing of them is
    // written into the emptied session.
    let ran = rest_of(&mut running).await;
    assert_eq!(
        kinds_of(&ran).last().map(String::as_str),
        Some("run_state:cancelled")
    );
    let waited = rest_of(&mut waiting).await;
    assert_eq!(
        kinds_of(&waited).last().map(String::as_str),
        Some("run_state:cancelled")
    );
    let emptied = client
        .call::<methods::SessionsHistory>(&history("web:r"))
        .await
        .unwrap();
    assert!(emptied.messages.is_empty(), "{emptied:?}");

    fake.push(Reply::Text("fresh".into()));
    follow(&client, send_params(&session, "again")).await;
    let after = client
        .call::<methods::SessionsHistory>(&history("web:r"))
        .await
        .unwrap();
    let roles: Vec<Role> = after.messages.iter().map(|m| m.message.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant]);
    assert_eq!(fake.requests().len(), 2, "the dropped turn never ran");
    harness.stop().await;
}

#[tokio::test]
async fn dashboard_methods_report_usage_per_day_provider_health_and_logs() {
    let fake = FakeOpenAi::start().await;
    let mut options = Options {
        config: config(&fake),
        tools: Vec::new(),
        config_file: None,
    };
    // A second provider nobody listens for.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut down = flynn_core::protocol::config::ProviderConfig::new(
        flynn_core::protocol::config::ProviderKind::OpenaiCompatible,
    );
    down.base_url = Some(format!("http://127.0.0.1:{port}/v1"));
    options.config.providers.insert("down".into(), down);
    let mut harness = Harness::with(options).await;
    let client = harness.client().await;
    fake.push(Reply::Text("one".into()));
    follow(&client, send_params(&key("web:d"), "hi")).await;

    let usage = client
        .call::<methods::UsageSummary>(&UsageParams {
            session: None,
            days: Some(7),
        })
        .await
        .unwrap();
    assert_eq!(usage.daily.len(), 1, "{usage:?}");
    assert_eq!(usage.daily[0].day, chrono_today());
    assert_eq!(usage.daily[0].tier, Tier::Default);
    assert_eq!(usage.daily[0].total.calls, 1);
    // Without `days`, the answer has no `daily` at all (checked on the
    // wire: the typed field would read an absent one as empty).
    let plain: Value = harness
        .http()
        .request("usage.summary", params(json!({})))
        .await
        .unwrap();
    assert!(plain.get("daily").is_none(), "{plain}");

    let providers = client
        .call::<methods::ProvidersStatus>(&ProvidersParams::default())
        .await
        .unwrap();
    assert_eq!(providers.len(), 2);
    assert_eq!(
        (providers[0].name.as_str(), providers[0].ok),
        ("down", false)
    );
    assert!(
        providers[0]
            .error
            .as_deref()
            .unwrap()
            .contains(&port.to_string())
    );
    assert_eq!(
        (providers[1].name.as_str(), providers[1].ok),
        ("fake", true)
    );
    assert_eq!(providers[1].models, Some(2));
    // Kept for 30 seconds unless asked again.
    let before = fake.requests().len();
    client
        .call::<methods::ProvidersStatus>(&ProvidersParams::default())
        .await
        .unwrap();
    assert_eq!(fake.requests().len(), before);
    client
        .call::<methods::ProvidersStatus>(&ProvidersParams { refresh: true })
        .await
        .unwrap();
    assert_eq!(fake.requests().len(), before + 1);

    // This test process keeps no log lines: the answer says so.
    let logs = client
        .call::<methods::SystemLogs>(&flynn_api::LogsParams { limit: Some(5) })
        .await
        .unwrap();
    assert!(!logs.captured && logs.lines.is_empty(), "{logs:?}");
    harness.stop().await;
}

/// Today in UTC as `YYYY-MM-DD`.
fn chrono_today() -> String {
    chrono::Utc::now().format("%Y-%m-%d").to_string()
}

#[tokio::test]
async fn pairing_is_listed_approved_and_revoked_over_the_gateway() {
    let fake = FakeOpenAi::start().await;
    let mut harness = Harness::start(&fake).await;
    let client = harness.client().await;
    let store = harness.flynn.manager().store().clone();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let ticket = store
        .pairing_request("discord", "1001", Some("bob"), now, 3_600_000)
        .await
        .unwrap();

    let listed = client
        .call::<methods::PairingList>(&NoParams {})
        .await
        .unwrap();
    assert_eq!(listed.pending.len(), 1);
    assert_eq!(listed.pending[0].code, ticket.code);
    assert_eq!(listed.pending[0].sender, "1001");
    assert_eq!(listed.pending[0].name.as_deref(), Some("bob"));
    assert!(listed.approved.is_empty());

    let approve = |code: &str| PairingApproveParams {
        channel: "discord".into(),
        code: code.into(),
        owner: false,
    };
    let wrong = client
        .call::<methods::PairingApprove>(&approve("AAAAAA"))
        .await
        .unwrap_err();
    let rpc = wrong.rpc().expect("a protocol error");
    assert_eq!(rpc.code, codes::NOT_FOUND, "{rpc:?}");
    assert!(
        rpc.message.contains("no pairing code AAAAAA on discord"),
        "{rpc:?}"
    );
    // A missing field is refused by the daemon, not only by the type
    // (sent raw: the typed params cannot leave it out).
    let missing = harness
        .ws()
        .await
        .request::<Value, _>("pairing.approve", params(json!({"channel": "discord"})))
        .await
        .unwrap_err()
        .to_string();
    assert!(missing.contains("code"), "{missing}");

    let approved = client
        .call::<methods::PairingApprove>(&approve(&ticket.code))
        .await
        .unwrap();
    assert_eq!(approved.sender, "1001");
    assert!(store.peer_approved("discord", "1001").await.unwrap());
    let revoked = client
        .call::<methods::PairingRevoke>(&PairingRevokeParams {
            channel: "discord".into(),
            sender: "1001".into(),
        })
        .await
        .unwrap();
    assert!(revoked.revoked);
    assert!(!store.peer_approved("discord", "1001").await.unwrap());

    // No platform channel runs here; the web chat is always listed.
    let channels = client
        .call::<methods::ChannelsStatus>(&NoParams {})
        .await
        .unwrap();
    assert_eq!(channels.len(), 1);
    assert_eq!(
        (channels[0].name.as_str(), channels[0].state.as_str()),
        ("web", "connected")
    );
    // And nothing answers under /channels/.
    let response = reqwest::Client::new()
        .post(harness.url("/channels/telegram/webhook"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401, "answered like a refused signature");
    harness.stop().await;
}
