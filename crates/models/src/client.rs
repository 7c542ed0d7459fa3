use std::pin::Pin;

use async_trait::async_trait;
use flynn_protocol::config::{ProviderConfig, ProviderKind};
use flynn_protocol::{Message, ToolSpec, Usage};
use futures::{Stream, StreamExt};

use crate::{Error, Result};

/// What a client is, as data: the configured provider name, its kind, and
/// whether it runs on a machine the user controls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientInfo {
    /// The key of `providers` in config (`anthropic`, `local`...).
    pub provider: String,
    pub kind: ProviderKind,
    /// Whether the server is on this machine or its private network: the
    /// `local` tier uses only these while `models.local_only` is on.
    pub local: bool,
}

impl ClientInfo {
    pub fn new(provider: impl Into<String>, kind: ProviderKind, local: bool) -> Self {
        ClientInfo {
            provider: provider.into(),
            kind,
            local,
        }
    }

    /// The info of a client built from a provider's config: its `local`
    /// setting, else a guess from its base URL (a loopback, private or
    /// `.local` host; the kind's default URL when none is set).
    pub fn for_provider(provider: &str, config: &ProviderConfig) -> Self {
        ClientInfo::new(provider, config.kind, crate::locality::is_local(config))
    }
}

/// One call to a model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The provider's model id (`claude-sonnet-4-5`, `gpt-4o-mini`).
    pub model: String,
    pub system: Option<String>,
    pub messages: Vec<Message>,
    /// Tools offered, with their dotted names; clients map names for the wire.
    pub tools: Vec<ToolSpec>,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
}

impl ModelRequest {
    pub fn new(model: impl Into<String>, messages: Vec<Message>) -> Self {
        ModelRequest {
            model: model.into(),
            system: None,
            messages,
            tools: Vec::new(),
            max_tokens: 4096,
            temperature: None,
        }
    }
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// A finished answer.
    EndTurn,
    /// It wants tool results before going on.
    ToolUse,
    /// It hit `max_tokens`.
    MaxTokens,
    StopSequence,
    /// It declined to answer.
    Refusal,
    /// Anything else the provider said, verbatim.
    Other(String),
}

/// The assembled result of one model call.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelResponse {
    /// The assistant message: text, thinking and tool-use blocks in order,
    /// tool names already mapped back to their dotted form.
    pub message: Message,
    pub stop_reason: StopReason,
    pub usage: Usage,
    /// The model id the server says answered.
    pub model: String,
}

/// What a streaming call yields. Deltas come first, as they arrive; the
/// stream ends with exactly one `Completed` holding the assembled response.
/// A stream that ends without `Completed` was cut off.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    TextDelta(String),
    ThinkingDelta(String),
    /// The model began a tool call (arguments are still streaming).
    ToolUseStart {
        id: String,
        name: String,
    },
    Completed(ModelResponse),
}

pub type ModelStream = Pin<Box<dyn Stream<Item = Result<StreamEvent>> + Send>>;

/// A model provider. Implementations must be cheap to share (`Arc`) and
/// must not retry on their own: retries and fallback are the router's job.
#[async_trait]
pub trait ModelClient: Send + Sync {
    fn info(&self) -> &ClientInfo;

    /// Sends the request and streams the answer. Errors before the first
    /// byte of the answer come back here; errors after it come through the
    /// stream.
    async fn stream(&self, request: ModelRequest) -> Result<ModelStream>;

    /// The context window, in tokens, the server says it serves `model`
    /// with, when the provider can be asked (Ollama, llama.cpp); `None`
    /// when it cannot, or did not answer. Implementations cache answers per
    /// model. Configuration and the built-in table are
    /// [`crate::ContextWindows`]' business, not the client's.
    async fn context_window(&self, _model: &str) -> Option<u32> {
        None
    }

    /// Sends the request and waits for the whole answer.
    async fn complete(&self, request: ModelRequest) -> Result<ModelResponse> {
        let provider = self.info().provider.clone();
        drain(&provider, self.stream(request).await?).await
    }
}

/// Reads a stream to its `Completed` event.
pub async fn drain(provider: &str, mut stream: ModelStream) -> Result<ModelResponse> {
    while let Some(event) = stream.next().await {
        if let StreamEvent::Completed(response) = event? {
            return Ok(response);
        }
    }
    Err(Error::Stream {
        provider: provider.to_owned(),
        message: "the stream ended before the answer was complete".to_owned(),
    })
}
