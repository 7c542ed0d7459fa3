//! Response bodies copied from the vendors' documentation (see
//! `fixtures/README.md` for each source). Every `.sse` one is a valid SSE
//! body: the leading `:` lines naming the source are SSE comments.

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

/// Ollama `POST /api/show` for `llama3.2`: `llama.context_length` 8192, no
/// `num_ctx` among its parameters.
pub const OLLAMA_SHOW: &str = include_str!("../fixtures/ollama/show.json");

/// llama.cpp `GET /props`: `default_generation_settings.n_ctx` 1024.
pub const LLAMACPP_PROPS: &str = include_str!("../fixtures/llamacpp/props.json");

/// Bedrock "Call a tool with the Converse API", step 1: the request with
/// the `top_song` tool.
pub const BEDROCK_TOOL_USE_REQUEST: &str =
    include_str!("../fixtures/bedrock/converse-tool-use-request.json");

/// Bedrock "Call a tool with the Converse API", step 2: the Converse
/// response asking for `top_song`.
pub const BEDROCK_TOOL_USE_RESPONSE: &str =
    include_str!("../fixtures/bedrock/converse-tool-use-response.json");

/// Bedrock "Call a tool with the Converse API", step 3: the request sending
/// the tool result back.
pub const BEDROCK_TOOL_RESULT_REQUEST: &str =
    include_str!("../fixtures/bedrock/converse-tool-result-request.json");

/// Bedrock ConverseStream events (a JSON list of `{"<eventType>": payload}`)
/// for a text answer with usage, cache reads included.
pub const BEDROCK_STREAM_TEXT: &str = include_str!("../fixtures/bedrock/converse-stream-text.json");

/// Bedrock ConverseStream events for a text block then a streamed
/// `top_song` tool call.
pub const BEDROCK_STREAM_TOOL_USE: &str =
    include_str!("../fixtures/bedrock/converse-stream-tool-use.json");

/// Bedrock ConverseStream events for reasoning with its signature, then
/// text.
pub const BEDROCK_STREAM_REASONING: &str =
    include_str!("../fixtures/bedrock/converse-stream-reasoning.json");

/// Bedrock ConverseStream events cut by a `modelStreamErrorException`.
pub const BEDROCK_STREAM_MODEL_ERROR: &str =
    include_str!("../fixtures/bedrock/model-stream-error.json");
