//! The Anthropic Messages API client, written on the shared transport.

pub(crate) mod wire;

use async_trait::async_trait;
use flynn_protocol::config::ProviderConfig;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::http::{self, Transport};
use crate::{ClientInfo, Error, ModelClient, ModelRequest, ModelStream, Result, ToolNameMap};

/// The API version this client speaks.
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A Messages API client. Always streams; `complete()` drains the stream.
#[derive(Debug)]
pub(crate) struct AnthropicClient {
    info: ClientInfo,
    transport: Transport,
    url: String,
    /// The `x-api-key` value, when a key is configured.
    api_key: Option<HeaderValue>,
}

impl AnthropicClient {
    pub fn new(name: &str, config: &ProviderConfig) -> Result<Self> {
        let base = http::base_url(name, config)?;
        // Accept both `https://api.anthropic.com` and `.../v1`.
        let url = if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        };
        let api_key = http::api_key(config)
            .map(|key| {
                let mut value = http::header_value(name, "API key", &key)?;
                value.set_sensitive(true);
                Ok::<_, Error>(value)
            })
            .transpose()?;
        Ok(AnthropicClient {
            info: ClientInfo::for_provider(name, config),
            transport: Transport::new(name, config)?,
            url,
            api_key,
        })
    }
}

#[async_trait]
impl ModelClient for AnthropicClient {
    fn info(&self) -> &ClientInfo {
        &self.info
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream> {
        let Some(api_key) = &self.api_key else {
            return Err(Error::MissingApiKey {
                provider: self.info.provider.clone(),
                env: self.info.kind.api_key_env(),
            });
        };
        let names = ToolNameMap::new(&request.tools);
        let body = wire::request_body(&request, &names);
        let mut headers = HeaderMap::new();
        headers.insert(HeaderName::from_static("x-api-key"), api_key.clone());
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        let response = self
            .transport
            .post_json(&self.url, headers, &body, wire::is_context_overflow)
            .await?;
        let assembler =
            wire::MessagesAssembler::new(self.transport.provider(), &request.model, names);
        Ok(self.transport.event_stream(response, assembler))
    }
}
