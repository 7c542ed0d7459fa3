//! One contract, every provider: the same scenarios run through each real
//! client against its strict fake (OpenAI, an OpenAI-compatible server,
//! Ollama, Anthropic and, with the `bedrock` feature, Bedrock). The
//! per-provider modules pin each wire format byte for byte; this one pins
//! what the runtime relies on whichever provider answers: deltas that add
//! up to the answer, dotted tool names both ways, tool results matched by
//! id, thinking kept, and each kind of failure mapped to the same typed
//! error with the same retry advice.

use std::sync::Arc;
use std::time::Duration;

use flynn_models::{Error, ModelClient, ModelRequest, StopReason, StreamEvent};
use flynn_protocol::config::ProviderKind;
use flynn_protocol::{ContentBlock, ImageSource, Message, Role, Usage};
use flynn_testkit::{
    CapturedRequest, FakeAnthropic, FakeOllama, FakeOpenAi, FakeRedirect, INPUT_TOKENS,
    OUTPUT_TOKENS, Reply, fixtures,
};
use serde_json::{Value, json};

use crate::{client, config, failure, run, shell_tool};

const KEY: &str = "sk-conformance";

/// The fake behind one provider.
enum Fake {
    OpenAi(FakeOpenAi),
    Ollama(FakeOllama),
    Anthropic(FakeAnthropic),
    #[cfg(feature = "bedrock")]
    Bedrock(flynn_testkit::FakeBedrock),
}

/// How a provider's wire format is read back, for the checks that look at
/// what the client sent.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Wire {
    /// Chat Completions: OpenAI, compatible servers, Ollama.
    ChatCompletions,
    /// Anthropic's Messages API.
    Messages,
    /// Bedrock's Converse API.
    #[cfg(feature = "bedrock")]
    Converse,
}

/// A real client and its fake.
struct Provider {
    /// The provider's name in config, which its errors carry.
    name: &'static str,
    kind: ProviderKind,
    model: &'static str,
    wire: Wire,
    fake: Fake,
    client: Arc<dyn ModelClient>,
}

/// Every provider, each on a fresh fake.
async fn providers() -> Vec<Provider> {
    let openai = FakeOpenAi::start_with_key(KEY).await;
    let compatible = FakeOpenAi::start().await;
    let ollama = FakeOllama::start().await;
    let anthropic = FakeAnthropic::start_with_key(KEY).await;
    let all = vec![
        Provider {
            name: "openai",
            kind: ProviderKind::Openai,
            model: "gpt-4o-mini",
            wire: Wire::ChatCompletions,
            client: client(
                "openai",
                &config(ProviderKind::Openai, &openai.base_url(), Some(KEY)),
            ),
            fake: Fake::OpenAi(openai),
        },
        Provider {
            name: "local",
            kind: ProviderKind::OpenaiCompatible,
            model: "qwen2.5-7b-instruct",
            wire: Wire::ChatCompletions,
            client: client(
                "local",
                &config(ProviderKind::OpenaiCompatible, &compatible.base_url(), None),
            ),
            fake: Fake::OpenAi(compatible),
        },
        Provider {
            name: "ollama",
            kind: ProviderKind::Ollama,
            model: "llama3.2",
            wire: Wire::ChatCompletions,
            client: client(
                "ollama",
                &config(ProviderKind::Ollama, &ollama.base_url(), None),
            ),
            fake: Fake::Ollama(ollama),
        },
        Provider {
            name: "anthropic",
            kind: ProviderKind::Anthropic,
            model: "claude-sonnet-4-5",
            wire: Wire::Messages,
            client: client(
                "anthropic",
                &config(ProviderKind::Anthropic, &anthropic.base_url(), Some(KEY)),
            ),
            fake: Fake::Anthropic(anthropic),
        },
    ];
    #[cfg(feature = "bedrock")]
    let all = {
        let mut all = all;
        all.push(bedrock::provider().await);
        all
    };
    all
}

#[cfg(feature = "bedrock")]
mod bedrock {
    use flynn_models::{AwsCredentials, build_bedrock_client};
    use flynn_protocol::config::{ProviderConfig, ProviderKind};
    use flynn_testkit::FakeBedrock;

    use super::{Fake, Provider, Wire};

    pub const ACCESS_KEY: &str = "AKIDCONFORMANCE";

    pub fn config(fake: &FakeBedrock) -> ProviderConfig {
        let mut config = ProviderConfig::new(ProviderKind::Bedrock);
        config.base_url = Some(fake.endpoint_url());
        config.region = Some("us-east-1".into());
        config
    }

    pub fn credentials(access_key_id: &str) -> AwsCredentials {
        AwsCredentials {
            access_key_id: access_key_id.into(),
            secret_access_key: "flynn-conformance-secret".into(),
            session_token: None,
        }
    }

    pub async fn provider() -> Provider {
        let fake = FakeBedrock::start_with_access_key(ACCESS_KEY).await;
        Provider {
            name: "bedrock",
            kind: ProviderKind::Bedrock,
            model: "anthropic.claude-sonnet-4-5-20250929-v1:0",
            wire: Wire::Converse,
            client: build_bedrock_client("bedrock", &config(&fake), credentials(ACCESS_KEY))
                .unwrap(),
            fake: Fake::Bedrock(fake),
        }
    }
}

/// One kind of failure, in each vendor's own words.
#[derive(Debug, Clone, Copy)]
enum Failure {
    RateLimited,
    Overloaded,
    ServerError,
    ContextOverflow,
}

impl Provider {
    fn push(&self, reply: Reply) {
        match &self.fake {
            Fake::OpenAi(fake) => fake.push(reply),
            Fake::Ollama(fake) => fake.push(reply),
            Fake::Anthropic(fake) => fake.push(reply),
            #[cfg(feature = "bedrock")]
            Fake::Bedrock(fake) => fake.push(reply),
        }
    }

    fn requests(&self) -> Vec<CapturedRequest> {
        match &self.fake {
            Fake::OpenAi(fake) => fake.requests(),
            Fake::Ollama(fake) => fake.requests(),
            Fake::Anthropic(fake) => fake.requests(),
            #[cfg(feature = "bedrock")]
            Fake::Bedrock(fake) => fake.requests(),
        }
    }

    /// The fake's protocol violations, which every scenario expects empty.
    fn assert_no_violations(&self) {
        let violations = match &self.fake {
            Fake::OpenAi(fake) => fake.violations(),
            Fake::Ollama(fake) => fake.violations(),
            Fake::Anthropic(fake) => fake.violations(),
            #[cfg(feature = "bedrock")]
            Fake::Bedrock(fake) => fake.violations(),
        };
        assert_eq!(violations, Vec::<String>::new(), "{}", self.name);
    }

    /// The fake's base URL; `None` for Bedrock, whose client takes an
    /// endpoint and credentials instead.
    fn base_url(&self) -> Option<String> {
        match &self.fake {
            Fake::OpenAi(fake) => Some(fake.base_url()),
            Fake::Ollama(fake) => Some(fake.base_url()),
            Fake::Anthropic(fake) => Some(fake.base_url()),
            #[cfg(feature = "bedrock")]
            Fake::Bedrock(_) => None,
        }
    }

    /// The same provider with a key its server does not know; `None` for
    /// the keyless servers.
    fn with_wrong_key(&self) -> Option<Arc<dyn ModelClient>> {
        match &self.fake {
            #[cfg(feature = "bedrock")]
            Fake::Bedrock(fake) => Some(
                flynn_models::build_bedrock_client(
                    self.name,
                    &bedrock::config(fake),
                    bedrock::credentials("AKIDSTRANGER"),
                )
                .unwrap(),
            ),
            _ if matches!(self.kind, ProviderKind::Openai | ProviderKind::Anthropic) => {
                let wrong = config(self.kind, &self.base_url()?, Some("sk-wrong"));
                Some(client(self.name, &wrong))
            }
            _ => None,
        }
    }

    /// The same provider behind a server that redirects every request to
    /// this provider's fake; `None` where the HTTP stack is not Flynn's
    /// (Bedrock's is the AWS SDK's).
    fn behind_redirect(&self, status: u16) -> Option<(FakeRedirect, Arc<dyn ModelClient>)> {
        let redirect = FakeRedirect::start(status, &self.base_url()?);
        let client = client(
            self.name,
            &config(self.kind, &redirect.base_url(), Some(KEY)),
        );
        Some((redirect, client))
    }

    /// A reply that fails in the vendor's documented way, and the message
    /// the client must carry in its error.
    fn failing_reply(&self, failure: Failure) -> (Reply, &'static str) {
        // OpenAI and Anthropic say when to try again; Bedrock does not.
        let retry_after = match failure {
            Failure::RateLimited => vec![("retry-after".to_owned(), "7".to_owned())],
            _ => Vec::new(),
        };
        match self.wire {
            Wire::ChatCompletions => {
                let (status, message, kind, code) = match failure {
                    Failure::RateLimited => (
                        429,
                        "Rate limit reached for requests",
                        "requests",
                        Some("rate_limit_exceeded"),
                    ),
                    Failure::Overloaded => (
                        503,
                        "The engine is currently overloaded, please try again later",
                        "server_error",
                        None,
                    ),
                    Failure::ServerError => (
                        500,
                        "The server had an error while processing your request.",
                        "server_error",
                        None,
                    ),
                    Failure::ContextOverflow => (
                        400,
                        "This model's maximum context length is 128000 tokens.",
                        "invalid_request_error",
                        Some("context_length_exceeded"),
                    ),
                };
                let body = json!({"error": {
                    "message": message, "type": kind, "param": null, "code": code
                }});
                let reply = Reply::Error {
                    status,
                    headers: retry_after,
                    body: body.to_string(),
                };
                (reply, message)
            }
            Wire::Messages => {
                let (status, message, kind) = match failure {
                    Failure::RateLimited => (429, "Rate limit reached", "rate_limit_error"),
                    Failure::Overloaded => (529, "Overloaded", "overloaded_error"),
                    Failure::ServerError => (500, "Internal server error", "api_error"),
                    Failure::ContextOverflow => (
                        400,
                        "prompt is too long: 208310 tokens > 200000 maximum",
                        "invalid_request_error",
                    ),
                };
                let body = json!({"type": "error", "error": {"type": kind, "message": message}});
                let reply = Reply::Error {
                    status,
                    headers: retry_after,
                    body: body.to_string(),
                };
                (reply, message)
            }
            #[cfg(feature = "bedrock")]
            Wire::Converse => {
                let (status, exception, message) = match failure {
                    Failure::RateLimited => (
                        429,
                        "ThrottlingException",
                        "Too many requests, please wait before trying again.",
                    ),
                    Failure::Overloaded => (
                        503,
                        "ServiceUnavailableException",
                        "The service is temporarily unavailable.",
                    ),
                    Failure::ServerError => (
                        500,
                        "InternalServerException",
                        "The server encountered an internal error.",
                    ),
                    Failure::ContextOverflow => (
                        400,
                        "ValidationException",
                        "Input is too long for requested model.",
                    ),
                };
                (
                    flynn_testkit::bedrock_error(status, exception, message),
                    message,
                )
            }
        }
    }

    /// An answer that starts, says "Hello", then stops in the middle: the
    /// connection closes before the vendor's end-of-message marker.
    fn cut_off(&self) {
        match self.wire {
            Wire::ChatCompletions => self.push(Reply::RawSse(
                fixtures::OPENAI_STREAMING_TEXT
                    .split("\n\n")
                    .filter(|event| !event.contains("\"stop\"") && !event.contains("[DONE]"))
                    .map(|event| format!("{event}\n\n"))
                    .collect(),
            )),
            Wire::Messages => self.push(Reply::RawSse(anthropic_until_message_delta())),
            #[cfg(feature = "bedrock")]
            Wire::Converse => {
                if let Fake::Bedrock(fake) = &self.fake {
                    fake.push_events(vec![
                        json!({"messageStart": {"role": "assistant"}}),
                        json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Hello"}}}),
                    ]);
                }
            }
        }
    }

    /// An answer that starts, says "Hello", then reports an error inside
    /// the stream (after the HTTP 200).
    fn error_mid_stream(&self) {
        match self.wire {
            Wire::ChatCompletions => self.push(Reply::RawSse(format!(
                "{}data: {}\n\n",
                fixtures::OPENAI_STREAMING_TEXT
                    .split("\n\n")
                    .find(|event| event.contains("\"Hello\""))
                    .map(|event| format!("{event}\n\n"))
                    .unwrap(),
                json!({"error": {"message": "upstream connection lost", "type": "server_error"}})
            ))),
            Wire::Messages => self.push(Reply::RawSse(format!(
                "{}event: error\ndata: {}\n\n",
                anthropic_until_message_delta(),
                json!({"type": "error", "error": {"type": "api_error", "message": "upstream connection lost"}})
            ))),
            #[cfg(feature = "bedrock")]
            Wire::Converse => {
                if let Fake::Bedrock(fake) = &self.fake {
                    fake.push_events(vec![
                        json!({"messageStart": {"role": "assistant"}}),
                        json!({"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Hello"}}}),
                        json!({"modelStreamErrorException": {"message": "upstream connection lost", "originalStatusCode": 500}}),
                    ]);
                }
            }
        }
    }

    fn request(&self, messages: Vec<Message>) -> ModelRequest<'static> {
        ModelRequest::new(self.model, messages)
    }
}

/// Anthropic's documented basic stream, cut before `message_delta`: the
/// text "Hello!" in two deltas, and no end.
fn anthropic_until_message_delta() -> String {
    fixtures::ANTHROPIC_STREAMING_TEXT
        .split("event: message_delta")
        .next()
        .unwrap()
        .to_owned()
}

/// The system prompt as sent.
fn system_sent(wire: Wire, body: &Value) -> Option<String> {
    match wire {
        Wire::ChatCompletions => body["messages"]
            .as_array()?
            .iter()
            .find(|message| message["role"] == "system")
            .and_then(|message| message["content"].as_str())
            .map(str::to_owned),
        Wire::Messages => match &body["system"] {
            Value::String(text) => Some(text.clone()),
            Value::Array(blocks) => Some(
                blocks
                    .iter()
                    .filter_map(|block| block["text"].as_str())
                    .collect(),
            ),
            _ => None,
        },
        #[cfg(feature = "bedrock")]
        Wire::Converse => Some(
            body["system"]
                .as_array()?
                .iter()
                .filter_map(|block| block["text"].as_str())
                .collect(),
        ),
    }
}

/// The tool names offered, as the wire spells them.
fn tool_names_sent(wire: Wire, body: &Value) -> Vec<String> {
    let (tools, pointer) = match wire {
        Wire::ChatCompletions => (&body["tools"], "/function/name"),
        Wire::Messages => (&body["tools"], "/name"),
        #[cfg(feature = "bedrock")]
        Wire::Converse => (&body["toolConfig"]["tools"], "/toolSpec/name"),
    };
    tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| tool.pointer(pointer)?.as_str().map(str::to_owned))
        .collect()
}

/// Every tool result sent back, as `(tool call id, text)`.
fn tool_results_sent(wire: Wire, body: &Value) -> Vec<(String, String)> {
    let text_of = |content: &Value| match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|block| block["text"].as_str())
            .collect(),
        _ => String::new(),
    };
    let messages = body["messages"].as_array().into_iter().flatten();
    match wire {
        Wire::ChatCompletions => messages
            .filter(|message| message["role"] == "tool")
            .map(|message| {
                (
                    message["tool_call_id"].as_str().unwrap_or("").to_owned(),
                    text_of(&message["content"]),
                )
            })
            .collect(),
        Wire::Messages => messages
            .flat_map(|message| message["content"].as_array().into_iter().flatten())
            .filter(|block| block["type"] == "tool_result")
            .map(|block| {
                (
                    block["tool_use_id"].as_str().unwrap_or("").to_owned(),
                    text_of(&block["content"]),
                )
            })
            .collect(),
        #[cfg(feature = "bedrock")]
        Wire::Converse => messages
            .flat_map(|message| message["content"].as_array().into_iter().flatten())
            .filter_map(|block| block.get("toolResult"))
            .map(|result| {
                (
                    result["toolUseId"].as_str().unwrap_or("").to_owned(),
                    text_of(&result["content"]),
                )
            })
            .collect(),
    }
}

fn text_of(deltas: &[StreamEvent]) -> String {
    deltas
        .iter()
        .filter_map(|delta| match delta {
            StreamEvent::TextDelta(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn text_streams_in_deltas_that_add_up_to_the_answer_with_its_usage() {
    for provider in providers().await {
        let name = provider.name;
        provider.push(Reply::Text("Hello there, friend".into()));
        let mut request = provider.request(vec![Message::user("Hi")]);
        request.system = Some("Be brief.".into());

        let (deltas, response) = run(&provider.client, request).await;

        assert!(deltas.len() > 1, "{name}: one delta per chunk: {deltas:?}");
        assert_eq!(text_of(&deltas), "Hello there, friend", "{name}");
        let response = response.unwrap();
        assert_eq!(
            response.message,
            Message::assistant("Hello there, friend"),
            "{name}"
        );
        assert_eq!(response.stop_reason, StopReason::EndTurn, "{name}");
        assert_eq!(
            (response.usage.input_tokens, response.usage.output_tokens),
            (INPUT_TOKENS, OUTPUT_TOKENS),
            "{name}"
        );
        let sent = &provider.requests()[0].body;
        assert_eq!(
            system_sent(provider.wire, sent).as_deref(),
            Some("Be brief."),
            "{name}: {sent}"
        );
        provider.assert_no_violations();
    }
}

#[tokio::test]
async fn a_dotted_tool_goes_out_in_wire_form_and_its_call_and_result_round_trip_by_id() {
    for provider in providers().await {
        let name = provider.name;
        provider.push(Reply::ToolCalls(vec![(
            "shell_exec".into(),
            json!({"command": "ls -la"}),
        )]));
        provider.push(Reply::Text("Two files.".into()));
        let mut request = provider.request(vec![Message::user("List the files")]);
        request.tools = vec![shell_tool()].into();

        let (deltas, response) = run(&provider.client, request.clone()).await;

        let response = response.unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse, "{name}");
        let [
            ContentBlock::ToolUse {
                id,
                name: tool,
                input,
            },
        ] = response.message.content.as_slice()
        else {
            panic!("{name}: one tool call expected: {:?}", response.message);
        };
        assert_eq!(
            (tool.as_str(), input),
            ("shell.exec", &json!({"command": "ls -la"})),
            "{name}"
        );
        assert!(!id.is_empty(), "{name}: the call has an id");
        assert_eq!(
            deltas,
            vec![StreamEvent::ToolUseStart {
                id: id.clone(),
                name: "shell.exec".into(),
            }],
            "{name}"
        );
        assert_eq!(
            tool_names_sent(provider.wire, &provider.requests()[0].body),
            vec!["shell_exec"],
            "{name}"
        );

        let id = id.clone();
        request.messages.to_mut().push(response.message);
        request.messages.to_mut().push(Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: id.clone(),
                content: "a.txt\nb.txt".into(),
                is_error: false,
            }],
        });
        let (_, second) = run(&provider.client, request).await;
        assert_eq!(
            second.map(|r| r.message),
            Ok(Message::assistant("Two files.")),
            "{name}"
        );
        assert_eq!(
            tool_results_sent(provider.wire, &provider.requests()[1].body),
            vec![(id, "a.txt\nb.txt".to_owned())],
            "{name}"
        );
        provider.assert_no_violations();
    }
}

#[tokio::test]
async fn several_tool_calls_in_one_answer_keep_their_order_and_distinct_ids() {
    for provider in providers().await {
        let name = provider.name;
        provider.push(Reply::ToolCalls(vec![
            ("shell_exec".into(), json!({"command": "date"})),
            ("shell_exec".into(), json!({"command": "uptime"})),
        ]));
        let mut request = provider.request(vec![Message::user("Date and uptime?")]);
        request.tools = vec![shell_tool()].into();

        let (_, response) = run(&provider.client, request).await;

        let calls: Vec<(String, Value)> = response
            .unwrap()
            .message
            .content
            .into_iter()
            .filter_map(|block| match block {
                ContentBlock::ToolUse { id, name, input } => {
                    assert_eq!(name, "shell.exec");
                    Some((id, input))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            calls.iter().map(|(_, input)| input).collect::<Vec<_>>(),
            vec![&json!({"command": "date"}), &json!({"command": "uptime"})],
            "{name}"
        );
        assert_ne!(calls[0].0, calls[1].0, "{name}: ids are distinct");
        provider.assert_no_violations();
    }
}

#[tokio::test]
async fn thinking_streams_before_the_text_and_a_signature_goes_back_unchanged() {
    for provider in providers().await {
        let name = provider.name;
        provider.push(Reply::Thinking {
            thinking: "Greet back.".into(),
            signature: "sig-conformance".into(),
            text: "Hi!".into(),
        });
        provider.push(Reply::Text("Bye.".into()));
        let mut request = provider.request(vec![Message::user("Hello")]);

        let (deltas, response) = run(&provider.client, request.clone()).await;

        let first_text = deltas
            .iter()
            .position(|delta| matches!(delta, StreamEvent::TextDelta(_)));
        let last_thinking = deltas
            .iter()
            .rposition(|delta| matches!(delta, StreamEvent::ThinkingDelta(_)));
        assert!(
            matches!((last_thinking, first_text), (Some(t), Some(x)) if t < x),
            "{name}: thinking first, then text: {deltas:?}"
        );
        let response = response.unwrap();
        let [
            ContentBlock::Thinking {
                thinking,
                signature,
            },
            ContentBlock::Text { text },
        ] = response.message.content.as_slice()
        else {
            panic!("{name}: thinking then text: {:?}", response.message);
        };
        assert_eq!((thinking.as_str(), text.as_str()), ("Greet back.", "Hi!"));
        // Chat Completions has no place for a signature; the others must
        // keep it, or the provider rejects the next call.
        let signed = provider.wire != Wire::ChatCompletions;
        assert_eq!(
            signature.as_deref(),
            signed.then_some("sig-conformance"),
            "{name}"
        );

        request.messages.to_mut().push(response.message);
        request.messages.to_mut().push(Message::user("Bye"));
        let (_, second) = run(&provider.client, request).await;
        assert_eq!(
            second.map(|r| r.message),
            Ok(Message::assistant("Bye.")),
            "{name}"
        );
        if signed {
            let sent = provider.requests()[1].body.to_string();
            assert!(
                sent.contains("sig-conformance") && sent.contains("Greet back."),
                "{name}: the thinking goes back with its signature: {sent}"
            );
        }
        provider.assert_no_violations();
    }
}

#[tokio::test]
async fn an_image_goes_out_and_the_answer_comes_back() {
    // A 1×1 transparent PNG.
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";
    for provider in providers().await {
        let name = provider.name;
        provider.push(Reply::Text("A dot.".into()));
        let message = Message {
            role: Role::User,
            content: vec![
                ContentBlock::Image {
                    source: ImageSource::Base64 {
                        media_type: "image/png".into(),
                        data: PNG.into(),
                    },
                },
                ContentBlock::text("What is this?"),
            ],
        };

        let (_, response) = run(&provider.client, provider.request(vec![message])).await;

        assert_eq!(
            response.map(|r| r.message),
            Ok(Message::assistant("A dot.")),
            "{name}"
        );
        // Every wire carries the bytes as base64 (Converse's JSON encoding
        // of its byte blob included).
        let sent = provider.requests()[0].body.to_string();
        assert!(sent.contains(PNG), "{name}: {sent}");
        provider.assert_no_violations();
    }
}

#[tokio::test]
async fn each_kind_of_failure_is_the_same_typed_error_with_the_same_retry_advice() {
    for provider in providers().await {
        let name = provider.name;
        for failure_kind in [
            Failure::RateLimited,
            Failure::Overloaded,
            Failure::ServerError,
            Failure::ContextOverflow,
        ] {
            let (reply, said) = provider.failing_reply(failure_kind);
            provider.push(reply);
            let before = provider.requests().len();

            let error = failure(
                &provider.client,
                provider.request(vec![Message::user("Hi")]),
            )
            .await;

            assert_eq!(
                provider.requests().len(),
                before + 1,
                "{name}: {failure_kind:?}: the client itself never retries"
            );
            let carried = match (&error, failure_kind) {
                (
                    Error::RateLimited {
                        message,
                        retry_after,
                        ..
                    },
                    Failure::RateLimited,
                ) => {
                    if provider.kind != ProviderKind::Bedrock {
                        assert_eq!(*retry_after, Some(Duration::from_secs(7)), "{name}");
                    }
                    message
                }
                (Error::Overloaded { message, .. }, Failure::Overloaded)
                | (Error::Server { message, .. }, Failure::ServerError)
                | (Error::ContextOverflow { message, .. }, Failure::ContextOverflow) => message,
                _ => panic!("{name}: {failure_kind:?} became {error:?}"),
            };
            assert_eq!(carried, said, "{name}: the vendor's message is kept");
            assert!(
                error.to_string().starts_with(&format!("{name}: ")),
                "{name}: the error names the provider: {error}"
            );
            let retryable = !matches!(failure_kind, Failure::ContextOverflow);
            assert_eq!(error.is_retryable(), retryable, "{name}: {error:?}");
        }
        provider.assert_no_violations();
    }
}

#[tokio::test]
async fn a_wrong_key_is_an_auth_error_that_says_where_the_key_comes_from() {
    for provider in providers().await {
        let name = provider.name;
        let Some(stranger) = provider.with_wrong_key() else {
            continue;
        };
        let error = failure(&stranger, provider.request(vec![Message::user("Hi")])).await;
        let Error::Auth { status, env, .. } = &error else {
            panic!("{name}: {error:?}");
        };
        assert!(matches!(status, 401 | 403), "{name}: {status}");
        assert!(env.is_some(), "{name}: names the key's variable: {error:?}");
        assert!(!error.is_retryable(), "{name}");
        provider.assert_no_violations();
    }
}

/// Runs a call whose answer says "Hello" and then breaks; checks that the
/// deltas before the break are delivered and returns the error.
async fn broken_after_hello(provider: &Provider) -> Error {
    let (deltas, response) = run(
        &provider.client,
        provider.request(vec![Message::user("Hi")]),
    )
    .await;
    assert!(
        text_of(&deltas).starts_with("Hello"),
        "{}: the deltas before the break are delivered: {deltas:?}",
        provider.name
    );
    let error = response.unwrap_err();
    assert!(error.is_retryable(), "{}: {error:?}", provider.name);
    error
}

#[tokio::test]
async fn an_answer_cut_off_is_a_retryable_stream_error_after_its_deltas() {
    for provider in providers().await {
        provider.cut_off();
        let error = broken_after_hello(&provider).await;
        assert!(
            matches!(error, Error::Stream { .. }),
            "{}: {error:?}",
            provider.name
        );
    }
}

#[tokio::test]
async fn an_error_inside_the_stream_ends_it_after_its_deltas_with_the_vendors_message() {
    for provider in providers().await {
        provider.error_mid_stream();
        let error = broken_after_hello(&provider).await;
        // The kind may differ (Anthropic's in-stream `api_error` is its
        // HTTP 500, a server error; the others report a stream error), but
        // the message and the retry advice are the same.
        assert!(
            matches!(&error, Error::Stream { message, .. } | Error::Server { message, .. } if message == "upstream connection lost"),
            "{}: {error:?}",
            provider.name
        );
    }
}

/// reqwest drops `Authorization` on a cross-host redirect but not every
/// header that carries a key: no provider follows one.
#[tokio::test]
async fn a_redirect_is_refused_and_names_where_it_pointed() {
    for provider in providers().await {
        let name = provider.name;
        for status in [301, 307] {
            let Some((redirect, client)) = provider.behind_redirect(status) else {
                continue;
            };
            let error = failure(&client, provider.request(vec![Message::user("Hi")])).await;
            assert!(
                matches!(&error, Error::Redirect { status: s, .. } if *s == status),
                "{name}: {error:?}"
            );
            assert!(error.is_config() && !error.is_retryable(), "{name}");
            assert_eq!(redirect.requests().len(), 1, "{name}");
        }
        assert_eq!(
            provider.requests(),
            Vec::new(),
            "{name}: nothing reached the target"
        );
    }
}

#[tokio::test]
async fn nothing_listening_is_a_retryable_connect_error_naming_the_address() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{addr}");
    for provider in providers().await {
        let name = provider.name;
        let kind = provider.kind;
        let nowhere: Arc<dyn ModelClient> = match provider.wire {
            #[cfg(feature = "bedrock")]
            Wire::Converse => {
                let mut config = flynn_protocol::config::ProviderConfig::new(kind);
                config.base_url = Some(url.clone());
                config.region = Some("us-east-1".into());
                flynn_models::build_bedrock_client(
                    name,
                    &config,
                    bedrock::credentials(bedrock::ACCESS_KEY),
                )
                .unwrap()
            }
            _ => client(name, &config(kind, &url, Some(KEY))),
        };
        let error = failure(&nowhere, provider.request(vec![Message::user("Hi")])).await;
        assert!(
            matches!(&error, Error::Connect { url: to, .. } if to.starts_with(&url)),
            "{name}: {error:?}"
        );
        assert!(error.is_retryable(), "{name}");
    }
}

/// Usage is what the runtime bills and budgets from: the same counts for
/// a tool call as for text.
#[tokio::test]
async fn a_tool_call_reports_its_usage_like_text_does() {
    for provider in providers().await {
        let name = provider.name;
        provider.push(Reply::ToolCalls(vec![(
            "shell_exec".into(),
            json!({"command": "true"}),
        )]));
        let mut request = provider.request(vec![Message::user("Run true")]);
        request.tools = vec![shell_tool()].into();

        let (_, response) = run(&provider.client, request).await;

        let usage = response.unwrap().usage;
        assert_eq!(
            Usage {
                input_tokens: usage.input_tokens,
                output_tokens: usage.output_tokens,
                ..Usage::default()
            },
            Usage {
                input_tokens: INPUT_TOKENS,
                output_tokens: OUTPUT_TOKENS,
                ..Usage::default()
            },
            "{name}"
        );
    }
}
