//! The gateway through `flynn-client`, as the CLI, the TUI and `flynn mcp
//! serve --gateway` reach it: every method and subscription with the
//! params and result `flynn-api` declares (an answer whose shape drifted
//! from its type fails to decode here), the typed errors, following one
//! turn, and reconnecting with backoff. The wire itself (frames, HTTP
//! status codes, headers) is tested with raw clients in `security` and
//! `trust`.

use std::collections::BTreeSet;
use std::time::Duration;

use flynn_api::{
    CancelParams, ConfigGetParams, ConfigPatchParams, ConfigSet, HistoryParams, InvokeParams,
    LogsParams, Method, PairingApproveParams, PairingRevokeParams, ProvidersParams, ResolveParams,
    SendParams, SessionParams, StatusParams, SubscribeParams, Subscription, ToolsListParams,
    UsageParams, codes, methods,
};
use flynn_client::{Backoff, Client, Error};
use flynn_core::protocol::config::TokenScope;
use flynn_core::protocol::{AgentEvent, Role, RunState};
use flynn_testkit::{FakeOpenAi, Reply};
use serde_json::json;

use crate::harness::*;

/// Every method and subscription, each called once through its type; the
/// set called is checked against `flynn_api::METHODS`, so a method added
/// without a typed round trip here fails this test.
#[tokio::test]
async fn every_method_and_subscription_answers_in_the_shape_flynn_api_declares() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("typed answer".into()));
    fake.push(Reply::Text("second answer".into()));
    let home = tempfile::tempdir().unwrap();
    let config_file = home.path().join("flynn.yaml");
    std::fs::write(&config_file, "memory:\n  enabled: false\n").unwrap();
    let mut harness = Harness::with(Options {
        config: config(&fake),
        tools: Vec::new(),
        config_file: Some(config_file.clone()),
    })
    .await;
    let client = harness.client().await;
    let session = key("web:typed");
    let mut called = BTreeSet::new();
    macro_rules! call {
        ($method:ty, $params:expr) => {{
            called.insert(<$method as Method>::NAME);
            client.call::<$method>(&$params).await
        }};
    }

    // The subscriptions: one watcher of the session, one turn followed.
    called.insert(methods::SessionsSubscribe::NAME);
    let mut watched = client
        .subscribe::<methods::SessionsSubscribe>(&SubscribeParams {
            sessions: vec![session.clone()],
        })
        .await
        .unwrap();
    called.insert(methods::AgentSend::NAME);
    let followed = follow(&client, send_params(&session, "hi")).await;
    assert_eq!(text_of(&followed), "typed answer");
    assert_eq!(
        followed.last().map(|e| &e.event),
        Some(&AgentEvent::RunState {
            state: RunState::Complete
        })
    );
    assert_eq!(until_turn_ends(&mut watched).await, followed);

    let sent = call!(methods::SessionsSend, send_params(&session, "and again")).unwrap();
    assert_eq!(
        (sent.session.as_str(), sent.outcome.reply.as_str()),
        ("web:typed", "second answer")
    );
    assert_eq!(sent.command, None);

    let sessions = call!(methods::SessionsList, flynn_api::NoParams {}).unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!((&sessions[0].key, sessions[0].message_count), (&session, 4));
    let history = call!(
        methods::SessionsHistory,
        HistoryParams {
            session: session.clone(),
            before: None,
            after: None,
            limit: Some(2),
        }
    )
    .unwrap();
    assert_eq!(
        history
            .messages
            .iter()
            .map(|m| (m.message.role, m.message.text()))
            .collect::<Vec<_>>(),
        [
            (Role::User, "and again".to_owned()),
            (Role::Assistant, "second answer".to_owned())
        ]
    );
    assert!(history.more_before);

    let status = call!(
        methods::AgentStatus,
        StatusParams {
            session: Some(session.clone())
        }
    )
    .unwrap();
    assert!(status.running.is_empty() && !status.draining, "{status:?}");
    let cancel = call!(
        methods::AgentCancel,
        CancelParams {
            session: session.clone(),
            turn: None
        }
    )
    .unwrap();
    assert!(!cancel.cancelled, "nothing was running");

    let tools = call!(methods::ToolsList, ToolsListParams { agent: None }).unwrap();
    assert!(
        tools
            .iter()
            .any(|tool| tool.name == "file.read" && tool.allowed),
        "{tools:?}"
    );
    std::fs::write(harness._home.path().join("note.txt"), "remember the milk").unwrap();
    let invoked = call!(
        methods::ToolsInvoke,
        InvokeParams {
            name: "file.read".into(),
            input: json!({"path": "note.txt"}),
            agent: None,
            session: None,
            confirm: false,
        }
    )
    .unwrap();
    assert!(
        invoked.ok && invoked.output.contains("remember the milk"),
        "{invoked:?}"
    );

    let pending = call!(methods::ConfirmationsList, flynn_api::NoParams {}).unwrap();
    assert!(pending.is_empty());
    let unknown = call!(
        methods::ConfirmationsResolve,
        ResolveParams {
            session: session.clone(),
            id: "call_9".into(),
            approve: true,
            input_digest: None,
            reason: None,
        }
    )
    .unwrap_err();
    assert_eq!(
        unknown.rpc().map(|e| e.code),
        Some(codes::NOT_FOUND),
        "{unknown:?}"
    );

    let tiers = call!(
        methods::ConfigGet,
        ConfigGetParams {
            path: "models.tiers.default".into()
        }
    )
    .unwrap();
    assert_eq!(tiers, json!(["fake/m"]));
    let patched = call!(
        methods::ConfigPatch,
        ConfigPatchParams {
            set: vec![ConfigSet {
                path: "sessions.queue_limit".into(),
                value: json!(50),
            }],
        }
    )
    .unwrap();
    assert_eq!(patched.file, config_file.display().to_string());
    assert!(
        std::fs::read_to_string(&config_file)
            .unwrap()
            .contains("queue_limit: 50")
    );

    let usage = call!(
        methods::UsageSummary,
        UsageParams {
            session: None,
            days: Some(7)
        }
    )
    .unwrap();
    assert_eq!(usage.total.calls, 2);
    assert_eq!(usage.daily.len(), 1, "{usage:?}");
    let health = call!(methods::SystemHealth, flynn_api::NoParams {}).unwrap();
    assert_eq!(health.status, "ok");
    let version = call!(methods::SystemVersion, flynn_api::NoParams {}).unwrap();
    assert_eq!(version.protocol, flynn_api::PROTOCOL_VERSION);
    assert!(version.client.is_some_and(|client| client.admin));
    let logs = call!(methods::SystemLogs, LogsParams { limit: Some(5) }).unwrap();
    assert!(!logs.captured && logs.lines.is_empty());
    let providers = call!(methods::ProvidersStatus, ProvidersParams { refresh: false }).unwrap();
    assert_eq!(
        providers
            .iter()
            .map(|p| (p.name.as_str(), p.ok))
            .collect::<Vec<_>>(),
        [("fake", true)]
    );
    let channels = call!(methods::ChannelsStatus, flynn_api::NoParams {}).unwrap();
    assert_eq!(
        channels
            .iter()
            .map(|c| (c.name.as_str(), c.state.as_str()))
            .collect::<Vec<_>>(),
        [("web", "connected")]
    );
    let mcp = call!(methods::McpStatus, flynn_api::NoParams {}).unwrap();
    assert!(mcp.is_empty());
    let cluster = call!(methods::ClusterStatus, flynn_api::NoParams {}).unwrap();
    assert_eq!(cluster.this_node, None);
    assert!(cluster.nodes.is_empty());

    let pairing = call!(methods::PairingList, flynn_api::NoParams {}).unwrap();
    assert!(pairing.pending.is_empty() && pairing.approved.is_empty());
    let wrong = call!(
        methods::PairingApprove,
        PairingApproveParams {
            channel: "discord".into(),
            code: "AAAAAA".into(),
            owner: false,
        }
    )
    .unwrap_err();
    assert_eq!(wrong.rpc().map(|e| e.code), Some(codes::NOT_FOUND));
    let revoked = call!(
        methods::PairingRevoke,
        PairingRevokeParams {
            channel: "discord".into(),
            sender: "1001".into(),
        }
    )
    .unwrap();
    assert!(!revoked.revoked);

    let reset = call!(
        methods::SessionsReset,
        SessionParams {
            session: session.clone()
        }
    )
    .unwrap();
    assert!(reset.existed);
    // Last: the harness has no daemon loop to restart, only the request.
    let restart = call!(methods::SystemRestart, flynn_api::NoParams {}).unwrap();
    assert!(restart.restarting);

    let declared: BTreeSet<&str> = flynn_api::METHODS.iter().map(|m| m.name).collect();
    assert_eq!(called, declared, "every declared method is called above");
    assert_eq!(fake.violations(), Vec::<String>::new());
    harness.stop().await;
}

#[tokio::test]
async fn errors_come_back_typed_with_their_codes_and_the_connection_lives() {
    let fake = FakeOpenAi::start().await;
    let mut config = config(&fake);
    config.gateway.tokens = vec![chat_token("phone", PHONE_TOKEN)];
    let mut harness = Harness::with(Options {
        config,
        tools: Vec::new(),
        config_file: None,
    })
    .await;
    let url = format!("ws://{}/rpc", harness.addr);

    let refused = Client::connect(&url, Some("not-the-token-0123456789-0123456789"))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, Error::Unauthorized { status: 401 }),
        "{refused:?}"
    );

    let phone = Client::connect(&url, Some(PHONE_TOKEN)).await.unwrap();
    let forbidden = phone
        .call::<methods::ToolsInvoke>(&InvokeParams {
            name: "file.read".into(),
            input: json!({"path": "x"}),
            agent: None,
            session: None,
            confirm: false,
        })
        .await
        .unwrap_err();
    assert_eq!(
        forbidden.rpc().and_then(|e| e.forbidden()),
        Some(Some(TokenScope::Admin)),
        "{forbidden:?}"
    );

    let owner = harness.client().await;
    let unknown_agent = owner
        .follow(&SendParams {
            agent: Some("nobody".into()),
            ..send_params(&key("web:e"), "hi")
        })
        .await
        .unwrap_err();
    let rpc = unknown_agent.rpc().expect("a protocol error");
    assert_eq!(
        (rpc.code, rpc.kind.as_deref()),
        (codes::CONFIG, Some("config")),
        "{rpc:?}"
    );
    assert!(rpc.message.contains("nobody"), "{rpc:?}");
    // The connection still answers.
    let health = owner
        .call::<methods::SystemHealth>(&flynn_api::NoParams {})
        .await
        .unwrap();
    assert_eq!(health.status, "ok");
    assert!(owner.is_connected());

    // The daemon going away closes the connection, and calls say so.
    harness.stop().await;
    tokio::time::timeout(Duration::from_secs(10), owner.closed())
        .await
        .expect("the client notices the daemon stopped");
    let after = owner
        .call::<methods::SystemHealth>(&flynn_api::NoParams {})
        .await
        .unwrap_err();
    assert!(matches!(after, Error::Closed), "{after:?}");
    let nobody = Client::connect(&url, Some(TOKEN)).await.unwrap_err();
    assert!(matches!(nobody, Error::Unreachable { .. }), "{nobody:?}");
}

#[tokio::test]
async fn a_client_waiting_with_backoff_connects_once_the_daemon_is_up() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("up now".into()));
    // A port with nothing on it yet.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("ws://{addr}/rpc");
    let (failed_tx, mut failed_rx) = tokio::sync::mpsc::unbounded_channel();
    let waiting = tokio::spawn(async move {
        let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_millis(200));
        backoff
            .connect(&url, Some(TOKEN), |error| {
                let _ = failed_tx.send(matches!(error, Error::Unreachable { .. }));
            })
            .await
    });
    // It has tried and failed at least twice before the daemon starts.
    for _ in 0..2 {
        assert_eq!(failed_rx.recv().await, Some(true));
    }
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let mut harness = Harness::on(
        listener,
        Options {
            config: config(&fake),
            tools: Vec::new(),
            config_file: None,
        },
    )
    .await;
    let client = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("connected once the daemon was up")
        .unwrap();
    let events = follow(&client, send_params(&key("web:late"), "hello?")).await;
    assert_eq!(text_of(&events), "up now");
    harness.stop().await;
}

const PHONE_TOKEN: &str = "phone-token-0123456789-0123456789-abc";

fn chat_token(name: &str, value: &str) -> flynn_core::protocol::config::GatewayToken {
    flynn_core::protocol::config::GatewayToken {
        name: name.into(),
        token: Some(value.into()),
        token_file: None,
        scopes: vec![TokenScope::Chat],
    }
}
