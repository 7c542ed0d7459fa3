//! Who may do what over the gateway: scoped tokens (M3, L2), Tailscale
//! identity confirmed by tailscaled (C1), browser-side and network
//! hygiene (M4, M5, L1), OpenAI sessions (L14); each through real HTTP
//! clients and sockets against the real server.

use std::time::Duration;

use flynn_core::protocol::config::{GatewayToken, TokenScope};
use flynn_testkit::{FakeOpenAi, FakeTailscaled, Reply};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::*;

pub const CHAT_TOKEN: &str = "chat-token-0123456789abcdef0123456789";
pub const OPS_TOKEN: &str = "ops-token-0123456789abcdef0123456789ab";

fn token(name: &str, value: &str, scopes: &[TokenScope]) -> GatewayToken {
    GatewayToken {
        name: name.to_owned(),
        token: Some(value.to_owned()),
        token_file: None,
        scopes: scopes.to_vec(),
    }
}

async fn start(config: flynn_core::protocol::config::FlynnConfig) -> Harness {
    Harness::with(Options {
        config,
        tools: Vec::new(),
        config_file: None,
    })
    .await
}

/// One JSON-RPC call over HTTP POST with `token`: (HTTP status, body).
async fn rpc(harness: &Harness, token: &str, method: &str, params: Value) -> (u16, Value) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let response = reqwest::Client::new()
        .post(harness.url("/rpc"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn error_code(answer: &Value) -> i32 {
    answer["error"]["code"].as_i64().unwrap_or(0) as i32
}

#[tokio::test]
async fn a_chat_token_cannot_administer_and_sees_only_its_own_sessions() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("owner's answer".into()));
    fake.push(Reply::Text("chat answer".into()));
    let mut config = config(&fake);
    config.gateway.tokens = vec![
        token("ide", CHAT_TOKEN, &[TokenScope::Chat]),
        token("ops", OPS_TOKEN, &[TokenScope::Read, TokenScope::Approve]),
    ];
    let mut harness = start(config).await;
    let (_, owner) = rpc(
        &harness,
        TOKEN,
        "sessions.send",
        json!({"session": "telegram:42", "message": "my secret plans"}),
    )
    .await;
    assert_eq!(
        owner["result"]["outcome"]["reply"], "owner's answer",
        "{owner}"
    );

    // The admin's methods are refused, each naming the scope it needs.
    for (method, params) in [
        (
            "config.patch",
            json!({"set": [{"path": "mcp.servers.x", "value": {"command": "sh"}}]}),
        ),
        ("config.get", json!({})),
        (
            "tools.invoke",
            json!({"name": "shell.exec", "input": {"command": "id"}, "confirm": true}),
        ),
        ("system.restart", json!({})),
        (
            "confirmations.resolve",
            json!({"session": "telegram:42", "id": "x", "approve": true}),
        ),
        (
            "pairing.approve",
            json!({"channel": "telegram", "code": "ABCDEF"}),
        ),
        ("system.logs", json!({})),
    ] {
        let (status, answer) = rpc(&harness, CHAT_TOKEN, method, params).await;
        assert_eq!(status, 200, "{method}");
        assert_eq!(
            error_code(&answer),
            flynn_gateway::codes::FORBIDDEN,
            "{method}: {answer}"
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("'ide' has `chat`"),
            "{answer}"
        );
    }

    // Other sessions: not to read, not to write.
    for (method, params) in [
        ("sessions.history", json!({"session": "telegram:42"})),
        (
            "sessions.send",
            json!({"session": "telegram:42", "message": "hi"}),
        ),
        ("sessions.reset", json!({"session": "telegram:42"})),
        ("agent.cancel", json!({"session": "telegram:42"})),
    ] {
        let (_, answer) = rpc(&harness, CHAT_TOKEN, method, params).await;
        assert_eq!(
            error_code(&answer),
            flynn_gateway::codes::FORBIDDEN,
            "{method}: {answer}"
        );
    }
    // It can ask who it is (the web chat does, to name its sessions).
    let (_, version) = rpc(&harness, CHAT_TOKEN, "system.version", json!({})).await;
    assert_eq!(
        version["result"]["client"],
        json!({"name": "ide", "scopes": ["chat"], "namespace": "token-ide", "admin": false})
    );
    // Its own: the default session is its namespace's.
    let (_, sent) = rpc(
        &harness,
        CHAT_TOKEN,
        "sessions.send",
        json!({"message": "hello"}),
    )
    .await;
    assert_eq!(sent["result"]["session"], "token-ide:default", "{sent}");
    assert_eq!(sent["result"]["outcome"]["reply"], "chat answer");
    let (_, listed) = rpc(&harness, CHAT_TOKEN, "sessions.list", json!({})).await;
    let keys: Vec<&str> = listed["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["token-ide:default"]);
    // A `read` token sees everything, and may not send anywhere but home.
    let (_, listed) = rpc(&harness, OPS_TOKEN, "sessions.list", json!({})).await;
    assert_eq!(listed["result"].as_array().unwrap().len(), 2, "{listed}");
    let (_, history) = rpc(
        &harness,
        OPS_TOKEN,
        "sessions.history",
        json!({"session": "telegram:42"}),
    )
    .await;
    assert!(
        history["result"]["messages"]
            .to_string()
            .contains("my secret plans"),
        "{history}"
    );
    // The admin token's turns are the owner's; a chat token's are a
    // guest's (its own memory, the guest tool policy), and say so.
    assert_eq!(history["result"]["messages"][0]["principal"], "owner");
    let (_, own) = rpc(
        &harness,
        OPS_TOKEN,
        "sessions.history",
        json!({"session": "token-ide:default"}),
    )
    .await;
    assert_eq!(
        own["result"]["messages"][0]["principal"], "guest:token-ide:ide",
        "{own}"
    );
    let (_, answer) = rpc(
        &harness,
        OPS_TOKEN,
        "sessions.send",
        json!({"session": "telegram:42", "message": "x"}),
    )
    .await;
    assert_eq!(error_code(&answer), flynn_gateway::codes::FORBIDDEN);

    // Routes: /metrics needs `read`; /v1 takes `chat`.
    let metrics = reqwest::Client::new()
        .get(harness.url("/metrics"))
        .bearer_auth(CHAT_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 403);
    let models = reqwest::Client::new()
        .get(harness.url("/v1/models"))
        .bearer_auth(CHAT_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 200);
    // The chat token cannot auto-approve its own turns either.
    let (_, answer) = rpc(
        &harness,
        CHAT_TOKEN,
        "sessions.send",
        json!({"message": "go", "approval": "approve_all"}),
    )
    .await;
    assert_eq!(
        error_code(&answer),
        flynn_gateway::codes::FORBIDDEN,
        "{answer}"
    );
    assert_eq!(
        fake.requests().len(),
        2,
        "only the two allowed turns reached the model"
    );
    harness.stop().await;
}

#[tokio::test]
async fn every_registered_method_declares_its_scope() {
    let fake = FakeOpenAi::start().await;
    let config = config(&fake);
    let home = tempfile::tempdir().unwrap();
    let flynn = flynn_core::Flynn::builder()
        .config(config.clone())
        .home(home.path().join("data"))
        .workspace(home.path())
        .build()
        .await
        .unwrap();
    let gateway = flynn_gateway::Gateway::new(flynn_gateway::GatewayParts {
        manager: flynn.manager().clone(),
        config,
        config_file: None,
        token: TOKEN.to_owned(),
        approver: flynn_gateway::RemoteApprover::new(),
        channels: None,
    });
    let names = gateway.method_names();
    assert!(names.len() > 20, "{names:?}");
    let missing: Vec<&str> = names
        .iter()
        .copied()
        // Unsubscribing ends what the client already holds.
        .filter(|name| !name.ends_with(".unsubscribe"))
        .filter(|name| flynn_api::scopes_of(name).is_none())
        .collect();
    assert_eq!(
        missing,
        Vec::<&str>::new(),
        "methods without a scope in flynn_api::METHODS"
    );
    flynn.shutdown().await;
}

#[tokio::test]
async fn tokens_come_only_in_the_header_except_on_the_websocket_and_failures_are_throttled() {
    let fake = FakeOpenAi::start().await;
    let mut config = config(&fake);
    config.gateway.auth_failures_per_minute = 3;
    let mut harness = start(config).await;
    let client = reqwest::Client::new();
    let query = client
        .get(harness.url(&format!("/v1/models?token={TOKEN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(query.status(), 401);
    let answer: Value = query.json().await.unwrap();
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only on the WebSocket upgrade"),
        "{answer}"
    );
    for _ in 0..2 {
        let (status, _) = rpc(&harness, "wrong-token", "system.version", json!({})).await;
        assert_eq!(status, 401);
    }
    // Three failures in a minute: this address waits, right token or not.
    let refused = client
        .post(harness.url("/rpc"))
        .bearer_auth(TOKEN)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "system.version"}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    let wait: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    harness.stop().await;
}

#[tokio::test]
async fn a_forged_tailscale_header_from_loopback_is_refused() {
    // The old form: any loopback peer with the header was the owner.
    let fake = FakeOpenAi::start().await;
    let mut config = config(&fake);
    config.gateway.tailscale_users = vec!["alice@example.com".into()];
    let mut harness = start(config).await;
    let answer = reqwest::Client::new()
        .post(harness.url("/rpc"))
        .header("tailscale-user-login", "alice@example.com")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools.invoke",
            "params": {"name": "shell.exec", "input": {"command": "id"}, "confirm": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 401);
    let body: Value = answer.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("gateway.tailscale.listen"),
        "{body}"
    );
    harness.stop().await;
}

const TS_HOST: &str = "box.tailnet-1234.ts.net";

/// A request as `tailscale serve` sends it to a Unix socket backend.
async fn via_serve(socket: &std::path::Path, headers: &[(&str, &str)]) -> (u16, Value) {
    let client = reqwest::Client::builder()
        .unix_socket(socket)
        .build()
        .unwrap();
    let mut request = client
        .post("http://localhost/rpc")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "system.health"}));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn tailscale_serve_identity_counts_only_on_its_listener_and_when_tailscaled_confirms_it() {
    let dir = tempfile::tempdir().unwrap();
    let tailscaled = FakeTailscaled::start(dir.path()).await.unwrap();
    tailscaled.add_user("100.64.0.5".parse().unwrap(), "alice@example.com");
    tailscaled.add_user("100.64.0.6".parse().unwrap(), "mallory@example.com");
    tailscaled.add_tagged("100.64.0.7".parse().unwrap(), "alice@example.com");
    let fake = FakeOpenAi::start().await;
    let mut config = config(&fake);
    let listen = dir.path().join("ts.sock");
    config.gateway.tailscale.users = vec!["alice@example.com".into()];
    config.gateway.tailscale.listen = Some(format!("unix:{}", listen.display()));
    config.gateway.tailscale.host = Some(TS_HOST.into());
    config.gateway.tailscale.socket = tailscaled.socket().to_owned();
    config.gateway.auth_failures_per_minute = 100;
    let mut harness = start(config).await;
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&listen).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o600,
        "only the daemon's user (and root's tailscaled) may connect"
    );

    let alice = [
        ("tailscale-user-login", "alice@example.com"),
        ("x-forwarded-for", "100.64.0.5"),
        ("x-forwarded-host", TS_HOST),
    ];
    let (status, answer) = via_serve(&listen, &alice).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"]["status"], "ok", "{answer}");

    // A login tailscaled does not confirm for that address.
    let (status, answer) = via_serve(
        &listen,
        &[
            ("tailscale-user-login", "alice@example.com"),
            ("x-forwarded-for", "100.64.0.6"),
            ("x-forwarded-host", TS_HOST),
        ],
    )
    .await;
    assert_eq!(status, 401);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tailscaled says 100.64.0.6 is 'mallory@example.com'"),
        "{answer}"
    );
    for forged in [
        // Unknown to tailscaled.
        [
            ("tailscale-user-login", "alice@example.com"),
            ("x-forwarded-for", "100.64.0.9"),
            ("x-forwarded-host", TS_HOST),
        ],
        // A tagged node is no person.
        [
            ("tailscale-user-login", "alice@example.com"),
            ("x-forwarded-for", "100.64.0.7"),
            ("x-forwarded-host", TS_HOST),
        ],
        // Not an allowed user, though tailscaled knows them.
        [
            ("tailscale-user-login", "mallory@example.com"),
            ("x-forwarded-for", "100.64.0.6"),
            ("x-forwarded-host", TS_HOST),
        ],
    ] {
        let (status, answer) = via_serve(&listen, &forged).await;
        assert_eq!(status, 401, "{forged:?}: {answer}");
    }
    // Another name (DNS rebinding through Serve) is refused.
    let (status, _) = via_serve(
        &listen,
        &[
            ("tailscale-user-login", "alice@example.com"),
            ("x-forwarded-for", "100.64.0.5"),
            ("x-forwarded-host", "rebind.attacker.example"),
        ],
    )
    .await;
    assert_eq!(status, 421);
    // Alice's very headers on the main listener: refused.
    let mut headers = HeaderMap::new();
    for (name, value) in alice {
        headers.insert(name, value.parse().unwrap());
    }
    let main = reqwest::Client::new()
        .post(harness.url("/rpc"))
        .headers(headers)
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "system.health"}))
        .send()
        .await
        .unwrap();
    assert_eq!(main.status(), 401);
    assert_eq!(tailscaled.violations(), Vec::<String>::new());
    assert!(
        tailscaled.asked().contains(&"100.64.0.5".to_owned()),
        "{:?}",
        tailscaled.asked()
    );
    harness.stop().await;
}

#[tokio::test]
async fn pages_of_other_sites_and_other_host_names_are_refused() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("json answer".into()));
    let mut harness = start(config(&fake)).await;
    let client = reqwest::Client::new();
    let chat =
        json!({"model": "flynn", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    // A page's "simple request": text/plain.
    let plain = client
        .post(harness.url("/v1/chat/completions"))
        .bearer_auth(TOKEN)
        .header("content-type", "text/plain")
        .body(chat.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 415);
    let cross = client
        .post(harness.url("/v1/chat/completions"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .header("origin", "https://evil.example")
        .body(chat.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(cross.status(), 403);
    let fetched = client
        .post(harness.url("/rpc"))
        .bearer_auth(TOKEN)
        .header("sec-fetch-site", "cross-site")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "system.version"}))
        .send()
        .await
        .unwrap();
    assert_eq!(fetched.status(), 403);
    // DNS rebinding: the page's own name in Host.
    let rebound = client
        .post(harness.url("/rpc"))
        .bearer_auth(TOKEN)
        .header(
            "host",
            format!("rebind.attacker.example:{}", harness.addr.port()),
        )
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "system.version"}))
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 421);
    let mcp = client
        .post(harness.url("/mcp"))
        .bearer_auth(TOKEN)
        .header("host", "rebind.attacker.example")
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 421);
    // The same request from a client: fine.
    let ok = client
        .post(harness.url("/v1/chat/completions"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body(chat)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(
        fake.requests().len(),
        1,
        "only the client's request reached the model"
    );
    harness.stop().await;
}

#[tokio::test]
async fn health_without_a_token_says_only_ok() {
    let fake = FakeOpenAi::start().await;
    let mut config = config(&fake);
    config.gateway.tokens = vec![token("ide", CHAT_TOKEN, &[TokenScope::Chat])];
    let mut harness = start(config).await;
    let client = reqwest::Client::new();
    let bare: Value = client
        .get(harness.url("/healthz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(bare, json!({"status": "ok"}));
    let chat: Value = client
        .get(harness.url("/healthz"))
        .bearer_auth(CHAT_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(chat, json!({"status": "ok"}), "chat has no `read`");
    let full: Value = client
        .get(harness.url("/healthz"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(full["pending_confirmations"], 0, "{full}");
    assert!(full["version"].is_string());
    harness.stop().await;
}

#[tokio::test]
async fn the_openai_endpoint_keeps_one_session_per_token_and_user() {
    let fake = FakeOpenAi::start().await;
    for reply in ["one", "two", "three"] {
        fake.push(Reply::Text(reply.into()));
    }
    let mut config = config(&fake);
    config.gateway.tokens = vec![token("ide", CHAT_TOKEN, &[TokenScope::Chat])];
    let mut harness = start(config).await;
    let ask = |token: &'static str, user: Option<&'static str>| {
        let url = harness.url("/v1/chat/completions");
        async move {
            let mut body =
                json!({"model": "flynn", "messages": [{"role": "user", "content": "hi"}]});
            if let Some(user) = user {
                body["user"] = json!(user);
            }
            let response = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200);
            response.headers()["x-flynn-session"]
                .to_str()
                .unwrap()
                .to_owned()
        }
    };
    let first = ask(TOKEN, None).await;
    let second = ask(TOKEN, None).await;
    assert_eq!(
        (first.as_str(), second.as_str()),
        ("openai:default", "openai:default")
    );
    assert_eq!(ask(CHAT_TOKEN, Some("bob")).await, "token-ide:openai-bob");
    let sessions = harness.flynn.manager().store().list().await.unwrap();
    assert_eq!(sessions.len(), 2, "not one per request");
    harness.stop().await;
}

/// Opens a connection from `from` (another loopback address) and sends
/// the start of a request, never its end.
async fn slow_client(from: &str, to: std::net::SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    // Over the caps the server may have closed it already.
    let _ = stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await;
    stream
}

/// Whether the server closed `stream` within `wait`.
async fn closed_within(stream: &mut tokio::net::TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 512];
    loop {
        match tokio::time::timeout(wait, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            // A 408 or the like before the close.
            Ok(Ok(_)) => continue,
        }
    }
}

#[tokio::test]
async fn a_thousand_slow_connections_do_not_stop_a_normal_client() {
    let fake = FakeOpenAi::start().await;
    let mut config = config(&fake);
    config.gateway.max_connections_per_ip = 50;
    config.gateway.header_timeout_secs = 1;
    let mut harness = start(config).await;
    let mut slow = Vec::with_capacity(1000);
    for _ in 0..1000 {
        slow.push(slow_client("127.0.0.2", harness.addr).await);
    }
    // A normal client from another address is served at once.
    let (status, answer) = tokio::time::timeout(
        Duration::from_secs(5),
        rpc(&harness, TOKEN, "system.version", json!({})),
    )
    .await
    .expect("served while 1,000 slow connections are open");
    assert_eq!(
        (status, answer["result"]["protocol"].as_u64()),
        (200, Some(1))
    );
    // Every slow connection is closed: those over the per-address cap at
    // once, the others when their headers do not come in time.
    let closed = futures::future::join_all(
        slow.iter_mut()
            .map(|stream| closed_within(stream, Duration::from_secs(5))),
    )
    .await;
    assert_eq!(
        closed.iter().filter(|c| !**c).count(),
        0,
        "slow connections still open"
    );
    let metrics = reqwest::Client::new()
        .get(harness.url("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("flynn_gateway_connections_refused_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(refused >= 950, "{refused}");
    harness.stop().await;
}

#[tokio::test]
async fn security_changes_through_config_patch_are_audited() {
    let fake = FakeOpenAi::start().await;
    let files = tempfile::tempdir().unwrap();
    let file = files.path().join("config.yaml");
    std::fs::write(&file, "gateway:\n  bind: 127.0.0.1:18800\n").unwrap();
    let mut config = config(&fake);
    config.gateway.tokens = vec![token("ide", CHAT_TOKEN, &[TokenScope::Chat])];
    let mut harness = Harness::with(Options {
        config,
        tools: Vec::new(),
        config_file: Some(file.clone()),
    })
    .await;
    let patch = json!({"set": [
        {"path": "gateway.allowed_hosts", "value": ["flynn.example.com"]},
        {"path": "gateway.token", "value": "a-new-token-0123456789abcdef012345"},
    ]});
    let (_, refused) = rpc(&harness, CHAT_TOKEN, "config.patch", patch.clone()).await;
    assert_eq!(error_code(&refused), flynn_gateway::codes::FORBIDDEN);
    assert!(
        !std::fs::read_to_string(&file)
            .unwrap()
            .contains("flynn.example.com")
    );
    let (_, done) = rpc(&harness, TOKEN, "config.patch", patch).await;
    assert_eq!(done["result"]["restart_required"], true, "{done}");
    let audit = harness._home.path().join("data/audit/tools.jsonl");
    let lines = std::fs::read_to_string(&audit).unwrap();
    let record: Value = serde_json::from_str(lines.lines().last().unwrap()).unwrap();
    assert_eq!(
        (
            record["tool"].as_str(),
            record["agent"].as_str(),
            record["outcome"].as_str()
        ),
        (Some("config.patch"), Some("token:default"), Some("ok"))
    );
    assert_eq!(
        record["arguments"]["set"],
        json!([
            {"path": "gateway.allowed_hosts", "value": ["flynn.example.com"], "security": true},
            {"path": "gateway.token", "value": "***", "security": true},
        ])
    );
    assert!(
        !lines.contains("a-new-token"),
        "the secret stays out of the log"
    );
    harness.stop().await;
}
