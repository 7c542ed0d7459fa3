//! Compaction of older messages, memory and its embedders.

use super::*;

/// When and how older messages are summarised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactionConfig {
    /// Off: a conversation grows until the model refuses it.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Compact when the prompt reaches this percentage of the model's
    /// context window.
    #[serde(default = "default_threshold_pct")]
    pub threshold_pct: u8,
    /// The most recent turns kept word for word.
    #[serde(default = "default_keep_turns")]
    pub keep_turns: u32,
    /// Seconds the summariser may take before the summary is built
    /// without it (an extractive summary).
    #[serde(default = "default_compaction_timeout")]
    pub timeout_secs: u64,
    /// The longest summary asked for, in tokens.
    #[serde(default = "default_summary_max_tokens")]
    pub summary_max_tokens: u32,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            enabled: true,
            threshold_pct: default_threshold_pct(),
            keep_turns: default_keep_turns(),
            timeout_secs: default_compaction_timeout(),
            summary_max_tokens: default_summary_max_tokens(),
        }
    }
}

pub(super) fn yes() -> bool {
    true
}

fn default_threshold_pct() -> u8 {
    80
}

fn default_keep_turns() -> u32 {
    4
}

fn default_compaction_timeout() -> u64 {
    60
}

fn default_summary_max_tokens() -> u32 {
    2048
}

/// Memory: markdown files that are the truth, a search index rebuilt
/// from them, and the `[Memory Context]` section of the system prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryConfig {
    /// Off: no memory tools, no `[Memory Context]`, no extraction.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Where the memory files live; `FLYNN_HOME/memory` when absent. Not
    /// used with the sessions in PostgreSQL: memory is kept there too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// The search index (SQLite, rebuilt from the files whenever they
    /// change); `FLYNN_HOME/memory-index.db` when absent. Not used with
    /// the sessions in PostgreSQL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<PathBuf>,
    /// The most tokens `[Memory Context]` adds to one turn's prompt.
    #[serde(default = "default_memory_context_tokens")]
    pub max_context_tokens: u32,
    /// Search hits for the message added to `[Memory Context]` after the
    /// user and global memory, at most.
    #[serde(default = "default_memory_context_hits")]
    pub context_hits: u32,
    /// After compaction, extract facts worth keeping from what it
    /// summarised and append them to `user.md` or `global.md`.
    #[serde(default = "yes")]
    pub auto_extract: bool,
    /// The embedder for vector search; absent: search is keyword (BM25)
    /// only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embeddings: Option<EmbeddingsConfig>,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        MemoryConfig {
            enabled: true,
            dir: None,
            index: None,
            max_context_tokens: default_memory_context_tokens(),
            context_hits: default_memory_context_hits(),
            auto_extract: true,
            embeddings: None,
        }
    }
}

fn default_memory_context_tokens() -> u32 {
    2000
}

fn default_memory_context_hits() -> u32 {
    5
}

/// Which service turns memory text into vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EmbedderKind {
    /// `POST /v1/embeddings` of OpenAI or any compatible server (vLLM,
    /// llama.cpp, LM Studio, OpenRouter...).
    Openai,
    /// Ollama's native `POST /api/embed`.
    Ollama,
    /// Google Gemini's `batchEmbedContents`.
    Gemini,
    /// Voyage AI's `POST /v1/embeddings`.
    Voyage,
    /// all-MiniLM-L6-v2 run in-process (cargo feature `local-embeddings`);
    /// needs `model_dir`, no network.
    Local,
}

/// The embedder used by the memory index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsConfig {
    /// The service.
    pub kind: EmbedderKind,
    /// Reuse the base URL and API key of this entry of `providers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Base URL; the service's public endpoint when absent (Ollama:
    /// `http://localhost:11434`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// API key; usually `${OPENAI_API_KEY}`, `${GEMINI_API_KEY}` or
    /// `${VOYAGE_API_KEY}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Model id; each kind has a default (`text-embedding-3-small`,
    /// `nomic-embed-text`, `gemini-embedding-001`, `voyage-3.5-lite`,
    /// `all-MiniLM-L6-v2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Vector size to ask for, where the service lets you choose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<u32>,
    /// `local` only: the directory holding `config.json`,
    /// `tokenizer.json` and `model.safetensors`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_dir: Option<PathBuf>,
    /// Texts sent in one request.
    #[serde(default = "default_embed_batch")]
    pub batch_size: u32,
    /// Seconds one request may take.
    #[serde(default = "default_embed_timeout")]
    pub timeout_secs: u64,
}

fn default_embed_batch() -> u32 {
    64
}

fn default_embed_timeout() -> u64 {
    30
}
