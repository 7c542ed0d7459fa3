//! The Chat Completions client against `FakeOpenAi`, as OpenAI itself, an
//! OpenAI-compatible server and Ollama.

use std::sync::Arc;
use std::time::Duration;

use flynn_models::{Error, ModelClient, ModelRequest, ModelResponse, StopReason, StreamEvent};
use flynn_protocol::config::ProviderKind;
use flynn_protocol::{ContentBlock, Message, Role, Usage};
use flynn_testkit::{FakeOpenAi, INPUT_TOKENS, OUTPUT_TOKENS, Reply};
use serde_json::json;

use crate::{client, config, failure, run, shell_tool};

const KEY: &str = "sk-test";
const MODEL: &str = "gpt-4o-mini";

async fn fake() -> FakeOpenAi {
    FakeOpenAi::start_with_key(KEY).await
}

fn openai(fake: &FakeOpenAi) -> Arc<dyn ModelClient> {
    client(
        "openai",
        &config(ProviderKind::Openai, &fake.base_url(), Some(KEY)),
    )
}

/// A keyless OpenAI-compatible server (llama.cpp, vLLM...).
fn compatible(fake: &FakeOpenAi) -> Arc<dyn ModelClient> {
    client(
        "local",
        &config(ProviderKind::OpenaiCompatible, &fake.base_url(), None),
    )
}

fn usage() -> Usage {
    Usage {
        input_tokens: INPUT_TOKENS,
        output_tokens: OUTPUT_TOKENS,
        ..Usage::default()
    }
}

fn hello() -> ModelRequest<'static> {
    ModelRequest::new(MODEL, vec![Message::user("Hi")])
}

fn error_body(message: &str, kind: &str, code: Option<&str>) -> String {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}}).to_string()
}

#[tokio::test]
async fn streams_text_with_usage() {
    let fake = fake().await;
    fake.push(Reply::Text("Hello there, friend".into()));
    let mut request = hello();
    request.system = Some("Be brief.".into());
    request.temperature = Some(0.25);

    let (deltas, response) = run(&openai(&fake), request).await;

    assert_eq!(
        deltas,
        vec![
            StreamEvent::TextDelta("Hello ".into()),
            StreamEvent::TextDelta("there, ".into()),
            StreamEvent::TextDelta("friend".into()),
        ]
    );
    assert_eq!(
        response,
        Ok(ModelResponse {
            message: Message::assistant("Hello there, friend"),
            stop_reason: StopReason::EndTurn,
            usage: usage(),
            model: MODEL.into(),
        })
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(sent.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(
        sent.body,
        json!({
            "model": MODEL,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"}
            ],
            "max_completion_tokens": 4096,
            "temperature": 0.25,
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_tool_call_comes_back_with_its_dotted_name_and_its_result_goes_out() {
    let fake = fake().await;
    fake.push(Reply::ToolCalls(vec![(
        "shell_exec".into(),
        json!({"command": "ls -la"}),
    )]));
    fake.push(Reply::Text("Two files.".into()));
    let client = openai(&fake);
    let mut request = ModelRequest::new(MODEL, vec![Message::user("List the files")]);
    request.tools = vec![shell_tool()].into();

    let (deltas, response) = run(&client, request.clone()).await;

    assert_eq!(
        deltas,
        vec![StreamEvent::ToolUseStart {
            id: "call_1".into(),
            name: "shell.exec".into(),
        }]
    );
    let response = response.unwrap();
    assert_eq!(
        response,
        ModelResponse {
            message: Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "shell.exec".into(),
                    input: json!({"command": "ls -la"}),
                }],
            },
            stop_reason: StopReason::ToolUse,
            usage: usage(),
            model: MODEL.into(),
        }
    );

    request.messages.to_mut().push(response.message);
    request.messages.to_mut().push(Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: "call_1".into(),
            content: "a.txt\nb.txt".into(),
            is_error: false,
        }],
    });
    let (_, response) = run(&client, request).await;
    assert_eq!(
        response.map(|r| r.message),
        Ok(Message::assistant("Two files."))
    );

    let requests = fake.requests();
    assert_eq!(
        requests[0].body["tools"],
        json!([{"type": "function", "function": {
            "name": "shell_exec",
            "description": "Run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"]
            }
        }}])
    );
    assert_eq!(
        requests[1].body["messages"],
        json!([
            {"role": "user", "content": "List the files"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "shell_exec", "arguments": "{\"command\":\"ls -la\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a.txt\nb.txt"}
        ])
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn reasoning_deltas_from_a_compatible_server_become_thinking() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Thinking {
        thinking: "Greet back.".into(),
        signature: "unused".into(),
        text: "Hello!".into(),
    });

    let (deltas, response) = run(&compatible(&fake), hello()).await;

    assert_eq!(
        deltas,
        vec![
            StreamEvent::ThinkingDelta("Greet ".into()),
            StreamEvent::ThinkingDelta("back.".into()),
            StreamEvent::TextDelta("Hello!".into()),
        ]
    );
    assert_eq!(
        response.map(|r| r.message.content),
        Ok(vec![
            ContentBlock::Thinking {
                thinking: "Greet back.".into(),
                signature: None,
            },
            ContentBlock::text("Hello!"),
        ])
    );
    let sent = &fake.requests()[0];
    assert_eq!(sent.header("authorization"), None);
    // Compatible servers get the classic `max_tokens`.
    assert_eq!(sent.body["max_tokens"], json!(4096));
    assert_eq!(sent.body.get("max_completion_tokens"), None);
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_wrong_key_is_an_auth_error_naming_the_variable() {
    let fake = fake().await;
    let client = client(
        "openai",
        &config(ProviderKind::Openai, &fake.base_url(), Some("sk-wrong")),
    );
    let error = failure(&client, hello()).await;
    assert_eq!(
        error,
        Error::Auth {
            provider: "openai".into(),
            status: 401,
            message: "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.".into(),
            env: Some("OPENAI_API_KEY"),
        }
    );
    assert!(error.to_string().ends_with("(check OPENAI_API_KEY)"));
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn http_errors_map_to_typed_errors() {
    let fake = fake().await;
    let client = openai(&fake);
    let cases = [
        (
            Reply::Error {
                status: 429,
                headers: vec![("retry-after".into(), "7".into())],
                body: error_body(
                    "Rate limit reached for requests",
                    "requests",
                    Some("rate_limit_exceeded"),
                ),
            },
            Error::RateLimited {
                provider: "openai".into(),
                retry_after: Some(Duration::from_secs(7)),
                message: "Rate limit reached for requests".into(),
            },
        ),
        (
            Reply::Error {
                status: 529,
                headers: Vec::new(),
                body: error_body("overloaded", "server_error", None),
            },
            Error::Overloaded {
                provider: "openai".into(),
                status: 529,
                retry_after: None,
                message: "overloaded".into(),
            },
        ),
        (
            Reply::Error {
                status: 503,
                headers: vec![("retry-after-ms".into(), "250".into())],
                body: error_body(
                    "The engine is currently overloaded, please try again later",
                    "server_error",
                    None,
                ),
            },
            Error::Overloaded {
                provider: "openai".into(),
                status: 503,
                retry_after: Some(Duration::from_millis(250)),
                message: "The engine is currently overloaded, please try again later".into(),
            },
        ),
        (
            Reply::Error {
                status: 500,
                headers: Vec::new(),
                body: error_body(
                    "The server had an error while processing your request.",
                    "server_error",
                    None,
                ),
            },
            Error::Server {
                provider: "openai".into(),
                status: 500,
                message: "The server had an error while processing your request.".into(),
            },
        ),
        (
            Reply::Error {
                status: 400,
                headers: Vec::new(),
                body: error_body(
                    "This model's maximum context length is 128000 tokens.",
                    "invalid_request_error",
                    Some("context_length_exceeded"),
                ),
            },
            Error::ContextOverflow {
                provider: "openai".into(),
                message: "This model's maximum context length is 128000 tokens.".into(),
            },
        ),
    ];
    for (reply, expected) in cases {
        fake.push(reply);
        assert_eq!(failure(&client, hello()).await, expected);
    }
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn ollama_model_not_found_is_an_invalid_request_with_its_message() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Error {
        status: 404,
        headers: Vec::new(),
        body: r#"{"error":"model 'x' not found"}"#.into(),
    });
    let client = client(
        "ollama",
        &config(ProviderKind::Ollama, &fake.base_url(), None),
    );
    assert_eq!(
        failure(&client, ModelRequest::new("x", vec![Message::user("Hi")])).await,
        Error::InvalidRequest {
            provider: "ollama".into(),
            status: 404,
            message: "model 'x' not found".into(),
        }
    );
}

fn chunk(delta: serde_json::Value, finish: &str) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 1694268190,
            "model": "llama3", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

#[tokio::test]
async fn a_truncated_stream_is_a_stream_error_after_its_deltas() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::RawSse(
        flynn_testkit::fixtures::OPENAI_STREAMING_TEXT
            .split("\n\n")
            .filter(|event| !event.contains("\"stop\"") && !event.contains("[DONE]"))
            .map(|event| format!("{event}\n\n"))
            .collect(),
    ));
    let (deltas, response) = run(&compatible(&fake), hello()).await;
    assert_eq!(deltas, vec![StreamEvent::TextDelta("Hello".into())]);
    assert_eq!(
        response,
        Err(Error::Stream {
            provider: "local".into(),
            message: "the stream ended without a finish_reason or [DONE]: the answer was cut off"
                .into(),
        })
    );
}

#[tokio::test]
async fn malformed_json_in_an_event_is_a_protocol_error() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::RawSse("data: {\"choices\": [\n\n".into()));
    assert_eq!(
        failure(&compatible(&fake), hello()).await,
        Error::Protocol {
            provider: "local".into(),
            message: "event 'message' does not hold valid JSON (EOF while parsing a list at line 1 column 13): {\"choices\": [".into(),
        }
    );
}

#[tokio::test]
async fn an_empty_finish_reason_is_accepted() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::RawSse(format!(
        "{}{}{}data: [DONE]\n\n",
        chunk(json!({"role": "assistant", "content": "Hi"}), ""),
        chunk(json!({"content": " there"}), ""),
        chunk(json!({}), ""),
    )));
    let (deltas, response) = run(&compatible(&fake), hello()).await;
    assert_eq!(
        deltas,
        vec![
            StreamEvent::TextDelta("Hi".into()),
            StreamEvent::TextDelta(" there".into()),
        ]
    );
    assert_eq!(
        response,
        Ok(ModelResponse {
            message: Message::assistant("Hi there"),
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
            model: "llama3".into(),
        })
    );
}

#[tokio::test]
async fn an_error_chunk_mid_stream_is_a_stream_error() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::RawSse(format!(
        "{}data: {}\n\n",
        chunk(json!({"content": "Hel"}), ""),
        json!({"error": {"message": "upstream connection lost", "type": "server_error"}})
    )));
    let (deltas, response) = run(&compatible(&fake), hello()).await;
    assert_eq!(deltas, vec![StreamEvent::TextDelta("Hel".into())]);
    assert_eq!(
        response,
        Err(Error::Stream {
            provider: "local".into(),
            message: "upstream connection lost".into(),
        })
    );
}

#[tokio::test]
async fn images_go_as_data_urls() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("A cat.".into()));
    let request = ModelRequest::new(
        MODEL,
        vec![Message {
            role: Role::User,
            content: vec![
                ContentBlock::text("What is this?"),
                ContentBlock::Image {
                    source: flynn_protocol::ImageSource::Base64 {
                        media_type: "image/jpeg".into(),
                        data: "/9j/4AAQ".into(),
                    },
                },
            ],
        }],
    );
    let response = compatible(&fake).complete(request).await;
    assert_eq!(
        response.map(|r| r.message),
        Ok(Message::assistant("A cat."))
    );
    assert_eq!(
        fake.requests()[0].body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}}
        ]}])
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_json_answer_where_a_stream_was_asked_for_is_a_protocol_error() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Error {
        status: 200,
        headers: Vec::new(),
        body: r#"{"error":{"message":"streaming is not supported by this proxy"}}"#.into(),
    });
    assert_eq!(
        failure(&compatible(&fake), hello()).await,
        Error::Protocol {
            provider: "local".into(),
            message: "expected an event stream (text/event-stream) but got 'application/json': streaming is not supported by this proxy".into(),
        }
    );
}

#[tokio::test]
async fn images_by_url_go_as_urls() {
    let fake = FakeOpenAi::start().await;
    fake.push(Reply::Text("A dog.".into()));
    let request = ModelRequest::new(
        MODEL,
        vec![Message {
            role: Role::User,
            content: vec![
                ContentBlock::Image {
                    source: flynn_protocol::ImageSource::Url {
                        url: "https://example.com/dog.png".into(),
                    },
                },
                ContentBlock::text("And this?"),
            ],
        }],
    );
    let response = openai(&fake).complete(request).await;
    assert_eq!(
        response.map(|r| r.message),
        Ok(Message::assistant("A dog."))
    );
    assert_eq!(
        fake.requests()[0].body["messages"],
        json!([{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "https://example.com/dog.png"}},
            {"type": "text", "text": "And this?"}
        ]}])
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}
