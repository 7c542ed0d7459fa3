//! OpenAI Chat Completions on the wire: the request body, and the streamed
//! `chat.completion.chunk` events assembled back into a response.
//!
//! The response types are deliberately lenient: the same shapes come from
//! OpenAI, Ollama, vLLM, llama.cpp, LM Studio, OpenRouter and Gemini, and
//! they disagree on which fields may be missing or null.

use std::borrow::Cow;
use std::collections::BTreeMap;

use eventsource_stream::Event;
use flynn_protocol::config::ProviderKind;
use flynn_protocol::{ContentBlock, ImageSource, Message, Role, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::http::{Assembler, Fed, VendorError, event_json};
use crate::preset::{MaxTokensField, preset};
use crate::{Error, ModelRequest, ModelResponse, Result, StopReason, StreamEvent, ToolNameMap};

/// Whether an error says the prompt does not fit the context window, by
/// the documented codes: `context_length_exceeded` (OpenAI, Groq),
/// `tokens_limit_reached` (GitHub Models' per-request limit) and llama.cpp's
/// `exceed_context_size_error` type.
pub(crate) fn is_context_overflow(_status: u16, error: &VendorError) -> bool {
    matches!(
        error.code.as_deref(),
        Some("context_length_exceeded" | "tokens_limit_reached")
    ) || error.kind.as_deref() == Some("exceed_context_size_error")
}

// ---------------------------------------------------------------------------
// Request

#[derive(Debug, Serialize)]
pub(crate) struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<ChatMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<ChatTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Debug, Serialize)]
#[serde(tag = "role", rename_all = "snake_case")]
enum ChatMessage<'a> {
    System {
        content: &'a str,
    },
    User {
        content: UserContent<'a>,
    },
    Assistant {
        /// `null` when the message is only tool calls, as the API documents.
        content: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<WireToolCall<'a>>,
    },
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum UserContent<'a> {
    Text(&'a str),
    Parts(Vec<UserPart<'a>>),
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum UserPart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: ImageUrl<'a> },
}

#[derive(Debug, Serialize)]
struct ImageUrl<'a> {
    url: Cow<'a, str>,
}

#[derive(Debug, Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall,
}

#[derive(Debug, Serialize)]
struct WireFunctionCall {
    name: String,
    /// The arguments as a JSON-encoded string, as the API wants them.
    arguments: String,
}

#[derive(Debug, Serialize)]
struct ChatTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ChatFunction<'a>,
}

#[derive(Debug, Serialize)]
struct ChatFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// The request body for one call, shaped by the kind's [`Preset`]; it
/// borrows from the request and the names instead of copying them.
/// Thinking blocks are not sent: Chat Completions has no field for them.
pub(crate) fn request_body<'a>(
    kind: ProviderKind,
    request: &'a ModelRequest<'_>,
    names: &'a ToolNameMap,
) -> ChatRequest<'a> {
    let preset = preset(kind);
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(ChatMessage::System { content: system });
    }
    for message in request.messages.iter() {
        match message.role {
            Role::User => push_user(&mut messages, message),
            Role::Assistant => messages.push(assistant(message, names)),
        }
    }
    let tools = request
        .tools
        .iter()
        .map(|tool| ChatTool {
            kind: "function",
            function: ChatFunction {
                name: names.to_wire(&tool.name),
                description: &tool.description,
                parameters: &tool.input_schema,
            },
        })
        .collect();
    let (max_tokens, max_completion_tokens) = match preset.max_tokens_field {
        MaxTokensField::MaxTokens => (Some(request.max_tokens), None),
        MaxTokensField::MaxCompletionTokens => (None, Some(request.max_tokens)),
    };
    ChatRequest {
        model: &request.model,
        messages,
        tools,
        max_tokens,
        max_completion_tokens,
        temperature: request.temperature,
        stream: true,
        stream_options: preset.stream_usage.then_some(StreamOptions {
            include_usage: true,
        }),
    }
}

/// A user message: its tool results become `tool` messages (which must
/// directly follow the assistant's calls), the rest one `user` message.
fn push_user<'a>(messages: &mut Vec<ChatMessage<'a>>, message: &'a Message) {
    let mut parts = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::ToolResult {
                tool_use_id,
                content,
                is_error: _,
            } => messages.push(ChatMessage::Tool {
                tool_call_id: tool_use_id,
                content,
            }),
            ContentBlock::Text { text } => parts.push(UserPart::Text { text }),
            ContentBlock::Image { source } => parts.push(UserPart::ImageUrl {
                image_url: ImageUrl {
                    url: match source {
                        ImageSource::Base64 { media_type, data } => {
                            Cow::Owned(format!("data:{media_type};base64,{data}"))
                        }
                        ImageSource::Url { url } => Cow::Borrowed(url),
                    },
                },
            }),
            ContentBlock::ToolUse { .. }
            | ContentBlock::Thinking { .. }
            | ContentBlock::RedactedThinking { .. } => {}
        }
    }
    let content = match parts.as_slice() {
        [] => return,
        // Plain text goes as a string: every compatible server takes that.
        [UserPart::Text { text }] => UserContent::Text(text),
        _ => UserContent::Parts(parts),
    };
    messages.push(ChatMessage::User { content });
}

fn assistant<'a>(message: &'a Message, names: &ToolNameMap) -> ChatMessage<'a> {
    let text = message.text();
    let tool_calls: Vec<WireToolCall<'a>> = message
        .tool_uses()
        .map(|(id, name, input)| WireToolCall {
            id,
            kind: "function",
            function: WireFunctionCall {
                name: names.to_wire_or_sanitised(name),
                arguments: input.to_string(),
            },
        })
        .collect();
    let content = if text.is_empty() && !tool_calls.is_empty() {
        None
    } else {
        Some(text)
    };
    ChatMessage::Assistant {
        content,
        tool_calls,
    }
}

// ---------------------------------------------------------------------------
// Response

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Chunk {
    model: Option<String>,
    choices: Option<Vec<Choice>>,
    usage: Option<WireUsage>,
    /// Groq's own envelope; its `usage` arrives in the last chunk.
    x_groq: Option<XGroq>,
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct XGroq {
    usage: Option<WireUsage>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Choice {
    index: Option<u32>,
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Delta {
    content: Option<String>,
    /// DeepSeek, vLLM and llama.cpp.
    reasoning_content: Option<String>,
    /// Ollama, OpenRouter, Groq (`reasoning_format: parsed`) and newer vLLM.
    reasoning: Option<String>,
    refusal: Option<String>,
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ToolCallDelta {
    index: Option<usize>,
    id: Option<String>,
    function: Option<FunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct FunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct PromptTokensDetails {
    cached_tokens: Option<u64>,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: Option<String>,
    arguments: String,
    announced: bool,
}

/// Assembles `chat.completion.chunk` events.
#[derive(Debug)]
pub(crate) struct ChatAssembler {
    provider: String,
    names: ToolNameMap,
    model: Option<String>,
    fallback_model: String,
    text: String,
    reasoning: String,
    refused: bool,
    calls: BTreeMap<usize, PartialCall>,
    finish_reason: Option<String>,
    usage: Usage,
}

impl ChatAssembler {
    pub fn new(provider: &str, request_model: &str, names: ToolNameMap) -> Self {
        ChatAssembler {
            provider: provider.to_owned(),
            names,
            model: None,
            fallback_model: request_model.to_owned(),
            text: String::new(),
            reasoning: String::new(),
            refused: false,
            calls: BTreeMap::new(),
            finish_reason: None,
            usage: Usage::default(),
        }
    }

    fn protocol(&self, message: String) -> Error {
        Error::Protocol {
            provider: self.provider.clone(),
            message,
        }
    }

    fn read_chunk(&mut self, chunk: Chunk, out: &mut Vec<StreamEvent>) -> Result<()> {
        if let Some(error) = chunk.error {
            let message = VendorError::from_value(&serde_json::json!({ "error": error }))
                .map_or_else(|| "the server reported an error".to_owned(), |e| e.message);
            return Err(Error::Stream {
                provider: self.provider.clone(),
                message,
            });
        }
        if self.model.is_none() {
            self.model = chunk.model.filter(|model| !model.is_empty());
        }
        if let Some(usage) = chunk.usage.or(chunk.x_groq.and_then(|x| x.usage)) {
            let cached = usage
                .prompt_tokens_details
                .and_then(|details| details.cached_tokens)
                .unwrap_or(0);
            let prompt = usage.prompt_tokens.unwrap_or(0);
            // `prompt_tokens` counts cached tokens too; `Usage` keeps them
            // apart, as Anthropic reports them.
            self.usage = Usage {
                input_tokens: prompt.saturating_sub(cached),
                output_tokens: usage.completion_tokens.unwrap_or(0),
                cache_read_tokens: cached,
                cache_write_tokens: 0,
            };
        }
        // Only one choice is ever asked for.
        for choice in chunk.choices.unwrap_or_default() {
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(reason) = choice.finish_reason.filter(|reason| !reason.is_empty()) {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            for thinking in [delta.reasoning_content, delta.reasoning]
                .into_iter()
                .flatten()
                .filter(|text| !text.is_empty())
            {
                self.reasoning.push_str(&thinking);
                out.push(StreamEvent::ThinkingDelta(thinking));
            }
            if let Some(text) = delta.content.filter(|text| !text.is_empty()) {
                self.text.push_str(&text);
                out.push(StreamEvent::TextDelta(text));
            }
            if let Some(refusal) = delta.refusal.filter(|text| !text.is_empty()) {
                self.refused = true;
                self.text.push_str(&refusal);
                out.push(StreamEvent::TextDelta(refusal));
            }
            for (position, call) in delta.tool_calls.unwrap_or_default().into_iter().enumerate() {
                let index = call.index.unwrap_or(position);
                let partial = self.calls.entry(index).or_default();
                if let Some(id) = call.id.filter(|id| !id.is_empty()) {
                    partial.id.get_or_insert(id);
                }
                if let Some(function) = call.function {
                    if let Some(name) = function.name.filter(|name| !name.is_empty()) {
                        partial.name.get_or_insert(name);
                    }
                    if let Some(arguments) = function.arguments {
                        partial.arguments.push_str(&arguments);
                    }
                }
                if !partial.announced
                    && let Some(name) = &partial.name
                {
                    partial.announced = true;
                    let id = partial.id.get_or_insert_with(fresh_call_id).clone();
                    out.push(StreamEvent::ToolUseStart {
                        id,
                        name: self.names.from_wire(name).to_owned(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// An id for a tool call the server sent without one. Unique, not the
/// call's index: an index repeats in every answer, and a session's call
/// ids must not (a result is matched to its call, and a kept output found,
/// by the id).
fn fresh_call_id() -> String {
    format!("call_{}", uuid::Uuid::now_v7().simple())
}

impl ChatAssembler {
    /// An event that is not a well-formed chunk: an error event, or the
    /// error that says what is wrong with it.
    fn slow_chunk(&self, event: &Event) -> Result<Chunk> {
        let value = event_json(&self.provider, event)?;
        if event.event == "error" {
            let message = VendorError::from_value(&value)
                .map_or_else(|| crate::http::quote(&event.data), |e| e.message);
            return Err(Error::Stream {
                provider: self.provider.clone(),
                message,
            });
        }
        serde_json::from_value(value).map_err(|error| {
            self.protocol(format!(
                "a chat.completion.chunk has an unexpected shape ({error}): {}",
                crate::http::quote(&event.data)
            ))
        })
    }
}

impl Assembler for ChatAssembler {
    fn feed(&mut self, event: &Event, out: &mut Vec<StreamEvent>) -> Result<Fed> {
        if event.data.trim() == "[DONE]" {
            return Ok(Fed::Done);
        }
        // The common case parses straight into a chunk; anything else is
        // parsed again the slow way, to say what is wrong with it.
        let parsed = (event.event != "error")
            .then(|| serde_json::from_str::<Chunk>(&event.data).ok())
            .flatten();
        let chunk = match parsed {
            Some(chunk) => chunk,
            None => self.slow_chunk(event)?,
        };
        self.read_chunk(chunk, out)?;
        Ok(Fed::More)
    }

    fn finish(&mut self, marked: bool) -> Result<ModelResponse> {
        if !marked && self.finish_reason.is_none() {
            return Err(Error::Stream {
                provider: self.provider.clone(),
                message:
                    "the stream ended without a finish_reason or [DONE]: the answer was cut off"
                        .to_owned(),
            });
        }
        let mut content = Vec::new();
        if !self.reasoning.is_empty() {
            content.push(ContentBlock::Thinking {
                thinking: std::mem::take(&mut self.reasoning),
                signature: None,
            });
        }
        if !self.text.is_empty() {
            content.push(ContentBlock::Text {
                text: std::mem::take(&mut self.text),
            });
        }
        for (index, call) in std::mem::take(&mut self.calls) {
            let Some(wire) = call.name else {
                return Err(self.protocol(format!("tool call {index} arrived without a name")));
            };
            let name = self.names.from_wire(&wire).to_owned();
            let id = call.id.unwrap_or_else(fresh_call_id);
            let input = if call.arguments.trim().is_empty() {
                Value::Object(serde_json::Map::new())
            } else {
                // Arguments that are not JSON (small local models write
                // them often) fail that one call, not the answer: the turn
                // answers it with an error the model can act on.
                serde_json::from_str(&call.arguments).unwrap_or_else(|_| {
                    let mut stand_in = serde_json::Map::new();
                    stand_in.insert(
                        flynn_protocol::INVALID_ARGUMENTS_KEY.to_owned(),
                        Value::String(call.arguments.clone()),
                    );
                    Value::Object(stand_in)
                })
            };
            content.push(ContentBlock::ToolUse { id, name, input });
        }
        let has_calls = content
            .iter()
            .any(|block| matches!(block, ContentBlock::ToolUse { .. }));
        let stop_reason = match self.finish_reason.as_deref() {
            // Some servers (older Ollama) say "stop" even with tool calls.
            Some("stop") | None if has_calls => StopReason::ToolUse,
            Some("stop") | None if self.refused => StopReason::Refusal,
            Some("stop") | None => StopReason::EndTurn,
            Some("tool_calls" | "function_call") => StopReason::ToolUse,
            Some("length") => StopReason::MaxTokens,
            Some("content_filter") => StopReason::Refusal,
            Some(other) => StopReason::Other(other.to_owned()),
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
    use flynn_protocol::ToolSpec;
    use serde_json::json;

    use super::*;

    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "shell.exec".into(),
            description: "Run a command".into(),
            input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}})
                .into(),
        }]
    }

    fn body(kind: ProviderKind, request: &ModelRequest) -> Value {
        let names = ToolNameMap::new(&request.tools);
        serde_json::to_value(request_body(kind, request, &names)).unwrap_or_default()
    }

    #[test]
    fn serialises_a_whole_conversation() {
        let request = ModelRequest {
            model: "gpt-4o-mini".into(),
            system: Some("Be brief.".into()),
            messages: Cow::Owned(vec![
                Message::user("List files"),
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::Thinking {
                            thinking: "hmm".into(),
                            signature: None,
                        },
                        ContentBlock::ToolUse {
                            id: "call_1".into(),
                            name: "shell.exec".into(),
                            input: json!({"command": "ls"}),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::ToolResult {
                            tool_use_id: "call_1".into(),
                            content: "a.txt".into(),
                            is_error: false,
                        },
                        ContentBlock::text("And this?"),
                        ContentBlock::Image {
                            source: ImageSource::Base64 {
                                media_type: "image/png".into(),
                                data: "iVBORw0KGgo=".into(),
                            },
                        },
                    ],
                },
                Message::assistant("A PNG."),
            ]),
            tools: tools().into(),
            max_tokens: 1024,
            temperature: Some(0.5),
        };
        assert_eq!(
            body(ProviderKind::OpenaiCompatible, &request),
            json!({
                "model": "gpt-4o-mini",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "List files"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": "shell_exec", "arguments": "{\"command\":\"ls\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
                    {"role": "user", "content": [
                        {"type": "text", "text": "And this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
                    ]},
                    {"role": "assistant", "content": "A PNG."}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "shell_exec",
                    "description": "Run a command",
                    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}
                }}],
                "max_tokens": 1024,
                "temperature": 0.5,
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    /// Chat Completions takes images only in user messages: the images a
    /// tool attached follow the `tool` messages as one user message.
    #[test]
    fn images_after_tool_results_become_a_user_message_after_the_tool_messages() {
        let png = |data: &str| ContentBlock::Image {
            source: ImageSource::Base64 {
                media_type: "image/png".into(),
                data: data.into(),
            },
        };
        let result = |id: &str, content: &str| ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: content.into(),
            is_error: false,
        };
        let request = ModelRequest::new(
            "gpt-4o",
            vec![
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::ToolUse {
                            id: "call_1".into(),
                            name: "browser.screenshot".into(),
                            input: json!({}),
                        },
                        ContentBlock::ToolUse {
                            id: "call_2".into(),
                            name: "browser.screenshot".into(),
                            input: json!({"full_page": true}),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![
                        result("call_1", "Saved a screenshot."),
                        result("call_2", "Saved another."),
                        png("AAAA"),
                        png("BBBB"),
                    ],
                },
            ],
        );
        assert_eq!(
            body(ProviderKind::Openai, &request)["messages"],
            json!([
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "browser_screenshot", "arguments": "{}"}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "browser_screenshot", "arguments": "{\"full_page\":true}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "Saved a screenshot."},
                {"role": "tool", "tool_call_id": "call_2", "content": "Saved another."},
                {"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,BBBB"}}
                ]}
            ])
        );
    }

    #[test]
    fn openai_itself_gets_max_completion_tokens() {
        let request = ModelRequest::new("gpt-5", vec![Message::user("hi")]);
        assert_eq!(
            body(ProviderKind::Openai, &request),
            json!({
                "model": "gpt-5",
                "messages": [{"role": "user", "content": "hi"}],
                "max_completion_tokens": 4096,
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    fn assemble(sse: &str, names: ToolNameMap) -> (Vec<StreamEvent>, Result<ModelResponse>) {
        let mut assembler = ChatAssembler::new("openai", "requested-model", names);
        let mut out = Vec::new();
        for data in sse.lines().filter_map(|line| line.strip_prefix("data: ")) {
            let event = Event {
                event: "message".into(),
                data: data.into(),
                ..Event::default()
            };
            match assembler.feed(&event, &mut out) {
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
            flynn_testkit::fixtures::OPENAI_STREAMING_TEXT,
            ToolNameMap::default(),
        );
        assert_eq!(deltas, vec![StreamEvent::TextDelta("Hello".into())]);
        assert_eq!(
            response,
            Ok(ModelResponse {
                message: Message::assistant("Hello"),
                stop_reason: StopReason::EndTurn,
                usage: Usage::default(),
                model: "gpt-4o-mini".into(),
            })
        );
    }

    #[test]
    fn assembles_the_documented_tool_call_stream() {
        let names = ToolNameMap::new(&[ToolSpec {
            name: "weather.get".into(),
            description: String::new(),
            input_schema: json!({}).into(),
        }]);
        let (deltas, response) = assemble(
            &flynn_testkit::fixtures::OPENAI_STREAMING_TOOL_CALLS
                .replace("get_weather", "weather_get"),
            names,
        );
        assert_eq!(
            deltas,
            vec![StreamEvent::ToolUseStart {
                id: "call_DdmO9pD3xa9XTPNJ32zg2hcA".into(),
                name: "weather.get".into(),
            }]
        );
        assert_eq!(
            response.map(|r| (r.message, r.stop_reason)),
            Ok((
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::ToolUse {
                        id: "call_DdmO9pD3xa9XTPNJ32zg2hcA".into(),
                        name: "weather.get".into(),
                        input: json!({"location": "Paris, France"}),
                    }],
                },
                StopReason::ToolUse
            ))
        );
    }

    #[test]
    fn tolerates_what_compatible_servers_send() {
        // No model, null content, an empty finish_reason mid-stream, reasoning
        // under both names, usage in a choice-less chunk, no [DONE].
        let sse = r#"data: {"choices":[{"delta":{"role":"assistant","content":null,"reasoning_content":"Think"},"finish_reason":""}]}
data: {"choices":[{"delta":{"reasoning":"ing."},"finish_reason":null}]}
data: {"choices":[{"delta":{"content":"Hi"}}]}
data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}
data: {"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":10}}}
"#;
        let (deltas, response) = assemble(sse, ToolNameMap::default());
        assert_eq!(
            deltas,
            vec![
                StreamEvent::ThinkingDelta("Think".into()),
                StreamEvent::ThinkingDelta("ing.".into()),
                StreamEvent::TextDelta("Hi".into()),
            ]
        );
        assert_eq!(
            response,
            Ok(ModelResponse {
                message: Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::Thinking {
                            thinking: "Thinking.".into(),
                            signature: None,
                        },
                        ContentBlock::text("Hi"),
                    ],
                },
                stop_reason: StopReason::EndTurn,
                usage: Usage {
                    input_tokens: 20,
                    output_tokens: 5,
                    cache_read_tokens: 10,
                    cache_write_tokens: 0,
                },
                model: "requested-model".into(),
            })
        );
    }

    #[test]
    fn a_stream_cut_before_its_finish_is_an_error() {
        let sse =
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n";
        let (_, response) = assemble(sse, ToolNameMap::default());
        assert_eq!(
            response,
            Err(Error::Stream {
                provider: "openai".into(),
                message:
                    "the stream ended without a finish_reason or [DONE]: the answer was cut off"
                        .into(),
            })
        );
    }

    #[test]
    fn empty_arguments_are_an_empty_object_and_bad_ones_a_stand_in_for_the_turn_to_refuse() {
        let ok = r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"ping","arguments":""}}]},"finish_reason":"tool_calls"}]}
data: [DONE]
"#;
        let (_, response) = assemble(ok, ToolNameMap::default());
        assert_eq!(
            response.map(|r| r.message.content),
            Ok(vec![ContentBlock::ToolUse {
                id: "c1".into(),
                name: "ping".into(),
                input: json!({}),
            }])
        );
        let bad = r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"ping","arguments":"{\"a\":"}}]},"finish_reason":"tool_calls"}]}
data: [DONE]
"#;
        let (_, response) = assemble(bad, ToolNameMap::default());
        assert_eq!(
            response.map(|r| r.message.content),
            Ok(vec![ContentBlock::ToolUse {
                id: "c1".into(),
                name: "ping".into(),
                input: json!({"$invalid_json": "{\"a\":"}),
            }])
        );
    }

    #[test]
    fn calls_sent_without_ids_get_ids_that_do_not_repeat_across_answers() {
        // Two answers of a server that numbers its calls but names none,
        // as some local servers do: every call needs an id of its own, or
        // a later call's result is taken for an earlier one's.
        let sse = r#"data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"ping","arguments":"{}"}},{"index":1,"function":{"name":"ping","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}
data: [DONE]
"#;
        let mut ids = Vec::new();
        for _ in 0..2 {
            let (deltas, response) = assemble(sse, ToolNameMap::default());
            let announced: Vec<String> = deltas
                .into_iter()
                .filter_map(|delta| match delta {
                    StreamEvent::ToolUseStart { id, .. } => Some(id),
                    _ => None,
                })
                .collect();
            let answered: Vec<String> = response
                .map(|r| {
                    r.message
                        .tool_uses()
                        .map(|(id, _, _)| id.to_owned())
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(announced, answered, "the announced ids are the answer's");
            assert_eq!(answered.len(), 2);
            ids.extend(answered);
        }
        let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), 4, "ids repeat: {ids:?}");
        assert!(ids.iter().all(|id| id.starts_with("call_")), "{ids:?}");
    }

    #[test]
    fn an_error_chunk_ends_the_stream() {
        let sse = r#"data: {"choices":[{"delta":{"content":"Hel"}}]}
data: {"error":{"message":"The server had an error while processing your request.","type":"server_error"}}
"#;
        let (_, response) = assemble(sse, ToolNameMap::default());
        assert_eq!(
            response,
            Err(Error::Stream {
                provider: "openai".into(),
                message: "The server had an error while processing your request.".into(),
            })
        );
    }

    #[test]
    fn context_overflow_is_read_from_the_error_code() {
        let overflow = VendorError::parse(
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        );
        assert!(is_context_overflow(400, &overflow));
        let other = VendorError::parse(
            r#"{"error":{"message":"maximum context length","type":"invalid_request_error","code":null}}"#,
        );
        assert!(!is_context_overflow(400, &other));
    }
}
