//! OpenAI's `POST /v1/embeddings`, which compatible servers (vLLM,
//! llama.cpp, LM Studio, OpenRouter, Ollama's `/v1`) speak too.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{EmbedError, EmbedInput, Embedder, HttpSettings, check_vectors};
use crate::http;

const SERVICE: &str = "openai";
/// Texts per request OpenAI accepts.
pub const MAX_BATCH: usize = 2048;

/// Embeds through an OpenAI-compatible `/embeddings` endpoint.
#[derive(Debug)]
pub struct OpenAiEmbedder {
    settings: HttpSettings,
    id: String,
    client: reqwest::Client,
}

impl OpenAiEmbedder {
    /// `settings.base_url` ends where OpenAI's does, in `/v1`. At most
    /// 2,048 texts go in one request (OpenAI's limit).
    pub fn new(mut settings: HttpSettings) -> Result<Self, EmbedError> {
        settings.batch_size = settings.batch_size.clamp(1, MAX_BATCH);
        Ok(OpenAiEmbedder {
            id: settings.id(SERVICE),
            client: http::client(SERVICE, settings.timeout)?,
            settings,
        })
    }
}

#[derive(Deserialize)]
struct Response {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    embedding: Vec<f32>,
    index: usize,
}

#[async_trait]
impl Embedder for OpenAiEmbedder {
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
        for batch in texts.chunks(self.settings.batch_size) {
            let mut body = json!({
                "model": self.settings.model,
                "input": batch,
                "encoding_format": "float",
            });
            if let Some(dimensions) = self.settings.dimensions {
                body["dimensions"] = Value::from(dimensions);
            }
            let mut request = self
                .client
                .post(self.settings.url("/embeddings"))
                .json(&body);
            if let Some(key) = &self.settings.api_key {
                request = request.bearer_auth(key);
            }
            let response: Response = http::send(SERVICE, request).await?;
            let mut data = response.data;
            data.sort_by_key(|item| item.index);
            if data.iter().enumerate().any(|(i, item)| item.index != i) {
                return Err(EmbedError::Decode {
                    service: SERVICE,
                    message: "the answer's indexes do not match the texts sent".to_owned(),
                });
            }
            let batch_vectors: Vec<Vec<f32>> =
                data.into_iter().map(|item| item.embedding).collect();
            check_vectors(SERVICE, &batch_vectors, batch.len())?;
            vectors.extend(batch_vectors);
        }
        Ok(vectors)
    }
}
