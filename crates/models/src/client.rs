use std::borrow::Cow;
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

/// One call to a model. The history, tools and texts are borrowed where
/// the caller holds them ([`Cow`]), so a call copies nothing: a turn lends
/// its history, and the router re-targets the same request at each model
/// it tries ([`ModelRequest::for_model`]). Owned values work too.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest<'a> {
    /// The provider's model id (`claude-sonnet-4-5`, `gpt-4o-mini`).
    pub model: Cow<'a, str>,
    pub system: Option<Cow<'a, str>>,
    pub messages: Cow<'a, [Message]>,
    /// Tools offered, with their dotted names; clients map names for the wire.
    pub tools: Cow<'a, [ToolSpec]>,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
}

impl<'a> ModelRequest<'a> {
    pub fn new(model: impl Into<Cow<'a, str>>, messages: impl Into<Cow<'a, [Message]>>) -> Self {
        ModelRequest {
            model: model.into(),
            system: None,
            messages: messages.into(),
            tools: Cow::Borrowed(&[]),
            max_tokens: 4096,
            temperature: None,
        }
    }

    /// The same request for `model`, borrowing everything else.
    pub fn for_model<'b>(&'b self, model: &'b str) -> ModelRequest<'b> {
        ModelRequest {
            model: Cow::Borrowed(model),
            system: self.system.as_deref().map(Cow::Borrowed),
            messages: Cow::Borrowed(&self.messages),
            tools: Cow::Borrowed(&self.tools),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
        }
    }

    /// The request owning all it holds, to keep beyond its borrows.
    pub fn into_owned(self) -> ModelRequest<'static> {
        ModelRequest {
            model: Cow::Owned(self.model.into_owned()),
            system: self.system.map(|system| Cow::Owned(system.into_owned())),
            messages: Cow::Owned(self.messages.into_owned()),
            tools: Cow::Owned(self.tools.into_owned()),
            max_tokens: self.max_tokens,
            temperature: self.temperature,
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
    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream>;

    /// The context window, in tokens, the server says it serves `model`
    /// with, when the provider can be asked (Ollama, llama.cpp); `None`
    /// when it cannot, or did not answer. Implementations cache answers per
    /// model. Configuration and the built-in table are
    /// [`crate::ContextWindows`]' business, not the client's.
    async fn context_window(&self, _model: &str) -> Option<u32> {
        None
    }

    /// Sends the request and waits for the whole answer.
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelResponse> {
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
