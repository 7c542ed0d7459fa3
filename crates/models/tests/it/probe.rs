//! `probe`: the model list as a check that a server is there and takes
//! the key, against the strict fakes.

use std::time::Duration;

use flynn_models::{Error, probe};
use flynn_protocol::config::ProviderKind;
use flynn_testkit::{FakeAnthropic, FakeOpenAi};

use crate::config;

const TIMEOUT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn an_openai_server_lists_its_models_with_the_bearer_key() {
    let fake = FakeOpenAi::start_with_key("sk-right").await;
    let listed = probe(
        "openai",
        &config(ProviderKind::Openai, &fake.base_url(), Some("sk-right")),
        TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(listed.models, ["gpt-4o-mini", "gpt-4o"]);
    assert_eq!(listed.url, format!("{}/models", fake.base_url()));
    let requests = fake.requests();
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("GET", "/v1/models")
    );
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-right"));

    let wrong = probe(
        "openai",
        &config(ProviderKind::Openai, &fake.base_url(), Some("sk-wrong")),
        TIMEOUT,
    )
    .await
    .unwrap_err();
    assert!(wrong.is_auth(), "{wrong}");
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn an_anthropic_server_is_asked_with_its_headers() {
    let fake = FakeAnthropic::start_with_key("sk-ant").await;
    let listed = probe(
        "claude",
        &config(ProviderKind::Anthropic, &fake.base_url(), Some("sk-ant")),
        TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(listed.models, ["claude-sonnet-4-5"]);
    let request = &fake.requests()[0];
    assert_eq!(request.path, "/v1/models");
    assert_eq!(request.header("x-api-key"), Some("sk-ant"));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_missing_key_and_a_silent_port_are_errors_before_and_after_the_request() {
    let fake = FakeOpenAi::start().await;
    let missing = probe(
        "openai",
        &config(ProviderKind::Openai, &fake.base_url(), None),
        TIMEOUT,
    )
    .await
    .unwrap_err();
    assert!(matches!(missing, Error::MissingApiKey { .. }), "{missing}");
    assert!(fake.requests().is_empty());
    // A local server needs no key.
    probe(
        "local",
        &config(ProviderKind::OpenaiCompatible, &fake.base_url(), None),
        TIMEOUT,
    )
    .await
    .unwrap();

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = probe(
        "local",
        &config(
            ProviderKind::OpenaiCompatible,
            &format!("http://127.0.0.1:{port}/v1"),
            None,
        ),
        TIMEOUT,
    )
    .await
    .unwrap_err();
    assert!(down.is_retryable(), "{down}");
    assert!(down.to_string().contains(&port.to_string()), "{down}");
}
