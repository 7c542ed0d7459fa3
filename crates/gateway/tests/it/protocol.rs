use std::time::Duration;

use flynn_testkit::{FakeOpenAi, Reply};
use jsonrpsee::core::client::{ClientT, Subscription, SubscriptionClientT};
use serde_json::{Value, json};

use crate::harness::*;

#[tokio::test]
async fn a_turn_streams_its_events_with_envelopes_and_history_reads_by_cursor() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Hello from the fake.".into()));
    fake.push(Reply::Text("Second answer.".into()));
    let mut harness = Harness::start(&fake).await;
    let client = harness.ws().await;

    let events = send(&client, json!({"session": "web:alice", "message": "hi"})).await;
    let kinds = kinds(&events);
    assert_eq!(kinds.first().map(String::as_str), Some("run_state:start"));
    assert_eq!(kinds.last().map(String::as_str), Some("run_state:complete"));
    assert!(kinds.contains(&"done".to_owned()), "{kinds:?}");
    assert_eq!(text(&events), "Hello from the fake.");
    // Envelopes: this session, one turn, increasing sequence numbers.
    let turn = events[0]["turn"].as_u64().unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] > w[0]), "{seqs:?}");
    for event in &events {
        assert_eq!(event["session"], "web:alice");
        assert_eq!(event["turn"].as_u64(), Some(turn));
        assert!(event["time_ms"].as_i64().unwrap() > 0);
    }

    let history = call(&client, "sessions.history", json!({"session": "web:alice"})).await;
    let messages = history["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["message"]["role"], "user");
    assert_eq!(history["more_before"], false);
    let cursor = history["cursor"].as_u64().unwrap();

    send(&client, json!({"session": "web:alice", "message": "again"})).await;
    let since = call(
        &client,
        "sessions.history",
        json!({"session": "web:alice", "after": cursor}),
    )
    .await;
    let new: Vec<&Value> = since["messages"].as_array().unwrap().iter().collect();
    assert_eq!(new.len(), 2, "only what came after the cursor: {since}");
    assert_eq!(new[1]["message"]["content"][0]["text"], "Second answer.");
    let page = call(
        &client,
        "sessions.history",
        json!({"session": "web:alice", "limit": 1}),
    )
    .await;
    assert_eq!(page["messages"].as_array().unwrap().len(), 1);
    assert_eq!(page["more_before"], true);

    let sessions = call(&client, "sessions.list", empty()).await;
    assert_eq!(sessions[0]["key"], "web:alice");
    assert_eq!(sessions[0]["message_count"], 4);
    // Titled by its first message, not the later one.
    assert_eq!(sessions[0]["title"], "hi");
    let usage = call(&client, "usage.summary", empty()).await;
    assert_eq!(usage["total"]["calls"], 2);
    assert_eq!(usage["tiers"][0]["tier"], "default");

    let reset = call(&client, "sessions.reset", json!({"session": "web:alice"})).await;
    assert_eq!(reset["existed"], true);
    let sessions = call(&client, "sessions.list", empty()).await;
    assert_eq!(sessions.as_array().unwrap().len(), 0);
    assert!(fake.violations().is_empty(), "{:?}", fake.violations());
    harness.stop().await;
}

#[tokio::test]
async fn two_clients_on_one_session_see_the_same_events_in_the_same_order() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("one two three four".into()));
    let mut harness = Harness::start(&fake).await;
    let watcher_a = harness.ws().await;
    let watcher_b = harness.ws().await;
    let sender = harness.ws().await;
    let mut subs: Vec<Subscription<Value>> = Vec::new();
    for client in [&watcher_a, &watcher_b] {
        subs.push(
            client
                .subscribe(
                    "sessions.subscribe",
                    params(json!({"sessions": ["tg:42"]})),
                    "sessions.unsubscribe",
                )
                .await
                .unwrap(),
        );
    }
    let sent = send(&sender, json!({"session": "tg:42", "message": "count"})).await;
    let mut seen = Vec::new();
    for sub in &mut subs {
        seen.push(collect_turn(sub).await);
    }
    assert_eq!(seen[0], seen[1], "both watchers saw the same events");
    assert_eq!(seen[0], sent, "and the same as the sender");
    assert!(text(&seen[0]).contains("one two three four"));
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
    let client = harness.ws().await;
    let approver = harness.ws().await;

    for (approve, expected_ok) in [(true, true), (false, false)] {
        fake.push(Reply::ToolCalls(vec![(
            "file_write".into(),
            json!({"path": "out.txt", "content": "written"}),
        )]));
        fake.push(Reply::Text("done".into()));
        let mut sub: Subscription<Value> = client
            .subscribe(
                "agent.send",
                params(json!({"session": "web:w", "message": "write it"})),
                "agent.unsubscribe",
            )
            .await
            .unwrap();
        let mut events = Vec::new();
        loop {
            let event: Value = tokio::time::timeout(Duration::from_secs(10), sub.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            events.push(event.clone());
            if event["type"] == "confirmation_requested" {
                let pending = call(&approver, "confirmations.list", empty()).await;
                assert_eq!(pending.as_array().unwrap().len(), 1, "{pending}");
                assert_eq!(pending[0]["tool"], "file.write");
                let id = event["id"].as_str().unwrap();
                let resolved = call(
                    &approver,
                    "confirmations.resolve",
                    json!({"session": "web:w", "id": id, "approve": approve, "reason": "not today"}),
                )
                .await;
                assert_eq!(
                    resolved["resolution"],
                    if approve { "approved" } else { "denied" }
                );
            }
            if event["type"] == "run_state" && event["state"] == "complete" {
                break;
            }
        }
        let end = events.iter().find(|e| e["type"] == "tool_end").unwrap();
        assert_eq!(end["ok"], expected_ok, "{end}");
        if !approve {
            assert!(end["output"].as_str().unwrap().contains("not today"));
        }
        let pending = call(&approver, "confirmations.list", empty()).await;
        assert_eq!(pending, json!([]));
    }
    assert_eq!(
        std::fs::read_to_string(harness._home.path().join("out.txt")).unwrap(),
        "written"
    );
    let error = approver
        .request::<Value, _>(
            "confirmations.resolve",
            params(json!({"session": "web:w", "id": "call_9", "approve": true})),
        )
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("waits for confirmation"),
        "{error}"
    );
    harness.stop().await;
}

#[tokio::test]
async fn cancel_stops_a_running_turn() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Stall(
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"thinking...\"},\"finish_reason\":null}]}\n\n".into(),
    ));
    let mut harness = Harness::start(&fake).await;
    let client = harness.ws().await;
    let mut sub: Subscription<Value> = client
        .subscribe(
            "agent.send",
            params(json!({"session": "web:c", "message": "long job"})),
            "agent.unsubscribe",
        )
        .await
        .unwrap();
    // Wait for the stream to have started.
    loop {
        let event: Value = sub.next().await.unwrap().unwrap();
        if event["type"] == "content_delta" {
            break;
        }
    }
    let status = call(&client, "agent.status", json!({"session": "web:c"})).await;
    assert_eq!(status["running"].as_array().unwrap().len(), 1, "{status}");
    let cancelled = call(&client, "agent.cancel", json!({"session": "web:c"})).await;
    assert_eq!(cancelled["cancelled"], true);
    let rest = collect_turn(&mut sub).await;
    assert_eq!(
        kinds(&rest).last().map(String::as_str),
        Some("run_state:cancelled")
    );
    harness.stop().await;
}

#[tokio::test]
async fn reset_stops_the_running_turn_drops_the_waiting_one_and_starts_afresh() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Stall(
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"thinking...\"},\"finish_reason\":null}]}\n\n".into(),
    ));
    let mut harness = Harness::start(&fake).await;
    let client = harness.ws().await;
    let mut running: Subscription<Value> = client
        .subscribe(
            "agent.send",
            params(json!({"session": "web:r", "message": "long job"})),
            "agent.unsubscribe",
        )
        .await
        .unwrap();
    loop {
        let event: Value = running.next().await.unwrap().unwrap();
        if event["type"] == "content_delta" {
            break;
        }
    }
    let mut waiting: Subscription<Value> = client
        .subscribe(
            "agent.send",
            params(json!({"session": "web:r", "message": "next job"})),
            "agent.unsubscribe",
        )
        .await
        .unwrap();

    let reset = call(&client, "sessions.reset", json!({"session": "web:r"})).await;
    assert_eq!(reset["existed"], true);
    // Both turns ended before the history went: nothing of them is
    // written into the emptied session.
    let ran = collect_turn(&mut running).await;
    assert_eq!(
        kinds(&ran).last().map(String::as_str),
        Some("run_state:cancelled")
    );
    let waited = collect_turn(&mut waiting).await;
    assert_eq!(
        kinds(&waited).last().map(String::as_str),
        Some("run_state:cancelled")
    );
    let history = call(&client, "sessions.history", json!({"session": "web:r"})).await;
    assert_eq!(history["messages"], json!([]));

    fake.push(Reply::Text("fresh".into()));
    send(&client, json!({"session": "web:r", "message": "again"})).await;
    let history = call(&client, "sessions.history", json!({"session": "web:r"})).await;
    let roles: Vec<&Value> = history["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["message"]["role"])
        .collect();
    assert_eq!(roles, [&json!("user"), &json!("assistant")]);
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
    let client = harness.ws().await;
    fake.push(Reply::Text("one".into()));
    send(&client, json!({"session": "web:d", "message": "hi"})).await;

    let usage: Value = client
        .request("usage.summary", params(json!({"days": 7})))
        .await
        .unwrap();
    let today = chrono_today();
    assert_eq!(usage["daily"].as_array().unwrap().len(), 1, "{usage}");
    assert_eq!(usage["daily"][0]["day"], today);
    assert_eq!(usage["daily"][0]["tier"], "default");
    assert_eq!(usage["daily"][0]["calls"], 1);
    let plain: Value = client
        .request("usage.summary", params(json!({})))
        .await
        .unwrap();
    assert!(plain.get("daily").is_none(), "{plain}");

    let providers: Value = client
        .request("providers.status", params(json!({})))
        .await
        .unwrap();
    let providers = providers.as_array().unwrap();
    assert_eq!(providers.len(), 2);
    assert_eq!(
        (providers[0]["name"].as_str(), providers[0]["ok"].as_bool()),
        (Some("down"), Some(false))
    );
    assert!(
        providers[0]["error"]
            .as_str()
            .unwrap()
            .contains(&port.to_string())
    );
    assert_eq!(
        (providers[1]["name"].as_str(), providers[1]["ok"].as_bool()),
        (Some("fake"), Some(true))
    );
    assert_eq!(providers[1]["models"], 2);
    // Kept for 30 seconds unless asked again.
    let before = fake.requests().len();
    let _: Value = client
        .request("providers.status", params(json!({})))
        .await
        .unwrap();
    assert_eq!(fake.requests().len(), before);
    let _: Value = client
        .request("providers.status", params(json!({"refresh": true})))
        .await
        .unwrap();
    assert_eq!(fake.requests().len(), before + 1);

    // This test process keeps no log lines: the answer says so.
    let logs: Value = client
        .request("system.logs", params(json!({"limit": 5})))
        .await
        .unwrap();
    assert_eq!(logs, json!({"captured": false, "lines": []}));
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
    let client = harness.ws().await;
    let store = harness.flynn.manager().store().clone();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let ticket = store
        .pairing_request("discord", "1001", Some("bob"), now, 3_600_000)
        .await
        .unwrap();

    let listed: Value = client
        .request("pairing.list", params(json!({})))
        .await
        .unwrap();
    assert_eq!(listed["pending"][0]["code"], ticket.code.as_str());
    assert_eq!(listed["pending"][0]["sender"], "1001");
    assert_eq!(listed["pending"][0]["name"], "bob");
    assert_eq!(listed["approved"], json!([]));

    let wrong = client
        .request::<Value, _>(
            "pairing.approve",
            params(json!({"channel": "discord", "code": "AAAAAA"})),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        wrong.contains("no pairing code AAAAAA on discord"),
        "{wrong}"
    );
    let missing = client
        .request::<Value, _>("pairing.approve", params(json!({"channel": "discord"})))
        .await
        .unwrap_err()
        .to_string();
    assert!(missing.contains("code"), "{missing}");

    let approved: Value = client
        .request(
            "pairing.approve",
            params(json!({"channel": "discord", "code": ticket.code})),
        )
        .await
        .unwrap();
    assert_eq!(approved["sender"], "1001");
    assert!(store.peer_approved("discord", "1001").await.unwrap());
    let revoked: Value = client
        .request(
            "pairing.revoke",
            params(json!({"channel": "discord", "sender": "1001"})),
        )
        .await
        .unwrap();
    assert_eq!(revoked, json!({"revoked": true}));
    assert!(!store.peer_approved("discord", "1001").await.unwrap());

    // No platform channel runs here; the web chat is always listed.
    let channels: Value = client
        .request("channels.status", params(json!({})))
        .await
        .unwrap();
    assert_eq!(channels.as_array().unwrap().len(), 1);
    assert_eq!(channels[0]["name"], "web");
    assert_eq!(channels[0]["state"], "connected");
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
