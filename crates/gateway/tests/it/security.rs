use std::time::Duration;

use flynn_testkit::{FakeOpenAi, Reply};
use serde_json::{Value, json};
use tokio_util::compat::TokioAsyncReadCompatExt;

use crate::harness::*;

async fn post(url: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// A raw WebSocket to `/rpc`, to send frames no client library would.
struct RawWs {
    sender: soketto::connection::Sender<tokio_util::compat::Compat<tokio::net::TcpStream>>,
    receiver: soketto::connection::Receiver<tokio_util::compat::Compat<tokio::net::TcpStream>>,
}

async fn raw_ws(harness: &Harness, resource: &str, origin: Option<&str>) -> Result<RawWs, String> {
    let socket = tokio::net::TcpStream::connect(harness.addr).await.unwrap();
    let host = harness.addr.to_string();
    let mut client = soketto::handshake::Client::new(socket.compat(), &host, resource);
    let headers;
    if let Some(origin) = origin {
        headers = [soketto::handshake::client::Header {
            name: "Origin",
            value: origin.as_bytes(),
        }];
        client.set_headers(&headers);
    }
    match client.handshake().await.map_err(|e| e.to_string())? {
        soketto::handshake::ServerResponse::Accepted { .. } => {
            let (sender, receiver) = client.into_builder().finish();
            Ok(RawWs { sender, receiver })
        }
        soketto::handshake::ServerResponse::Rejected { status_code } => {
            Err(format!("rejected {status_code}"))
        }
        soketto::handshake::ServerResponse::Redirect { status_code, .. } => {
            Err(format!("redirect {status_code}"))
        }
    }
}

impl RawWs {
    async fn exchange(&mut self, frame: &str) -> Value {
        self.sender.send_text(frame).await.unwrap();
        self.sender.flush().await.unwrap();
        let mut data = Vec::new();
        tokio::time::timeout(
            Duration::from_secs(5),
            self.receiver.receive_data(&mut data),
        )
        .await
        .unwrap()
        .unwrap();
        serde_json::from_slice(&data).unwrap()
    }
}

#[tokio::test]
async fn every_route_but_health_and_webhooks_needs_the_token() {
    let fake = FakeOpenAi::start().await;
    let mut harness = Harness::start(&fake).await;
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"system.health"}"#;
    let (status, body) = post(&harness.url("/rpc"), None, call).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "unauthorized");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("gateway.token")
    );
    let (status, _) = post(&harness.url("/rpc"), Some("wrong-token"), call).await;
    assert_eq!(status, 401);
    let (status, body) = post(&harness.url("/rpc"), Some(TOKEN), call).await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["status"], "ok");
    for path in ["/metrics", "/v1/models"] {
        let response = reqwest::get(harness.url(path)).await.unwrap();
        assert_eq!(response.status(), 401, "{path}");
    }
    let health = reqwest::get(harness.url("/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);

    // WebSocket: no token, a wrong token, a wrong origin; then ?token=.
    let refused = raw_ws(&harness, "/rpc", None).await.err();
    assert_eq!(refused.as_deref(), Some("rejected 401"));
    let refused = raw_ws(&harness, "/rpc?token=nope", None).await.err();
    assert_eq!(refused.as_deref(), Some("rejected 401"));
    let resource = format!("/rpc?token={TOKEN}");
    let refused = raw_ws(&harness, &resource, Some("https://evil.example"))
        .await
        .err();
    assert_eq!(refused.as_deref(), Some("rejected 403"));
    let own = format!("http://{}", harness.addr);
    let mut ws = raw_ws(&harness, &resource, Some(&own)).await.unwrap();
    let answer = ws
        .exchange(r#"{"jsonrpc":"2.0","id":7,"method":"system.version"}"#)
        .await;
    assert_eq!(answer["id"], 7);
    assert_eq!(answer["result"]["protocol"], 1);
    harness.stop().await;
}

#[tokio::test]
async fn malformed_oversized_and_unknown_frames_get_errors_and_the_connection_lives() {
    let fake = FakeOpenAi::start().await;
    let mut config = config(&fake);
    config.gateway.max_request_bytes = 4096;
    let mut harness = Harness::with(Options {
        config,
        tools: Vec::new(),
        config_file: None,
    })
    .await;
    let mut ws = raw_ws(&harness, &format!("/rpc?token={TOKEN}"), None)
        .await
        .unwrap();
    let answer = ws.exchange("{not json").await;
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
    let answer = ws.exchange(r#"{"jsonrpc":"2.0","id":1}"#).await;
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let answer = ws
        .exchange(r#"{"jsonrpc":"2.0","id":2,"method":"no.such"}"#)
        .await;
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let answer = ws
        .exchange(r#"{"jsonrpc":"2.0","id":3,"method":"agent.cancel","params":{"session":42}}"#)
        .await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"sessions.send","params":{{"session":"a:b","message":"{}"}}}}"#,
        "x".repeat(8192)
    );
    let answer = ws.exchange(&big).await;
    assert_eq!(answer["error"]["code"], -32007, "{answer}");
    // Still serving this connection.
    let answer = ws
        .exchange(r#"{"jsonrpc":"2.0","id":5,"method":"system.health"}"#)
        .await;
    assert_eq!(answer["result"]["status"], "ok", "{answer}");
    // Over HTTP, an oversized body is refused too.
    let (status, _) = post(&harness.url("/rpc"), Some(TOKEN), &big).await;
    assert_eq!(status, 413);
    assert!(fake.requests().is_empty(), "nothing reached the model");
    harness.stop().await;
}

#[tokio::test]
async fn a_client_over_its_rate_is_told_to_slow_down() {
    let fake = FakeOpenAi::start().await;
    let mut config = config(&fake);
    config.gateway.rate_limit_per_minute = 3;
    let mut harness = Harness::with(Options {
        config,
        tools: Vec::new(),
        config_file: None,
    })
    .await;
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"system.health"}"#;
    for _ in 0..3 {
        let (_, body) = post(&harness.url("/rpc"), Some(TOKEN), call).await;
        assert_eq!(body["result"]["status"], "ok");
    }
    let (_, body) = post(&harness.url("/rpc"), Some(TOKEN), call).await;
    assert_eq!(
        body["error"]["code"],
        flynn_gateway::codes::RATE_LIMITED,
        "{body}"
    );
    assert!(body["error"]["data"]["retry_after_secs"].as_u64().unwrap() >= 1);
    harness.stop().await;
}

pub const HOOK_SECRET: &str = "hook-secret-0123456789abcdef0123456789";

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

async fn hook(
    harness: &Harness,
    name: &str,
    body: &str,
    headers: &[(&str, String)],
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(harness.url(&format!("/webhooks/{name}")))
        .body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_signed_webhook_becomes_a_message_and_a_forged_one_is_refused() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text(
        "Build 42 failed on main; look at the tests.".into(),
    ));
    fake.push(Reply::Text("noted".into()));
    let mut config = config(&fake);
    config.gateway.webhooks.insert(
        "ci".into(),
        flynn_core::protocol::config::WebhookConfig {
            secret: HOOK_SECRET.into(),
            session: None,
            agent: None,
            template: Some("CI event from {{name}}: {{body}}".into()),
            deliver_to: None,
        },
    );
    let mut harness = Harness::with(Options {
        config,
        tools: Vec::new(),
        config_file: None,
    })
    .await;
    let body = r#"{"build":42,"status":"failed"}"#;
    let secret = HOOK_SECRET.as_bytes();
    let forged = hook(
        &harness,
        "ci",
        body,
        &[(
            "x-flynn-signature",
            flynn_gateway::sign(b"other-secret", body.as_bytes()),
        )],
    )
    .await;
    assert_eq!(forged.0, 401);
    let unsigned = hook(&harness, "ci", body, &[]).await;
    assert_eq!(unsigned, forged);
    // An unknown name and another method answer exactly like a bad
    // signature: nothing tells what is configured.
    let unknown = hook(
        &harness,
        "nope",
        body,
        &[(
            "x-flynn-signature",
            flynn_gateway::sign(secret, body.as_bytes()),
        )],
    )
    .await;
    assert_eq!(unknown, forged);
    let get = reqwest::get(harness.url("/webhooks/ci")).await.unwrap();
    assert_eq!(get.status(), 401);
    assert_eq!(get.json::<Value>().await.unwrap(), forged.1);

    // GitHub's form, the body alone signed: only with a delivery id.
    let github = [(
        "x-hub-signature-256",
        flynn_gateway::sign(secret, body.as_bytes()),
    )];
    let (status, answer) = hook(&harness, "ci", body, &github).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (401, Some("no_delivery_id"))
    );
    let mut events = harness.flynn.subscribe(&"webhook:ci".parse().unwrap());
    let delivered = [
        github[0].clone(),
        (
            "x-github-delivery",
            "72d3162e-cc78-11e3-81ab-4c9367dc0958".to_owned(),
        ),
    ];
    let (status, accepted) = hook(&harness, "ci", body, &delivered).await;
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["session"], "webhook:ci");
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let flynn_core::AgentEvent::Done { outcome } = event.event {
            assert!(outcome.reply.contains("Build 42 failed"));
            break;
        }
    }
    let sent = &fake.requests()[0].body;
    let last = sent["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        last["content"],
        // The body is untrusted content, wrapped as such.
        json!(format!(
            "CI event from ci: {}",
            flynn_core::protocol::wrap_untrusted("webhook ci", body)
        )),
        "{last}"
    );
    // The same request again is a replay; so is a fresh delivery id on the
    // captured signature (the id is not signed).
    let (status, answer) = hook(&harness, "ci", body, &delivered).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("replayed"))
    );
    let relabelled = [
        github[0].clone(),
        ("x-github-delivery", "another".to_owned()),
    ];
    let (status, _) = hook(&harness, "ci", body, &relabelled).await;
    assert_eq!(status, 409);

    // Flynn's form: a signed timestamp, within 5 minutes, once.
    let now = now_secs();
    let stamped = [
        ("x-flynn-timestamp", now.to_string()),
        (
            "x-flynn-signature",
            flynn_gateway::sign_timestamped(secret, now, body.as_bytes()),
        ),
    ];
    let (status, answer) = hook(&harness, "ci", body, &stamped).await;
    assert_eq!(status, 202, "{answer}");
    let (status, answer) = hook(&harness, "ci", body, &stamped).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("replayed"))
    );
    // Another timestamp under the old signature does not verify.
    let moved = [
        ("x-flynn-timestamp", (now + 1).to_string()),
        stamped[1].clone(),
    ];
    assert_eq!(hook(&harness, "ci", body, &moved).await, forged);
    let old = now - 600;
    let stale = [
        ("x-flynn-timestamp", old.to_string()),
        (
            "x-flynn-signature",
            flynn_gateway::sign_timestamped(secret, old, body.as_bytes()),
        ),
    ];
    let (status, answer) = hook(&harness, "ci", body, &stale).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (401, Some("stale"))
    );
    harness.stop().await;
}

#[tokio::test]
async fn metrics_leave_out_usage_the_store_cannot_read_and_say_so() {
    use sqlx::ConnectOptions;

    let fake = FakeOpenAi::start().await;
    let mut harness = Harness::start(&fake).await;
    let scrape = || async {
        reqwest::Client::new()
            .get(harness.url("/metrics"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let healthy = scrape().await;
    assert!(healthy.contains("\nflynn_store_up 1\n"), "{healthy}");
    // The usage table goes missing behind the daemon's back.
    let mut raw = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(harness._home.path().join("data/sessions.db"))
        .connect()
        .await
        .unwrap();
    sqlx::query("DROP TABLE usage")
        .execute(&mut raw)
        .await
        .unwrap();
    let broken = scrape().await;
    assert!(broken.contains("\nflynn_store_up 0\n"), "{broken}");
    assert!(
        !broken.contains("flynn_tokens_total{") && !broken.contains("flynn_cost_usd_total{"),
        "{broken}"
    );
    harness.stop().await;
}

#[tokio::test]
async fn metrics_count_turns_tokens_and_refusals() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("counted".into()));
    let mut harness = Harness::start(&fake).await;
    let client = harness.ws().await;
    send(&client, json!({"session": "m:1", "message": "hi"})).await;
    let _ = post(&harness.url("/rpc"), Some("bad"), "{}").await;
    let text = reqwest::Client::new()
        .get(harness.url("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("flynn_turns_total{outcome=\"complete\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("flynn_tokens_total{tier=\"default\",direction=\"input\"} 12"),
        "{text}"
    );
    assert!(
        text.contains("flynn_gateway_auth_failures_total 1"),
        "{text}"
    );
    assert!(
        text.contains("flynn_turn_duration_seconds_count 1"),
        "{text}"
    );
    assert!(
        text.contains("flynn_turn_first_output_seconds_count 1"),
        "{text}"
    );
    // One model call; Flynn's own share of the turn is less than the turn.
    assert!(text.contains("flynn_model_call_seconds_count 1"), "{text}");
    assert!(
        text.contains("flynn_turn_overhead_seconds_count 1"),
        "{text}"
    );
    let sum = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}_sum ")))
            .unwrap()
            .parse()
            .unwrap()
    };
    let (turn, model, overhead) = (
        sum("flynn_turn_duration_seconds"),
        sum("flynn_model_call_seconds"),
        sum("flynn_turn_overhead_seconds"),
    );
    assert!(model > 0.0 && overhead > 0.0, "{text}");
    assert!(
        model + overhead <= turn + 0.001,
        "{model} + {overhead} > {turn}"
    );
    let rss = text
        .lines()
        .find_map(|l| l.strip_prefix("flynn_resident_memory_bytes "))
        .unwrap();
    assert!(rss.parse::<f64>().unwrap() > 1_000_000.0, "{rss}");
    let gauge = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .parse()
            .unwrap()
    };
    // The accept loop and this connection's task at least; stdin, out
    // and err, the listener and the database at least.
    assert!(gauge("flynn_runtime_tasks") >= 2.0, "{text}");
    assert!(gauge("flynn_open_fds") >= 5.0, "{text}");
    harness.stop().await;
}

#[test]
fn binding_beyond_loopback_is_recognised() {
    assert!(!flynn_gateway::binds_beyond_loopback("127.0.0.1:18800"));
    assert!(!flynn_gateway::binds_beyond_loopback("[::1]:18800"));
    assert!(!flynn_gateway::binds_beyond_loopback("localhost:18800"));
    assert!(flynn_gateway::binds_beyond_loopback("0.0.0.0:18800"));
    assert!(flynn_gateway::binds_beyond_loopback("192.168.1.5:18800"));
    assert!(flynn_gateway::binds_beyond_loopback("myhost.lan:18800"));
}

#[tokio::test]
async fn a_webhook_retried_under_its_delivery_id_runs_once_and_a_full_queue_asks_to_retry() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Stall(
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"working\"},\"finish_reason\":null}]}\n\n".into(),
    ));
    let mut config = config(&fake);
    config.sessions.queue_limit = 1;
    config.gateway.webhooks.insert(
        "ci".into(),
        flynn_core::protocol::config::WebhookConfig {
            secret: HOOK_SECRET.into(),
            session: None,
            agent: None,
            template: None,
            deliver_to: None,
        },
    );
    let mut harness = Harness::with(Options {
        config,
        tools: Vec::new(),
        config_file: None,
    })
    .await;
    let secret = HOOK_SECRET.as_bytes();
    let signed = |at: i64, body: &str, delivery: &str| {
        vec![
            ("x-flynn-timestamp", at.to_string()),
            (
                "x-flynn-signature",
                flynn_gateway::sign_timestamped(secret, at, body.as_bytes()),
            ),
            ("x-flynn-delivery", delivery.to_owned()),
        ]
    };
    let now = now_secs();
    let (status, answer) = hook(&harness, "ci", "build 1", &signed(now, "build 1", "d-1")).await;
    assert_eq!(status, 202, "{answer}");
    // The sender timed out and sends it again, signed anew: not a second turn.
    let (status, answer) = hook(
        &harness,
        "ci",
        "build 1",
        &signed(now + 1, "build 1", "d-1"),
    )
    .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (409, Some("replayed")),
        "{answer}"
    );
    // The first turn runs (stalled), the second waits, the third does not
    // fit: the sender is asked to try again later, not told it failed.
    let (status, answer) = hook(&harness, "ci", "build 2", &signed(now, "build 2", "d-2")).await;
    assert_eq!(status, 202, "{answer}");
    let body = "build 3";
    let request = reqwest::Client::new()
        .post(harness.url("/webhooks/ci"))
        .body(body);
    let request = signed(now, body, "d-3")
        .into_iter()
        .fold(request, |r, (name, value)| r.header(name, value));
    let refused = request.send().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "30");
    // Refused for now only: the same delivery is taken once there is room.
    harness
        .flynn
        .manager()
        .cancel(&"webhook:ci".parse().unwrap());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, answer) = hook(&harness, "ci", body, &signed(now, body, "d-3")).await;
        if status == 202 {
            break;
        }
        assert_eq!(status, 503, "{answer}");
        assert!(std::time::Instant::now() < deadline, "{answer}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    harness.stop().await;
}
