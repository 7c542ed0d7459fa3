//! Voyage embeddings (being written).

use async_trait::async_trait;

use super::{EmbedError, EmbedInput, Embedder, HttpSettings};

#[derive(Debug)]
pub struct VoyageEmbedder {
    settings: HttpSettings,
    id: String,
}

impl VoyageEmbedder {
    pub fn new(settings: HttpSettings) -> Result<Self, EmbedError> {
        Err(EmbedError::Config(format!(
            "voyage embeddings are not available yet ({})",
            settings.id("voyage")
        )))
    }
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
        _texts: &[String],
        _input: EmbedInput,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        Err(EmbedError::Config(
            "voyage embeddings are not available yet".to_owned(),
        ))
    }
}
