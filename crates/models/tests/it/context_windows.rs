//! Context windows: asked of Ollama (`/api/show`) and llama.cpp (`/props`)
//! through the real clients, cached per model, and ranked against the
//! configuration and the built-in table.

use std::collections::BTreeMap;

use flynn_models::{ContextWindow, ContextWindows, WindowSource};
use flynn_protocol::config::{ModelsConfig, ProviderConfig, ProviderKind};
use flynn_testkit::{FakeLlamaCpp, FakeOllama, FakeOpenAi};
use serde_json::json;

use crate::{client, config};

fn windows(providers: &[(&str, &ProviderConfig)], overrides: &[(&str, u32)]) -> ContextWindows {
    let providers: BTreeMap<String, ProviderConfig> = providers
        .iter()
        .map(|(name, config)| ((*name).to_owned(), (*config).clone()))
        .collect();
    let models = ModelsConfig {
        context_windows: overrides
            .iter()
            .map(|(key, tokens)| ((*key).to_owned(), *tokens))
            .collect(),
        ..ModelsConfig::default()
    };
    ContextWindows::new(&providers, &models)
}

fn paths(requests: &[flynn_testkit::CapturedRequest]) -> Vec<(String, String)> {
    requests
        .iter()
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect()
}

#[tokio::test]
async fn ollama_is_asked_once_per_model_and_num_ctx_wins() {
    let fake = FakeOllama::start().await;
    fake.add_model("qwen3:8b", 40_960, Some(16_384));
    fake.add_model("llama3.1:8b", 131_072, None);
    let config = config(ProviderKind::Ollama, &fake.base_url(), None);
    let client = client("ollama", &config);
    let windows = windows(&[("ollama", &config)], &[]);

    let server = |tokens| ContextWindow {
        tokens,
        source: WindowSource::Server,
    };
    assert_eq!(
        windows.resolve(client.as_ref(), "qwen3:8b").await,
        server(16_384)
    );
    assert_eq!(
        windows.resolve(client.as_ref(), "qwen3:8b").await,
        server(16_384)
    );
    // No num_ctx: Ollama's default context, not the model's 128k.
    assert_eq!(
        windows.resolve(client.as_ref(), "llama3.1:8b").await,
        server(4_096)
    );
    // The documented model: trained for 8192, served with the default.
    assert_eq!(
        windows.resolve(client.as_ref(), "llama3.2").await,
        server(4_096)
    );

    let requests = fake.requests();
    assert_eq!(
        paths(&requests),
        vec![
            ("POST".to_owned(), "/api/show".to_owned()),
            ("POST".to_owned(), "/api/show".to_owned()),
            ("POST".to_owned(), "/api/show".to_owned()),
        ]
    );
    assert_eq!(
        requests.iter().map(|r| r.body.clone()).collect::<Vec<_>>(),
        vec![
            json!({"model": "qwen3:8b"}),
            json!({"model": "llama3.1:8b"}),
            json!({"model": "llama3.2"}),
        ]
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn configuration_is_not_second_guessed_by_the_server() {
    let fake = FakeOllama::start().await;
    fake.add_model("qwen3:8b", 40_960, Some(16_384));
    let mut config = config(ProviderKind::Ollama, &fake.base_url(), None);
    let client = client("ollama", &config);

    let by_model = windows(&[("ollama", &config)], &[("ollama/qwen3:8b", 12_000)]);
    assert_eq!(
        by_model.resolve(client.as_ref(), "qwen3:8b").await,
        ContextWindow {
            tokens: 12_000,
            source: WindowSource::ConfiguredModel
        }
    );
    let bare = windows(&[("ollama", &config)], &[("qwen3:8b", 10_000)]);
    assert_eq!(
        bare.resolve(client.as_ref(), "qwen3:8b").await,
        ContextWindow {
            tokens: 10_000,
            source: WindowSource::ConfiguredBareModel
        }
    );
    config.context_window = Some(24_000);
    let provider = windows(&[("ollama", &config)], &[]);
    assert_eq!(
        provider.resolve(client.as_ref(), "qwen3:8b").await,
        ContextWindow {
            tokens: 24_000,
            source: WindowSource::ConfiguredProvider
        }
    );
    assert_eq!(fake.requests(), Vec::new());
}

#[tokio::test]
async fn an_unknown_model_falls_back_to_the_table_then_the_assumption() {
    let fake = FakeOllama::start().await;
    let config = config(ProviderKind::Ollama, &fake.base_url(), None);
    let client = client("ollama", &config);
    let windows = windows(&[("ollama", &config)], &[]);
    // Ollama answers 404 {"error":"model 'x' not found"}: not cached, and
    // the table decides.
    assert_eq!(
        windows.resolve(client.as_ref(), "mistral-nemo:12b").await,
        ContextWindow {
            tokens: 131_072,
            source: WindowSource::Table
        }
    );
    assert_eq!(
        windows.resolve(client.as_ref(), "my-finetune").await,
        ContextWindow {
            tokens: 8_192,
            source: WindowSource::Default
        }
    );
    assert_eq!(
        windows.resolve(client.as_ref(), "my-finetune").await,
        ContextWindow {
            tokens: 8_192,
            source: WindowSource::Default
        }
    );
    assert_eq!(fake.requests().len(), 3);
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_server_that_is_not_there_costs_nothing_but_its_answer() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let config = config(ProviderKind::Ollama, &format!("http://{addr}/v1"), None);
    let client = client("ollama", &config);
    let windows = windows(&[("ollama", &config)], &[]);
    assert_eq!(
        windows.resolve(client.as_ref(), "llama3.1:8b").await,
        ContextWindow {
            tokens: 131_072,
            source: WindowSource::Table
        }
    );
}

#[tokio::test]
async fn llamacpp_reports_its_slot_context() {
    let fake = FakeLlamaCpp::start().await;
    let config = config(ProviderKind::Llamacpp, &fake.base_url(), None);
    let client = client("llamacpp", &config);
    let windows = windows(&[("llamacpp", &config)], &[]);
    // The documented answer: n_ctx 1024.
    assert_eq!(client.context_window("any").await, Some(1_024));
    fake.set_n_ctx(32_768);
    // Cached per model: a new model id asks again.
    assert_eq!(
        windows
            .resolve(client.as_ref(), "qwen2.5-7b-instruct")
            .await,
        ContextWindow {
            tokens: 32_768,
            source: WindowSource::Server
        }
    );
    assert_eq!(client.context_window("any").await, Some(1_024));
    assert_eq!(
        paths(&fake.requests()),
        vec![
            ("GET".to_owned(), "/props".to_owned()),
            ("GET".to_owned(), "/props".to_owned()),
        ]
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn kinds_that_cannot_say_are_never_asked() {
    let fake = FakeOpenAi::start().await;
    for kind in [
        ProviderKind::Openai,
        ProviderKind::OpenaiCompatible,
        ProviderKind::Vllm,
        ProviderKind::Lmstudio,
        ProviderKind::Openrouter,
        ProviderKind::GithubModels,
        ProviderKind::Groq,
        ProviderKind::Gemini,
    ] {
        let client = client("p", &config(kind, &fake.base_url(), Some("k")));
        assert_eq!(client.context_window("gpt-4o").await, None, "{kind}");
    }
    let anthropic = client(
        "anthropic",
        &config(ProviderKind::Anthropic, &fake.base_url(), Some("k")),
    );
    assert_eq!(anthropic.context_window("claude-sonnet-4-5").await, None);
    assert_eq!(fake.requests(), Vec::new());
}

#[tokio::test]
async fn a_chat_call_and_detection_share_the_server() {
    // The chat endpoint and /api/show side by side, as on a real Ollama.
    let fake = FakeOllama::start().await;
    fake.push(flynn_testkit::Reply::Text("Hi!".into()));
    let config = config(ProviderKind::Ollama, &fake.base_url(), None);
    let client = client("ollama", &config);
    let response = client
        .complete(flynn_models::ModelRequest::new(
            "llama3.2",
            vec![flynn_protocol::Message::user("Hello")],
        ))
        .await;
    assert_eq!(
        response.map(|r| r.message),
        Ok(flynn_protocol::Message::assistant("Hi!"))
    );
    assert_eq!(client.context_window("llama3.2").await, Some(4_096));
    assert_eq!(
        paths(&fake.requests()),
        vec![
            ("POST".to_owned(), "/v1/chat/completions".to_owned()),
            ("POST".to_owned(), "/api/show".to_owned()),
        ]
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}
