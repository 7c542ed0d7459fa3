//! Failures below HTTP: nothing listening, a server that never answers, a
//! key that was never configured.

use std::time::Duration;

use flynn_models::{Error, ModelRequest};
use flynn_protocol::Message;
use flynn_protocol::config::ProviderKind;

use crate::{client, config, failure};

fn hello() -> ModelRequest<'static> {
    ModelRequest::new("some-model", vec![Message::user("Hello")])
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error() {
    // Bind a port, then free it: connecting to it is refused.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for (kind, base, url) in [
        (
            ProviderKind::OpenaiCompatible,
            format!("http://{addr}/v1"),
            format!("http://{addr}/v1/chat/completions"),
        ),
        (
            ProviderKind::Anthropic,
            format!("http://{addr}"),
            format!("http://{addr}/v1/messages"),
        ),
    ] {
        let client = client("p", &config(kind, &base, Some("key")));
        match failure(&client, hello()).await {
            Error::Connect {
                provider,
                url: failed,
                message: _,
            } => assert_eq!((provider.as_str(), failed), ("p", url)),
            other => panic!("{kind}: expected Connect, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_silent_server_is_a_timeout() {
    // The listener is never accepted from: the connection completes in the
    // kernel's backlog and no byte ever comes back.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut config = config(
        ProviderKind::OpenaiCompatible,
        &format!("http://{addr}/v1"),
        None,
    );
    config.read_timeout_secs = 1;
    let client = client("local", &config);
    assert_eq!(
        failure(&client, hello()).await,
        Error::Timeout {
            provider: "local".into(),
            after: Duration::from_secs(1),
        }
    );
    drop(listener);
}

#[tokio::test]
async fn a_missing_key_fails_before_any_request() {
    let fake = flynn_testkit::FakeOpenAi::start().await;
    for (kind, env) in [
        (ProviderKind::Openai, "OPENAI_API_KEY"),
        (ProviderKind::Gemini, "GEMINI_API_KEY"),
        (ProviderKind::Anthropic, "ANTHROPIC_API_KEY"),
    ] {
        // An empty key (an unset ${VAR}) counts as none.
        let client = client("p", &config(kind, &fake.base_url(), Some("")));
        assert_eq!(
            failure(&client, hello()).await,
            Error::MissingApiKey {
                provider: "p".into(),
                env: Some(env),
            }
        );
    }
    assert_eq!(fake.requests().len(), 0);
}

/// A server that answers one request with a `text/event-stream` head and
/// then hands the socket to `body`, which writes what the test needs.
async fn event_stream_server<F, Fut>(body: F) -> std::net::SocketAddr
where
    F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<()>> + Send,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await?;
        // The request: its head, then as many body bytes as it announces.
        let mut request = Vec::new();
        let mut buffer = [0u8; 4096];
        let head_end = loop {
            let read = socket.read(&mut buffer).await?;
            if read == 0 {
                return Ok(());
            }
            request.extend_from_slice(&buffer[..read]);
            if let Some(at) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
        };
        let head = String::from_utf8_lossy(&request[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0);
        while request.len() < head_end + length {
            let read = socket.read(&mut buffer).await?;
            if read == 0 {
                return Ok(());
            }
            request.extend_from_slice(&buffer[..read]);
        }
        socket
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
            )
            .await?;
        body(socket).await
    });
    addr
}

#[tokio::test]
async fn keep_alive_pings_alone_do_not_keep_a_stream_open() {
    use tokio::io::AsyncWriteExt;
    // One token, then only comments and ping events, for ever: every ping
    // resets a socket's read timeout, so only the stream can tell that no
    // answer is coming.
    let addr = event_stream_server(|mut socket| async move {
        socket
            .write_all(b"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n")
            .await?;
        loop {
            socket
                .write_all(b": keep-alive\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n")
                .await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let mut config = config(
        ProviderKind::OpenaiCompatible,
        &format!("http://{addr}/v1"),
        None,
    );
    config.read_timeout_secs = 1;
    let client = client("local", &config);
    let (deltas, ended) =
        tokio::time::timeout(Duration::from_secs(30), crate::run(&client, hello()))
            .await
            .expect("a stream of pings alone never ended");
    assert_eq!(
        deltas,
        vec![flynn_models::StreamEvent::TextDelta("Hel".into())]
    );
    assert_eq!(
        ended,
        Err(Error::Timeout {
            provider: "local".into(),
            after: Duration::from_secs(1),
        })
    );
}

#[tokio::test]
async fn an_event_that_never_ends_is_refused_at_the_size_limit() {
    use tokio::io::AsyncWriteExt;
    // `data: aaaa…` with no line end, past the limit, then silence: the
    // parser must not keep buffering it.
    let addr = event_stream_server(|mut socket| async move {
        socket.write_all(b"data: ").await?;
        let piece = vec![b'a'; 1 << 20];
        for _ in 0..2 {
            socket.write_all(&piece).await?;
        }
        std::future::pending::<()>().await;
        Ok(())
    })
    .await;
    let mut config = config(
        ProviderKind::OpenaiCompatible,
        &format!("http://{addr}/v1"),
        None,
    );
    config.read_timeout_secs = 5;
    let client = client("local", &config);
    let (_, ended) = tokio::time::timeout(Duration::from_secs(30), crate::run(&client, hello()))
        .await
        .expect("the stream never ended");
    assert_eq!(
        ended,
        Err(Error::Protocol {
            provider: "local".into(),
            message: "an event grew past 1 MiB without ending (no blank line after it): the server is not sending events Flynn can read".into(),
        })
    );
}
