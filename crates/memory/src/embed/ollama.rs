//! Ollama's native `POST /api/embed`: `{"model", "input": [...]}` →
//! `{"embeddings": [[...], ...]}` (the server's documented batch form).

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{EmbedError, EmbedInput, Embedder, HttpSettings, check_vectors};
use crate::http;

const SERVICE: &str = "ollama";

/// Embeds through an Ollama server.
#[derive(Debug)]
pub struct OllamaEmbedder {
    settings: HttpSettings,
    id: String,
    client: reqwest::Client,
}

impl OllamaEmbedder {
    /// `settings.base_url` is the server (`http://localhost:11434`); a
    /// trailing `/v1` (a provider entry's OpenAI-compatible URL) is
    /// dropped.
    pub fn new(mut settings: HttpSettings) -> Result<Self, EmbedError> {
        if let Some(base) = settings.base_url.strip_suffix("/v1") {
            settings.base_url = base.to_owned();
        }
        Ok(OllamaEmbedder {
            id: settings.id(SERVICE),
            client: http::client(SERVICE, settings.timeout)?,
            settings,
        })
    }
}

#[derive(Deserialize)]
struct Response {
    embeddings: Vec<Vec<f32>>,
}

#[async_trait]
impl Embedder for OllamaEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn batch_size(&self) -> usize {
        self.settings.batch_size
    }

    async fn embed(
        &self,
        texts: &[String],
        _input: EmbedInput,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.settings.batch_size.max(1)) {
            let mut body = json!({
                "model": self.settings.model,
                "input": batch,
                "truncate": true,
            });
            if let Some(dimensions) = self.settings.dimensions {
                body["dimensions"] = Value::from(dimensions);
            }
            let mut request = self
                .client
                .post(self.settings.url("/api/embed"))
                .json(&body);
            if let Some(key) = &self.settings.api_key {
                request = request.bearer_auth(key);
            }
            let response: Response = http::send(SERVICE, request).await?;
            check_vectors(SERVICE, &response.embeddings, batch.len())?;
            vectors.extend(response.embeddings);
        }
        Ok(vectors)
    }
}
