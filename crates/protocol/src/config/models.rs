//! Providers, model references, tiers, retries and the circuit breaker.

use super::*;

/// The wire protocol a provider speaks, and the preset (base URL, key
/// variable, quirks) that goes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    /// Anthropic Messages API (`/v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    Openai,
    /// Any server speaking OpenAI Chat Completions. Needs `base_url`.
    OpenaiCompatible,
    /// Ollama's OpenAI-compatible endpoint (default `http://127.0.0.1:11434/v1`).
    Ollama,
    /// llama.cpp's `llama-server` (default `http://127.0.0.1:8080/v1`).
    Llamacpp,
    /// vLLM's OpenAI-compatible server (default `http://127.0.0.1:8000/v1`).
    Vllm,
    /// LM Studio's local server (default `http://127.0.0.1:1234/v1`).
    Lmstudio,
    /// OpenRouter (`https://openrouter.ai/api/v1`, key in `OPENROUTER_API_KEY`).
    Openrouter,
    /// GitHub Models (`https://models.github.ai/inference`, key in `GITHUB_TOKEN`).
    GithubModels,
    /// Groq (`https://api.groq.com/openai/v1`, key in `GROQ_API_KEY`).
    Groq,
    /// Google Gemini through its OpenAI-compatible endpoint.
    Gemini,
    /// AWS Bedrock Converse API (needs the `bedrock` build feature; AWS
    /// credentials from the usual AWS sources).
    Bedrock,
    /// A GGUF model run inside Flynn (needs the `local-llm` build
    /// feature): `model_path`, and optionally `threads` and `context`.
    Local,
}

impl ProviderKind {
    pub const ALL: [ProviderKind; 13] = [
        ProviderKind::Anthropic,
        ProviderKind::Openai,
        ProviderKind::OpenaiCompatible,
        ProviderKind::Ollama,
        ProviderKind::Llamacpp,
        ProviderKind::Vllm,
        ProviderKind::Lmstudio,
        ProviderKind::Openrouter,
        ProviderKind::GithubModels,
        ProviderKind::Groq,
        ProviderKind::Gemini,
        ProviderKind::Bedrock,
        ProviderKind::Local,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Openai => "openai",
            ProviderKind::OpenaiCompatible => "openai-compatible",
            ProviderKind::Ollama => "ollama",
            ProviderKind::Llamacpp => "llamacpp",
            ProviderKind::Vllm => "vllm",
            ProviderKind::Lmstudio => "lmstudio",
            ProviderKind::Openrouter => "openrouter",
            ProviderKind::GithubModels => "github-models",
            ProviderKind::Groq => "groq",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Bedrock => "bedrock",
            ProviderKind::Local => "local",
        }
    }

    /// The base URL used when the config names none, if the kind has one.
    /// Bedrock's endpoint comes from the region instead.
    pub fn default_base_url(self) -> Option<&'static str> {
        match self {
            ProviderKind::Anthropic => Some("https://api.anthropic.com"),
            ProviderKind::Openai => Some("https://api.openai.com/v1"),
            ProviderKind::OpenaiCompatible | ProviderKind::Bedrock | ProviderKind::Local => None,
            ProviderKind::Ollama => Some("http://127.0.0.1:11434/v1"),
            ProviderKind::Llamacpp => Some("http://127.0.0.1:8080/v1"),
            ProviderKind::Vllm => Some("http://127.0.0.1:8000/v1"),
            ProviderKind::Lmstudio => Some("http://127.0.0.1:1234/v1"),
            ProviderKind::Openrouter => Some("https://openrouter.ai/api/v1"),
            ProviderKind::GithubModels => Some("https://models.github.ai/inference"),
            ProviderKind::Groq => Some("https://api.groq.com/openai/v1"),
            ProviderKind::Gemini => Some("https://generativelanguage.googleapis.com/v1beta/openai"),
        }
    }

    /// Whether calls without an API key are refused before they are sent.
    pub fn requires_api_key(self) -> bool {
        matches!(
            self,
            ProviderKind::Anthropic
                | ProviderKind::Openai
                | ProviderKind::Gemini
                | ProviderKind::Openrouter
                | ProviderKind::GithubModels
                | ProviderKind::Groq
        )
    }

    /// The environment variable users usually keep this kind's key in.
    pub fn api_key_env(self) -> Option<&'static str> {
        match self {
            ProviderKind::Anthropic => Some("ANTHROPIC_API_KEY"),
            ProviderKind::Openai => Some("OPENAI_API_KEY"),
            ProviderKind::Gemini => Some("GEMINI_API_KEY"),
            ProviderKind::Openrouter => Some("OPENROUTER_API_KEY"),
            ProviderKind::GithubModels => Some("GITHUB_TOKEN"),
            ProviderKind::Groq => Some("GROQ_API_KEY"),
            ProviderKind::OpenaiCompatible
            | ProviderKind::Ollama
            | ProviderKind::Llamacpp
            | ProviderKind::Vllm
            | ProviderKind::Lmstudio
            | ProviderKind::Bedrock
            | ProviderKind::Local => None,
        }
    }

    /// Whether the kind is a server people run on their own machines.
    pub fn is_self_hosted(self) -> bool {
        matches!(
            self,
            ProviderKind::Ollama
                | ProviderKind::Llamacpp
                | ProviderKind::Vllm
                | ProviderKind::Lmstudio
        )
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One model provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// The wire protocol this provider speaks.
    pub kind: ProviderKind,
    /// Base URL of the API; defaults to the kind's public endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// API key; usually `${SOME_API_KEY}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Seconds to wait for a TCP/TLS connection.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
    /// Seconds without any bytes from the server before a call fails.
    #[serde(default = "default_read_timeout")]
    pub read_timeout_secs: u64,
    /// Extra HTTP headers sent with every request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// AWS region (Bedrock only); `AWS_REGION` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Context window, in tokens, of every model of this provider; wins
    /// over the built-in table and what the server reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u32>,
    /// Whether this provider runs on a machine you control. Decides which
    /// providers the `local` tier may use; guessed from the base URL (a
    /// loopback, private or `.local` host) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<bool>,
    /// The GGUF file a `kind: local` provider runs (`flynn models pull`
    /// puts them in `FLYNN_HOME/models`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_path: Option<PathBuf>,
    /// Threads a `kind: local` model computes on; default: one per
    /// physical core.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// Context window, in tokens, a `kind: local` model runs with; default
    /// and upper bound: what the file's metadata says it was trained for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<u32>,
}

impl ProviderConfig {
    pub fn new(kind: ProviderKind) -> Self {
        ProviderConfig {
            kind,
            base_url: None,
            api_key: None,
            connect_timeout_secs: default_connect_timeout(),
            read_timeout_secs: default_read_timeout(),
            headers: BTreeMap::new(),
            region: None,
            context_window: None,
            local: None,
            model_path: None,
            threads: None,
            context: None,
        }
    }
}

fn default_connect_timeout() -> u64 {
    10
}

fn default_read_timeout() -> u64 {
    120
}

/// A model named as `provider/model`, where `provider` is a key of
/// `providers` and `model` is the provider's model id (which may itself
/// contain slashes, as OpenRouter's do).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ModelRef {
    provider: String,
    model: String,
}

impl ModelRef {
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        ModelRef {
            provider: provider.into(),
            model: model.into(),
        }
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    pub fn model(&self) -> &str {
        &self.model
    }
}

impl JsonSchema for ModelRef {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ModelRef".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[^/\\s]+/\\S+$",
            "description": "A model as `provider/model`, e.g. `anthropic/claude-sonnet-4-5`."
        })
    }
}

/// A string that is not `provider/model`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidModelRef(pub String);

impl fmt::Display for InvalidModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid model '{}' (expected 'provider/model', e.g. 'anthropic/claude-sonnet-4-5')",
            self.0
        )
    }
}

impl std::error::Error for InvalidModelRef {}

impl FromStr for ModelRef {
    type Err = InvalidModelRef;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('/') {
            Some((provider, model))
                if !provider.is_empty()
                    && !model.is_empty()
                    && !s.chars().any(char::is_whitespace) =>
            {
                Ok(ModelRef::new(provider, model))
            }
            _ => Err(InvalidModelRef(s.to_owned())),
        }
    }
}

impl TryFrom<String> for ModelRef {
    type Error = InvalidModelRef;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<ModelRef> for String {
    fn from(value: ModelRef) -> Self {
        value.to_string()
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

/// Models by tier, plus a last-resort chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelsConfig {
    #[serde(default)]
    pub tiers: TiersConfig,
    /// Tried in order after every model of the requested tier failed.
    #[serde(default)]
    pub fallback: Vec<ModelRef>,
    /// Largest answer, in tokens, asked of a model per call.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// Retries of one model before moving to the next.
    #[serde(default)]
    pub retry: RetryConfig,
    /// When a provider that keeps failing is skipped for a while.
    #[serde(default)]
    pub circuit_breaker: CircuitBreakerConfig,
    /// Keeps the `local` tier on local providers: when its models fail,
    /// the call fails instead of falling back to a remote provider.
    #[serde(default = "default_true")]
    pub local_only: bool,
    /// Context windows in tokens, by `provider/model` or bare model id;
    /// win over the built-in table and what the server reports.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub context_windows: BTreeMap<String, u32>,
    /// Whether a model reads images, by `provider/model` or bare model id;
    /// wins over the built-in table. A model that does not gets none:
    /// each image in the history is replaced by a note.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub image_input: BTreeMap<String, bool>,
    /// Prices in USD per million tokens, by `provider/model` or bare model
    /// id; win over the built-in price table.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub prices: BTreeMap<String, Price>,
    /// How tokens are counted before a call (usage reported by the
    /// provider is always what is recorded).
    #[serde(default)]
    pub token_counting: TokenCounting,
}

impl Default for ModelsConfig {
    fn default() -> Self {
        ModelsConfig {
            tiers: TiersConfig::default(),
            fallback: Vec::new(),
            max_tokens: default_max_tokens(),
            retry: RetryConfig::default(),
            circuit_breaker: CircuitBreakerConfig::default(),
            local_only: true,
            context_windows: BTreeMap::new(),
            image_input: BTreeMap::new(),
            prices: BTreeMap::new(),
            token_counting: TokenCounting::default(),
        }
    }
}

pub(super) fn default_true() -> bool {
    true
}

/// Retries with exponential backoff and full jitter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// Extra attempts on the same model after a retryable failure.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Backoff before the first retry, in milliseconds; doubles each time.
    #[serde(default = "default_initial_backoff_ms")]
    pub initial_backoff_ms: u64,
    /// Longest backoff, in milliseconds.
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: u64,
    /// Longest `Retry-After` worth waiting for, in seconds; a longer one
    /// moves on to the next model at once.
    #[serde(default = "default_max_retry_after_secs")]
    pub max_retry_after_secs: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_retries: default_max_retries(),
            initial_backoff_ms: default_initial_backoff_ms(),
            max_backoff_ms: default_max_backoff_ms(),
            max_retry_after_secs: default_max_retry_after_secs(),
        }
    }
}

fn default_max_retries() -> u32 {
    2
}

fn default_initial_backoff_ms() -> u64 {
    500
}

fn default_max_backoff_ms() -> u64 {
    8_000
}

fn default_max_retry_after_secs() -> u64 {
    30
}

/// Skips a provider after repeated failures, until a cooldown passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CircuitBreakerConfig {
    /// Consecutive failed calls that open the breaker.
    #[serde(default = "default_failure_threshold")]
    pub failure_threshold: u32,
    /// Seconds the provider is skipped before one trial call is let through.
    #[serde(default = "default_cooldown_secs")]
    pub cooldown_secs: u64,
}

impl Default for CircuitBreakerConfig {
    fn default() -> Self {
        CircuitBreakerConfig {
            failure_threshold: default_failure_threshold(),
            cooldown_secs: default_cooldown_secs(),
        }
    }
}

fn default_failure_threshold() -> u32 {
    3
}

fn default_cooldown_secs() -> u64 {
    30
}

/// A model's price in USD per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Reading from the prompt cache; the input price when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_mtok: Option<f64>,
    /// Writing to the prompt cache; the input price when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_mtok: Option<f64>,
}

/// How tokens are counted before a call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenCounting {
    /// About four bytes per token: free and close enough for budgets.
    #[default]
    Estimate,
    /// Exact for OpenAI model families (tiktoken, offline); an estimate
    /// for others.
    Tiktoken,
}

fn default_max_tokens() -> u32 {
    4096
}

/// An ordered list of models for each tier; the first that answers wins.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TiersConfig {
    #[serde(default)]
    pub fast: Vec<ModelRef>,
    #[serde(default)]
    pub default: Vec<ModelRef>,
    #[serde(default)]
    pub complex: Vec<ModelRef>,
    #[serde(default)]
    pub local: Vec<ModelRef>,
}

impl TiersConfig {
    pub fn get(&self, tier: Tier) -> &[ModelRef] {
        match tier {
            Tier::Fast => &self.fast,
            Tier::Default => &self.default,
            Tier::Complex => &self.complex,
            Tier::Local => &self.local,
        }
    }

    pub fn get_mut(&mut self, tier: Tier) -> &mut Vec<ModelRef> {
        match tier {
            Tier::Fast => &mut self.fast,
            Tier::Default => &mut self.default,
            Tier::Complex => &mut self.complex,
            Tier::Local => &mut self.local,
        }
    }
}
