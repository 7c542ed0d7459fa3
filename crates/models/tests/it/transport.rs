//! Failures below HTTP: nothing listening, a server that never answers, a
//! key that was never configured.

use std::time::Duration;

use flynn_models::{Error, ModelRequest};
use flynn_protocol::Message;
use flynn_protocol::config::ProviderKind;

use crate::{client, config, failure};

fn hello() -> ModelRequest {
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
