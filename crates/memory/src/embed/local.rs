//! all-MiniLM-L6-v2 run in-process on candle: no network, no service.
//! What sentence-transformers computes for this model: BERT, mean pooling
//! over the real tokens, then normalisation; 384 dimensions.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

use super::{EmbedError, EmbedInput, Embedder, check_vectors};

/// sentence-transformers' `max_seq_length` for this model.
const MAX_TOKENS: usize = 256;
const ID: &str = "local/all-MiniLM-L6-v2";

struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    device: Device,
}

/// The local embedder.
pub struct LocalEmbedder {
    model: Arc<Model>,
    batch_size: usize,
    dir: PathBuf,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("dir", &self.dir)
            .field("batch_size", &self.batch_size)
            .finish_non_exhaustive()
    }
}

fn local(what: &str, error: impl std::fmt::Display) -> EmbedError {
    EmbedError::Local(format!("{what}: {error}"))
}

impl LocalEmbedder {
    /// Loads `config.json`, `tokenizer.json` and `model.safetensors` from
    /// `dir` (what `scripts/fetch-minilm.sh` fetches).
    pub fn load(dir: &Path, batch_size: usize) -> Result<Self, EmbedError> {
        let file = |name: &str| {
            let path = dir.join(name);
            if path.is_file() {
                Ok(path)
            } else {
                Err(EmbedError::Local(format!(
                    "{} is missing; run scripts/fetch-minilm.sh and set memory.embeddings.model_dir to the directory it prints",
                    path.display()
                )))
            }
        };
        let config_path = file("config.json")?;
        let tokenizer_path = file("tokenizer.json")?;
        let weights_path = file("model.safetensors")?;

        let config: Config = serde_json::from_slice(
            &std::fs::read(&config_path)
                .map_err(|e| local(&config_path.display().to_string(), e))?,
        )
        .map_err(|e| local(&config_path.display().to_string(), e))?;
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)
            .map_err(|e| local(&tokenizer_path.display().to_string(), e))?;
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..PaddingParams::default()
        }));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| local("tokenizer truncation", e))?;
        let device = Device::Cpu;
        let weights = std::fs::read(&weights_path)
            .map_err(|e| local(&weights_path.display().to_string(), e))?;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)
            .map_err(|e| local(&weights_path.display().to_string(), e))?;
        let bert = BertModel::load(vb, &config).map_err(|e| local("loading the model", e))?;
        Ok(LocalEmbedder {
            model: Arc::new(Model {
                bert,
                tokenizer,
                device,
            }),
            batch_size: batch_size.max(1),
            dir: dir.to_path_buf(),
        })
    }
}

impl Model {
    fn embed(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let encodings = self
            .tokenizer
            .encode_batch(texts, true)
            .map_err(|e| local("tokenizing", e))?;
        let rows = |get: &dyn Fn(&tokenizers::Encoding) -> &[u32]| {
            encodings
                .iter()
                .map(|encoding| Tensor::new(get(encoding), &self.device))
                .collect::<Result<Vec<_>, _>>()
                .and_then(|rows| Tensor::stack(&rows, 0))
        };
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let ids = rows(&|e| e.get_ids())?;
            let mask = rows(&|e| e.get_attention_mask())?;
            let types = ids.zeros_like()?;
            let hidden = self.bert.forward(&ids, &types, Some(&mask))?;
            // Mean over the real tokens (padding masked out).
            let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
            let counts = mask.sum(1)?.clamp(1e-9, f64::MAX)?;
            let pooled = summed.broadcast_div(&counts)?;
            let norms = pooled
                .sqr()?
                .sum_keepdim(1)?
                .sqrt()?
                .clamp(1e-12, f64::MAX)?;
            pooled.broadcast_div(&norms)?.to_vec2::<f32>()
        };
        run().map_err(|e| local("running the model", e))
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn id(&self) -> &str {
        ID
    }

    fn batch_size(&self) -> usize {
        self.batch_size
    }

    async fn embed(
        &self,
        texts: &[String],
        _input: EmbedInput,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.batch_size) {
            let model = Arc::clone(&self.model);
            let batch = batch.to_vec();
            let result = tokio::task::spawn_blocking(move || model.embed(batch))
                .await
                .map_err(|e| local("the model's task", e))??;
            vectors.extend(result);
        }
        check_vectors("local", &vectors, texts.len())?;
        Ok(vectors)
    }
}
