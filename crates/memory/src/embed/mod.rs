//! Embedders: turn memory text into vectors for the index's similarity
//! search. One trait, one implementation per service, and a factory that
//! builds the configured one.

mod gemini;
#[cfg(feature = "local-embeddings")]
mod local;
mod ollama;
mod openai;
mod voyage;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::config::{EmbedderKind, EmbeddingsConfig, ProviderConfig};

pub use gemini::GeminiEmbedder;
#[cfg(feature = "local-embeddings")]
pub use local::LocalEmbedder;
pub use ollama::OllamaEmbedder;
pub use openai::OpenAiEmbedder;
pub use voyage::VoyageEmbedder;

/// What a text is embedded for. Services that embed queries and documents
/// differently (Gemini's `taskType`, Voyage's `input_type`) are told; the
/// others ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedInput {
    /// A search query.
    Query,
    /// A chunk of a memory file.
    Document,
}

/// Turns texts into vectors.
#[async_trait]
pub trait Embedder: Send + Sync + fmt::Debug {
    /// Names the vector space: kind, model and, when asked for, the size
    /// (`openai/text-embedding-3-small@512`). The index rebuilds every
    /// vector when it changes.
    fn id(&self) -> &str;

    /// Texts sent in one request at most; callers split longer lists.
    fn batch_size(&self) -> usize;

    /// One vector per text, in order. All vectors have the same length.
    async fn embed(&self, texts: &[String], input: EmbedInput)
    -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Why texts could not be embedded.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The configuration cannot make an embedder.
    #[error("memory.embeddings: {0}")]
    Config(String),
    /// The service answered with an error status.
    #[error("{service} embeddings: HTTP {status}: {message}")]
    Status {
        service: &'static str,
        status: u16,
        message: String,
    },
    /// The service answered with a redirect, which is not followed: the
    /// key travels in headers (`x-goog-api-key`) a redirect would carry
    /// to another host.
    #[error(
        "{service} embeddings: the service answered with a redirect (HTTP {status}) to {to}; API keys are not sent across redirects: check memory.embeddings.base_url"
    )]
    Redirect {
        service: &'static str,
        status: u16,
        /// Where it pointed: `host[:port]`, or what the `Location` said.
        to: String,
    },
    /// The service could not be reached or did not answer in time.
    #[error("{service} embeddings: {message}")]
    Transport {
        service: &'static str,
        message: String,
    },
    /// The answer was not what the service documents.
    #[error("{service} embeddings: unexpected answer: {message}")]
    Decode {
        service: &'static str,
        message: String,
    },
    /// The local model could not be loaded or run.
    #[error("local embeddings: {0}")]
    Local(String),
}

impl EmbedError {
    /// Whether trying again later may work (the service is down, slow or
    /// rate limiting), as opposed to a configuration or model problem.
    pub fn is_transient(&self) -> bool {
        match self {
            EmbedError::Transport { .. } => true,
            EmbedError::Status { status, .. } => *status == 429 || *status >= 500,
            EmbedError::Config(_)
            | EmbedError::Redirect { .. }
            | EmbedError::Decode { .. }
            | EmbedError::Local(_) => false,
        }
    }
}

/// What every HTTP embedder is built from.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// Without a trailing slash.
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
    pub dimensions: Option<u32>,
    pub batch_size: usize,
    pub timeout: Duration,
}

impl fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpSettings")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("model", &self.model)
            .field("dimensions", &self.dimensions)
            .field("batch_size", &self.batch_size)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl HttpSettings {
    /// The vector-space id: `kind/model`, plus `@dimensions` when asked.
    pub fn id(&self, kind: &str) -> String {
        match self.dimensions {
            Some(dimensions) => format!("{kind}/{}@{dimensions}", self.model),
            None => format!("{kind}/{}", self.model),
        }
    }

    /// `base_url` + `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }
}

/// The model each kind uses when the config names none.
pub fn default_model(kind: EmbedderKind) -> &'static str {
    match kind {
        EmbedderKind::Openai => "text-embedding-3-small",
        EmbedderKind::Ollama => "nomic-embed-text",
        EmbedderKind::Gemini => "gemini-embedding-001",
        EmbedderKind::Voyage => "voyage-3.5-lite",
        EmbedderKind::Local => "all-MiniLM-L6-v2",
    }
}

fn default_base_url(kind: EmbedderKind) -> Option<&'static str> {
    match kind {
        EmbedderKind::Openai => Some("https://api.openai.com/v1"),
        EmbedderKind::Ollama => Some("http://localhost:11434"),
        EmbedderKind::Gemini => Some("https://generativelanguage.googleapis.com/v1beta"),
        EmbedderKind::Voyage => Some("https://api.voyageai.com/v1"),
        EmbedderKind::Local => None,
    }
}

fn kind_name(kind: EmbedderKind) -> &'static str {
    match kind {
        EmbedderKind::Openai => "openai",
        EmbedderKind::Ollama => "ollama",
        EmbedderKind::Gemini => "gemini",
        EmbedderKind::Voyage => "voyage",
        EmbedderKind::Local => "local",
    }
}

/// Builds the configured embedder. `providers` is the config's
/// `providers` block, for `embeddings.provider`.
pub fn from_config(
    config: &EmbeddingsConfig,
    providers: &BTreeMap<String, ProviderConfig>,
) -> Result<Arc<dyn Embedder>, EmbedError> {
    if config.kind == EmbedderKind::Local {
        return local_from_config(config);
    }
    let provider = match &config.provider {
        Some(name) => Some(providers.get(name).ok_or_else(|| {
            let known: Vec<&str> = providers.keys().map(String::as_str).collect();
            EmbedError::Config(format!(
                "provider '{name}' is not configured (providers: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ))
        })?),
        None => None,
    };
    let base_url = config
        .base_url
        .clone()
        .or_else(|| provider.and_then(|p| p.base_url.clone()))
        .or_else(|| {
            provider
                .and_then(|p| p.kind.default_base_url())
                .map(str::to_owned)
        })
        .or_else(|| default_base_url(config.kind).map(str::to_owned))
        .unwrap_or_default();
    let api_key = config
        .api_key
        .clone()
        .or_else(|| provider.and_then(|p| p.api_key.clone()))
        .filter(|key| !key.is_empty());
    let needs_key = matches!(config.kind, EmbedderKind::Gemini | EmbedderKind::Voyage)
        || (config.kind == EmbedderKind::Openai && base_url.contains("api.openai.com"));
    let name = kind_name(config.kind);
    if needs_key && api_key.is_none() {
        let var = match config.kind {
            EmbedderKind::Gemini => "GEMINI_API_KEY",
            EmbedderKind::Voyage => "VOYAGE_API_KEY",
            _ => "OPENAI_API_KEY",
        };
        return Err(EmbedError::Config(format!(
            "{name} embeddings need an API key: set memory.embeddings.api_key (for example to ${{{var}}}) or name a provider that has one"
        )));
    }
    let settings = HttpSettings {
        base_url: base_url.trim_end_matches('/').to_owned(),
        api_key,
        model: config
            .model
            .clone()
            .unwrap_or_else(|| default_model(config.kind).to_owned()),
        dimensions: config.dimensions,
        batch_size: config.batch_size.max(1) as usize,
        timeout: Duration::from_secs(config.timeout_secs.max(1)),
    };
    Ok(match config.kind {
        EmbedderKind::Openai => Arc::new(OpenAiEmbedder::new(settings)?),
        EmbedderKind::Ollama => Arc::new(OllamaEmbedder::new(settings)?),
        EmbedderKind::Gemini => Arc::new(GeminiEmbedder::new(settings)?),
        EmbedderKind::Voyage => Arc::new(VoyageEmbedder::new(settings)?),
        EmbedderKind::Local => return local_from_config(config),
    })
}

#[cfg(feature = "local-embeddings")]
fn local_from_config(config: &EmbeddingsConfig) -> Result<Arc<dyn Embedder>, EmbedError> {
    let Some(dir) = &config.model_dir else {
        return Err(EmbedError::Config(
            "kind local needs model_dir: the directory holding config.json, tokenizer.json and model.safetensors (scripts/fetch-minilm.sh fetches them)".to_owned(),
        ));
    };
    Ok(Arc::new(LocalEmbedder::load(
        dir,
        config.batch_size.max(1) as usize,
    )?))
}

#[cfg(not(feature = "local-embeddings"))]
fn local_from_config(_config: &EmbeddingsConfig) -> Result<Arc<dyn Embedder>, EmbedError> {
    Err(EmbedError::Config(
        "kind local needs a Flynn built with the cargo feature local-embeddings".to_owned(),
    ))
}

/// Checks that `vectors` answers `count` texts with vectors of one size.
pub(crate) fn check_vectors(
    service: &'static str,
    vectors: &[Vec<f32>],
    count: usize,
) -> Result<(), EmbedError> {
    if vectors.len() != count {
        return Err(EmbedError::Decode {
            service,
            message: format!("{} vectors for {count} texts", vectors.len()),
        });
    }
    if let Some(first) = vectors.first() {
        if first.is_empty() {
            return Err(EmbedError::Decode {
                service,
                message: "an empty vector".to_owned(),
            });
        }
        if let Some(other) = vectors.iter().find(|v| v.len() != first.len()) {
            return Err(EmbedError::Decode {
                service,
                message: format!(
                    "vectors of different sizes ({} and {})",
                    first.len(),
                    other.len()
                ),
            });
        }
    }
    Ok(())
}
