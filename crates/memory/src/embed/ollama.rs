//! Ollama embeddings (being written).

use async_trait::async_trait;

use super::{EmbedError, EmbedInput, Embedder, HttpSettings};

#[derive(Debug)]
pub struct OllamaEmbedder {
    settings: HttpSettings,
    id: String,
}

impl OllamaEmbedder {
    pub fn new(settings: HttpSettings) -> Result<Self, EmbedError> {
        Err(EmbedError::Config(format!(
            "ollama embeddings are not available yet ({})",
            settings.id("ollama")
        )))
    }
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
        _texts: &[String],
        _input: EmbedInput,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        Err(EmbedError::Config(
            "ollama embeddings are not available yet".to_owned(),
        ))
    }
}
