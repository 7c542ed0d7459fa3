//! Every OpenAI-compatible kind against `FakeOpenAi`: the whole request
//! each one sends (body and headers), from its preset.

use flynn_models::{ModelRequest, ModelResponse, StopReason};
use flynn_protocol::Message;
use flynn_protocol::config::ProviderKind;
use flynn_testkit::{CapturedRequest, FakeOpenAi, Reply};
use serde_json::{Value, json};

use crate::{client, config, run};

/// The headers a test can predict: all but `host` and `content-length`.
fn headers(sent: &CapturedRequest) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = sent
        .headers
        .iter()
        .filter(|(name, _)| name != "host" && name != "content-length")
        .cloned()
        .collect();
    headers.sort();
    headers
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = list
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    pairs.sort();
    pairs
}

/// One call of `kind` to a fake; returns what the fake received.
async fn sent_by(kind: ProviderKind, key: Option<&str>, model: &str) -> CapturedRequest {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Hi!".into()));
    let client = client("p", &config(kind, &fake.base_url(), key));
    let mut request = ModelRequest::new(model, vec![Message::user("Hello")]);
    request.max_tokens = 300;
    let (_, response) = run(&client, request).await;
    assert_eq!(
        response.map(|r| (r.message, r.stop_reason)),
        Ok((Message::assistant("Hi!"), StopReason::EndTurn)),
        "{kind}"
    );
    assert_eq!(fake.violations(), Vec::<String>::new(), "{kind}");
    let mut requests = fake.requests();
    assert_eq!(requests.len(), 1, "{kind}");
    requests.remove(0)
}

fn body(model: &str, limit: (&str, u32), stream_usage: bool) -> Value {
    let mut body = json!({
        "model": model,
        "messages": [{"role": "user", "content": "Hello"}],
        "stream": true
    });
    body[limit.0] = json!(limit.1);
    if stream_usage {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

const JSON_POST: [(&str, &str); 2] = [("accept", "*/*"), ("content-type", "application/json")];

#[tokio::test]
async fn each_kind_sends_what_its_vendor_documents() {
    struct Case {
        kind: ProviderKind,
        key: Option<&'static str>,
        model: &'static str,
        limit: &'static str,
        stream_usage: bool,
        headers: Vec<(&'static str, &'static str)>,
    }
    let bearer = |extra: &[(&'static str, &'static str)]| {
        let mut headers = vec![("authorization", "Bearer k")];
        headers.extend_from_slice(extra);
        headers
    };
    let cases = [
        Case {
            kind: ProviderKind::Openai,
            key: Some("k"),
            model: "gpt-5",
            limit: "max_completion_tokens",
            stream_usage: true,
            headers: bearer(&JSON_POST),
        },
        Case {
            kind: ProviderKind::OpenaiCompatible,
            key: None,
            model: "local-model",
            limit: "max_tokens",
            stream_usage: true,
            headers: JSON_POST.to_vec(),
        },
        Case {
            kind: ProviderKind::Ollama,
            key: None,
            model: "llama3.2",
            limit: "max_tokens",
            stream_usage: true,
            headers: JSON_POST.to_vec(),
        },
        Case {
            kind: ProviderKind::Llamacpp,
            key: None,
            model: "any",
            limit: "max_tokens",
            stream_usage: true,
            headers: JSON_POST.to_vec(),
        },
        Case {
            kind: ProviderKind::Vllm,
            key: Some("k"),
            model: "Qwen/Qwen2.5-7B-Instruct",
            limit: "max_tokens",
            stream_usage: true,
            headers: bearer(&JSON_POST),
        },
        Case {
            kind: ProviderKind::Lmstudio,
            key: None,
            model: "qwen2.5-7b-instruct",
            limit: "max_tokens",
            stream_usage: true,
            headers: JSON_POST.to_vec(),
        },
        Case {
            kind: ProviderKind::Openrouter,
            key: Some("k"),
            model: "anthropic/claude-sonnet-4.5",
            limit: "max_tokens",
            stream_usage: true,
            headers: bearer(&[
                ("accept", "*/*"),
                ("content-type", "application/json"),
                ("http-referer", "https://github.com/flynn-agent/flynn"),
                ("x-title", "Flynn"),
            ]),
        },
        Case {
            kind: ProviderKind::GithubModels,
            key: Some("k"),
            model: "openai/gpt-4.1",
            limit: "max_tokens",
            stream_usage: true,
            headers: bearer(&[
                ("accept", "application/vnd.github+json"),
                ("content-type", "application/json"),
                ("x-github-api-version", "2022-11-28"),
            ]),
        },
        Case {
            kind: ProviderKind::Groq,
            key: Some("k"),
            model: "llama-3.3-70b-versatile",
            limit: "max_completion_tokens",
            stream_usage: true,
            headers: bearer(&JSON_POST),
        },
        Case {
            kind: ProviderKind::Gemini,
            key: Some("k"),
            model: "gemini-2.5-flash",
            limit: "max_tokens",
            stream_usage: false,
            headers: bearer(&JSON_POST),
        },
    ];
    for case in cases {
        let sent = sent_by(case.kind, case.key, case.model).await;
        assert_eq!(
            (sent.method.as_str(), sent.path.as_str()),
            ("POST", "/v1/chat/completions"),
            "{}",
            case.kind
        );
        assert_eq!(
            sent.body,
            body(case.model, (case.limit, 300), case.stream_usage),
            "{}",
            case.kind
        );
        assert_eq!(headers(&sent), pairs(&case.headers), "{}", case.kind);
    }
}

#[tokio::test]
async fn configured_headers_replace_the_kinds_own() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("Hi!".into()));
    let mut config = config(ProviderKind::Openrouter, &fake.base_url(), Some("k"));
    config
        .headers
        .insert("X-Title".into(), "My Assistant".into());
    config
        .headers
        .insert("HTTP-Referer".into(), "https://example.org".into());
    let client = client("openrouter", &config);
    let (_, response) = run(
        &client,
        ModelRequest::new("openai/gpt-4o", vec![Message::user("Hi")]),
    )
    .await;
    assert!(response.is_ok(), "{response:?}");
    let sent = &fake.requests()[0];
    assert_eq!(
        (sent.header("x-title"), sent.header("http-referer")),
        (Some("My Assistant"), Some("https://example.org"))
    );
    assert_eq!(
        sent.headers
            .iter()
            .filter(|(name, _)| name == "x-title")
            .count(),
        1
    );
}

#[tokio::test]
async fn gemini_reports_usage_without_being_asked() {
    // Gemini's endpoint puts `usage` in its chunks unasked; the client reads
    // it wherever it comes.
    let fake = FakeOpenAi::start().await;
    let chunk = |delta: Value, finish: Value, usage: Value| {
        format!(
            "data: {}\n\n",
            json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                   "created": 1, "model": "gemini-2.5-flash", "object": "chat.completion.chunk",
                   "usage": usage})
        )
    };
    fake.push(Reply::RawSse(format!(
        "{}{}data: [DONE]\n\n",
        chunk(
            json!({"content": "Hi", "role": "assistant"}),
            Value::Null,
            json!({"completion_tokens": 1, "prompt_tokens": 7, "total_tokens": 8})
        ),
        chunk(
            json!({"content": "!", "role": "assistant"}),
            json!("stop"),
            json!({"completion_tokens": 2, "prompt_tokens": 7, "total_tokens": 9})
        ),
    )));
    let client = client(
        "gemini",
        &config(ProviderKind::Gemini, &fake.base_url(), Some("k")),
    );
    let (_, response) = run(
        &client,
        ModelRequest::new("gemini-2.5-flash", vec![Message::user("Hello")]),
    )
    .await;
    assert_eq!(
        response,
        Ok(ModelResponse {
            message: Message::assistant("Hi!"),
            stop_reason: StopReason::EndTurn,
            usage: flynn_protocol::Usage {
                input_tokens: 7,
                output_tokens: 2,
                ..Default::default()
            },
            model: "gemini-2.5-flash".into(),
        })
    );
    assert_eq!(fake.requests()[0].body.get("stream_options"), None);
}

#[tokio::test]
async fn groq_usage_in_its_x_groq_envelope_is_read() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::RawSse(concat!(
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"llama-3.3-70b-versatile\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"logprobs\":null,\"finish_reason\":null}],\"x_groq\":{\"id\":\"req_1\"}}\n\n",
        "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"llama-3.3-70b-versatile\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"x_groq\":{\"id\":\"req_1\",\"usage\":{\"queue_time\":0.02,\"prompt_tokens\":18,\"prompt_time\":0.001,\"completion_tokens\":3,\"completion_time\":0.002,\"total_tokens\":21,\"total_time\":0.003}}}\n\n",
        "data: [DONE]\n\n"
    ).into()));
    let client = client(
        "groq",
        &config(ProviderKind::Groq, &fake.base_url(), Some("k")),
    );
    let (_, response) = run(
        &client,
        ModelRequest::new("llama-3.3-70b-versatile", vec![Message::user("Hello")]),
    )
    .await;
    assert_eq!(
        response.map(|r| r.usage),
        Ok(flynn_protocol::Usage {
            input_tokens: 18,
            output_tokens: 3,
            ..Default::default()
        })
    );
}

#[tokio::test]
async fn github_models_request_limit_is_a_context_overflow() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Error {
        status: 413,
        headers: Vec::new(),
        body: json!({"error": {"code": "tokens_limit_reached", "message": "Request body too large for gpt-4o model. Max size: 8000 tokens.", "details": "Request body too large for gpt-4o model. Max size: 8000 tokens."}}).to_string(),
    });
    let client = client(
        "github",
        &config(ProviderKind::GithubModels, &fake.base_url(), Some("k")),
    );
    let error = crate::failure(
        &client,
        ModelRequest::new("openai/gpt-4o", vec![Message::user("Hello")]),
    )
    .await;
    assert!(error.is_context_overflow(), "{error:?}");
}
