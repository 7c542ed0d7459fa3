//! Bedrock's Converse API on the wire: the request parts built from a
//! [`ModelRequest`], the ConverseStream events assembled back into a
//! response, and the documented error codes mapped to typed [`Error`]s.
//!
//! The AWS SDK does the signing, the JSON and the event-stream framing; this
//! module only converts between its types and Flynn's. Stream events are
//! first reduced to [`Event`], so the assembler can be tested without
//! building SDK values.

use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_bedrockruntime::primitives::Blob;
use aws_sdk_bedrockruntime::types as sdk;
use aws_smithy_types::error::operation::BuildError;
use aws_smithy_types::{Document, Number};
use flynn_protocol::{ContentBlock, ImageSource, Role, Usage};
use serde_json::Value;

use crate::http::quote;
use crate::{Error, ModelRequest, ModelResponse, Result, StopReason, StreamEvent, ToolNameMap};

/// The variable named in authentication errors (the `env` field of
/// [`Error::Auth`] holds one name; the AWS chain has several sources).
pub(crate) const CREDENTIALS_ENV: &str = "AWS_ACCESS_KEY_ID";

// ---------------------------------------------------------------------------
// Request

/// The fields of one Converse / ConverseStream request, besides the model id
/// (which travels in the URL).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parts {
    pub system: Option<Vec<sdk::SystemContentBlock>>,
    pub messages: Vec<sdk::Message>,
    pub tool_config: Option<sdk::ToolConfiguration>,
    pub inference: sdk::InferenceConfiguration,
}

/// Builds the request for `request`, with tool names mapped through
/// `names`. Fails on content Bedrock cannot take (an image by URL, an image
/// format it does not read).
pub(crate) fn request_parts(
    provider: &str,
    request: &ModelRequest,
    names: &ToolNameMap,
) -> Result<Parts> {
    // `toolResult.status` is documented for Anthropic Claude models only;
    // other models refuse requests that carry it.
    let with_status = request.model.contains("anthropic.");
    let mut messages = Vec::new();
    for message in request.messages.iter() {
        let mut content = Vec::new();
        for block in &message.content {
            if let Some(block) = wire_block(provider, block, names, with_status)? {
                content.push(block);
            }
        }
        // Bedrock refuses messages with no content.
        if content.is_empty() {
            continue;
        }
        let role = match message.role {
            Role::User => sdk::ConversationRole::User,
            Role::Assistant => sdk::ConversationRole::Assistant,
        };
        messages.push(built(
            provider,
            sdk::Message::builder()
                .role(role)
                .set_content(Some(content))
                .build(),
        )?);
    }
    let system = request
        .system
        .as_deref()
        .filter(|system| !system.trim().is_empty())
        .map(|system| vec![sdk::SystemContentBlock::Text(system.to_owned())]);
    let tool_config = if request.tools.is_empty() {
        None
    } else {
        let mut tools = Vec::new();
        for tool in request.tools.iter() {
            let spec = sdk::ToolSpecification::builder()
                .name(names.to_wire(&tool.name))
                .set_description(
                    Some(tool.description.clone()).filter(|description| !description.is_empty()),
                )
                .input_schema(sdk::ToolInputSchema::Json(to_document(&tool.input_schema)))
                .build();
            tools.push(sdk::Tool::ToolSpec(built(provider, spec)?));
        }
        Some(built(
            provider,
            sdk::ToolConfiguration::builder()
                .set_tools(Some(tools))
                .build(),
        )?)
    };
    let inference = sdk::InferenceConfiguration::builder()
        .max_tokens(i32::try_from(request.max_tokens).unwrap_or(i32::MAX))
        .set_temperature(request.temperature)
        .build();
    Ok(Parts {
        system,
        messages,
        tool_config,
        inference,
    })
}

fn wire_block(
    provider: &str,
    block: &ContentBlock,
    names: &ToolNameMap,
    with_status: bool,
) -> Result<Option<sdk::ContentBlock>> {
    Ok(Some(match block {
        // Bedrock refuses blank text blocks.
        ContentBlock::Text { text } if text.trim().is_empty() => return Ok(None),
        ContentBlock::Text { text } => sdk::ContentBlock::Text(text.clone()),
        ContentBlock::Image { source } => sdk::ContentBlock::Image(image(provider, source)?),
        ContentBlock::ToolUse { id, name, input } => sdk::ContentBlock::ToolUse(built(
            provider,
            sdk::ToolUseBlock::builder()
                .tool_use_id(id)
                .name(names.to_wire_or_sanitised(name))
                .input(to_document(input))
                .build(),
        )?),
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            // A blank text block is refused here too; an empty result still
            // has to answer its call.
            let text = if content.trim().is_empty() {
                "(no output)".to_owned()
            } else {
                content.clone()
            };
            let status = with_status.then_some(if *is_error {
                sdk::ToolResultStatus::Error
            } else {
                sdk::ToolResultStatus::Success
            });
            sdk::ContentBlock::ToolResult(built(
                provider,
                sdk::ToolResultBlock::builder()
                    .tool_use_id(tool_use_id)
                    .content(sdk::ToolResultContentBlock::Text(text))
                    .set_status(status)
                    .build(),
            )?)
        }
        // Reasoning goes back unchanged, with its signature; reasoning from
        // a provider that does not sign it would be refused, so it stays
        // behind.
        ContentBlock::Thinking {
            thinking,
            signature: Some(signature),
        } => sdk::ContentBlock::ReasoningContent(sdk::ReasoningContentBlock::ReasoningText(built(
            provider,
            sdk::ReasoningTextBlock::builder()
                .text(thinking)
                .signature(signature)
                .build(),
        )?)),
        ContentBlock::Thinking {
            signature: None, ..
        } => return Ok(None),
        // Redacted reasoning is bytes on Bedrock; Flynn keeps it as base64.
        ContentBlock::RedactedThinking { data } => match aws_smithy_types::base64::decode(data) {
            Ok(bytes) => sdk::ContentBlock::ReasoningContent(
                sdk::ReasoningContentBlock::RedactedContent(Blob::new(bytes)),
            ),
            // Not from Bedrock (another provider's opaque text): it would be
            // refused, so it stays behind like unsigned thinking.
            Err(_) => return Ok(None),
        },
    }))
}

/// An image block: inline bytes, or an `s3://` object. Bedrock cannot fetch
/// other URLs.
fn image(provider: &str, source: &ImageSource) -> Result<sdk::ImageBlock> {
    let invalid = |message: String| Error::InvalidRequest {
        provider: provider.to_owned(),
        status: 400,
        message,
    };
    let (format, source) = match source {
        ImageSource::Base64 { media_type, data } => {
            let format = image_format(media_type).ok_or_else(|| {
                invalid(format!(
                    "Bedrock does not read {media_type} images (it reads image/png, image/jpeg, image/gif and image/webp)"
                ))
            })?;
            let bytes = aws_smithy_types::base64::decode(data).map_err(|error| {
                invalid(format!(
                    "an inline {media_type} image is not valid base64: {error}"
                ))
            })?;
            (format, sdk::ImageSource::Bytes(Blob::new(bytes)))
        }
        ImageSource::Url { url } if url.starts_with("s3://") => {
            let extension = url.rsplit('.').next().unwrap_or_default();
            let format = image_format(&format!("image/{}", extension.to_ascii_lowercase()))
                .ok_or_else(|| {
                    invalid(format!(
                        "cannot tell the format of the image {url} from its name (expected .png, .jpg, .jpeg, .gif or .webp)"
                    ))
                })?;
            let location = built(provider, sdk::S3Location::builder().uri(url).build())?;
            (format, sdk::ImageSource::S3Location(location))
        }
        ImageSource::Url { url } => {
            return Err(invalid(format!(
                "Bedrock takes images inline or from s3://, not from {url}: attach the image's bytes instead"
            )));
        }
    };
    built(
        provider,
        sdk::ImageBlock::builder()
            .format(format)
            .source(source)
            .build(),
    )
}

fn image_format(media_type: &str) -> Option<sdk::ImageFormat> {
    match media_type.to_ascii_lowercase().as_str() {
        "image/png" => Some(sdk::ImageFormat::Png),
        "image/jpeg" | "image/jpg" => Some(sdk::ImageFormat::Jpeg),
        "image/gif" => Some(sdk::ImageFormat::Gif),
        "image/webp" => Some(sdk::ImageFormat::Webp),
        _ => None,
    }
}

/// An SDK builder's result. Builders only fail on a missing required field,
/// which this module always sets; the error still says which.
fn built<T>(provider: &str, result: Result<T, BuildError>) -> Result<T> {
    result.map_err(|error| Error::Protocol {
        provider: provider.to_owned(),
        message: format!("cannot build the Converse request: {error}"),
    })
}

/// JSON as a Smithy document (tool schemas and inputs).
pub(crate) fn to_document(value: &Value) -> Document {
    match value {
        Value::Null => Document::Null,
        Value::Bool(b) => Document::Bool(*b),
        Value::Number(n) => Document::Number(if let Some(u) = n.as_u64() {
            Number::PosInt(u)
        } else if let Some(i) = n.as_i64() {
            Number::NegInt(i)
        } else {
            Number::Float(n.as_f64().unwrap_or_default())
        }),
        Value::String(s) => Document::String(s.clone()),
        Value::Array(items) => Document::Array(items.iter().map(to_document).collect()),
        Value::Object(map) => Document::Object(
            map.iter()
                .map(|(key, value)| (key.clone(), to_document(value)))
                .collect(),
        ),
    }
}

// ---------------------------------------------------------------------------
// Response

/// One ConverseStream event, reduced to what Flynn uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// `messageStart`.
    MessageStart,
    /// `contentBlockStart` of a tool call (text and reasoning blocks have
    /// no start event; their first delta starts them).
    ToolUseStart {
        index: i32,
        id: String,
        name: String,
    },
    /// `contentBlockDelta` with `text`.
    Text { index: i32, text: String },
    /// `contentBlockDelta` with `toolUse.input`: a piece of JSON text.
    ToolInput { index: i32, json: String },
    /// `contentBlockDelta` with `reasoningContent.text`.
    Reasoning { index: i32, text: String },
    /// `contentBlockDelta` with `reasoningContent.signature`.
    Signature { index: i32, signature: String },
    /// `contentBlockDelta` with `reasoningContent.redactedContent`.
    Redacted { index: i32, data: Vec<u8> },
    /// `contentBlockStop`.
    BlockStop { index: i32 },
    /// `messageStop`, with the documented stop reason verbatim.
    MessageStop { reason: String },
    /// `metadata`: token counts.
    Metadata { usage: Usage },
    /// Events and deltas Flynn does not use (citations, images, tool result
    /// streaming, types added later).
    Other,
}

impl From<sdk::ConverseStreamOutput> for Event {
    fn from(output: sdk::ConverseStreamOutput) -> Event {
        use sdk::ConverseStreamOutput as Out;
        match output {
            Out::MessageStart(_) => Event::MessageStart,
            Out::ContentBlockStart(start) => match start.start {
                Some(sdk::ContentBlockStart::ToolUse(tool)) => Event::ToolUseStart {
                    index: start.content_block_index,
                    id: tool.tool_use_id,
                    name: tool.name,
                },
                _ => Event::Other,
            },
            Out::ContentBlockDelta(delta) => {
                let index = delta.content_block_index;
                match delta.delta {
                    Some(sdk::ContentBlockDelta::Text(text)) => Event::Text { index, text },
                    Some(sdk::ContentBlockDelta::ToolUse(tool)) => Event::ToolInput {
                        index,
                        json: tool.input,
                    },
                    Some(sdk::ContentBlockDelta::ReasoningContent(reasoning)) => match reasoning {
                        sdk::ReasoningContentBlockDelta::Text(text) => {
                            Event::Reasoning { index, text }
                        }
                        sdk::ReasoningContentBlockDelta::Signature(signature) => {
                            Event::Signature { index, signature }
                        }
                        sdk::ReasoningContentBlockDelta::RedactedContent(data) => Event::Redacted {
                            index,
                            data: data.into_inner(),
                        },
                        _ => Event::Other,
                    },
                    _ => Event::Other,
                }
            }
            Out::ContentBlockStop(stop) => Event::BlockStop {
                index: stop.content_block_index,
            },
            Out::MessageStop(stop) => Event::MessageStop {
                reason: stop.stop_reason.as_str().to_owned(),
            },
            Out::Metadata(metadata) => Event::Metadata {
                usage: metadata.usage.map(usage).unwrap_or_default(),
            },
            _ => Event::Other,
        }
    }
}

fn usage(usage: sdk::TokenUsage) -> Usage {
    let count = |n: i32| u64::try_from(n).unwrap_or(0);
    Usage {
        input_tokens: count(usage.input_tokens),
        output_tokens: count(usage.output_tokens),
        cache_read_tokens: usage.cache_read_input_tokens.map_or(0, count),
        cache_write_tokens: usage.cache_write_input_tokens.map_or(0, count),
    }
}

/// The documented stop reasons, as Flynn's.
pub(crate) fn stop_reason(reason: &str) -> StopReason {
    match reason {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "guardrail_intervened" | "content_filtered" => StopReason::Refusal,
        other => StopReason::Other(other.to_owned()),
    }
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
    Reasoning {
        text: String,
        signature: String,
    },
    Redacted(Vec<u8>),
}

/// Assembles a ConverseStream into deltas and the final response.
#[derive(Debug)]
pub(crate) struct Assembler {
    provider: String,
    model: String,
    names: ToolNameMap,
    blocks: BTreeMap<i32, Partial>,
    started: bool,
    stop_reason: Option<String>,
    usage: Usage,
}

impl Assembler {
    pub fn new(provider: &str, model: &str, names: ToolNameMap) -> Self {
        Assembler {
            provider: provider.to_owned(),
            model: model.to_owned(),
            names,
            blocks: BTreeMap::new(),
            started: false,
            stop_reason: None,
            usage: Usage::default(),
        }
    }

    fn protocol(&self, message: String) -> Error {
        Error::Protocol {
            provider: self.provider.clone(),
            message,
        }
    }

    /// Reads one event, pushing the deltas it carries onto `out`.
    pub fn feed(&mut self, event: Event, out: &mut Vec<StreamEvent>) -> Result<()> {
        match event {
            Event::MessageStart => self.started = true,
            Event::ToolUseStart { index, id, name } => {
                if id.is_empty() || name.is_empty() {
                    return Err(self.protocol(format!(
                        "content block {index} is a toolUse without a toolUseId or a name"
                    )));
                }
                out.push(StreamEvent::ToolUseStart {
                    id: id.clone(),
                    name: self.names.from_wire(&name).to_owned(),
                });
                self.blocks.insert(
                    index,
                    Partial::ToolUse {
                        id,
                        wire_name: name,
                        json: String::new(),
                        input: None,
                    },
                );
            }
            Event::Text { index, text } => {
                if let Partial::Text(buffer) = self
                    .blocks
                    .entry(index)
                    .or_insert_with(|| Partial::Text(String::new()))
                    && !text.is_empty()
                {
                    buffer.push_str(&text);
                    out.push(StreamEvent::TextDelta(text));
                }
            }
            Event::ToolInput { index, json } => match self.blocks.get_mut(&index) {
                Some(Partial::ToolUse { json: buffer, .. }) => buffer.push_str(&json),
                _ => {
                    return Err(self.protocol(format!(
                        "toolUse input for content block {index}, which is not a started tool call"
                    )));
                }
            },
            Event::Reasoning { index, text } => {
                if let Partial::Reasoning { text: buffer, .. } =
                    self.blocks.entry(index).or_insert_with(reasoning)
                    && !text.is_empty()
                {
                    buffer.push_str(&text);
                    out.push(StreamEvent::ThinkingDelta(text));
                }
            }
            Event::Signature { index, signature } => {
                if let Partial::Reasoning {
                    signature: buffer, ..
                } = self.blocks.entry(index).or_insert_with(reasoning)
                {
                    buffer.push_str(&signature);
                }
            }
            Event::Redacted { index, data } => {
                if let Partial::Redacted(buffer) = self
                    .blocks
                    .entry(index)
                    .or_insert_with(|| Partial::Redacted(Vec::new()))
                {
                    buffer.extend_from_slice(&data);
                }
            }
            Event::BlockStop { index } => self.stop_block(index)?,
            Event::MessageStop { reason } => self.stop_reason = Some(reason),
            Event::Metadata { usage } => self.usage = usage,
            Event::Other => {}
        }
        Ok(())
    }

    /// Parses a finished tool call's input.
    fn stop_block(&mut self, index: i32) -> Result<()> {
        let Some(Partial::ToolUse {
            id,
            wire_name,
            json,
            input,
        }) = self.blocks.get_mut(&index)
        else {
            return Ok(());
        };
        if input.is_some() {
            return Ok(());
        }
        if json.trim().is_empty() {
            *input = Some(Value::Object(serde_json::Map::new()));
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

    /// The assembled answer once the stream has ended.
    pub fn finish(mut self) -> Result<ModelResponse> {
        let Some(reason) = self.stop_reason.take() else {
            let message = if self.started {
                "the stream ended before messageStop: the answer was cut off"
            } else {
                "the stream ended before messageStart"
            };
            return Err(Error::Stream {
                provider: self.provider.clone(),
                message: message.to_owned(),
            });
        };
        let indexes: Vec<i32> = self.blocks.keys().copied().collect();
        for index in indexes {
            self.stop_block(index)?;
        }
        let mut content = Vec::new();
        for block in std::mem::take(&mut self.blocks).into_values() {
            match block {
                Partial::Text(text) if text.is_empty() => {}
                Partial::Text(text) => content.push(ContentBlock::Text { text }),
                Partial::ToolUse {
                    id,
                    wire_name,
                    input,
                    ..
                } => content.push(ContentBlock::ToolUse {
                    id,
                    name: self.names.from_wire(&wire_name).to_owned(),
                    input: input.unwrap_or_else(|| Value::Object(serde_json::Map::new())),
                }),
                Partial::Reasoning { text, signature } => content.push(ContentBlock::Thinking {
                    thinking: text,
                    signature: Some(signature).filter(|signature| !signature.is_empty()),
                }),
                Partial::Redacted(data) => content.push(ContentBlock::RedactedThinking {
                    data: aws_smithy_types::base64::encode(data),
                }),
            }
        }
        Ok(ModelResponse {
            message: flynn_protocol::Message {
                role: Role::Assistant,
                content,
            },
            stop_reason: stop_reason(&reason),
            usage: self.usage,
            model: self.model,
        })
    }
}

fn reasoning() -> Partial {
    Partial::Reasoning {
        text: String::new(),
        signature: String::new(),
    }
}

// ---------------------------------------------------------------------------
// Errors

/// Phrases of the documented `ValidationException` messages for a prompt
/// over the model's context window (the Bedrock error has no dedicated code,
/// so this is the one place the message text decides): the generic Bedrock
/// message, Anthropic's two, and Amazon Nova's.
const OVERFLOW_PHRASES: [&str; 5] = [
    "input is too long for requested model",
    "input length and `max_tokens` exceed context limit",
    "too many total text bytes",
    "prompt is too long",
    "number of input tokens exceeds maximum length",
];

/// Whether a `ValidationException` says the prompt is over the context
/// window.
pub(crate) fn is_context_overflow(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    OVERFLOW_PHRASES
        .iter()
        .any(|phrase| message.contains(phrase))
}

/// What a failed call said: the AWS error code (`ThrottlingException`), the
/// HTTP status when there was one, the message and any `Retry-After`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Failure {
    pub code: Option<String>,
    pub status: Option<u16>,
    pub message: String,
    pub retry_after: Option<Duration>,
}

/// The typed error for an AWS error code, as documented for Converse and
/// ConverseStream (and the codes AWS's front end uses for every service).
/// Unknown codes fall back to the HTTP status.
pub(crate) fn classify(provider: &str, failure: Failure) -> Error {
    let provider = provider.to_owned();
    let Failure {
        code,
        status,
        message,
        retry_after,
    } = failure;
    match code.as_deref().unwrap_or_default() {
        "ThrottlingException" | "ServiceQuotaExceededException" | "TooManyRequestsException" => {
            Error::RateLimited {
                provider,
                retry_after,
                message,
            }
        }
        "ServiceUnavailableException" => Error::Overloaded {
            provider,
            status: status.unwrap_or(503),
            retry_after,
            message,
        },
        "ModelNotReadyException" => Error::Overloaded {
            provider,
            status: status.unwrap_or(429),
            retry_after,
            message,
        },
        "InternalServerException" | "InternalFailure" => Error::Server {
            provider,
            status: status.unwrap_or(500),
            message,
        },
        "ModelErrorException" => Error::Server {
            provider,
            status: status.unwrap_or(424),
            message,
        },
        "ModelTimeoutException" => Error::Server {
            provider,
            status: status.unwrap_or(408),
            message,
        },
        "ModelStreamErrorException" => Error::Stream { provider, message },
        "AccessDeniedException"
        | "UnrecognizedClientException"
        | "ExpiredTokenException"
        | "InvalidSignatureException"
        | "IncompleteSignatureException"
        | "MissingAuthenticationTokenException"
        | "InvalidClientTokenId"
        | "SignatureDoesNotMatch" => Error::Auth {
            provider,
            status: status.unwrap_or(403),
            message,
            env: Some(CREDENTIALS_ENV),
        },
        "ValidationException" if is_context_overflow(&message) => {
            Error::ContextOverflow { provider, message }
        }
        "ValidationException" => Error::InvalidRequest {
            provider,
            status: status.unwrap_or(400),
            message,
        },
        "ResourceNotFoundException" => Error::InvalidRequest {
            provider,
            status: status.unwrap_or(404),
            message,
        },
        code => match status {
            Some(status @ (401 | 403)) => Error::Auth {
                provider,
                status,
                message,
                env: Some(CREDENTIALS_ENV),
            },
            Some(429) => Error::RateLimited {
                provider,
                retry_after,
                message,
            },
            Some(status @ 503) => Error::Overloaded {
                provider,
                status,
                retry_after,
                message,
            },
            Some(status @ 500..=599) => Error::Server {
                provider,
                status,
                message,
            },
            Some(status @ 400..=499) => Error::InvalidRequest {
                provider,
                status,
                message,
            },
            Some(status) => Error::Protocol {
                provider,
                message: format!("unexpected HTTP status {status} ({code}): {message}"),
            },
            None if code.is_empty() => Error::Stream { provider, message },
            None => Error::Stream {
                provider,
                message: format!("{code}: {message}"),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use flynn_protocol::{Message, ToolSpec};
    use serde_json::json;

    use super::*;

    fn shell() -> ToolSpec {
        ToolSpec {
            name: "shell.exec".into(),
            description: "Run a command".into(),
            input_schema: json!({"type": "object", "properties": {"command": {"type": "string"}}})
                .into(),
        }
    }

    fn text(index: i32, text: &str) -> Event {
        Event::Text {
            index,
            text: text.into(),
        }
    }

    fn assemble(
        events: Vec<Event>,
        names: ToolNameMap,
    ) -> (Vec<StreamEvent>, Result<ModelResponse>) {
        let mut assembler = Assembler::new("bedrock", "anthropic.claude-sonnet-4-5", names);
        let mut out = Vec::new();
        for event in events {
            if let Err(error) = assembler.feed(event, &mut out) {
                return (out, Err(error));
            }
        }
        (out, assembler.finish())
    }

    #[test]
    fn json_becomes_a_document_with_exact_numbers() {
        let value = json!({
            "type": "object",
            "required": ["command"],
            "properties": {"count": {"minimum": -3, "maximum": 10, "default": 2.5}},
            "additionalProperties": false,
            "nothing": null
        });
        let document = to_document(&value);
        let Document::Object(map) = &document else {
            panic!("not an object: {document:?}");
        };
        assert_eq!(
            map["required"],
            Document::Array(vec![Document::String("command".into())])
        );
        let Document::Object(count) = &map["properties"] else {
            panic!()
        };
        let Document::Object(count) = &count["count"] else {
            panic!()
        };
        assert_eq!(count["minimum"], Document::Number(Number::NegInt(-3)));
        assert_eq!(count["maximum"], Document::Number(Number::PosInt(10)));
        assert_eq!(count["default"], Document::Number(Number::Float(2.5)));
        assert_eq!(map["nothing"], Document::Null);
        assert_eq!(map["additionalProperties"], Document::Bool(false));
    }

    #[test]
    fn builds_every_kind_of_block() {
        let request = ModelRequest {
            model: "anthropic.claude-sonnet-4-5-20250929-v1:0".into(),
            system: Some("Be brief.".into()),
            messages: Cow::Owned(vec![
                Message {
                    role: Role::User,
                    content: vec![
                        ContentBlock::text("What is this?"),
                        ContentBlock::Image {
                            source: ImageSource::Base64 {
                                media_type: "image/png".into(),
                                data: "iVBORw0KGgo=".into(),
                            },
                        },
                        ContentBlock::Image {
                            source: ImageSource::Url {
                                url: "s3://bucket/cat.JPG".into(),
                            },
                        },
                    ],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::Thinking {
                            thinking: "Let me look.".into(),
                            signature: Some("sig-1".into()),
                        },
                        ContentBlock::Thinking {
                            thinking: "unsigned".into(),
                            signature: None,
                        },
                        ContentBlock::RedactedThinking {
                            data: "AQID".into(),
                        },
                        ContentBlock::text(" "),
                        ContentBlock::ToolUse {
                            id: "tooluse_1".into(),
                            name: "shell.exec".into(),
                            input: json!({"command": "ls"}),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![ContentBlock::ToolResult {
                        tool_use_id: "tooluse_1".into(),
                        content: String::new(),
                        is_error: true,
                    }],
                },
                // Left out whole: nothing in it survives.
                Message {
                    role: Role::Assistant,
                    content: vec![ContentBlock::text("")],
                },
            ]),
            tools: Cow::Owned(vec![shell()]),
            max_tokens: 512,
            temperature: Some(0.5),
        };
        let names = ToolNameMap::new(&request.tools);
        let parts = request_parts("bedrock", &request, &names).unwrap();

        let message = |role, content| {
            sdk::Message::builder()
                .role(role)
                .set_content(Some(content))
                .build()
                .unwrap()
        };
        let image = |format, source| {
            sdk::ContentBlock::Image(
                sdk::ImageBlock::builder()
                    .format(format)
                    .source(source)
                    .build()
                    .unwrap(),
            )
        };
        assert_eq!(
            parts,
            Parts {
                system: Some(vec![sdk::SystemContentBlock::Text("Be brief.".into())]),
                messages: vec![
                    message(
                        sdk::ConversationRole::User,
                        vec![
                            sdk::ContentBlock::Text("What is this?".into()),
                            image(
                                sdk::ImageFormat::Png,
                                sdk::ImageSource::Bytes(Blob::new(
                                    aws_smithy_types::base64::decode("iVBORw0KGgo=").unwrap()
                                )),
                            ),
                            image(
                                sdk::ImageFormat::Jpeg,
                                sdk::ImageSource::S3Location(
                                    sdk::S3Location::builder()
                                        .uri("s3://bucket/cat.JPG")
                                        .build()
                                        .unwrap()
                                ),
                            ),
                        ]
                    ),
                    message(
                        sdk::ConversationRole::Assistant,
                        vec![
                            sdk::ContentBlock::ReasoningContent(
                                sdk::ReasoningContentBlock::ReasoningText(
                                    sdk::ReasoningTextBlock::builder()
                                        .text("Let me look.")
                                        .signature("sig-1")
                                        .build()
                                        .unwrap()
                                )
                            ),
                            sdk::ContentBlock::ReasoningContent(
                                sdk::ReasoningContentBlock::RedactedContent(Blob::new(vec![
                                    1, 2, 3
                                ]))
                            ),
                            sdk::ContentBlock::ToolUse(
                                sdk::ToolUseBlock::builder()
                                    .tool_use_id("tooluse_1")
                                    .name("shell_exec")
                                    .input(to_document(&json!({"command": "ls"})))
                                    .build()
                                    .unwrap()
                            ),
                        ]
                    ),
                    message(
                        sdk::ConversationRole::User,
                        vec![sdk::ContentBlock::ToolResult(
                            sdk::ToolResultBlock::builder()
                                .tool_use_id("tooluse_1")
                                .content(sdk::ToolResultContentBlock::Text("(no output)".into()))
                                .status(sdk::ToolResultStatus::Error)
                                .build()
                                .unwrap()
                        )]
                    ),
                ],
                tool_config: Some(
                    sdk::ToolConfiguration::builder()
                        .tools(sdk::Tool::ToolSpec(
                            sdk::ToolSpecification::builder()
                                .name("shell_exec")
                                .description("Run a command")
                                .input_schema(sdk::ToolInputSchema::Json(to_document(
                                    &shell().input_schema
                                )))
                                .build()
                                .unwrap()
                        ))
                        .build()
                        .unwrap()
                ),
                inference: sdk::InferenceConfiguration::builder()
                    .max_tokens(512)
                    .temperature(0.5)
                    .build(),
            }
        );
    }

    #[test]
    fn tool_result_status_is_only_sent_to_claude() {
        let mut request = ModelRequest::new(
            "amazon.nova-pro-v1:0",
            vec![Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "t1".into(),
                    content: "done".into(),
                    is_error: false,
                }],
            }],
        );
        let status = |request: &ModelRequest| {
            let parts = request_parts("bedrock", request, &ToolNameMap::default()).unwrap();
            match parts.messages[0].content() {
                [sdk::ContentBlock::ToolResult(result)] => result.status().cloned(),
                other => panic!("unexpected content {other:?}"),
            }
        };
        assert_eq!(status(&request), None);
        request.model = "us.anthropic.claude-haiku-4-5-20251001-v1:0".into();
        assert_eq!(status(&request), Some(sdk::ToolResultStatus::Success));
    }

    #[test]
    fn images_bedrock_cannot_read_are_refused_with_the_reason() {
        let refused = |source: ImageSource| {
            let request = ModelRequest::new(
                "m",
                vec![Message {
                    role: Role::User,
                    content: vec![ContentBlock::Image { source }],
                }],
            );
            request_parts("bedrock", &request, &ToolNameMap::default())
        };
        assert_eq!(
            refused(ImageSource::Url {
                url: "https://example.com/a.png".into()
            }),
            Err(Error::InvalidRequest {
                provider: "bedrock".into(),
                status: 400,
                message: "Bedrock takes images inline or from s3://, not from https://example.com/a.png: attach the image's bytes instead".into(),
            })
        );
        assert_eq!(
            refused(ImageSource::Base64 {
                media_type: "image/bmp".into(),
                data: "Qk0=".into()
            }),
            Err(Error::InvalidRequest {
                provider: "bedrock".into(),
                status: 400,
                message: "Bedrock does not read image/bmp images (it reads image/png, image/jpeg, image/gif and image/webp)".into(),
            })
        );
        assert!(matches!(
            refused(ImageSource::Base64 {
                media_type: "image/png".into(),
                data: "not base64!".into()
            }),
            Err(Error::InvalidRequest { .. })
        ));
        assert!(matches!(
            refused(ImageSource::Url {
                url: "s3://bucket/scan.tiff".into()
            }),
            Err(Error::InvalidRequest { .. })
        ));
    }

    #[test]
    fn assembles_text_with_usage() {
        let (deltas, response) = assemble(
            vec![
                Event::MessageStart,
                text(0, "Hello"),
                text(0, ""),
                text(0, " world"),
                Event::BlockStop { index: 0 },
                Event::MessageStop {
                    reason: "end_turn".into(),
                },
                Event::Metadata {
                    usage: Usage {
                        input_tokens: 10,
                        output_tokens: 2,
                        cache_read_tokens: 4,
                        cache_write_tokens: 1,
                    },
                },
            ],
            ToolNameMap::default(),
        );
        assert_eq!(
            deltas,
            vec![
                StreamEvent::TextDelta("Hello".into()),
                StreamEvent::TextDelta(" world".into()),
            ]
        );
        assert_eq!(
            response,
            Ok(ModelResponse {
                message: Message::assistant("Hello world"),
                stop_reason: StopReason::EndTurn,
                usage: Usage {
                    input_tokens: 10,
                    output_tokens: 2,
                    cache_read_tokens: 4,
                    cache_write_tokens: 1,
                },
                model: "anthropic.claude-sonnet-4-5".into(),
            })
        );
    }

    #[test]
    fn assembles_reasoning_and_a_tool_call_with_its_dotted_name() {
        let names = ToolNameMap::new(&[shell()]);
        let (deltas, response) = assemble(
            vec![
                Event::MessageStart,
                Event::Reasoning {
                    index: 0,
                    text: "I should ".into(),
                },
                Event::Reasoning {
                    index: 0,
                    text: "list files.".into(),
                },
                Event::Signature {
                    index: 0,
                    signature: "EqQBCgIYAh".into(),
                },
                Event::BlockStop { index: 0 },
                Event::Redacted {
                    index: 1,
                    data: vec![1, 2, 3],
                },
                Event::BlockStop { index: 1 },
                Event::ToolUseStart {
                    index: 2,
                    id: "tooluse_1".into(),
                    name: "shell_exec".into(),
                },
                Event::ToolInput {
                    index: 2,
                    json: "{\"command\":".into(),
                },
                Event::ToolInput {
                    index: 2,
                    json: " \"ls\"}".into(),
                },
                Event::BlockStop { index: 2 },
                Event::ToolUseStart {
                    index: 3,
                    id: "tooluse_2".into(),
                    name: "unknown_tool".into(),
                },
                Event::Other,
                Event::MessageStop {
                    reason: "tool_use".into(),
                },
            ],
            names,
        );
        assert_eq!(
            deltas,
            vec![
                StreamEvent::ThinkingDelta("I should ".into()),
                StreamEvent::ThinkingDelta("list files.".into()),
                StreamEvent::ToolUseStart {
                    id: "tooluse_1".into(),
                    name: "shell.exec".into(),
                },
                StreamEvent::ToolUseStart {
                    id: "tooluse_2".into(),
                    name: "unknown_tool".into(),
                },
            ]
        );
        let response = response.unwrap();
        assert_eq!(response.stop_reason, StopReason::ToolUse);
        assert_eq!(
            response.message.content,
            vec![
                ContentBlock::Thinking {
                    thinking: "I should list files.".into(),
                    signature: Some("EqQBCgIYAh".into()),
                },
                ContentBlock::RedactedThinking {
                    data: "AQID".into()
                },
                ContentBlock::ToolUse {
                    id: "tooluse_1".into(),
                    name: "shell.exec".into(),
                    input: json!({"command": "ls"}),
                },
                ContentBlock::ToolUse {
                    id: "tooluse_2".into(),
                    name: "unknown_tool".into(),
                    input: json!({}),
                },
            ]
        );
        assert_eq!(response.usage, Usage::default());
    }

    #[test]
    fn a_stream_without_message_stop_was_cut_off() {
        let (_, response) = assemble(
            vec![Event::MessageStart, text(0, "Hel")],
            ToolNameMap::default(),
        );
        assert_eq!(
            response,
            Err(Error::Stream {
                provider: "bedrock".into(),
                message: "the stream ended before messageStop: the answer was cut off".into(),
            })
        );
        let (_, response) = assemble(Vec::new(), ToolNameMap::default());
        assert_eq!(
            response,
            Err(Error::Stream {
                provider: "bedrock".into(),
                message: "the stream ended before messageStart".into(),
            })
        );
    }

    #[test]
    fn broken_tool_calls_are_protocol_errors() {
        let names = ToolNameMap::new(&[shell()]);
        let (_, response) = assemble(
            vec![
                Event::MessageStart,
                Event::ToolUseStart {
                    index: 0,
                    id: "tooluse_9".into(),
                    name: "shell_exec".into(),
                },
                Event::ToolInput {
                    index: 0,
                    json: "{\"command\": ".into(),
                },
                Event::BlockStop { index: 0 },
            ],
            names,
        );
        assert_eq!(
            response,
            Err(Error::Protocol {
                provider: "bedrock".into(),
                message: "the input of tool call 'shell.exec' (tooluse_9) is not valid JSON (EOF while parsing a value at line 1 column 12): {\"command\":".into(),
            })
        );
        let (_, response) = assemble(
            vec![
                Event::MessageStart,
                Event::ToolInput {
                    index: 4,
                    json: "{}".into(),
                },
            ],
            ToolNameMap::default(),
        );
        assert_eq!(
            response,
            Err(Error::Protocol {
                provider: "bedrock".into(),
                message: "toolUse input for content block 4, which is not a started tool call"
                    .into(),
            })
        );
    }

    #[test]
    fn every_documented_stop_reason_maps() {
        assert_eq!(stop_reason("end_turn"), StopReason::EndTurn);
        assert_eq!(stop_reason("tool_use"), StopReason::ToolUse);
        assert_eq!(stop_reason("max_tokens"), StopReason::MaxTokens);
        assert_eq!(stop_reason("stop_sequence"), StopReason::StopSequence);
        assert_eq!(stop_reason("guardrail_intervened"), StopReason::Refusal);
        assert_eq!(stop_reason("content_filtered"), StopReason::Refusal);
        assert_eq!(
            stop_reason("model_context_window_exceeded"),
            StopReason::Other("model_context_window_exceeded".into())
        );
    }

    fn failure(code: &str, status: Option<u16>, message: &str) -> Error {
        classify(
            "bedrock",
            Failure {
                code: Some(code.to_owned()).filter(|code| !code.is_empty()),
                status,
                message: message.to_owned(),
                retry_after: None,
            },
        )
    }

    #[test]
    fn documented_error_codes_map_to_typed_errors() {
        let p = || "bedrock".to_owned();
        assert_eq!(
            failure("ThrottlingException", Some(429), "Too many requests"),
            Error::RateLimited {
                provider: p(),
                retry_after: None,
                message: "Too many requests".into()
            }
        );
        assert_eq!(
            failure("ServiceUnavailableException", Some(503), "busy"),
            Error::Overloaded {
                provider: p(),
                status: 503,
                retry_after: None,
                message: "busy".into()
            }
        );
        assert_eq!(
            failure("ModelNotReadyException", Some(429), "warming up"),
            Error::Overloaded {
                provider: p(),
                status: 429,
                retry_after: None,
                message: "warming up".into()
            }
        );
        assert_eq!(
            failure("InternalServerException", None, "oops"),
            Error::Server {
                provider: p(),
                status: 500,
                message: "oops".into()
            }
        );
        for code in [
            "AccessDeniedException",
            "UnrecognizedClientException",
            "ExpiredTokenException",
        ] {
            assert_eq!(
                failure(code, Some(403), "no"),
                Error::Auth {
                    provider: p(),
                    status: 403,
                    message: "no".into(),
                    env: Some("AWS_ACCESS_KEY_ID")
                }
            );
        }
        assert_eq!(
            failure(
                "ValidationException",
                Some(400),
                "The model returned the following errors: Input is too long for requested model."
            ),
            Error::ContextOverflow {
                provider: p(),
                message:
                    "The model returned the following errors: Input is too long for requested model."
                        .into()
            }
        );
        assert_eq!(
            failure(
                "ValidationException",
                Some(400),
                "The text field in the ContentBlock object at messages.0.content.0 is blank."
            ),
            Error::InvalidRequest {
                provider: p(),
                status: 400,
                message:
                    "The text field in the ContentBlock object at messages.0.content.0 is blank."
                        .into()
            }
        );
        assert_eq!(
            failure("ModelStreamErrorException", None, "stream broke"),
            Error::Stream {
                provider: p(),
                message: "stream broke".into()
            }
        );
        assert_eq!(
            failure("", Some(502), "Bad Gateway"),
            Error::Server {
                provider: p(),
                status: 502,
                message: "Bad Gateway".into()
            }
        );
        assert_eq!(
            failure("SomethingNew", None, "?"),
            Error::Stream {
                provider: p(),
                message: "SomethingNew: ?".into()
            }
        );
    }

    #[test]
    fn every_documented_overflow_message_is_recognised() {
        for message in [
            "Input is too long for requested model.",
            "input length and `max_tokens` exceed context limit: 142422 + 64000 > 204658, decrease input length or `max_tokens` and try again",
            "too many total text bytes: 9000001 > 9000000",
            "prompt is too long: 208310 tokens > 200000 maximum",
            "Input Tokens Exceeded: Number of input tokens exceeds maximum length. Please update the request and try again.",
        ] {
            assert!(is_context_overflow(message), "{message}");
        }
        assert!(!is_context_overflow("Malformed input request"));
    }
}
