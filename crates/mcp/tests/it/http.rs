//! The fixture over streamable HTTP behind a bearer token: the token
//! given as `bearer_token` or as an `Authorization` header reaches the
//! server; a wrong or missing one is refused and reported; configured
//! headers never follow a redirect elsewhere.

use std::time::{Duration, Instant};

use flynn_mcp::Phase;
use flynn_testkit::mcp::HttpFixture;
use serde_json::{Value, json};

use crate::support::{Harness, error, ok, untrusted};

const TOKEN: &str = "s3cret-fixture-token";

async fn connected(fixture: &HttpFixture, auth: Value) -> Harness {
    let mut config = json!({ "url": fixture.url(), "startup_timeout_secs": 10, "trusted": true });
    if let (Some(config), Value::Object(auth)) = (config.as_object_mut(), auth) {
        config.extend(auth);
    }
    let harness = Harness::new(|_| json!({ "remote": config }));
    harness.server("remote").ready().await;
    harness
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_reaches_the_server() {
    let fixture = HttpFixture::start(Some(TOKEN));
    let harness = connected(&fixture, json!({ "bearer_token": TOKEN })).await;

    let status = harness.server("remote").status();
    assert_eq!(status.phase, Phase::Running, "{status:?}");
    assert_eq!((status.transport, status.target), ("http", fixture.url()));
    assert_eq!(
        harness.names(),
        [
            "remote.add",
            "remote.echo",
            "remote.fail",
            "remote.getenv",
            "remote.slow",
            "remote.toggle",
            "remote.whoami"
        ]
    );
    assert_eq!(
        harness.call("remote.whoami", json!({})).await,
        untrusted("remote.whoami", &format!("Bearer {TOKEN}"))
    );
    assert_eq!(
        harness.call("remote.add", json!({"a": 20, "b": 22})).await,
        ok("42")
    );
    assert_eq!(
        harness.call("remote.fail", json!({})).await,
        error(&format!(
            "remote.fail reported an error:\n{}",
            flynn_tools::wrap_untrusted("remote.fail", "the fixture failed on purpose")
        ))
    );
    assert!(
        !fixture
            .events()
            .iter()
            .any(|event| event.starts_with("refused")),
        "{:?}",
        fixture.events()
    );
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorization_header_reaches_the_server() {
    let fixture = HttpFixture::start(Some(TOKEN));
    let harness = connected(
        &fixture,
        json!({ "headers": { "Authorization": format!("Bearer {TOKEN}") } }),
    )
    .await;

    assert_eq!(
        harness.server("remote").status().phase,
        Phase::Running,
        "{:?}",
        harness.server("remote").status()
    );
    assert_eq!(
        harness.call("remote.whoami", json!({})).await,
        untrusted("remote.whoami", &format!("Bearer {TOKEN}"))
    );
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_token_is_refused_and_reported() {
    for (auth, sent) in [
        (
            json!({ "bearer_token": "not-the-token" }),
            "Bearer not-the-token",
        ),
        (json!({}), "none"),
    ] {
        let fixture = HttpFixture::start(Some(TOKEN));
        let started = Instant::now();
        let harness = connected(&fixture, auth).await;
        assert!(started.elapsed() < Duration::from_secs(5));

        let status = harness.server("remote").status();
        assert_eq!(
            (status.phase, status.tools),
            (Phase::Restarting, 0),
            "{status:?}"
        );
        let reason = status.error.clone().unwrap_or_default();
        assert!(
            reason.starts_with("the server refused the credentials (401/403): check mcp.servers.remote.bearer_token or its Authorization header"),
            "{status:?}"
        );
        assert!(!reason.contains(TOKEN), "{status:?}");
        assert_eq!(harness.names(), Vec::<String>::new());
        assert_eq!(
            fixture.events(),
            [format!("refused POST /mcp authorization={sent}")]
        );
        harness.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_an_http_call_cancels_it_on_the_server() {
    let fixture = HttpFixture::start(None);
    let harness = connected(&fixture, json!({})).await;
    let ctx = harness.context();
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    });

    let started = Instant::now();
    let result = harness
        .call_in("remote.slow", json!({"secs": 30}), &ctx)
        .await;
    assert_eq!(result, error("remote.slow was cancelled"));
    assert!(started.elapsed() < Duration::from_secs(2));
    let id = fixture
        .events()
        .iter()
        .find_map(|event| {
            let rest = event.strip_prefix("call slow ")?;
            Some(rest.split(' ').next()?.to_owned())
        })
        .unwrap();
    let seen = fixture
        .log()
        .wait_for(Duration::from_secs(5), |event| {
            event == format!("cancelled {id}")
        })
        .await;
    assert_eq!(
        seen,
        Some(format!("cancelled {id}")),
        "{:?}",
        fixture.events()
    );
    harness.stop().await;
}

/// A bare HTTP/1.1 server on 127.0.0.1 that records the head of every
/// request (lower-cased) and answers each with `answer`.
struct Recorder {
    port: u16,
    heads: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Recorder {
    fn start(answer: impl Fn() -> String + Send + 'static) -> Recorder {
        use std::io::{BufRead, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = heads.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let mut reader = std::io::BufReader::new(stream);
                let mut head = String::new();
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(value) = lower.strip_prefix("content-length:") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                    head.push_str(&lower);
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                seen.lock().unwrap().push(head);
                let _ = reader.get_mut().write_all(answer().as_bytes());
            }
        });
        Recorder { port, heads }
    }

    fn heads(&self) -> Vec<String> {
        self.heads.lock().unwrap().clone()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_headers_never_follow_a_redirect_to_another_host() {
    let elsewhere = Recorder::start(|| {
        "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_owned()
    });
    let target = format!("http://127.0.0.1:{}/mcp", elsewhere.port);
    let configured = Recorder::start(move || {
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
    });
    let harness = Harness::new(|_| {
        json!({ "remote": {
            "url": format!("http://127.0.0.1:{}/mcp", configured.port),
            "headers": { "X-Api-Key": "key-that-must-stay-home" },
            "startup_timeout_secs": 10,
        }})
    });
    harness.server("remote").ready().await;

    let status = harness.server("remote").status();
    assert_eq!(status.phase, Phase::Restarting, "{status:?}");
    // The configured server got the header; the one it redirected to got
    // nothing at all.
    let heads = configured.heads();
    assert!(!heads.is_empty());
    assert!(
        heads
            .iter()
            .all(|head| head.contains("x-api-key: key-that-must-stay-home")),
        "{heads:?}"
    );
    assert_eq!(elsewhere.heads(), Vec::<String>::new());
    harness.stop().await;
}
