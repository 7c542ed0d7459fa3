//! Response bodies copied from the vendors' documentation (see
//! `fixtures/README.md` for each source). Every one is a valid SSE body: the
//! leading `:` lines naming the source are SSE comments.

/// Anthropic "Basic streaming request": text "Hello!", 25 in / 15 out.
pub const ANTHROPIC_STREAMING_TEXT: &str = include_str!("../fixtures/anthropic/streaming-text.sse");

/// Anthropic "Streaming request with tool use": a text block, then a
/// `get_weather` tool_use whose input streams as partial JSON.
pub const ANTHROPIC_STREAMING_TOOL_USE: &str =
    include_str!("../fixtures/anthropic/streaming-tool-use.sse");

/// Anthropic "Streaming request with extended thinking": a thinking block
/// with its signature, then a text block.
pub const ANTHROPIC_STREAMING_THINKING: &str =
    include_str!("../fixtures/anthropic/streaming-thinking.sse");

/// Anthropic "Error events": an `overloaded_error` sent mid-stream.
pub const ANTHROPIC_ERROR_EVENT: &str = include_str!("../fixtures/anthropic/error-event.sse");

/// OpenAI chat completion chunks: text "Hello", then `finish_reason: stop`
/// and `[DONE]`.
pub const OPENAI_STREAMING_TEXT: &str = include_str!("../fixtures/openai/streaming-text.sse");

/// OpenAI function calling, streamed: one `get_weather` call whose
/// arguments arrive in pieces.
pub const OPENAI_STREAMING_TOOL_CALLS: &str =
    include_str!("../fixtures/openai/streaming-tool-calls.sse");
