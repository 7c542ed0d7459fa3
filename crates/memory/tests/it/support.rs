//! An in-process embedder for index tests: counts what it embeds, can be
//! told to fail, and gives texts that share words similar vectors.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;
use flynn_memory::{EmbedError, EmbedInput, Embedder};

#[derive(Debug)]
pub struct TestEmbedder {
    id: String,
    dimensions: usize,
    pub texts: AtomicUsize,
    pub calls: AtomicUsize,
    pub failing: AtomicBool,
    pub seen: Mutex<Vec<String>>,
}

impl TestEmbedder {
    pub fn new(id: &str, dimensions: usize) -> Self {
        TestEmbedder {
            id: id.to_owned(),
            dimensions,
            texts: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
            failing: AtomicBool::new(false),
            seen: Mutex::new(Vec::new()),
        }
    }

    pub fn embedded(&self) -> usize {
        self.texts.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Embedder for TestEmbedder {
    fn id(&self) -> &str {
        &self.id
    }

    fn batch_size(&self) -> usize {
        16
    }

    async fn embed(
        &self,
        texts: &[String],
        input: EmbedInput,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(EmbedError::Status {
                service: "test",
                status: 503,
                message: "embedder is down".to_owned(),
            });
        }
        if input == EmbedInput::Document {
            self.texts.fetch_add(texts.len(), Ordering::SeqCst);
            self.seen.lock().unwrap().extend(texts.iter().cloned());
        }
        Ok(texts
            .iter()
            .map(|t| flynn_testkit::fake_embedding(t, self.dimensions))
            .collect())
    }
}
