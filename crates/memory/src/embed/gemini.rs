//! Google Gemini's `POST /models/{model}:batchEmbedContents` with the key
//! in `x-goog-api-key`: one request per text in `requests`, each naming
//! the model and a task type (`RETRIEVAL_QUERY` or `RETRIEVAL_DOCUMENT`)
//! → `{"embeddings": [{"values": [...]}, ...]}`. At most 100 texts a call.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{EmbedError, EmbedInput, Embedder, HttpSettings, check_vectors};
use crate::http;

const SERVICE: &str = "gemini";
/// Texts per `batchEmbedContents` call the API accepts.
pub const MAX_BATCH: usize = 100;

/// Embeds through the Gemini API.
#[derive(Debug)]
pub struct GeminiEmbedder {
    settings: HttpSettings,
    id: String,
    client: reqwest::Client,
}

impl GeminiEmbedder {
    /// `settings.base_url` ends in the API version (`.../v1beta`); the
    /// model may be given with or without `models/`.
    pub fn new(mut settings: HttpSettings) -> Result<Self, EmbedError> {
        if let Some(model) = settings.model.strip_prefix("models/") {
            settings.model = model.to_owned();
        }
        settings.batch_size = settings.batch_size.clamp(1, MAX_BATCH);
        Ok(GeminiEmbedder {
            id: settings.id(SERVICE),
            client: http::client(SERVICE, settings.timeout)?,
            settings,
        })
    }
}

#[derive(Deserialize)]
struct Response {
    embeddings: Vec<Values>,
}

#[derive(Deserialize)]
struct Values {
    values: Vec<f32>,
}

#[async_trait]
impl Embedder for GeminiEmbedder {
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
        let model = format!("models/{}", self.settings.model);
        let task = match input {
            EmbedInput::Query => "RETRIEVAL_QUERY",
            EmbedInput::Document => "RETRIEVAL_DOCUMENT",
        };
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.settings.batch_size) {
            let requests: Vec<Value> = batch
                .iter()
                .map(|text| {
                    let mut request = json!({
                        "model": model,
                        "content": {"parts": [{"text": text}]},
                        "taskType": task,
                    });
                    if let Some(dimensions) = self.settings.dimensions {
                        request["outputDimensionality"] = Value::from(dimensions);
                    }
                    request
                })
                .collect();
            let mut request = self
                .client
                .post(self.settings.url(&format!("/{model}:batchEmbedContents")))
                .json(&json!({ "requests": requests }));
            if let Some(key) = &self.settings.api_key {
                request = request.header("x-goog-api-key", key);
            }
            let response: Response = http::send(SERVICE, request).await?;
            let batch_vectors: Vec<Vec<f32>> =
                response.embeddings.into_iter().map(|e| e.values).collect();
            check_vectors(SERVICE, &batch_vectors, batch.len())?;
            vectors.extend(batch_vectors);
        }
        Ok(vectors)
    }
}
