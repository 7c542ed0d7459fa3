//! Each HTTP embedder against a strict fake of its service.

use std::collections::BTreeMap;

use flynn_memory::embed::from_config;
use flynn_memory::{EmbedError, EmbedInput};
use flynn_protocol::config::{EmbedderKind, EmbeddingsConfig, ProviderConfig, ProviderKind};
use flynn_testkit::{FakeEmbeddings, Vendor, fake_embedding};

fn config(kind: EmbedderKind, base_url: &str, key: Option<&str>) -> EmbeddingsConfig {
    EmbeddingsConfig {
        kind,
        provider: None,
        base_url: Some(base_url.to_owned()),
        api_key: key.map(str::to_owned),
        model: None,
        dimensions: None,
        model_dir: None,
        batch_size: 64,
        timeout_secs: 5,
    }
}

fn texts(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("fact number {i} about boats"))
        .collect()
}

const CASES: [(Vendor, EmbedderKind); 4] = [
    (Vendor::OpenAi, EmbedderKind::Openai),
    (Vendor::Ollama, EmbedderKind::Ollama),
    (Vendor::Gemini, EmbedderKind::Gemini),
    (Vendor::Voyage, EmbedderKind::Voyage),
];

#[tokio::test]
async fn every_embedder_batches_keeps_order_and_sends_its_key_and_size() {
    for (vendor, kind) in CASES {
        let fake = FakeEmbeddings::start(vendor);
        fake.require_key("k-123");
        let mut config = config(kind, &fake.base_url(), Some("k-123"));
        config.batch_size = 2;
        config.dimensions = Some(32);
        let embedder = from_config(&config, &BTreeMap::new()).unwrap();
        let input = texts(5);
        let vectors = embedder.embed(&input, EmbedInput::Document).await.unwrap();
        let expected: Vec<Vec<f32>> = input.iter().map(|t| fake_embedding(t, 32)).collect();
        assert_eq!(vectors, expected, "{vendor:?}");
        assert_eq!(
            fake.requests().len(),
            3,
            "{vendor:?}: 5 texts in batches of 2"
        );
        assert_eq!(fake.violations(), Vec::<String>::new(), "{vendor:?}");
        assert_eq!(fake.texts_embedded(), 5);
        assert!(embedder.id().ends_with("@32"), "{}", embedder.id());
    }
}

#[tokio::test]
async fn query_and_document_are_told_apart_where_the_service_asks() {
    let gemini = FakeEmbeddings::start(Vendor::Gemini);
    let embedder = from_config(
        &config(EmbedderKind::Gemini, &gemini.base_url(), Some("g")),
        &BTreeMap::new(),
    )
    .unwrap();
    embedder.embed(&texts(1), EmbedInput::Query).await.unwrap();
    embedder
        .embed(&texts(1), EmbedInput::Document)
        .await
        .unwrap();
    let tasks: Vec<String> = gemini
        .requests()
        .iter()
        .map(|r| {
            r.body["requests"][0]["taskType"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(tasks, ["RETRIEVAL_QUERY", "RETRIEVAL_DOCUMENT"]);
    assert_eq!(
        gemini.requests()[0].path,
        "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    );
    assert_eq!(gemini.requests()[0].header("x-goog-api-key"), Some("g"));

    let voyage = FakeEmbeddings::start(Vendor::Voyage);
    let embedder = from_config(
        &config(EmbedderKind::Voyage, &voyage.base_url(), Some("v")),
        &BTreeMap::new(),
    )
    .unwrap();
    embedder.embed(&texts(1), EmbedInput::Query).await.unwrap();
    assert_eq!(voyage.requests()[0].body["input_type"], "query");
    assert_eq!(voyage.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn ollama_takes_a_provider_entry_with_its_v1_url() {
    let fake = FakeEmbeddings::start(Vendor::Ollama);
    let mut providers = BTreeMap::new();
    providers.insert(
        "local".to_owned(),
        ProviderConfig {
            base_url: Some(format!("{}/v1", fake.base_url())),
            ..ProviderConfig::new(ProviderKind::Ollama)
        },
    );
    let config = EmbeddingsConfig {
        base_url: None,
        provider: Some("local".to_owned()),
        ..config(EmbedderKind::Ollama, "", None)
    };
    let embedder = from_config(&config, &providers).unwrap();
    embedder
        .embed(&texts(2), EmbedInput::Document)
        .await
        .unwrap();
    assert_eq!(fake.requests()[0].path, "/api/embed");
    assert_eq!(fake.violations(), Vec::<String>::new());

    // A model the server does not have: its message, not transient.
    let missing = EmbeddingsConfig {
        model: Some("mxbai-embed-large".to_owned()),
        ..config
    };
    let error = from_config(&missing, &providers)
        .unwrap()
        .embed(&texts(1), EmbedInput::Document)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("model \"mxbai-embed-large\" not found, try pulling it first"),
        "{error}"
    );
    assert!(!error.is_transient());
}

#[tokio::test]
async fn errors_carry_the_vendors_message_and_say_whether_to_retry() {
    for (vendor, kind) in CASES {
        let fake = FakeEmbeddings::start(vendor);
        fake.require_key("right");
        let wrong = from_config(
            &config(kind, &fake.base_url(), Some("wrong")),
            &BTreeMap::new(),
        )
        .unwrap();
        let error = wrong
            .embed(&texts(1), EmbedInput::Document)
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                EmbedError::Status {
                    status: 400 | 401,
                    ..
                }
            ),
            "{vendor:?}: {error}"
        );
        assert!(!error.is_transient(), "{vendor:?}");
        let message = error.to_string().to_lowercase();
        assert!(
            message.contains("key") || message.contains("unauthorized"),
            "{vendor:?}: {error}"
        );

        let right = from_config(
            &config(kind, &fake.base_url(), Some("right")),
            &BTreeMap::new(),
        )
        .unwrap();
        for status in [429, 500, 503] {
            fake.fail_next(status, Some(2));
            let error = right
                .embed(&texts(1), EmbedInput::Document)
                .await
                .unwrap_err();
            assert!(
                matches!(error, EmbedError::Status { status: s, .. } if s == status),
                "{vendor:?}: {error}"
            );
            assert!(error.is_transient(), "{vendor:?} {status}");
        }
        assert_eq!(fake.violations(), Vec::<String>::new(), "{vendor:?}");
    }
}

#[tokio::test]
async fn an_unreachable_service_is_a_transport_error() {
    let closed = {
        let fake = FakeEmbeddings::start(Vendor::OpenAi);
        fake.base_url()
    };
    let embedder = from_config(
        &config(EmbedderKind::Openai, &closed, None),
        &BTreeMap::new(),
    )
    .unwrap();
    let error = embedder
        .embed(&texts(1), EmbedInput::Document)
        .await
        .unwrap_err();
    assert!(matches!(error, EmbedError::Transport { .. }), "{error}");
    assert!(error.is_transient());
}

#[test]
fn missing_keys_and_providers_are_config_errors() {
    for (kind, var) in [
        (EmbedderKind::Voyage, "VOYAGE_API_KEY"),
        (EmbedderKind::Gemini, "GEMINI_API_KEY"),
    ] {
        let config = EmbeddingsConfig {
            base_url: None,
            ..config(kind, "", None)
        };
        let error = from_config(&config, &BTreeMap::new()).unwrap_err();
        assert!(matches!(error, EmbedError::Config(_)), "{error}");
        assert!(error.to_string().contains(var), "{error}");
    }
    let error = from_config(
        &EmbeddingsConfig {
            provider: Some("nope".to_owned()),
            ..config(EmbedderKind::Openai, "http://127.0.0.1:1/v1", None)
        },
        &BTreeMap::new(),
    )
    .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("provider 'nope' is not configured"),
        "{error}"
    );
}

/// reqwest drops `Authorization` on a redirect to another host, not
/// `x-goog-api-key`: the embedders follow no redirect and say why.
#[tokio::test]
async fn a_redirect_does_not_take_the_gemini_key_elsewhere() {
    let elsewhere = FakeEmbeddings::start(Vendor::Gemini);
    let origin = elsewhere.base_url().trim_end_matches("/v1beta").to_owned();
    let redirect = flynn_testkit::FakeRedirect::start(307, &origin);
    let embedder = from_config(
        &config(
            EmbedderKind::Gemini,
            &format!("{}/v1beta", redirect.base_url()),
            Some("g-secret"),
        ),
        &BTreeMap::new(),
    )
    .unwrap();
    let error = embedder
        .embed(&texts(1), EmbedInput::Document)
        .await
        .unwrap_err();
    let to = origin.trim_start_matches("http://").to_owned();
    assert_eq!(
        error.to_string(),
        format!(
            "gemini embeddings: the service answered with a redirect (HTTP 307) to {to}; API keys are not sent across redirects: check memory.embeddings.base_url"
        )
    );
    assert!(matches!(error, EmbedError::Redirect { status: 307, .. }));
    assert!(!error.is_transient());
    assert_eq!(
        redirect.requests()[0].header("x-goog-api-key"),
        Some("g-secret")
    );
    assert_eq!(elsewhere.requests().len(), 0);
}
