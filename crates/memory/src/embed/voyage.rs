//! Voyage AI's `POST /v1/embeddings`: `{"input": [...], "model",
//! "input_type": "query" | "document"}` with a bearer key →
//! `{"data": [{"embedding": [...], "index": i}, ...]}`. At most 1,000
//! texts a call.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{EmbedError, EmbedInput, Embedder, HttpSettings, check_vectors};
use crate::http;

const SERVICE: &str = "voyage";
/// Texts per call the API accepts.
pub const MAX_BATCH: usize = 1000;

/// Embeds through the Voyage AI API.
#[derive(Debug)]
pub struct VoyageEmbedder {
    settings: HttpSettings,
    id: String,
    client: reqwest::Client,
}

impl VoyageEmbedder {
    /// `settings.base_url` ends in `/v1`.
    pub fn new(mut settings: HttpSettings) -> Result<Self, EmbedError> {
        settings.batch_size = settings.batch_size.clamp(1, MAX_BATCH);
        Ok(VoyageEmbedder {
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
impl Embedder for VoyageEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn batch_size(&self) -> usize {
        self.settings.batch_size
    }

    async fn embed(
        &self,
        texts: &[String],
        input: EmbedInput,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let input_type = match input {
            EmbedInput::Query => "query",
            EmbedInput::Document => "document",
        };
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.settings.batch_size) {
            let mut body = json!({
                "input": batch,
                "model": self.settings.model,
                "input_type": input_type,
            });
            if let Some(dimensions) = self.settings.dimensions {
                body["output_dimension"] = Value::from(dimensions);
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
