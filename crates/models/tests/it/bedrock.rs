//! The Bedrock client against `FakeBedrock`, signing with static test
//! credentials given through the SDK's config (never the process
//! environment).

#![cfg(feature = "bedrock")]

use std::sync::Arc;

use flynn_models::{
    AwsCredentials, Error, ModelClient, ModelRequest, ModelResponse, StopReason, StreamEvent,
    build_bedrock_client,
};
use flynn_protocol::config::{ProviderConfig, ProviderKind};
use flynn_protocol::{ContentBlock, Message, Role, ToolSpec, Usage};
use flynn_testkit::{FakeBedrock, INPUT_TOKENS, OUTPUT_TOKENS, Reply, bedrock_error, fixtures};
use serde_json::{Value, json};

use crate::{client, failure, run, shell_tool};

const ACCESS_KEY: &str = "AKIDFLYNNTEST";
const MODEL: &str = "anthropic.claude-sonnet-4-5-20250929-v1:0";
/// `MODEL` as it appears in the request path.
const MODEL_PATH: &str = "anthropic.claude-sonnet-4-5-20250929-v1%3A0";

fn config(fake: &FakeBedrock) -> ProviderConfig {
    let mut config = ProviderConfig::new(ProviderKind::Bedrock);
    config.base_url = Some(fake.endpoint_url());
    config.region = Some("us-east-1".into());
    config
}

fn credentials(access_key_id: &str) -> AwsCredentials {
    AwsCredentials {
        access_key_id: access_key_id.into(),
        secret_access_key: "flynn-test-secret-key".into(),
        session_token: None,
    }
}

async fn fake() -> FakeBedrock {
    FakeBedrock::start_with_access_key(ACCESS_KEY).await
}

fn bedrock(fake: &FakeBedrock) -> Arc<dyn ModelClient> {
    build_bedrock_client("bedrock", &config(fake), credentials(ACCESS_KEY)).unwrap()
}

fn usage() -> Usage {
    Usage {
        input_tokens: INPUT_TOKENS,
        output_tokens: OUTPUT_TOKENS,
        ..Usage::default()
    }
}

fn events(fixture: &str) -> Vec<Value> {
    serde_json::from_str(fixture).unwrap()
}

#[tokio::test]
async fn streams_text_with_usage_over_a_signed_request() {
    let fake = fake().await;
    fake.push(Reply::Text("Hello there, friend".into()));
    let mut request = ModelRequest::new(MODEL, vec![Message::user("Hi")]);
    request.system = Some("Be brief.".into());
    request.max_tokens = 256;
    request.temperature = Some(0.5);

    let (deltas, response) = run(&bedrock(&fake), request).await;

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
        (
            "POST",
            format!("/model/{MODEL_PATH}/converse-stream").as_str()
        )
    );
    let authorization = sent.header("authorization").unwrap_or_default();
    assert!(
        authorization.starts_with("AWS4-HMAC-SHA256 Credential=AKIDFLYNNTEST/")
            && authorization.contains("/us-east-1/bedrock/aws4_request, SignedHeaders="),
        "{authorization}"
    );
    assert_eq!(
        sent.body,
        json!({
            "messages": [{"role": "user", "content": [{"text": "Hi"}]}],
            "system": [{"text": "Be brief."}],
            "inferenceConfig": {"maxTokens": 256, "temperature": 0.5}
        })
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn the_documented_stream_shapes_assemble() {
    let fake = fake().await;
    fake.push_events(events(fixtures::BEDROCK_STREAM_TEXT));
    fake.push_events(events(
        &fixtures::BEDROCK_STREAM_TOOL_USE.replace("\"top_song\"", "\"radio_top_song\""),
    ));
    let client = bedrock(&fake);

    let (_, text) = run(&client, ModelRequest::new(MODEL, vec![Message::user("Hi")])).await;
    assert_eq!(
        text,
        Ok(ModelResponse {
            message: Message::assistant(
                "The most popular song on WZPZ is Elemental Hotel by 8 Storey Hike."
            ),
            stop_reason: StopReason::EndTurn,
            usage: Usage {
                input_tokens: 460,
                output_tokens: 17,
                cache_read_tokens: 300,
                cache_write_tokens: 0,
            },
            model: MODEL.into(),
        })
    );

    let mut request = ModelRequest::new(
        MODEL,
        vec![Message::user("What is the most popular song on WZPZ?")],
    );
    request.tools = vec![ToolSpec {
        name: "radio.top_song".into(),
        description: "Get the most popular song played on a radio station.".into(),
        input_schema: json!({"type": "object", "properties": {"sign": {"type": "string"}}}).into(),
    }]
    .into();
    let (deltas, tool) = run(&client, request).await;
    assert_eq!(
        deltas,
        vec![
            StreamEvent::TextDelta("I'll look up the most popular song on WZPZ.".into()),
            StreamEvent::ToolUseStart {
                id: "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q".into(),
                name: "radio.top_song".into(),
            },
        ]
    );
    assert_eq!(
        tool.map(|r| (r.message.content, r.stop_reason, r.usage.output_tokens)),
        Ok((
            vec![
                ContentBlock::text("I'll look up the most popular song on WZPZ."),
                ContentBlock::ToolUse {
                    id: "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q".into(),
                    name: "radio.top_song".into(),
                    input: json!({"sign": "WZPZ"}),
                },
            ],
            StopReason::ToolUse,
            61
        ))
    );
    assert_eq!(
        fake.requests()[1].body["toolConfig"],
        json!({"tools": [{"toolSpec": {
            "name": "radio_top_song",
            "description": "Get the most popular song played on a radio station.",
            "inputSchema": {"json": {"type": "object", "properties": {"sign": {"type": "string"}}}}
        }}]})
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
    let client = bedrock(&fake);
    let mut request = ModelRequest::new(MODEL, vec![Message::user("List the files")]);
    request.tools = vec![shell_tool()].into();

    let (deltas, response) = run(&client, request.clone()).await;

    assert_eq!(
        deltas,
        vec![StreamEvent::ToolUseStart {
            id: "tooluse_01".into(),
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
                    id: "tooluse_01".into(),
                    name: "shell.exec".into(),
                    input: json!({"command": "ls -la"}),
                }],
            },
            &StopReason::ToolUse
        )
    );

    request.messages.to_mut().push(response.message);
    request.messages.to_mut().push(Message {
        role: Role::User,
        content: vec![ContentBlock::ToolResult {
            tool_use_id: "tooluse_01".into(),
            content: "a.txt\nb.txt".into(),
            is_error: false,
        }],
    });
    let (_, second) = run(&client, request).await;
    assert_eq!(
        second.map(|r| r.message),
        Ok(Message::assistant("Two files."))
    );
    assert_eq!(
        fake.requests()[1].body,
        json!({
            "messages": [
                {"role": "user", "content": [{"text": "List the files"}]},
                {"role": "assistant", "content": [
                    {"toolUse": {"toolUseId": "tooluse_01", "name": "shell_exec", "input": {"command": "ls -la"}}}
                ]},
                {"role": "user", "content": [
                    {"toolResult": {"toolUseId": "tooluse_01", "content": [{"text": "a.txt\nb.txt"}], "status": "success"}}
                ]}
            ],
            "toolConfig": {"tools": [{"toolSpec": {
                "name": "shell_exec",
                "description": "Run a shell command",
                "inputSchema": {"json": shell_tool().input_schema}
            }}]},
            "inferenceConfig": {"maxTokens": 4096}
        })
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn reasoning_streams_and_goes_back_with_its_signature() {
    let fake = fake().await;
    fake.push_events(events(fixtures::BEDROCK_STREAM_REASONING));
    fake.push(Reply::Text("You're welcome.".into()));
    let client = bedrock(&fake);
    let mut request = ModelRequest::new(MODEL, vec![Message::user("GCD of 1071 and 462?")]);

    let (deltas, response) = run(&client, request.clone()).await;

    assert_eq!(
        deltas,
        vec![
            StreamEvent::ThinkingDelta("The user wants the GCD of 1071 and 462. ".into()),
            StreamEvent::ThinkingDelta(
                "1071 = 2 × 462 + 147, 462 = 3 × 147 + 21, 147 = 7 × 21.".into()
            ),
            StreamEvent::TextDelta("The greatest common divisor is 21.".into()),
        ]
    );
    let response = response.unwrap();
    assert_eq!(
        response.message.content,
        vec![
            ContentBlock::Thinking {
                thinking: "The user wants the GCD of 1071 and 462. 1071 = 2 × 462 + 147, 462 = 3 × 147 + 21, 147 = 7 × 21.".into(),
                signature: Some("EqoBCkgIARABGAIiQL2wZ9mQ0mGkGZxqFh1y".into()),
            },
            ContentBlock::text("The greatest common divisor is 21."),
        ]
    );

    request.messages.to_mut().push(response.message);
    request.messages.to_mut().push(Message::user("Thanks!"));
    let (_, second) = run(&client, request).await;
    assert_eq!(
        second.map(|r| r.message),
        Ok(Message::assistant("You're welcome."))
    );
    assert_eq!(
        fake.requests()[1].body["messages"][1],
        json!({"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {
                "text": "The user wants the GCD of 1071 and 462. 1071 = 2 × 462 + 147, 462 = 3 × 147 + 21, 147 = 7 × 21.",
                "signature": "EqoBCkgIARABGAIiQL2wZ9mQ0mGkGZxqFh1y"
            }}},
            {"text": "The greatest common divisor is 21."}
        ]})
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn throttling_is_rate_limited() {
    let fake = fake().await;
    fake.push(bedrock_error(
        429,
        "ThrottlingException",
        "Too many requests, please wait before trying again.",
    ));
    let error = failure(
        &bedrock(&fake),
        ModelRequest::new(MODEL, vec![Message::user("Hi")]),
    )
    .await;
    assert_eq!(
        error,
        Error::RateLimited {
            provider: "bedrock".into(),
            retry_after: None,
            message: "Too many requests, please wait before trying again.".into(),
        }
    );
    assert!(error.is_retryable());
    assert_eq!(fake.requests().len(), 1, "the client must not retry");
}

#[tokio::test]
async fn access_denied_and_an_unknown_key_are_auth_errors() {
    let fake = fake().await;
    fake.push(bedrock_error(
        403,
        "AccessDeniedException",
        "You don't have access to the model with the specified model ID.",
    ));
    let hello = || ModelRequest::new(MODEL, vec![Message::user("Hi")]);
    let error = failure(&bedrock(&fake), hello()).await;
    assert_eq!(
        error,
        Error::Auth {
            provider: "bedrock".into(),
            status: 403,
            message: "You don't have access to the model with the specified model ID.".into(),
            env: Some("AWS_ACCESS_KEY_ID"),
        }
    );
    assert_eq!(
        error.to_string(),
        "bedrock: the API key was rejected (HTTP 403): You don't have access to the model with the specified model ID. (check AWS_ACCESS_KEY_ID)"
    );

    let stranger =
        build_bedrock_client("bedrock", &config(&fake), credentials("AKIDSTRANGER")).unwrap();
    assert_eq!(
        failure(&stranger, hello()).await,
        Error::Auth {
            provider: "bedrock".into(),
            status: 403,
            message: "The security token included in the request is invalid.".into(),
            env: Some("AWS_ACCESS_KEY_ID"),
        }
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn an_input_too_long_is_a_context_overflow() {
    let fake = fake().await;
    fake.push(bedrock_error(
        400,
        "ValidationException",
        "Input is too long for requested model.",
    ));
    let error = failure(
        &bedrock(&fake),
        ModelRequest::new(MODEL, vec![Message::user("Hi")]),
    )
    .await;
    assert_eq!(
        error,
        Error::ContextOverflow {
            provider: "bedrock".into(),
            message: "Input is too long for requested model.".into(),
        }
    );
}

#[tokio::test]
async fn an_exception_mid_stream_ends_it_with_a_stream_error() {
    let fake = fake().await;
    fake.push_events(events(fixtures::BEDROCK_STREAM_MODEL_ERROR));
    let (deltas, response) = run(
        &bedrock(&fake),
        ModelRequest::new(MODEL, vec![Message::user("Hi")]),
    )
    .await;
    assert_eq!(
        deltas,
        vec![StreamEvent::TextDelta("The most popular".into())]
    );
    assert_eq!(
        response,
        Err(Error::Stream {
            provider: "bedrock".into(),
            message: "Model stream error: the model stopped unexpectedly".into(),
        })
    );
}

#[tokio::test]
async fn throttling_inside_the_stream_is_rate_limited_too() {
    let fake = fake().await;
    fake.push_events(vec![
        json!({"messageStart": {"role": "assistant"}}),
        json!({"throttlingException": {"message": "Too many tokens, please wait before trying again."}}),
    ]);
    let error = failure(
        &bedrock(&fake),
        ModelRequest::new(MODEL, vec![Message::user("Hi")]),
    )
    .await;
    assert_eq!(
        error,
        Error::RateLimited {
            provider: "bedrock".into(),
            retry_after: None,
            message: "Too many tokens, please wait before trying again.".into(),
        }
    );
}

#[tokio::test]
async fn a_bedrock_api_key_is_sent_as_a_bearer_token() {
    let fake = FakeBedrock::start_with_api_key("ABSKQmVkcm9ja0FQSUtleS1test").await;
    fake.push(Reply::Text("Hi!".into()));
    let mut config = config(&fake);
    config.api_key = Some("ABSKQmVkcm9ja0FQSUtleS1test".into());

    let (_, response) = run(
        &client("bedrock", &config),
        ModelRequest::new(MODEL, vec![Message::user("Hi")]),
    )
    .await;

    assert_eq!(response.map(|r| r.message), Ok(Message::assistant("Hi!")));
    assert_eq!(
        fake.requests()[0].header("authorization"),
        Some("Bearer ABSKQmVkcm9ja0FQSUtleS1test")
    );
    assert_eq!(fake.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn nothing_listening_is_a_connect_error() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut config = ProviderConfig::new(ProviderKind::Bedrock);
    config.base_url = Some(format!("http://{addr}"));
    config.region = Some("us-east-1".into());
    let client = build_bedrock_client("bedrock", &config, credentials(ACCESS_KEY)).unwrap();
    let error = failure(&client, ModelRequest::new(MODEL, vec![Message::user("Hi")])).await;
    assert!(
        matches!(&error, Error::Connect { url, .. } if *url == format!("http://{addr}")),
        "{error:?}"
    );
    assert!(error.is_retryable());
}
