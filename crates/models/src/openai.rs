//! The OpenAI Chat Completions client, for OpenAI itself and every server
//! that speaks the same API (Ollama, vLLM, llama.cpp, LM Studio, OpenRouter,
//! Groq, Gemini's compatible endpoint...).

pub(crate) mod wire;

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::config::{ProviderConfig, ProviderKind};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde_json::json;

use crate::context_window::{llamacpp_props_window, ollama_show_window};
use crate::http::{self, Transport};
use crate::preset::{Detection, preset};
use crate::{ClientInfo, Error, ModelClient, ModelRequest, ModelStream, Result, ToolNameMap};

/// Longest wait for a server's model information: it is a local server
/// reading a file header, so anything slower is not worth waiting for.
const DETECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// A Chat Completions client. Always streams; `complete()` drains the stream.
#[derive(Debug)]
pub(crate) struct OpenAiClient {
    info: ClientInfo,
    transport: Transport,
    url: String,
    /// `Authorization: Bearer <key>`, when a key is configured.
    authorization: Option<HeaderValue>,
    /// How and where to ask the server for a model's context window.
    detection: Option<(Detection, String)>,
    /// What the server answered, per model (`None`: it answered without a
    /// window). Failed requests are not kept, so they are asked again.
    windows: Mutex<HashMap<String, Option<u32>>>,
}

impl OpenAiClient {
    pub fn new(name: &str, config: &ProviderConfig) -> Result<Self> {
        let base = http::base_url(name, config)?;
        let url = format!("{base}/chat/completions");
        // The native endpoints live at the server's root, beside `/v1`.
        let root = base.strip_suffix("/v1").unwrap_or(&base);
        let detection = preset(config.kind).detection.map(|detection| {
            let path = match detection {
                Detection::OllamaShow => "/api/show",
                Detection::LlamacppProps => "/props",
            };
            (detection, format!("{root}{path}"))
        });
        let authorization = http::api_key(config)
            .map(|key| {
                let mut value = http::header_value(name, "API key", &format!("Bearer {key}"))?;
                value.set_sensitive(true);
                Ok::<_, Error>(value)
            })
            .transpose()?;
        Ok(OpenAiClient {
            info: ClientInfo::for_provider(name, config),
            transport: Transport::new(name, config)?,
            url,
            authorization,
            detection,
            windows: Mutex::default(),
        })
    }

    /// The `Authorization` header for requests besides model calls.
    fn authorization_header(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = &self.authorization {
            headers.insert(reqwest::header::AUTHORIZATION, value.clone());
        }
        headers
    }

    /// Asks the server for `model`'s context window.
    async fn detect_window(
        &self,
        detection: Detection,
        url: &str,
        model: &str,
    ) -> Result<Option<u32>> {
        let (method, body) = match detection {
            Detection::OllamaShow => (reqwest::Method::POST, Some(json!({ "model": model }))),
            Detection::LlamacppProps => (reqwest::Method::GET, None),
        };
        let answer = self
            .transport
            .json_request(
                method,
                url,
                body.as_ref(),
                self.authorization_header(),
                DETECTION_TIMEOUT,
            )
            .await?;
        Ok(match detection {
            Detection::OllamaShow => ollama_show_window(&answer),
            Detection::LlamacppProps => llamacpp_props_window(&answer),
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

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream> {
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

    async fn context_window(&self, model: &str) -> Option<u32> {
        let (detection, url) = self.detection.as_ref()?;
        let known = self
            .windows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(model)
            .copied();
        if let Some(window) = known {
            return window;
        }
        match self.detect_window(*detection, url, model).await {
            Ok(window) => {
                self.windows
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(model.to_owned(), window);
                window
            }
            Err(error) => {
                tracing::debug!(
                    provider = %self.info.provider,
                    model,
                    %error,
                    "could not ask the server for the context window"
                );
                None
            }
        }
    }
}
