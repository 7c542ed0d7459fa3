//! The OpenAI Chat Completions client, for OpenAI itself and every server
//! that speaks the same API (Ollama, vLLM, llama.cpp, LM Studio, OpenRouter,
//! Groq, Gemini's compatible endpoint...).

mod wire;

use async_trait::async_trait;
use flynn_protocol::config::{ProviderConfig, ProviderKind};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};

use crate::http::{self, Transport};
use crate::{ClientInfo, Error, ModelClient, ModelRequest, ModelStream, Result, ToolNameMap};

/// A Chat Completions client. Always streams; `complete()` drains the stream.
#[derive(Debug)]
pub(crate) struct OpenAiClient {
    info: ClientInfo,
    transport: Transport,
    url: String,
    /// `Authorization: Bearer <key>`, when a key is configured.
    authorization: Option<HeaderValue>,
}

impl OpenAiClient {
    pub fn new(name: &str, config: &ProviderConfig) -> Result<Self> {
        let url = format!("{}/chat/completions", http::base_url(name, config)?);
        let authorization = http::api_key(config)
            .map(|key| {
                let mut value = http::header_value(name, "API key", &format!("Bearer {key}"))?;
                value.set_sensitive(true);
                Ok::<_, Error>(value)
            })
            .transpose()?;
        Ok(OpenAiClient {
            info: ClientInfo {
                provider: name.to_owned(),
                kind: config.kind,
            },
            transport: Transport::new(name, config)?,
            url,
            authorization,
        })
    }

    fn kind(&self) -> ProviderKind {
        self.info.kind
    }
}

#[async_trait]
impl ModelClient for OpenAiClient {
    fn info(&self) -> &ClientInfo {
        &self.info
    }

    async fn stream(&self, request: ModelRequest) -> Result<ModelStream> {
        if self.authorization.is_none() && self.kind().requires_api_key() {
            return Err(Error::MissingApiKey {
                provider: self.info.provider.clone(),
                env: self.kind().api_key_env(),
            });
        }
        let names = ToolNameMap::new(&request.tools);
        let body = wire::request_body(self.kind(), &request, &names);
        let mut headers = HeaderMap::new();
        if let Some(authorization) = &self.authorization {
            headers.insert(AUTHORIZATION, authorization.clone());
        }
        let response = self
            .transport
            .post_json(&self.url, headers, &body, wire::is_context_overflow)
            .await?;
        let assembler = wire::ChatAssembler::new(self.transport.provider(), &request.model, names);
        Ok(self.transport.event_stream(response, assembler))
    }
}
