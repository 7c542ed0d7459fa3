//! The Anthropic Messages API on the wire: the request body, and the
//! streamed events (`message_start`, `content_block_*`, `message_delta`,
//! `message_stop`, `ping`, `error`) assembled back into a response.

use std::collections::BTreeMap;

use eventsource_stream::Event;
use flynn_protocol::{ContentBlock, ImageSource, Message, Role, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::http::{Assembler, Fed, VendorError, event_json, quote};
use crate::{Error, ModelRequest, ModelResponse, Result, StopReason, StreamEvent, ToolNameMap};

/// Anthropic reports a prompt over the context window as an
/// `invalid_request_error` whose documented message starts "prompt is too
/// long". The error has no dedicated type or code, so this is the one place
/// the message text decides.
pub(crate) fn is_context_overflow(status: u16, error: &VendorError) -> bool {
    status == 400
        && error.kind.as_deref() == Some("invalid_request_error")
        && error.message.starts_with("prompt is too long")
}

// ---------------------------------------------------------------------------
// Request

#[derive(Debug, Serialize)]
pub(crate) struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    /// One text block, so that it can carry a cache breakpoint.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    system: Vec<SystemBlock<'a>>,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    stream: bool,
}

/// A prompt-cache breakpoint: everything up to and including the block
/// that carries it is cached for five minutes ("Prompt caching").
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum CacheControl {
    Ephemeral,
}

#[derive(Debug, Serialize)]
struct SystemBlock<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: Vec<CachedBlock<'a>>,
}

/// A content block, with the breakpoint it may carry.
#[derive(Debug, Serialize)]
struct CachedBlock<'a> {
    #[serde(flatten)]
    block: WireBlock<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text {
        text: &'a str,
    },
    Image {
        source: WireImageSource<'a>,
    },
    ToolUse {
        id: &'a str,
        name: String,
        input: &'a Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: &'a str,
        is_error: bool,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireImageSource<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_control: Option<CacheControl>,
}

/// The request body for one call, borrowing from the request and the
/// names instead of copying them.
///
/// Three prompt-cache breakpoints are set, of the four the API allows: on
/// the last tool (the tool list rarely changes), on the system prompt (tools
/// and system together), and on the last block of the last message, so that
/// each call of an agent loop reads the conversation so far from the cache
/// and writes only what is new ("Prompt caching": "Large context caching"
/// and "Multi-turn conversation"). Prompts shorter than the model's minimum
/// cacheable length are simply not cached; nothing fails.
pub(crate) fn request_body<'a>(
    request: &'a ModelRequest<'_>,
    names: &'a ToolNameMap,
) -> MessagesRequest<'a> {
    let mut messages: Vec<WireMessage<'a>> = request
        .messages
        .iter()
        .filter_map(|message| {
            let content: Vec<CachedBlock<'a>> = message
                .content
                .iter()
                .filter_map(|block| wire_block(block, names))
                .map(|block| CachedBlock {
                    block,
                    cache_control: None,
                })
                .collect();
            // The API refuses messages with no content.
            (!content.is_empty()).then(|| WireMessage {
                role: message.role.as_str(),
                content,
            })
        })
        .collect();
    // Thinking blocks cannot carry a breakpoint themselves.
    if let Some(last) = messages
        .last_mut()
        .and_then(|message| message.content.last_mut())
        .filter(|last| {
            !matches!(
                last.block,
                WireBlock::Thinking { .. } | WireBlock::RedactedThinking { .. }
            )
        })
    {
        last.cache_control = Some(CacheControl::Ephemeral);
    }
    let mut tools: Vec<WireTool<'a>> = request
        .tools
        .iter()
        .map(|tool| WireTool {
            name: names.to_wire(&tool.name),
            description: &tool.description,
            input_schema: &tool.input_schema,
            cache_control: None,
        })
        .collect();
    if let Some(last) = tools.last_mut() {
        last.cache_control = Some(CacheControl::Ephemeral);
    }
    MessagesRequest {
        model: &request.model,
        max_tokens: request.max_tokens,
        system: request
            .system
            .as_deref()
            .into_iter()
            .filter(|system| !system.is_empty())
            .map(|system| SystemBlock {
                kind: "text",
                text: system,
                cache_control: Some(CacheControl::Ephemeral),
            })
            .collect(),
        messages,
        tools,
        temperature: request.temperature,
        stream: true,
    }
}

fn wire_block<'a>(block: &'a ContentBlock, names: &ToolNameMap) -> Option<WireBlock<'a>> {
    Some(match block {
        // The API refuses empty text blocks.
        ContentBlock::Text { text } if text.is_empty() => return None,
        ContentBlock::Text { text } => WireBlock::Text { text },
        ContentBlock::Image { source } => WireBlock::Image {
            source: match source {
                ImageSource::Base64 { media_type, data } => {
                    WireImageSource::Base64 { media_type, data }
                }
                ImageSource::Url { url } => WireImageSource::Url { url },
            },
        },
        ContentBlock::ToolUse { id, name, input } => WireBlock::ToolUse {
            id,
            name: names.to_wire_or_sanitised(name),
            input,
        },
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => WireBlock::ToolResult {
            tool_use_id,
            content,
            is_error: *is_error,
        },
        // Thinking goes back unchanged, with its signature; thinking from a
        // provider that does not sign it (an OpenAI-compatible reasoning
        // model) would be refused, so it stays behind.
        ContentBlock::Thinking {
            thinking,
            signature: Some(signature),
        } => WireBlock::Thinking {
            thinking,
            signature,
        },
        ContentBlock::Thinking {
            signature: None, ..
        } => return None,
        ContentBlock::RedactedThinking { data } => WireBlock::RedactedThinking { data },
    })
}

// ---------------------------------------------------------------------------
// Response

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StartedMessage {
    model: Option<String>,
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        message: StartedMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: Value,
    },
    ContentBlockDelta {
        index: usize,
        delta: Value,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: Value,
    },
    /// New event types may appear at any time; they are ignored.
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct MessageDeltaBody {
    stop_reason: Option<String>,
}

/// A content block as it streams in.
#[derive(Debug)]
enum Partial {
    Text(String),
    ToolUse {
        id: String,
        wire_name: String,
        json: String,
        input: Option<Value>,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
    RedactedThinking(String),
    /// A block type this client does not know; its deltas are skipped.
    Skipped,
}

/// Assembles a Messages stream.
#[derive(Debug)]
pub(crate) struct MessagesAssembler {
    provider: String,
    names: ToolNameMap,
    model: Option<String>,
    fallback_model: String,
    blocks: BTreeMap<usize, Partial>,
    stop_reason: Option<String>,
    usage: Usage,
    started: bool,
}

impl MessagesAssembler {
    pub fn new(provider: &str, request_model: &str, names: ToolNameMap) -> Self {
        MessagesAssembler {
            provider: provider.to_owned(),
            names,
            model: None,
            fallback_model: request_model.to_owned(),
            blocks: BTreeMap::new(),
            stop_reason: None,
            usage: Usage::default(),
            started: false,
        }
    }

    fn protocol(&self, message: String) -> Error {
        Error::Protocol {
            provider: self.provider.clone(),
            message,
        }
    }

    fn read_usage(&mut self, usage: WireUsage) {
        // Counts in `message_delta` are cumulative: each replaces the last.
        if let Some(n) = usage.input_tokens {
            self.usage.input_tokens = n;
        }
        if let Some(n) = usage.output_tokens {
            self.usage.output_tokens = n;
        }
        if let Some(n) = usage.cache_read_input_tokens {
            self.usage.cache_read_tokens = n;
        }
        if let Some(n) = usage.cache_creation_input_tokens {
            self.usage.cache_write_tokens = n;
        }
    }

    fn start_block(
        &mut self,
        index: usize,
        block: &Value,
        out: &mut Vec<StreamEvent>,
    ) -> Result<()> {
        let text = |field: &str| block.get(field).and_then(Value::as_str).unwrap_or("");
        let partial = match text("type") {
            "text" => {
                let initial = text("text").to_owned();
                if !initial.is_empty() {
                    out.push(StreamEvent::TextDelta(initial.clone()));
                }
                Partial::Text(initial)
            }
            "tool_use" => {
                let id = text("id").to_owned();
                let wire_name = text("name").to_owned();
                if id.is_empty() || wire_name.is_empty() {
                    return Err(self.protocol(format!(
                        "content block {index} is a tool_use without an id or a name"
                    )));
                }
                out.push(StreamEvent::ToolUseStart {
                    id: id.clone(),
                    name: self.names.from_wire(&wire_name).to_owned(),
                });
                // `input` starts as `{}` and the real input streams as JSON
                // text; a non-empty start is kept in case nothing streams.
                let input = block
                    .get("input")
                    .filter(|input| input.as_object().is_some_and(|map| !map.is_empty()))
                    .cloned();
                Partial::ToolUse {
                    id,
                    wire_name,
                    json: String::new(),
                    input,
                }
            }
            "thinking" => {
                let initial = text("thinking").to_owned();
                if !initial.is_empty() {
                    out.push(StreamEvent::ThinkingDelta(initial.clone()));
                }
                Partial::Thinking {
                    thinking: initial,
                    signature: text("signature").to_owned(),
                }
            }
            "redacted_thinking" => Partial::RedactedThinking(text("data").to_owned()),
            _ => Partial::Skipped,
        };
        self.blocks.insert(index, partial);
        Ok(())
    }

    fn delta(&mut self, index: usize, delta: &Value, out: &mut Vec<StreamEvent>) -> Result<()> {
        let Some(block) = self.blocks.get_mut(&index) else {
            return Err(Error::Protocol {
                provider: self.provider.clone(),
                message: format!("content_block_delta for block {index}, which never started"),
            });
        };
        let text = |field: &str| delta.get(field).and_then(Value::as_str).unwrap_or("");
        match (block, text("type")) {
            (Partial::Text(buffer), "text_delta") => {
                let piece = text("text");
                if !piece.is_empty() {
                    buffer.push_str(piece);
                    out.push(StreamEvent::TextDelta(piece.to_owned()));
                }
            }
            (Partial::ToolUse { json, .. }, "input_json_delta") => {
                json.push_str(text("partial_json"))
            }
            (Partial::Thinking { thinking, .. }, "thinking_delta") => {
                let piece = text("thinking");
                if !piece.is_empty() {
                    thinking.push_str(piece);
                    out.push(StreamEvent::ThinkingDelta(piece.to_owned()));
                }
            }
            (Partial::Thinking { signature, .. }, "signature_delta") => {
                signature.push_str(text("signature"));
            }
            // Unknown blocks, and delta types added later (citations...).
            _ => {}
        }
        Ok(())
    }

    fn stop_block(&mut self, index: usize) -> Result<()> {
        let Some(Partial::ToolUse {
            id,
            wire_name,
            json,
            input,
        }) = self.blocks.get_mut(&index)
        else {
            return Ok(());
        };
        if json.trim().is_empty() {
            input.get_or_insert_with(|| Value::Object(serde_json::Map::new()));
            return Ok(());
        }
        match serde_json::from_str(json) {
            Ok(value) => {
                *input = Some(value);
                Ok(())
            }
            Err(error) => {
                let message = format!(
                    "the input of tool call '{}' ({id}) is not valid JSON ({error}): {}",
                    self.names.from_wire(wire_name),
                    quote(json)
                );
                Err(self.protocol(message))
            }
        }
    }

    /// The error an `event: error` stands for, by its documented type.
    fn stream_error(&self, error: &Value) -> Error {
        let parsed =
            VendorError::from_value(&serde_json::json!({ "error": error })).unwrap_or_default();
        let provider = self.provider.clone();
        let message = parsed.message.clone();
        match parsed.kind.as_deref() {
            Some("overloaded_error") => Error::Overloaded {
                provider,
                status: 529,
                retry_after: None,
                message,
            },
            Some("rate_limit_error") => Error::RateLimited {
                provider,
                retry_after: None,
                message,
            },
            Some("api_error") => Error::Server {
                provider,
                status: 500,
                message,
            },
            Some("authentication_error") => Error::Auth {
                provider,
                status: 401,
                message,
                env: Some("ANTHROPIC_API_KEY"),
            },
            Some("permission_error") => Error::Auth {
                provider,
                status: 403,
                message,
                env: Some("ANTHROPIC_API_KEY"),
            },
            Some("invalid_request_error") if is_context_overflow(400, &parsed) => {
                Error::ContextOverflow { provider, message }
            }
            Some("invalid_request_error") => Error::InvalidRequest {
                provider,
                status: 400,
                message,
            },
            Some("not_found_error") => Error::InvalidRequest {
                provider,
                status: 404,
                message,
            },
            Some("request_too_large") => Error::InvalidRequest {
                provider,
                status: 413,
                message,
            },
            Some(other) => Error::Stream {
                provider,
                message: format!("{other}: {message}"),
            },
            None => Error::Stream {
                provider,
                message: format!("error event: {}", quote(&error.to_string())),
            },
        }
    }
}

impl Assembler for MessagesAssembler {
    fn feed(&mut self, event: &Event, out: &mut Vec<StreamEvent>) -> Result<Fed> {
        // Straight from the text in the common case; parsed again the slow
        // way only to say what is wrong with an event.
        let parsed: WireEvent = match serde_json::from_str(&event.data) {
            Ok(parsed) => parsed,
            Err(_) => {
                let value = event_json(&self.provider, event)?;
                serde_json::from_value(value).map_err(|error| {
                    self.protocol(format!(
                        "event '{}' has an unexpected shape ({error}): {}",
                        event.event,
                        quote(&event.data)
                    ))
                })?
            }
        };
        match parsed {
            WireEvent::MessageStart { message } => {
                self.started = true;
                if let Some(model) = message.model.filter(|model| !model.is_empty()) {
                    self.model = Some(model);
                }
                if let Some(usage) = message.usage {
                    self.read_usage(usage);
                }
            }
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => self.start_block(index, &content_block, out)?,
            WireEvent::ContentBlockDelta { index, delta } => self.delta(index, &delta, out)?,
            WireEvent::ContentBlockStop { index } => self.stop_block(index)?,
            WireEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.stop_reason {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = usage {
                    self.read_usage(usage);
                }
            }
            WireEvent::MessageStop => return Ok(Fed::Done),
            WireEvent::Ping | WireEvent::Unknown => {}
            WireEvent::Error { error } => return Err(self.stream_error(&error)),
        }
        Ok(Fed::More)
    }

    fn finish(&mut self, marked: bool) -> Result<ModelResponse> {
        if !marked {
            let message = if self.started {
                "the stream ended before message_stop: the answer was cut off"
            } else {
                "the stream ended before message_start"
            };
            return Err(Error::Stream {
                provider: self.provider.clone(),
                message: message.to_owned(),
            });
        }
        let mut content = Vec::new();
        for (index, block) in std::mem::take(&mut self.blocks) {
            match block {
                Partial::Text(text) if text.is_empty() => {}
                Partial::Text(text) => content.push(ContentBlock::Text { text }),
                Partial::ToolUse {
                    id,
                    wire_name,
                    input,
                    ..
                } => {
                    let Some(input) = input else {
                        return Err(self.protocol(format!(
                            "tool call '{wire_name}' (block {index}) never finished (no content_block_stop)"
                        )));
                    };
                    content.push(ContentBlock::ToolUse {
                        id,
                        name: self.names.from_wire(&wire_name).to_owned(),
                        input,
                    });
                }
                Partial::Thinking {
                    thinking,
                    signature,
                } => content.push(ContentBlock::Thinking {
                    thinking,
                    signature: (!signature.is_empty()).then_some(signature),
                }),
                Partial::RedactedThinking(data) => {
                    content.push(ContentBlock::RedactedThinking { data });
                }
                Partial::Skipped => {}
            }
        }
        let has_calls = content
            .iter()
            .any(|block| matches!(block, ContentBlock::ToolUse { .. }));
        let stop_reason = match self.stop_reason.as_deref() {
            Some("end_turn") => StopReason::EndTurn,
            Some("tool_use") => StopReason::ToolUse,
            Some("max_tokens") => StopReason::MaxTokens,
            Some("stop_sequence") => StopReason::StopSequence,
            Some("refusal") => StopReason::Refusal,
            Some(other) => StopReason::Other(other.to_owned()),
            None if has_calls => StopReason::ToolUse,
            None => StopReason::EndTurn,
        };
        Ok(ModelResponse {
            message: Message {
                role: Role::Assistant,
                content,
            },
            stop_reason,
            usage: self.usage,
            model: self
                .model
                .clone()
                .unwrap_or_else(|| self.fallback_model.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use flynn_protocol::ToolSpec;
    use serde_json::json;

    use super::*;

    fn body(request: &ModelRequest) -> Value {
        let names = ToolNameMap::new(&request.tools);
        serde_json::to_value(request_body(request, &names)).unwrap_or_default()
    }

    #[test]
    fn serialises_a_whole_conversation() {
        let request = ModelRequest {
            model: "claude-sonnet-4-5".into(),
            system: Some("Be brief.".into()),
            messages: Cow::Owned(vec![
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::text("What is in this picture?"),
                        ContentBlock::Image {
                            source: ImageSource::Base64 {
                                media_type: "image/png".into(),
                                data: "iVBORw0KGgo=".into(),
                            },
                        },
                        ContentBlock::Image {
                            source: ImageSource::Url {
                                url: "https://example.com/a.png".into(),
                            },
                        },
                    ],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::Thinking {
                            thinking: "Let me look.".into(),
                            signature: Some("EqQBCgIYAhIM".into()),
                        },
                        ContentBlock::Thinking {
                            thinking: "unsigned".into(),
                            signature: None,
                        },
                        ContentBlock::RedactedThinking {
                            data: "EmwKAhgBEgy3va3p".into(),
                        },
                        ContentBlock::text(""),
                        ContentBlock::ToolUse {
                            id: "toolu_01".into(),
                            name: "shell.exec".into(),
                            input: json!({"command": "ls"}),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![ContentBlock::ToolResult {
                        tool_use_id: "toolu_01".into(),
                        content: "no such file".into(),
                        is_error: true,
                    }],
                },
            ]),
            tools: Cow::Owned(vec![ToolSpec {
                name: "shell.exec".into(),
                description: "Run a command".into(),
                input_schema: json!({"type": "object"}).into(),
            }]),
            max_tokens: 1024,
            temperature: None,
        };
        assert_eq!(
            body(&request),
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 1024,
                "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
                "messages": [
                    {"role": "user", "content": [
                        {"type": "text", "text": "What is in this picture?"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
                    ]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "Let me look.", "signature": "EqQBCgIYAhIM"},
                        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3p"},
                        {"type": "tool_use", "id": "toolu_01", "name": "shell_exec", "input": {"command": "ls"}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "no such file", "is_error": true,
                         "cache_control": {"type": "ephemeral"}}
                    ]}
                ],
                "tools": [{"name": "shell_exec", "description": "Run a command", "input_schema": {"type": "object"},
                           "cache_control": {"type": "ephemeral"}}],
                "stream": true
            })
        );
    }

    /// Anthropic takes other content after a message's tool results: the
    /// images a tool attached follow them in the same user message.
    #[test]
    fn images_follow_the_tool_results_in_the_same_message() {
        let request = ModelRequest::new(
            "claude-sonnet-4-5",
            vec![
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::ToolUse {
                        id: "toolu_01".into(),
                        name: "browser.screenshot".into(),
                        input: json!({}),
                    }],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::ToolResult {
                            tool_use_id: "toolu_01".into(),
                            content: "Saved a screenshot.".into(),
                            is_error: false,
                        },
                        ContentBlock::Image {
                            source: ImageSource::Base64 {
                                media_type: "image/png".into(),
                                data: "AAAA".into(),
                            },
                        },
                    ],
                },
            ],
        );
        assert_eq!(
            body(&request)["messages"],
            json!([
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_01", "name": "browser_screenshot", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": "Saved a screenshot.", "is_error": false},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                     "cache_control": {"type": "ephemeral"}}
                ]}
            ])
        );
    }

    #[test]
    fn omits_what_is_not_set() {
        let request = ModelRequest::new("claude-haiku-4-5", vec![Message::user("Hello")]);
        assert_eq!(
            body(&request),
            json!({
                "model": "claude-haiku-4-5",
                "max_tokens": 4096,
                "messages": [{"role": "user", "content": [
                    {"type": "text", "text": "Hello", "cache_control": {"type": "ephemeral"}}
                ]}],
                "stream": true
            })
        );
    }

    #[test]
    fn only_the_last_tool_carries_a_breakpoint_and_thinking_never_does() {
        let tool = |name: &str| ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}).into(),
        };
        let mut request = ModelRequest::new(
            "claude-sonnet-4-5",
            vec![
                Message::user("Think first."),
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::Thinking {
                        thinking: "Prefilled.".into(),
                        signature: Some("sig".into()),
                    }],
                },
            ],
        );
        request.tools = vec![tool("a"), tool("b")].into();
        let body = body(&request);
        assert_eq!(
            (&body["tools"], &body["messages"], body.get("system")),
            (
                &json!([
                    {"name": "a", "description": "", "input_schema": {"type": "object"}},
                    {"name": "b", "description": "", "input_schema": {"type": "object"},
                     "cache_control": {"type": "ephemeral"}}
                ]),
                &json!([
                    {"role": "user", "content": [{"type": "text", "text": "Think first."}]},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "Prefilled.", "signature": "sig"}
                    ]}
                ]),
                None
            )
        );
    }

    /// Feeds a recorded SSE body through a real SSE parser.
    fn assemble(sse: &str, names: ToolNameMap) -> (Vec<StreamEvent>, Result<ModelResponse>) {
        use eventsource_stream::Eventsource;
        use futures::StreamExt;

        let chunks = futures::stream::iter([Ok::<_, std::convert::Infallible>(sse.to_owned())]);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let events: Vec<Event> = runtime.block_on(
            chunks
                .eventsource()
                .filter_map(|event| async move { event.ok() })
                .collect(),
        );
        let mut assembler = MessagesAssembler::new("anthropic", "requested", names);
        let mut out = Vec::new();
        for event in &events {
            match assembler.feed(event, &mut out) {
                Ok(Fed::More) => {}
                Ok(Fed::Done) => return (out, assembler.finish(true)),
                Err(error) => return (out, Err(error)),
            }
        }
        let finished = assembler.finish(false);
        (out, finished)
    }

    #[test]
    fn assembles_the_documented_text_stream() {
        let (deltas, response) = assemble(
            flynn_testkit::fixtures::ANTHROPIC_STREAMING_TEXT,
            ToolNameMap::default(),
        );
        assert_eq!(
            deltas,
            vec![
                StreamEvent::TextDelta("Hello".into()),
                StreamEvent::TextDelta("!".into()),
            ]
        );
        assert_eq!(
            response,
            Ok(ModelResponse {
                message: Message::assistant("Hello!"),
                stop_reason: StopReason::EndTurn,
                usage: Usage {
                    input_tokens: 25,
                    output_tokens: 15,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                },
                model: "claude-opus-4-6".into(),
            })
        );
    }

    #[test]
    fn assembles_the_documented_tool_use_stream() {
        let names = ToolNameMap::new(&[ToolSpec {
            name: "weather.get".into(),
            description: String::new(),
            input_schema: json!({}).into(),
        }]);
        let (deltas, response) = assemble(
            &flynn_testkit::fixtures::ANTHROPIC_STREAMING_TOOL_USE
                .replace("\"get_weather\"", "\"weather_get\""),
            names,
        );
        assert_eq!(
            deltas.last(),
            Some(&StreamEvent::ToolUseStart {
                id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                name: "weather.get".into(),
            })
        );
        assert_eq!(
            response,
            Ok(ModelResponse {
                message: Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::text("Okay, let's check the weather for San Francisco, CA:"),
                        ContentBlock::ToolUse {
                            id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                            name: "weather.get".into(),
                            input: json!({"location": "San Francisco, CA", "unit": "fahrenheit"}),
                        },
                    ],
                },
                stop_reason: StopReason::ToolUse,
                usage: Usage {
                    input_tokens: 472,
                    output_tokens: 89,
                    cache_read_tokens: 0,
                    cache_write_tokens: 0,
                },
                model: "claude-opus-4-6".into(),
            })
        );
    }

    #[test]
    fn assembles_the_documented_thinking_stream_with_its_signature() {
        let (deltas, response) = assemble(
            flynn_testkit::fixtures::ANTHROPIC_STREAMING_THINKING,
            ToolNameMap::default(),
        );
        assert_eq!(deltas.len(), 5);
        assert_eq!(
            response.map(|r| r.message.content),
            Ok(vec![
                ContentBlock::Thinking {
                    thinking: "I need to find the GCD of 1071 and 462 using the Euclidean algorithm.\n\n1071 = 2 × 462 + 147\n462 = 3 × 147 + 21\n147 = 7 × 21 + 0\nThe remainder is 0, so GCD(1071, 462) = 21.".into(),
                    signature: Some("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds...".into()),
                },
                ContentBlock::text("The greatest common divisor of 1071 and 462 is **21**."),
            ])
        );
    }

    #[test]
    fn the_documented_error_event_is_overloaded() {
        let sse = format!(
            "{}{}",
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
            flynn_testkit::fixtures::ANTHROPIC_ERROR_EVENT
        );
        let (_, response) = assemble(&sse, ToolNameMap::default());
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

    #[test]
    fn unknown_blocks_and_events_are_skipped() {
        let sse = r#"event: message_start
data: {"type":"message_start","message":{"model":"m","usage":{"input_tokens":3,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"query\""}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: something_new
data: {"type":"something_new"}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Sunny."}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"pause_turn","stop_sequence":null},"usage":{"output_tokens":7}}

event: message_stop
data: {"type":"message_stop"}

"#;
        let (deltas, response) = assemble(sse, ToolNameMap::default());
        assert_eq!(deltas, vec![StreamEvent::TextDelta("Sunny.".into())]);
        assert_eq!(
            response.map(|r| (r.message, r.stop_reason)),
            Ok((
                Message::assistant("Sunny."),
                StopReason::Other("pause_turn".into())
            ))
        );
    }

    #[test]
    fn a_stream_without_message_stop_was_cut_off() {
        let cut = flynn_testkit::fixtures::ANTHROPIC_STREAMING_TEXT
            .split("event: message_delta")
            .next()
            .unwrap_or_default();
        let (_, response) = assemble(cut, ToolNameMap::default());
        assert_eq!(
            response,
            Err(Error::Stream {
                provider: "anthropic".into(),
                message: "the stream ended before message_stop: the answer was cut off".into(),
            })
        );
    }

    #[test]
    fn bad_tool_input_names_the_tool() {
        let sse = r#"event: message_start
data: {"type":"message_start","message":{"model":"m"}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_9","name":"shell_exec","input":{}}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"command\": "}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

"#;
        let names = ToolNameMap::new(&[ToolSpec {
            name: "shell.exec".into(),
            description: String::new(),
            input_schema: json!({}).into(),
        }]);
        let (_, response) = assemble(sse, names);
        assert_eq!(
            response,
            Err(Error::Protocol {
                provider: "anthropic".into(),
                message: "the input of tool call 'shell.exec' (toolu_9) is not valid JSON (EOF while parsing a value at line 1 column 12): {\"command\":".into(),
            })
        );
    }

    #[test]
    fn context_overflow_needs_the_documented_type_and_message() {
        let overflow = VendorError::parse(
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
        );
        assert!(is_context_overflow(400, &overflow));
        let other = VendorError::parse(
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}"#,
        );
        assert!(!is_context_overflow(400, &other));
    }
}
