//! The Anthropic client against `FakeAnthropic`.

use std::time::Duration;

use flynn_models::{Error, ModelRequest, ModelResponse, StopReason, StreamEvent};
use flynn_protocol::config::ProviderKind;
use flynn_protocol::{ContentBlock, Message, Role, Usage};
use flynn_testkit::{FakeAnthropic, FakeRedirect, INPUT_TOKENS, OUTPUT_TOKENS, Reply};
use serde_json::json;

use crate::{client, config, failure, run, shell_tool};

const KEY: &str = "sk-ant-test";
const MODEL: &str = "claude-sonnet-4-5";

async fn fake() -> FakeAnthropic {
    FakeAnthropic::start_with_key(KEY).await
}

fn anthropic(fake: &FakeAnthropic) -> std::sync::Arc<dyn flynn_models::ModelClient> {
    client(
        "anthropic",
        &config(ProviderKind::Anthropic, &fake.base_url(), Some(KEY)),
    )
}

fn usage() -> Usage {
    Usage {
        input_tokens: INPUT_TOKENS,
        output_tokens: OUTPUT_TOKENS,
        ..Usage::default()
    }
}

fn error_body(kind: &str, message: &str) -> String {
    json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
}

#[tokio::test]
async fn streams_text_with_usage() {
    let fake = fake().await;
    fake.push(Reply::Text("Hello there, friend".into()));
    let mut request = ModelRequest::new(MODEL, vec![Message::user("Hi")]);
    request.system = Some("Be brief.".into());
    request.max_tokens = 256;

    let (deltas, response) = run(&anthropic(&fake), request).await;

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
        ("POST", "/v1/messages")
    );
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(
        sent.body,
        json!({
            "model": MODEL,
            "max_tokens": 256,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}
            ]}],
            "stream": true
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
    let client = anthropic(&fake);
    let mut request = ModelRequest::new(MODEL, vec![Message::user("List the files")]);
    request.tools = vec![shell_tool()].into();

    let (deltas, response) = run(&client, request.clone()).await;

    assert_eq!(
        deltas,
        vec![StreamEvent::ToolUseStart {
            id: "toolu_01".into(),
            name: "shell.exec".into(),
        }]
    );
    let response = response.unwrap();
    assert_eq!(
        (&response.message, &response.stop_reason),
        (
            &Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "toolu_01".into(),
                    name: "shell.exec".into(),
                    input: json!({"command": "ls -la"}),
                }],
            },
            &StopReason::ToolUse
        )
    );

    // The follow-up carries the call and its result.
    request.messages.to_mut().push(response.message);
    request.messages.to_mut().push(Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: "toolu_01".into(),
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
        json!([{
            "name": "shell_exec",
            "description": "Run a shell command",
            "input_schema": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"]
            },
            "cache_control": {"type": "ephemeral"}
        }])
    );
    assert_eq!(
        requests[1].body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "List the files"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_01", "name": "shell_exec", "input": {"command": "ls -la"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.txt\nb.txt", "is_error": false,
                 "cache_control": {"type": "ephemeral"}}
            ]}
        ])
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn thinking_and_its_signature_go_back_unchanged() {
    let fake = fake().await;
    fake.push(Reply::Thinking {
        thinking: "The user greets me. I greet back.".into(),
        signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3h".into(),
        text: "Hello!".into(),
    });
    fake.push(Reply::Text("Bye!".into()));
    let client = anthropic(&fake);
    let mut request = ModelRequest::new(MODEL, vec![Message::user("Hi")]);

    let (deltas, response) = run(&client, request.clone()).await;

    assert_eq!(
        deltas,
        vec![
            StreamEvent::ThinkingDelta("The ".into()),
            StreamEvent::ThinkingDelta("user ".into()),
            StreamEvent::ThinkingDelta("greets ".into()),
            StreamEvent::ThinkingDelta("me. ".into()),
            StreamEvent::ThinkingDelta("I ".into()),
            StreamEvent::ThinkingDelta("greet ".into()),
            StreamEvent::ThinkingDelta("back.".into()),
            StreamEvent::TextDelta("Hello!".into()),
        ]
    );
    let message = response.unwrap().message;
    assert_eq!(
        message.content,
        vec![
            ContentBlock::Thinking {
                thinking: "The user greets me. I greet back.".into(),
                signature: Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3h".into()),
            },
            ContentBlock::text("Hello!"),
        ]
    );

    request.messages.to_mut().push(message);
    request.messages.to_mut().push(Message::user("Bye"));
    let (_, response) = run(&client, request).await;
    assert_eq!(response.map(|r| r.message), Ok(Message::assistant("Bye!")));
    assert_eq!(
        fake.requests()[1].body["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "The user greets me. I greet back.", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
            {"type": "text", "text": "Hello!"}
        ]})
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_wrong_key_is_an_auth_error_naming_the_variable() {
    let fake = fake().await;
    let client = client(
        "anthropic",
        &config(
            ProviderKind::Anthropic,
            &fake.base_url(),
            Some("sk-ant-wrong"),
        ),
    );
    let error = failure(&client, ModelRequest::new(MODEL, vec![Message::user("Hi")])).await;
    assert_eq!(
        error,
        Error::Auth {
            provider: "anthropic".into(),
            status: 401,
            message: "invalid x-api-key".into(),
            env: Some("ANTHROPIC_API_KEY"),
        }
    );
    assert_eq!(
        error.to_string(),
        "anthropic: the API key was rejected (HTTP 401): invalid x-api-key (check ANTHROPIC_API_KEY)"
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn http_errors_map_to_typed_errors() {
    let fake = fake().await;
    let client = anthropic(&fake);
    let cases = [
        (
            Reply::Error {
                status: 429,
                headers: vec![("retry-after".into(), "7".into())],
                body: error_body(
                    "rate_limit_error",
                    "Number of request tokens has exceeded your per-minute rate limit",
                ),
            },
            Error::RateLimited {
                provider: "anthropic".into(),
                retry_after: Some(Duration::from_secs(7)),
                message: "Number of request tokens has exceeded your per-minute rate limit".into(),
            },
        ),
        (
            Reply::Error {
                status: 529,
                headers: Vec::new(),
                body: error_body("overloaded_error", "Overloaded"),
            },
            Error::Overloaded {
                provider: "anthropic".into(),
                status: 529,
                retry_after: None,
                message: "Overloaded".into(),
            },
        ),
        (
            Reply::Error {
                status: 500,
                headers: Vec::new(),
                body: error_body("api_error", "Internal server error"),
            },
            Error::Server {
                provider: "anthropic".into(),
                status: 500,
                message: "Internal server error".into(),
            },
        ),
        (
            Reply::Error {
                status: 400,
                headers: Vec::new(),
                body: error_body(
                    "invalid_request_error",
                    "prompt is too long: 208310 tokens > 200000 maximum",
                ),
            },
            Error::ContextOverflow {
                provider: "anthropic".into(),
                message: "prompt is too long: 208310 tokens > 200000 maximum".into(),
            },
        ),
        (
            Reply::Error {
                status: 404,
                headers: Vec::new(),
                body: error_body("not_found_error", "model: claude-nope"),
            },
            Error::InvalidRequest {
                provider: "anthropic".into(),
                status: 404,
                message: "model: claude-nope".into(),
            },
        ),
    ];
    for (reply, expected) in cases {
        fake.push(reply);
        let error = failure(&client, ModelRequest::new(MODEL, vec![Message::user("Hi")])).await;
        assert_eq!(error, expected);
    }
    assert_eq!(fake.violations(), Vec::<String>::new());
}

/// The documented basic stream, cut before `message_delta`.
fn truncated_stream() -> String {
    flynn_testkit::fixtures::ANTHROPIC_STREAMING_TEXT
        .split("event: message_delta")
        .next()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_truncated_stream_is_a_stream_error_after_its_deltas() {
    let fake = fake().await;
    fake.push(Reply::RawSse(truncated_stream()));
    let (deltas, response) = run(
        &anthropic(&fake),
        ModelRequest::new(MODEL, vec![Message::user("Hi")]),
    )
    .await;
    assert_eq!(
        deltas,
        vec![
            StreamEvent::TextDelta("Hello".into()),
            StreamEvent::TextDelta("!".into()),
        ]
    );
    assert_eq!(
        response,
        Err(Error::Stream {
            provider: "anthropic".into(),
            message: "the stream ended before message_stop: the answer was cut off".into(),
        })
    );
}

#[tokio::test]
async fn malformed_json_in_an_event_is_a_protocol_error() {
    let fake = fake().await;
    fake.push(Reply::RawSse(
        "event: message_start\ndata: {\"type\": \"message_start\", \"message\": {\n\n".into(),
    ));
    let error = failure(
        &anthropic(&fake),
        ModelRequest::new(MODEL, vec![Message::user("Hi")]),
    )
    .await;
    assert_eq!(
        error,
        Error::Protocol {
            provider: "anthropic".into(),
            message: "event 'message_start' does not hold valid JSON (EOF while parsing an object at line 1 column 38): {\"type\": \"message_start\", \"message\": {".into(),
        }
    );
}

#[tokio::test]
async fn an_error_event_mid_stream_is_overloaded() {
    let fake = fake().await;
    fake.push(Reply::RawSse(format!(
        "{}{}",
        truncated_stream(),
        flynn_testkit::fixtures::ANTHROPIC_ERROR_EVENT
    )));
    let (deltas, response) = run(
        &anthropic(&fake),
        ModelRequest::new(MODEL, vec![Message::user("Hi")]),
    )
    .await;
    assert_eq!(deltas.len(), 2);
    assert_eq!(
        response,
        Err(Error::Overloaded {
            provider: "anthropic".into(),
            status: 529,
            retry_after: None,
            message: "Overloaded".into(),
        })
    );
}

#[tokio::test]
async fn a_base_url_ending_in_v1_is_accepted() {
    let fake = FakeAnthropic::start().await;
    fake.push(Reply::Text("ok".into()));
    let client = client(
        "anthropic",
        &config(
            ProviderKind::Anthropic,
            &format!("{}/v1/", fake.base_url()),
            Some("any"),
        ),
    );
    let response = client
        .complete(ModelRequest::new(MODEL, vec![Message::user("Hi")]))
        .await;
    assert_eq!(response.map(|r| r.message), Ok(Message::assistant("ok")));
    assert_eq!(fake.requests()[0].path, "/v1/messages");
    assert_eq!(fake.violations(), Vec::<String>::new());
}

/// A streamed answer that thinks, then calls a tool, with cache usage in
/// `message_start`, in the documented event shapes (extended thinking with
/// tool use: the thinking block, its signature delta, then the tool_use).
fn thinking_then_tool_use() -> String {
    let events = [
        json!({"type": "message_start", "message": {"id": "msg_01", "type": "message", "role": "assistant", "content": [], "model": MODEL, "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 12, "cache_creation_input_tokens": 1800, "cache_read_input_tokens": 2400, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "I should list the files."}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_01", "name": "shell_exec", "input": {}}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": \"ls\"}"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 40}}),
        json!({"type": "message_stop"}),
    ];
    events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn thinking_goes_back_before_its_tool_use_with_its_signature() {
    let fake = fake().await;
    fake.push(Reply::RawSse(thinking_then_tool_use()));
    fake.push(Reply::Text("Two files.".into()));
    let client = anthropic(&fake);
    let mut request = ModelRequest::new(MODEL, vec![Message::user("List the files")]);
    request.tools = vec![shell_tool()].into();

    let (_, response) = run(&client, request.clone()).await;
    let response = response.unwrap();
    let thinking = ContentBlock::Thinking {
        thinking: "I should list the files.".into(),
        signature: Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds".into()),
    };
    assert_eq!(
        (
            response.message.content.clone(),
            response.stop_reason.clone(),
            response.usage
        ),
        (
            vec![
                thinking,
                ContentBlock::ToolUse {
                    id: "toolu_01".into(),
                    name: "shell.exec".into(),
                    input: json!({"command": "ls"}),
                },
            ],
            StopReason::ToolUse,
            Usage {
                input_tokens: 12,
                output_tokens: 40,
                cache_read_tokens: 2400,
                cache_write_tokens: 1800,
            }
        )
    );

    request.messages.to_mut().push(response.message);
    request.messages.to_mut().push(Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: "toolu_01".into(),
            content: "a.txt\nb.txt".into(),
            is_error: false,
        }],
    });
    let (_, response) = run(&client, request).await;
    assert_eq!(
        response.map(|r| r.message),
        Ok(Message::assistant("Two files."))
    );
    assert_eq!(
        fake.requests()[1].body["messages"][1],
        json!({"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should list the files.",
             "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
            {"type": "tool_use", "id": "toolu_01", "name": "shell_exec", "input": {"command": "ls"}}
        ]})
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn system_tools_and_the_conversation_carry_cache_breakpoints() {
    let fake = fake().await;
    fake.push(Reply::Text("Done.".into()));
    let client = anthropic(&fake);
    let mut request = ModelRequest::new(
        MODEL,
        vec![
            Message::user("First"),
            Message::assistant("Answer"),
            Message::user("Second"),
        ],
    );
    request.system = Some("You are Flynn.".into());
    request.tools = vec![
        flynn_protocol::ToolSpec {
            name: "file.read".into(),
            description: "Read a file".into(),
            input_schema: json!({"type": "object"}).into(),
        },
        shell_tool(),
    ]
    .into();
    let (_, response) = run(&client, request).await;
    assert_eq!(response.map(|r| r.message), Ok(Message::assistant("Done.")));
    let body = &fake.requests()[0].body;
    let marked = json!({"type": "ephemeral"});
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "You are Flynn.", "cache_control": marked}])
    );
    assert_eq!(
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| (tool["name"].clone(), tool.get("cache_control").cloned()))
            .collect::<Vec<_>>(),
        vec![
            (json!("file_read"), None),
            (json!("shell_exec"), Some(marked.clone())),
        ]
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "First"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Answer"}]},
            {"role": "user", "content": [{"type": "text", "text": "Second", "cache_control": marked}]}
        ])
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn images_go_inline_and_by_url() {
    let fake = fake().await;
    fake.push(Reply::Text("Two cats.".into()));
    let request = ModelRequest::new(
        MODEL,
        vec![Message {
            role: Role::User,
            content: vec![
                ContentBlock::Image {
                    source: flynn_protocol::ImageSource::Base64 {
                        media_type: "image/jpeg".into(),
                        data: "/9j/4AAQ".into(),
                    },
                },
                ContentBlock::Image {
                    source: flynn_protocol::ImageSource::Url {
                        url: "https://example.com/cat.png".into(),
                    },
                },
                ContentBlock::text("What are these?"),
            ],
        }],
    );
    let response = anthropic(&fake).complete(request).await;
    assert_eq!(
        response.map(|r| r.message),
        Ok(Message::assistant("Two cats."))
    );
    assert_eq!(
        fake.requests()[0].body["messages"],
        json!([{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
            {"type": "text", "text": "What are these?", "cache_control": {"type": "ephemeral"}}
        ]}])
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

/// reqwest drops `Authorization` on a redirect to another host but keeps
/// `x-api-key` and configured headers: a redirect is not followed, and
/// the error names where it pointed.
#[tokio::test]
async fn a_redirect_is_refused_and_the_key_stays_home() {
    let elsewhere = fake().await;
    for status in [302, 307] {
        elsewhere.push(Reply::Text("thanks for the key".into()));
        let redirect = FakeRedirect::start(status, &elsewhere.base_url());
        let mut config = config(ProviderKind::Anthropic, &redirect.base_url(), Some(KEY));
        config
            .headers
            .insert("x-custom-secret".into(), "hush".into());
        let client = client("anthropic", &config);
        let error = failure(&client, ModelRequest::new(MODEL, vec![Message::user("Hi")])).await;
        let to = format!("127.0.0.1:{}", elsewhere.addr().port());
        assert_eq!(
            error,
            Error::Redirect {
                provider: "anthropic".into(),
                status,
                to: to.clone(),
            }
        );
        assert_eq!(
            error.to_string(),
            format!(
                "anthropic: the provider answered with a redirect (HTTP {status}) to {to}; API keys are not sent across redirects: check base_url"
            )
        );
        assert!(error.is_config() && !error.is_retryable());
        assert_eq!(redirect.requests().len(), 1);
        assert_eq!(redirect.requests()[0].header("x-api-key"), Some(KEY));
    }
    assert_eq!(elsewhere.requests(), Vec::new());
}
