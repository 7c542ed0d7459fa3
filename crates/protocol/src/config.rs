//! The configuration file's shape. Loading, `${VAR}` expansion and
//! validation live in `flynn-config`; these are the plain types every crate
//! receives its slice of.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Tier;

/// Current version of the configuration schema.
pub const CONFIG_VERSION: u32 = 1;

/// The whole configuration file. Every key is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Flynn configuration")]
pub struct FlynnConfig {
    /// Schema version of this file.
    #[serde(default = "default_version")]
    pub version: u32,
    /// Model providers by name; models are referred to as `name/model`.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Which models serve which tier.
    #[serde(default)]
    pub models: ModelsConfig,
    /// The agents, and which one answers which channel and sender.
    #[serde(default)]
    pub agents: AgentsConfig,
    /// Built-in tools, the tool policy and confirmation hooks.
    #[serde(default)]
    pub tools: ToolsConfig,
    /// Conversation storage, and how sessions run their turns.
    #[serde(default)]
    pub sessions: SessionsConfig,
    /// The daemon's gateway (JSON-RPC, web UI).
    #[serde(default)]
    pub gateway: GatewayConfig,
    /// Summarising older messages before a conversation fills the model's
    /// context window.
    #[serde(default)]
    pub compaction: CompactionConfig,
    /// Memory files, their search index and what goes into the prompt.
    #[serde(default)]
    pub memory: MemoryConfig,
    /// Chat platforms: Telegram, Discord, Slack, WhatsApp.
    #[serde(default)]
    pub channels: ChannelsConfig,
    /// Cron jobs and the heartbeat: messages sent to an agent on a
    /// schedule, the answers delivered to a channel.
    #[serde(default)]
    pub automation: AutomationConfig,
    /// MCP servers whose tools the agents may use.
    #[serde(default)]
    pub mcp: McpConfig,
}

impl Default for FlynnConfig {
    fn default() -> Self {
        FlynnConfig {
            version: CONFIG_VERSION,
            providers: BTreeMap::new(),
            models: ModelsConfig::default(),
            agents: AgentsConfig::default(),
            tools: ToolsConfig::default(),
            sessions: SessionsConfig::default(),
            gateway: GatewayConfig::default(),
            compaction: CompactionConfig::default(),
            memory: MemoryConfig::default(),
            channels: ChannelsConfig::default(),
            automation: AutomationConfig::default(),
            mcp: McpConfig::default(),
        }
    }
}

impl FlynnConfig {
    /// Every secret the config holds: provider API keys, the values of
    /// credential-looking provider headers (names with `auth`, `key`,
    /// `token` or `secret`), the web search key. What must never reach a
    /// tool result, a log line or the audit log.
    pub fn secrets(&self) -> Vec<String> {
        let mut secrets: Vec<String> = Vec::new();
        for provider in self.providers.values() {
            secrets.extend(provider.api_key.clone());
            secrets.extend(
                provider
                    .headers
                    .iter()
                    .filter(|(name, _)| {
                        let name = name.to_ascii_lowercase();
                        ["auth", "key", "token", "secret"]
                            .iter()
                            .any(|word| name.contains(word))
                    })
                    .map(|(_, value)| value.clone()),
            );
        }
        secrets.extend(self.tools.web_search.api_key.clone());
        if let Some(embeddings) = &self.memory.embeddings {
            secrets.extend(embeddings.api_key.clone());
        }
        secrets.extend(self.gateway.token.clone());
        secrets.extend(self.gateway.tokens.iter().filter_map(|t| t.token.clone()));
        secrets.extend(self.channels.secrets());
        secrets.extend(
            self.gateway
                .webhooks
                .values()
                .map(|hook| hook.secret.clone()),
        );
        secrets.extend(self.mcp.secrets());
        secrets
    }
}

fn default_version() -> u32 {
    CONFIG_VERSION
}

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
            prices: BTreeMap::new(),
            token_counting: TokenCounting::default(),
        }
    }
}

fn default_true() -> bool {
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

/// The agents: the main one's defaults, named agents, and which agent
/// answers which channel and sender.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentsConfig {
    /// Tier for the main conversation (and for named agents that set
    /// neither `tier` nor `model`).
    #[serde(default)]
    pub primary_tier: Tier,
    /// Model calls per turn before Flynn stops with a partial answer.
    #[serde(default = "default_max_iterations")]
    pub max_iterations: u32,
    /// Replaces the built-in system prompt (of agents that set none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The agent that answers when no route matches; the first of `list`
    /// when absent, or the built-in `main` agent when `list` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Named agents sharing one model router and one session store.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub list: Vec<AgentConfig>,
    /// Which agent answers a message, by channel and sender; the first
    /// matching rule wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<AgentRoute>,
    /// Which tier does each kind of background work.
    #[serde(default)]
    pub delegation: DelegationConfig,
    /// A turn that reaches `max_iterations` goes on once on the
    /// `delegation.complex_reasoning` tier, and the user is told.
    #[serde(default)]
    pub auto_escalate: bool,
    /// How deep delegation may nest: a sub-agent's sub-agent is depth 2.
    #[serde(default = "default_max_delegation_depth")]
    pub max_delegation_depth: u32,
    /// Sub-agents started with the `agents.spawn` tool.
    #[serde(default)]
    pub subagents: SubagentsConfig,
    /// Which sessions the `sessions.*` tools may see and message. A
    /// guest's turn sees only its own session, whatever this says.
    #[serde(default)]
    pub session_access: SessionAccess,
    /// The tools a guest's turn may use (a paired or allowlisted chat
    /// sender, anyone in an open DM), within the agent's own; the
    /// `messaging` profile when absent. A channel's or an agent's
    /// `guest_tools` wins over this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_tools: Option<ToolPolicyConfig>,
}

impl Default for AgentsConfig {
    fn default() -> Self {
        AgentsConfig {
            primary_tier: Tier::Default,
            max_iterations: default_max_iterations(),
            system_prompt: None,
            default: None,
            list: Vec::new(),
            routes: Vec::new(),
            delegation: DelegationConfig::default(),
            auto_escalate: false,
            max_delegation_depth: default_max_delegation_depth(),
            subagents: SubagentsConfig::default(),
            session_access: SessionAccess::default(),
            guest_tools: None,
        }
    }
}

fn default_max_delegation_depth() -> u32 {
    3
}

/// The tier each kind of background work runs on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DelegationConfig {
    /// Summaries of older messages.
    #[serde(default = "fast")]
    pub compaction: Tier,
    /// Facts worth remembering, taken from a conversation.
    #[serde(default = "fast")]
    pub memory_extraction: Tier,
    /// Short labelling tasks.
    #[serde(default = "fast")]
    pub classification: Tier,
    /// Condensing long tool output (`tools.summarise_over_bytes`).
    #[serde(default = "fast")]
    pub tool_summarisation: Tier,
    /// Where an escalated turn goes on (`agents.auto_escalate`), and
    /// sub-agents that ask for hard reasoning.
    #[serde(default = "complex")]
    pub complex_reasoning: Tier,
}

impl Default for DelegationConfig {
    fn default() -> Self {
        DelegationConfig {
            compaction: Tier::Fast,
            memory_extraction: Tier::Fast,
            classification: Tier::Fast,
            tool_summarisation: Tier::Fast,
            complex_reasoning: Tier::Complex,
        }
    }
}

impl DelegationConfig {
    /// The tier configured for `purpose`; a conversation or a sub-agent
    /// has no configured tier.
    pub fn tier_for(&self, purpose: crate::Purpose) -> Option<Tier> {
        use crate::Purpose;
        match purpose {
            Purpose::Compaction => Some(self.compaction),
            Purpose::MemoryExtraction => Some(self.memory_extraction),
            Purpose::Classification => Some(self.classification),
            Purpose::ToolSummarisation => Some(self.tool_summarisation),
            Purpose::ComplexReasoning => Some(self.complex_reasoning),
            Purpose::Conversation | Purpose::Subagent => None,
        }
    }
}

fn fast() -> Tier {
    Tier::Fast
}

fn complex() -> Tier {
    Tier::Complex
}

/// Limits on sub-agents (`agents.spawn`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubagentsConfig {
    /// Sub-agents running at once, across every session; a spawn beyond it
    /// waits for one to finish.
    #[serde(default = "default_subagent_concurrency")]
    pub max_concurrent: u32,
    /// Seconds a sub-agent may run before it is cancelled.
    #[serde(default = "default_subagent_timeout")]
    pub timeout_secs: u64,
}

impl Default for SubagentsConfig {
    fn default() -> Self {
        SubagentsConfig {
            max_concurrent: default_subagent_concurrency(),
            timeout_secs: default_subagent_timeout(),
        }
    }
}

fn default_subagent_concurrency() -> u32 {
    4
}

fn default_subagent_timeout() -> u64 {
    300
}

/// Which sessions an agent's `sessions.*` tools reach.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SessionAccess {
    /// Sessions answered by the same agent.
    #[default]
    Agent,
    /// Every session.
    All,
}

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

fn yes() -> bool {
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
    /// Where the memory files live; `FLYNN_HOME/memory` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// The search index (SQLite, rebuilt from the files whenever they
    /// change); `FLYNN_HOME/memory-index.db` when absent.
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

/// Name of the agent Flynn builds when `agents.list` is empty.
pub const MAIN_AGENT: &str = "main";

/// One named agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Letters, digits, `-` and `_`; what `/agent <name>`, `--agent` and
    /// routes use.
    pub name: String,
    /// Model tier; `agents.primary_tier` when neither this nor `model` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// One model as `provider/model`, with no fallback; wins over `tier`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    /// Which tools this agent may use; the `tools` block's policy when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolPolicyConfig>,
    /// The agent's base prompt; `agents.system_prompt`, else the built-in
    /// prompt, when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Files of the workspace added to the prompt on every turn, when they
    /// exist.
    #[serde(default = "default_prompt_files")]
    pub prompt_files: Vec<String>,
    /// Directory its tools start in and its prompt files are read from;
    /// `tools.workspace`, else the current directory, when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
    /// Overrides `agents.max_iterations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_iterations: Option<u32>,
    /// What a guest may pick with `/model`: tiers (`fast`) and models
    /// (`provider/model`). Empty: guests keep the agent's choice. The
    /// owner may pick any tier or model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// Other agents this one may start (`agents.spawn`) or message
    /// (`sessions.send`); it may always delegate to itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub can_delegate: Vec<String>,
    /// The tools a guest's turn may use with this agent (within its own
    /// `tools`); `agents.guest_tools`, else the `messaging` profile, when
    /// absent. A channel's `guest_tools` wins over this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_tools: Option<ToolPolicyConfig>,
}

impl AgentConfig {
    pub fn new(name: impl Into<String>) -> Self {
        AgentConfig {
            name: name.into(),
            tier: None,
            model: None,
            tools: None,
            system_prompt: None,
            prompt_files: default_prompt_files(),
            workspace: None,
            max_iterations: None,
            models: Vec::new(),
            can_delegate: Vec::new(),
            guest_tools: None,
        }
    }
}

/// The workspace files read into every prompt by default.
pub fn default_prompt_files() -> Vec<String> {
    vec!["SOUL.md".to_owned(), "AGENTS.md".to_owned()]
}

/// Sends messages from matching channels and senders to one agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentRoute {
    /// Channel name glob (`telegram`, `slack*`); any channel when absent.
    #[serde(default = "any_glob")]
    pub channel: String,
    /// Sender (peer) glob (`12345`, `team-*`); any sender when absent.
    #[serde(default = "any_glob")]
    pub sender: String,
    /// The agent's name, from `agents.list`.
    pub agent: String,
}

fn any_glob() -> String {
    "*".to_owned()
}

/// Tool sets named after what an agent is for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolProfile {
    /// Memory only.
    Minimal,
    /// Memory, web, sessions and sub-agents: a chat assistant that runs nothing.
    Messaging,
    /// Files, shell, processes, web, memory, sessions and sub-agents.
    Coding,
    /// Every tool.
    #[default]
    Full,
}

/// Which tools an agent may use: a profile, narrowed by `enabled` and
/// `deny` globs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolPolicyConfig {
    /// The starting set; the `tools` block's profile when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<ToolProfile>,
    /// Only these tools (names or globs such as `file.*`) of the profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<Vec<String>>,
    /// Never these tools (names or globs); wins over everything else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// How much this agent may do without asking; the `tools` block's
    /// autonomy when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autonomy: Option<Autonomy>,
    /// What this agent does once untrusted content is in its session; the
    /// `tools` block's `taint` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint: Option<TaintPolicy>,
}

fn default_max_iterations() -> u32 {
    10
}

/// Built-in tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// Tools offered to the model (names or globs such as `file.*`); every
    /// tool of the profile when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<Vec<String>>,
    /// The starting set of tools: minimal, messaging, coding or full.
    #[serde(default)]
    pub profile: ToolProfile,
    /// How much the agent may do without asking: `read_only` (no tool that
    /// writes, runs or sends is offered), `supervised` (those ask first;
    /// reading is silent) or `full` (nothing asks; every call is logged).
    /// `hooks` override it tool by tool.
    #[serde(default)]
    pub autonomy: Autonomy,
    /// What happens once untrusted content (a web page, an MCP tool's
    /// output, a webhook body) is in a session: `ask` (reading what the
    /// turn did not bring in, and sending data out, need a person's
    /// answer; `--yes` does not give it) or `allow` (no extra asking).
    #[serde(default)]
    pub taint: TaintPolicy,
    /// Names of variables of Flynn's own environment that commands
    /// (`shell.exec`, `process.*`) also get, beside the basic ones (`PATH`,
    /// `HOME`, `LANG`...). Nothing else of Flynn's environment reaches them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Tools never offered nor run (names or globs); wins over every other
    /// setting, agents' included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// What happens before a tool runs, by tool name glob; the first
    /// matching rule wins, and tools no rule matches run silently.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<HookRule>,
    /// Seconds a confirmation waits for an answer before it is denied.
    #[serde(default = "default_confirm_timeout")]
    pub confirm_timeout_secs: u64,
    /// Tool output longer than this many bytes is cut, with a marker.
    #[serde(default = "default_output_limit")]
    pub output_limit_bytes: usize,
    /// Tool output longer than this many bytes is condensed on the
    /// `agents.delegation.tool_summarisation` tier before the model sees
    /// it; the whole output stays readable with `tool.output`. Off when
    /// absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarise_over_bytes: Option<usize>,
    /// Directory that relative paths and commands start in; the current
    /// directory when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
    /// Policy overrides by model provider (a `providers` key), applied
    /// after the agent's: a small local model can be offered fewer tools.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<String, ToolPolicyConfig>,
    /// Tools (names or globs) not sent with every request; the model finds
    /// them with `tools.search` when it needs them. The built-in list of
    /// rarely needed tools when absent; `[]` sends every tool every time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deferred: Option<Vec<String>>,
    /// The audit log: one JSON line per tool call, secrets redacted.
    #[serde(default)]
    pub audit: AuditConfig,
    /// Where shell and process tools run: an OS sandbox or none.
    #[serde(default)]
    pub sandbox: SandboxConfig,
    #[serde(default)]
    pub shell: ShellToolConfig,
    #[serde(default)]
    pub files: FileToolConfig,
    #[serde(default)]
    pub web_fetch: WebFetchConfig,
    #[serde(default)]
    pub web_search: WebSearchConfig,
    #[serde(default)]
    pub process: ProcessToolConfig,
}

impl Default for ToolsConfig {
    fn default() -> Self {
        ToolsConfig {
            enabled: None,
            profile: ToolProfile::default(),
            deny: Vec::new(),
            hooks: Vec::new(),
            autonomy: Autonomy::default(),
            taint: TaintPolicy::default(),
            env: Vec::new(),
            confirm_timeout_secs: default_confirm_timeout(),
            output_limit_bytes: default_output_limit(),
            summarise_over_bytes: None,
            workspace: None,
            providers: BTreeMap::new(),
            deferred: None,
            audit: AuditConfig::default(),
            sandbox: SandboxConfig::default(),
            shell: ShellToolConfig::default(),
            files: FileToolConfig::default(),
            web_fetch: WebFetchConfig::default(),
            web_search: WebSearchConfig::default(),
            process: ProcessToolConfig::default(),
        }
    }
}

fn default_confirm_timeout() -> u64 {
    120
}

/// One hook: what happens before a matching tool runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookRule {
    /// Tool name glob, e.g. `shell.*`.
    pub tool: String,
    pub action: HookAction,
}

/// What a hook does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookAction {
    /// Ask a person first (a TTY prompt, a chat button, `--yes`); no
    /// answer within `confirm_timeout_secs` denies the call.
    Confirm,
    /// Run, and log the call.
    Log,
    /// Run.
    Silent,
}

fn default_output_limit() -> usize {
    50 * 1024
}

/// `shell.exec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellToolConfig {
    /// Seconds before a command is killed.
    #[serde(default = "default_shell_timeout")]
    pub timeout_secs: u64,
}

impl Default for ShellToolConfig {
    fn default() -> Self {
        ShellToolConfig {
            timeout_secs: default_shell_timeout(),
        }
    }
}

fn default_shell_timeout() -> u64 {
    30
}

/// `file.*` tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileToolConfig {
    /// Seconds before a file operation is abandoned.
    #[serde(default = "default_file_timeout")]
    pub timeout_secs: u64,
}

impl Default for FileToolConfig {
    fn default() -> Self {
        FileToolConfig {
            timeout_secs: default_file_timeout(),
        }
    }
}

fn default_file_timeout() -> u64 {
    10
}

/// How much an agent may do without asking.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Autonomy {
    /// Only tools that read are offered.
    ReadOnly,
    /// Tools that write files, run processes or send messages ask first.
    #[default]
    Supervised,
    /// Nothing asks; every call is logged.
    Full,
}

/// What an agent does once untrusted content is in its session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaintPolicy {
    /// Reading what the turn did not bring in and sending data out ask a
    /// person (approve-all does not answer for one).
    #[default]
    Ask,
    /// Nothing more asks than the autonomy says.
    Allow,
}

/// `tools.audit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Write the audit log at all.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Directory of `tools.jsonl` and its rotated files; `FLYNN_HOME/audit`
    /// when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// The file is rotated when it would grow past this many bytes.
    #[serde(default = "default_audit_max_bytes")]
    pub max_bytes: u64,
    /// Rotated files kept (`tools.1.jsonl` is the newest).
    #[serde(default = "default_audit_keep")]
    pub keep: u32,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            enabled: true,
            dir: None,
            max_bytes: default_audit_max_bytes(),
            keep: default_audit_keep(),
        }
    }
}

fn default_audit_max_bytes() -> u64 {
    10 * 1024 * 1024
}

fn default_audit_keep() -> u32 {
    5
}

/// `tools.sandbox`: the OS sandbox of `shell.exec` and `process.start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// `auto` picks the strongest available (bubblewrap, then Docker, then
    /// Landlock); naming one that is not available is an error when a
    /// command is run.
    #[serde(default)]
    pub mode: SandboxMode,
    /// Let sandboxed commands reach the network.
    #[serde(default)]
    pub network: bool,
    /// More directories (besides the workspace) a sandboxed command may write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writable: Vec<PathBuf>,
    /// Host paths (directories, files or Unix sockets such as an
    /// ssh-agent's) a sandboxed command may read, beside the system
    /// directories; nothing of `$HOME`, `FLYNN_HOME` or `/run` otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readable: Vec<PathBuf>,
    /// Image the Docker sandbox runs commands in.
    #[serde(default = "default_docker_image")]
    pub docker_image: String,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            mode: SandboxMode::default(),
            network: false,
            writable: Vec::new(),
            readable: Vec::new(),
            docker_image: default_docker_image(),
        }
    }
}

fn default_docker_image() -> String {
    "debian:stable-slim".to_owned()
}

/// Which sandbox runs shell and process tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxMode {
    /// The strongest one this host has; none when it has none.
    #[default]
    Auto,
    /// bubblewrap (`bwrap`): own mount, PID and network namespaces.
    Bubblewrap,
    /// A Docker container per command.
    Docker,
    /// Landlock file-system rules applied to the command (no network
    /// isolation on kernels before ABI 4).
    Landlock,
    /// No sandbox: commands run as the daemon's user.
    None,
}

/// `tools.web_fetch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebFetchConfig {
    /// Seconds a fetch may take, redirects included.
    #[serde(default = "default_web_timeout")]
    pub timeout_secs: u64,
    /// Largest body read, in bytes; a longer one is cut and says so.
    #[serde(default = "default_web_max_bytes")]
    pub max_bytes: u64,
    /// Redirects followed before giving up.
    #[serde(default = "default_max_redirects")]
    pub max_redirects: u32,
    /// Seconds a fetched page is served from the cache.
    #[serde(default = "default_web_cache_secs")]
    pub cache_secs: u64,
    /// Hosts, IP addresses or CIDR ranges fetched even though they are
    /// private, loopback or link-local (the SSRF guard refuses them
    /// otherwise), e.g. `127.0.0.1`, `10.0.0.0/8`, `nas.lan`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_private: Vec<String>,
}

impl Default for WebFetchConfig {
    fn default() -> Self {
        WebFetchConfig {
            timeout_secs: default_web_timeout(),
            max_bytes: default_web_max_bytes(),
            max_redirects: default_max_redirects(),
            cache_secs: default_web_cache_secs(),
            allow_private: Vec::new(),
        }
    }
}

fn default_web_timeout() -> u64 {
    30
}

fn default_web_max_bytes() -> u64 {
    5 * 1024 * 1024
}

fn default_max_redirects() -> u32 {
    5
}

fn default_web_cache_secs() -> u64 {
    300
}

/// `tools.web_search`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebSearchConfig {
    /// The search engine.
    #[serde(default)]
    pub provider: SearchProvider,
    /// API key (Brave, Tavily); usually `${BRAVE_SEARCH_API_KEY}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Base URL; required for SearXNG (`http://searxng:8080`), the
    /// provider's public endpoint otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Results returned when the model does not ask for a number.
    #[serde(default = "default_max_results")]
    pub max_results: u32,
    /// Seconds a search may take.
    #[serde(default = "default_search_timeout")]
    pub timeout_secs: u64,
}

impl Default for WebSearchConfig {
    fn default() -> Self {
        WebSearchConfig {
            provider: SearchProvider::default(),
            api_key: None,
            endpoint: None,
            max_results: default_max_results(),
            timeout_secs: default_search_timeout(),
        }
    }
}

fn default_max_results() -> u32 {
    5
}

fn default_search_timeout() -> u64 {
    15
}

/// A web search engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchProvider {
    /// Brave Search API (needs `api_key`).
    Brave,
    /// A SearXNG instance (needs `endpoint`; its JSON format enabled).
    Searxng,
    /// Tavily (needs `api_key`).
    Tavily,
    /// DuckDuckGo's HTML results page; no key.
    #[default]
    Duckduckgo,
}

/// `process.*` tools: background processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessToolConfig {
    /// Background processes running at once; `process.start` refuses more.
    #[serde(default = "default_max_processes")]
    pub max_processes: usize,
    /// Background processes one session may run at once (within
    /// `max_processes`), so one chat cannot take every slot.
    #[serde(default = "default_max_per_session")]
    pub max_per_session: usize,
    /// Seconds after which a background process is killed.
    #[serde(default = "default_max_runtime")]
    pub max_runtime_secs: u64,
    /// Bytes of recent output kept per process.
    #[serde(default = "default_buffer_bytes")]
    pub buffer_bytes: usize,
}

impl Default for ProcessToolConfig {
    fn default() -> Self {
        ProcessToolConfig {
            max_processes: default_max_processes(),
            max_per_session: default_max_per_session(),
            max_runtime_secs: default_max_runtime(),
            buffer_bytes: default_buffer_bytes(),
        }
    }
}

fn default_max_processes() -> usize {
    10
}

fn default_max_per_session() -> usize {
    4
}

fn default_max_runtime() -> u64 {
    3600
}

fn default_buffer_bytes() -> usize {
    64 * 1024
}

/// Conversation storage and the session lanes that run turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    /// Where sessions are stored, as a URL: `sqlite:///path/to/sessions.db`
    /// (or `sqlite://relative/path.db`, relative to the current directory).
    /// Set this or `database`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// SQLite database file; `FLYNN_HOME/sessions.db` when neither this
    /// nor `url` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database: Option<PathBuf>,
    /// What start-up does with a turn a previous process left unfinished:
    /// `report` it to its session (no tool runs twice), or `rerun` it.
    #[serde(default)]
    pub interrupted_turns: InterruptedTurns,
    /// Messages that may wait behind a running turn in one session; more
    /// are refused.
    #[serde(default = "default_queue_limit")]
    pub queue_limit: usize,
    /// Seconds a session with nothing to do keeps its lane (its task and
    /// cached state) before the lane is dropped.
    #[serde(default = "default_lane_idle_secs")]
    pub lane_idle_secs: u64,
    /// Days after its last activity a session is deleted, with its
    /// messages, turns and kept tool outputs (usage rows stay), and chat
    /// attachments older than that leave `<workspace>/inbox`; the daemon
    /// prunes at start-up and daily. Unset (the default): kept forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_days: Option<u64>,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            url: None,
            database: None,
            interrupted_turns: InterruptedTurns::default(),
            queue_limit: default_queue_limit(),
            retention_days: None,
            lane_idle_secs: default_lane_idle_secs(),
        }
    }
}

fn default_queue_limit() -> usize {
    32
}

fn default_lane_idle_secs() -> u64 {
    300
}

/// What start-up does with an unfinished turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InterruptedTurns {
    /// Mark it interrupted and tell its session; nothing runs again.
    #[default]
    Report,
    /// Run it again from where its history stands.
    Rerun,
}

/// The daemon's gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// Address to listen on. Anything beyond loopback needs a token.
    #[serde(default = "default_bind")]
    pub bind: String,
    /// Bearer token clients must present; else `FLYNN_GATEWAY_TOKEN`, else
    /// one generated into `FLYNN_HOME/gateway.token` (mode 0600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Origins (`https://host[:port]`) whose pages may open the WebSocket,
    /// besides the gateway's own address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_origins: Vec<String>,
    /// Largest HTTP request body or WebSocket message, in bytes.
    #[serde(default = "default_max_request_bytes")]
    pub max_request_bytes: u32,
    /// Requests (RPC calls, HTTP requests) one client may make per minute;
    /// 0 turns the limit off.
    #[serde(default = "default_rate_limit")]
    pub rate_limit_per_minute: u32,
    /// Deprecated: logins for `gateway.tailscale.users`. Identity headers
    /// are honoured only on `gateway.tailscale.listen` now; these logins
    /// are added to `gateway.tailscale.users`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tailscale_users: Vec<String>,
    /// Tailscale Serve in front of the gateway: who may come in without a
    /// token, on which listener, under which name.
    #[serde(default, skip_serializing_if = "TailscaleConfig::is_off")]
    pub tailscale: TailscaleConfig,
    /// Further tokens, each with its own name and rights (the token of
    /// `gateway.token`, `FLYNN_GATEWAY_TOKEN` or `FLYNN_HOME/gateway.token`
    /// is `admin`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<GatewayToken>,
    /// `Host` names requests may carry besides the bind address, the
    /// loopback names and the Tailscale name (anything else is refused:
    /// DNS rebinding). A reverse proxy's public name goes here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_hosts: Vec<String>,
    /// Connections served at once, over every client.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// Connections one address may hold at once.
    #[serde(default = "default_max_connections_per_ip")]
    pub max_connections_per_ip: u32,
    /// Seconds a client has to send a request's headers (slow clients are
    /// closed).
    #[serde(default = "default_header_timeout")]
    pub header_timeout_secs: u64,
    /// Seconds a client has to send the body of a request that needs no
    /// token (`/webhooks/*`, `/channels/*`).
    #[serde(default = "default_body_timeout")]
    pub body_timeout_secs: u64,
    /// Failed authentications one address may make per minute before it
    /// is refused (429) until the minute is over.
    #[serde(default = "default_auth_failures")]
    pub auth_failures_per_minute: u32,
    /// Seconds a shutdown lets running turns finish before cancelling them.
    #[serde(default = "default_shutdown_grace")]
    pub shutdown_grace_secs: u64,
    /// Signed inbound webhooks, by name: `POST /webhooks/<name>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub webhooks: BTreeMap<String, WebhookConfig>,
}

/// What a gateway token may do. `admin` implies the others.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TokenScope {
    /// Send messages and read the sessions it created; `/v1/*` and `/mcp`.
    Chat,
    /// Read every session, usage, logs and status.
    Read,
    /// Answer confirmations and pairing requests.
    Approve,
    /// Everything: config, `tools.invoke`, restart.
    Admin,
}

impl TokenScope {
    pub const ALL: [TokenScope; 4] = [
        TokenScope::Chat,
        TokenScope::Read,
        TokenScope::Approve,
        TokenScope::Admin,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TokenScope::Chat => "chat",
            TokenScope::Read => "read",
            TokenScope::Approve => "approve",
            TokenScope::Admin => "admin",
        }
    }
}

impl std::fmt::Display for TokenScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One named gateway token (`gateway.tokens`): its value in the config
/// or in a file, and what it may do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayToken {
    /// Shown in logs and the audit log; letters, digits, `-`, `_`.
    pub name: String,
    /// The secret (at least 32 characters), or use `token_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A file holding the secret (mode 0600), read at start-up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// `chat`, `read`, `approve`, `admin`.
    pub scopes: Vec<TokenScope>,
}

/// Tailscale Serve in front of the gateway (`gateway.tailscale`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TailscaleConfig {
    /// Tailnet logins let in without a token.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// The listener `tailscale serve` targets, and only it:
    /// `unix:/run/flynn/ts.sock` (best: mode 0600) or a loopback
    /// `host:port`. Identity headers count only there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// The gateway's Tailscale name (`box.tailnet.ts.net`): requests on the
    /// Tailscale listener must be for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// tailscaled's LocalAPI socket, asked who each client is.
    #[serde(default = "default_tailscaled_socket")]
    pub socket: PathBuf,
    /// What Tailscale users may do (default `admin`).
    #[serde(default = "default_tailscale_scopes")]
    pub scopes: Vec<TokenScope>,
}

impl Default for TailscaleConfig {
    fn default() -> Self {
        TailscaleConfig {
            users: Vec::new(),
            listen: None,
            host: None,
            socket: default_tailscaled_socket(),
            scopes: default_tailscale_scopes(),
        }
    }
}

impl TailscaleConfig {
    /// Nothing set: no Tailscale listener.
    pub fn is_off(&self) -> bool {
        *self == TailscaleConfig::default()
    }
}

fn default_tailscaled_socket() -> PathBuf {
    PathBuf::from("/var/run/tailscale/tailscaled.sock")
}

fn default_tailscale_scopes() -> Vec<TokenScope> {
    vec![TokenScope::Admin]
}

fn default_max_connections() -> u32 {
    1024
}

fn default_max_connections_per_ip() -> u32 {
    128
}

fn default_header_timeout() -> u64 {
    10
}

fn default_body_timeout() -> u64 {
    30
}

fn default_auth_failures() -> u32 {
    20
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            bind: default_bind(),
            token: None,
            allowed_origins: Vec::new(),
            max_request_bytes: default_max_request_bytes(),
            rate_limit_per_minute: default_rate_limit(),
            tailscale_users: Vec::new(),
            tailscale: TailscaleConfig::default(),
            tokens: Vec::new(),
            allowed_hosts: Vec::new(),
            max_connections: default_max_connections(),
            max_connections_per_ip: default_max_connections_per_ip(),
            header_timeout_secs: default_header_timeout(),
            body_timeout_secs: default_body_timeout(),
            auth_failures_per_minute: default_auth_failures(),
            shutdown_grace_secs: default_shutdown_grace(),
            webhooks: BTreeMap::new(),
        }
    }
}

/// One inbound webhook: a request signed with `secret` becomes a message
/// to an agent. The signature is HMAC-SHA256, hex: over
/// `<timestamp>.<body>` with `X-Flynn-Timestamp` (Unix seconds, within 5
/// minutes) in `X-Flynn-Signature: sha256=<hex>`; or over the body alone
/// (`X-Hub-Signature-256`, GitHub's form) with a delivery id never seen
/// before (`X-GitHub-Delivery` or `X-Flynn-Delivery`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// Shared secret the sender signs with: at least 32 bytes
    /// (`openssl rand -hex 32`).
    pub secret: String,
    /// Session the message goes to (default `webhook:<name>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Agent that answers (default: the session's routed agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The message, with `{{body}}` replaced by the request body and
    /// `{{name}}` by the webhook's name (default: the body as is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
}

fn default_bind() -> String {
    "127.0.0.1:18800".to_owned()
}

fn default_max_request_bytes() -> u32 {
    1024 * 1024
}

fn default_rate_limit() -> u32 {
    600
}

fn default_shutdown_grace() -> u64 {
    30
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_keys_credential_headers_and_the_search_key() {
        let mut config = FlynnConfig::default();
        let mut openai = ProviderConfig::new(ProviderKind::Openai);
        openai.api_key = Some("sk-one".into());
        openai.headers = [
            ("X-Api-Key".to_owned(), "hdr-key".to_owned()),
            ("Authorization".to_owned(), "Bearer tok".to_owned()),
            ("HTTP-Referer".to_owned(), "https://example.com".to_owned()),
        ]
        .into();
        config.providers.insert("openai".into(), openai);
        config
            .providers
            .insert("local".into(), ProviderConfig::new(ProviderKind::Ollama));
        config.tools.web_search.api_key = Some("brave-key".into());
        assert_eq!(
            config.secrets(),
            ["sk-one", "Bearer tok", "hdr-key", "brave-key"]
        );
    }

    #[test]
    fn model_ref_keeps_slashes_in_the_model_id() {
        let model: ModelRef = "openrouter/meta-llama/llama-3.1-8b"
            .parse()
            .unwrap_or_else(|_| ModelRef::new("", ""));
        assert_eq!(
            (model.provider(), model.model()),
            ("openrouter", "meta-llama/llama-3.1-8b")
        );
        assert_eq!(model.to_string(), "openrouter/meta-llama/llama-3.1-8b");
    }

    #[test]
    fn model_ref_rejects_strings_without_both_parts() {
        for input in ["gpt-4o", "/gpt-4o", "openai/", "open ai/x"] {
            assert_eq!(
                input.parse::<ModelRef>(),
                Err(InvalidModelRef(input.to_owned()))
            );
        }
    }

    #[test]
    fn empty_config_fills_every_default() {
        let config: FlynnConfig =
            serde_json::from_str("{}").unwrap_or_else(|_| FlynnConfig::default());
        assert_eq!(config, FlynnConfig::default());
        assert_eq!(config.agents.max_iterations, 10);
        assert_eq!(config.tools.output_limit_bytes, 51_200);
        assert_eq!(config.tools.shell.timeout_secs, 30);
        assert_eq!(config.gateway.bind, "127.0.0.1:18800");
    }
}

/// A platform's settings: its own keys, then the access keys every
/// channel shares (see [`ChannelAccess`]), inline in the same map.
macro_rules! channel_config {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$fmeta:meta])*
                pub $field:ident : $ty:ty,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $(
                $(#[$fmeta])*
                pub $field: $ty,
            )*
            /// Turns the channel off without removing its settings.
            #[serde(default = "yes")]
            pub enabled: bool,
            /// Sender ids always let in (the platform's user id, or a
            /// WhatsApp number in E.164 without `+`); `*` lets everyone in.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub allow_from: Vec<String>,
            /// What a direct message from a sender not allowed yet gets.
            #[serde(default)]
            pub dm_policy: DmPolicy,
            /// In groups, answer only messages that mention the bot (or
            /// reply to it). Direct messages never need a mention.
            #[serde(default = "yes")]
            pub require_mention: bool,
            /// Group (chat, channel) ids the bot answers in; empty: any
            /// group it is in. Senders in groups must still be allowed.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub allow_groups: Vec<String>,
            /// Messages one sender may send in a window before Flynn asks
            /// them to slow down.
            #[serde(default)]
            pub rate_limit: SenderRateLimit,
            /// Sender ids that are the owner: their messages have the
            /// owner's rights. Every other sender let in is a guest.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub owners: Vec<String>,
            /// The tools a guest's turn may use on this channel (within
            /// the agent's own); wins over the agent's `guest_tools`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub guest_tools: Option<ToolPolicyConfig>,
            /// Who answers the confirmations a guest's turn raises:
            /// `owner` (in the owner's direct chat, else the dashboard) or
            /// `requester` (the guest who asked, in its chat).
            #[serde(default)]
            pub guest_approvals: GuestApprovals,
        }

        impl $name {
            /// Who may talk to this channel.
            pub fn access(&self) -> ChannelAccess {
                ChannelAccess {
                    enabled: self.enabled,
                    allow_from: self.allow_from.clone(),
                    dm_policy: self.dm_policy,
                    require_mention: self.require_mention,
                    allow_groups: self.allow_groups.clone(),
                    rate_limit: self.rate_limit,
                    owners: self.owners.clone(),
                    guest_tools: self.guest_tools.clone(),
                    guest_approvals: self.guest_approvals,
                }
            }
        }
    };
}

/// Chat platforms Flynn answers on. Each is optional; a configured one
/// starts with the daemon (when the binary was built with its cargo
/// feature).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChannelsConfig {
    /// Telegram bot (Bot API): long polling or a webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telegram: Option<TelegramConfig>,
    /// Discord bot: the gateway WebSocket and the REST API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discord: Option<DiscordConfig>,
    /// Slack app: Socket Mode or the Events API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slack: Option<SlackConfig>,
    /// WhatsApp Business number on the Cloud API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whatsapp: Option<WhatsAppConfig>,
}

impl ChannelsConfig {
    /// The configured channels' names and who may talk to them, in a
    /// fixed order.
    pub fn access(&self) -> Vec<(&'static str, ChannelAccess)> {
        let mut all = Vec::new();
        if let Some(c) = &self.telegram {
            all.push(("telegram", c.access()));
        }
        if let Some(c) = &self.discord {
            all.push(("discord", c.access()));
        }
        if let Some(c) = &self.slack {
            all.push(("slack", c.access()));
        }
        if let Some(c) = &self.whatsapp {
            all.push(("whatsapp", c.access()));
        }
        all
    }

    /// Every token and secret of every channel.
    pub fn secrets(&self) -> Vec<String> {
        let mut secrets = Vec::new();
        if let Some(c) = &self.telegram {
            secrets.push(c.bot_token.clone());
            secrets.extend(c.webhook_secret.clone());
        }
        if let Some(c) = &self.discord {
            secrets.push(c.bot_token.clone());
        }
        if let Some(c) = &self.slack {
            secrets.push(c.bot_token.clone());
            secrets.extend(c.app_token.clone());
            secrets.extend(c.signing_secret.clone());
        }
        if let Some(c) = &self.whatsapp {
            secrets.push(c.access_token.clone());
            secrets.push(c.app_secret.clone());
            secrets.push(c.verify_token.clone());
        }
        secrets.retain(|s| !s.is_empty());
        secrets
    }
}

/// Who may talk to a channel, and how much: the keys every platform's
/// settings share.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelAccess {
    pub enabled: bool,
    pub allow_from: Vec<String>,
    pub dm_policy: DmPolicy,
    pub require_mention: bool,
    pub allow_groups: Vec<String>,
    pub rate_limit: SenderRateLimit,
    pub owners: Vec<String>,
    pub guest_tools: Option<ToolPolicyConfig>,
    pub guest_approvals: GuestApprovals,
}

impl Default for ChannelAccess {
    fn default() -> Self {
        ChannelAccess {
            enabled: true,
            allow_from: Vec::new(),
            dm_policy: DmPolicy::default(),
            require_mention: true,
            allow_groups: Vec::new(),
            rate_limit: SenderRateLimit::default(),
            owners: Vec::new(),
            guest_tools: None,
            guest_approvals: GuestApprovals::default(),
        }
    }
}

/// Who answers the confirmations a guest's turn raises.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GuestApprovals {
    /// The owner: in the owner's direct chat on the channel (once the
    /// owner has written there since the daemon started), else on the
    /// dashboard.
    #[default]
    Owner,
    /// The guest who asked, in the chat it asked from.
    Requester,
}

/// What a direct message from an unknown sender gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DmPolicy {
    /// A pairing code the owner approves with `flynn pairing approve`.
    #[default]
    Pairing,
    /// Nothing: only `allow_from` and senders paired before get in.
    Allowlist,
    /// Anyone may talk to the bot.
    Open,
}

/// A per-sender message budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SenderRateLimit {
    /// Messages per window; 0 turns the limit off.
    #[serde(default = "default_sender_messages")]
    pub messages: u32,
    /// The window, in seconds.
    #[serde(default = "default_sender_window")]
    pub per_secs: u64,
}

impl Default for SenderRateLimit {
    fn default() -> Self {
        SenderRateLimit {
            messages: default_sender_messages(),
            per_secs: default_sender_window(),
        }
    }
}

fn default_sender_messages() -> u32 {
    20
}

fn default_sender_window() -> u64 {
    60
}

/// How the Telegram bot receives updates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TelegramMode {
    /// `getUpdates` long polling: needs no public address.
    #[default]
    Polling,
    /// Telegram posts updates to `webhook_url`, which must reach this
    /// gateway's `/channels/telegram/webhook` over public HTTPS.
    Webhook,
}

channel_config! {
    /// A Telegram bot.
    pub struct TelegramConfig {
        /// The token @BotFather gave (`123456:ABC…`).
        pub bot_token: String,
        /// Long polling (default) or a webhook.
        #[serde(default)]
        pub mode: TelegramMode,
        /// Public HTTPS URL Telegram posts to in webhook mode; it must
        /// reach the gateway's `/channels/telegram/webhook`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub webhook_url: Option<String>,
        /// Secret Telegram sends back in `X-Telegram-Bot-Api-Secret-Token`
        /// (webhook mode; 1–256 characters of `A-Z a-z 0-9 _ -`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub webhook_secret: Option<String>,
        /// Bot API server (a self-hosted one, or a test fake).
        #[serde(default = "default_telegram_api")]
        pub api_url: String,
    }
}

fn default_telegram_api() -> String {
    "https://api.telegram.org".to_owned()
}

channel_config! {
    /// A Discord bot.
    pub struct DiscordConfig {
        /// The bot token from the Developer Portal (Bot → Reset Token).
        pub bot_token: String,
        /// REST API base (a test fake); Discord's own when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub api_url: Option<String>,
        /// Gateway WebSocket URL (a test fake); the one Discord names
        /// when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub gateway_url: Option<String>,
    }
}

/// How the Slack app receives events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SlackMode {
    /// Socket Mode over a WebSocket Slack opens for the app (needs
    /// `app_token`, no public address).
    #[default]
    Socket,
    /// The Events API: Slack posts to the gateway's
    /// `/channels/slack/events`, signed with `signing_secret`.
    Events,
}

channel_config! {
    /// A Slack app.
    pub struct SlackConfig {
        /// Bot User OAuth Token (`xoxb-…`).
        pub bot_token: String,
        /// Socket Mode (default) or the Events API.
        #[serde(default)]
        pub mode: SlackMode,
        /// App-level token with `connections:write` (`xapp-…`), for
        /// Socket Mode.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub app_token: Option<String>,
        /// Signing secret (Basic Information → App Credentials), for the
        /// Events API.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub signing_secret: Option<String>,
        /// Web API base (a test fake).
        #[serde(default = "default_slack_api")]
        pub api_url: String,
    }
}

fn default_slack_api() -> String {
    "https://slack.com/api".to_owned()
}

channel_config! {
    /// A WhatsApp Business number on the Cloud API.
    pub struct WhatsAppConfig {
        /// A system user's permanent access token.
        pub access_token: String,
        /// The number's Phone number ID (not the number itself).
        pub phone_number_id: String,
        /// The app's secret: webhook posts are signed with it
        /// (`X-Hub-Signature-256`).
        pub app_secret: String,
        /// The token typed into the webhook settings; Meta sends it back
        /// in the verification handshake.
        pub verify_token: String,
        /// Graph API base (a test fake).
        #[serde(default = "default_graph_api")]
        pub api_url: String,
        /// Graph API version.
        #[serde(default = "default_graph_version")]
        pub api_version: String,
    }
}

fn default_graph_api() -> String {
    "https://graph.facebook.com".to_owned()
}

fn default_graph_version() -> String {
    "v23.0".to_owned()
}

/// Scheduled messages: cron jobs and the heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AutomationConfig {
    /// Cron jobs: each sends its message to an agent on its schedule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<CronJobConfig>,
    /// A periodic look at `HEARTBEAT.md`; a model is asked only when a task
    /// listed there is due.
    #[serde(default)]
    pub heartbeat: HeartbeatConfig,
}

/// A cron job: a message sent to an agent on a schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CronJobConfig {
    /// Unique name (`cron.list` and `cron.remove` use it).
    pub name: String,
    /// Cron expression: 5 fields `minute hour day-of-month month
    /// day-of-week` (`30 7 * * MON-FRI`), or 6 with seconds first.
    pub schedule: String,
    /// IANA time zone the schedule is read in (`Europe/Berlin`).
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// The message sent to the agent.
    pub message: String,
    /// The agent that answers; `agents.default` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The session (`channel:peer`) the job's turns run in;
    /// `cron:<name>` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Where the answer is sent, as a session key `<channel>:<peer>`
    /// (`telegram:123456789`); kept in the job's session only when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_to: Option<String>,
    /// What happens to runs missed while Flynn was not running.
    #[serde(default)]
    pub missed: Missed,
    /// Off: the job stays in the file but never runs.
    #[serde(default = "yes")]
    pub enabled: bool,
}

impl CronJobConfig {
    /// The session the job's turns run in: `session`, or `cron:<name>`.
    pub fn session_key(&self) -> String {
        self.session
            .clone()
            .unwrap_or_else(|| format!("cron:{}", self.name))
    }
}

/// What happens to scheduled runs missed while Flynn was not running.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Missed runs are dropped; the job waits for its next time.
    #[default]
    Skip,
    /// One catch-up run at start-up, however many were missed.
    RunOnce,
}

/// The heartbeat: every `every_mins`, `HEARTBEAT.md` is read and, only when
/// one of its tasks is due, the due tasks are sent to the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// On: the file is read every `every_mins`.
    #[serde(default)]
    pub enabled: bool,
    /// Minutes between two looks at the file.
    #[serde(default = "default_heartbeat_mins")]
    pub every_mins: u32,
    /// The task file; `HEARTBEAT.md` in the workspace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// IANA time zone the file's times (`daily 08:00`) are read in.
    #[serde(default = "default_timezone")]
    pub timezone: String,
    /// Where answers are sent, as a session key `<channel>:<peer>`; kept
    /// in the `heartbeat:main` session only when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_to: Option<String>,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        HeartbeatConfig {
            enabled: false,
            every_mins: default_heartbeat_mins(),
            file: None,
            timezone: default_timezone(),
            deliver_to: None,
        }
    }
}

fn default_timezone() -> String {
    "UTC".to_owned()
}

fn default_heartbeat_mins() -> u32 {
    30
}

/// MCP servers, in the shape other MCP clients use: `command`, `args` and
/// `env` for a server Flynn starts (stdio), `url` and `headers` for one it
/// reaches over streamable HTTP.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// By name; a server's tools are offered as `<name>.<tool>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub servers: BTreeMap<String, McpServerConfig>,
}

impl McpConfig {
    /// The env values, header values and bearer tokens of every server:
    /// credentials, kept out of logs and tool output.
    pub fn secrets(&self) -> Vec<String> {
        let mut secrets = Vec::new();
        for server in self.servers.values() {
            secrets.extend(server.env.values().filter(|v| v.len() >= 8).cloned());
            secrets.extend(server.headers.values().filter(|v| v.len() >= 8).cloned());
            secrets.extend(server.bearer_token.clone());
        }
        secrets
    }
}

/// One MCP server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// `stdio` or `http` (`streamable-http`); read from `command` or `url`
    /// when absent.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<McpTransport>,
    /// The program to start (stdio): `npx`, `uvx`, a path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables for it. It gets only these and the basic
    /// ones (`PATH`, `HOME`, `LANG`...), never Flynn's own secrets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Directory it starts in; the workspace when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// The server's streamable HTTP endpoint (HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Headers sent with every request (HTTP), `Authorization` included.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// A token sent as `Authorization: Bearer <token>` (HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token: Option<String>,
    /// Off: the server is neither started nor offered.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// `boot`: started with Flynn; `lazy`: started before the first turn
    /// of an agent that may use its tools.
    #[serde(default)]
    pub start: McpStart,
    /// How long starting and listing the tools may take.
    #[serde(default = "default_mcp_startup_secs")]
    pub startup_timeout_secs: u64,
    /// How long one tool call may run.
    #[serde(default = "default_mcp_timeout_secs")]
    pub timeout_secs: u64,
    /// How often a running server is pinged; one that does not answer
    /// within as long is taken for hung and restarted. 0: never pinged.
    #[serde(default = "default_mcp_ping_interval_secs")]
    pub ping_interval_secs: u64,
    /// Trust what this server says: its tools' `readOnlyHint` and
    /// `openWorldHint` are honoured and its output does not taint the
    /// session. Off by default: every tool counts as acting on the world
    /// and its output as untrusted content.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trusted: bool,
}

impl McpServerConfig {
    /// The transport: `type` when set, else stdio with a `command`, HTTP
    /// with a `url`.
    pub fn transport(&self) -> McpTransport {
        self.kind
            .unwrap_or(if self.url.is_some() && self.command.is_none() {
                McpTransport::Http
            } else {
                McpTransport::Stdio
            })
    }
}

impl McpServerConfig {
    /// What it runs or reaches, for people: `command args...` (arguments
    /// with spaces quoted) or the URL; never `env` or headers, which may
    /// hold secrets.
    pub fn target(&self) -> String {
        match self.transport() {
            McpTransport::Stdio => {
                let mut words = vec![self.command.clone().unwrap_or_default()];
                words.extend(self.args.iter().map(|arg| {
                    if arg.is_empty() || arg.contains(char::is_whitespace) {
                        format!("'{arg}'")
                    } else {
                        arg.clone()
                    }
                }));
                words.join(" ")
            }
            McpTransport::Http | McpTransport::Sse => self.url.clone().unwrap_or_default(),
        }
    }
}

impl McpTransport {
    /// As the config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            McpTransport::Stdio => "stdio",
            McpTransport::Http => "http",
            McpTransport::Sse => "sse",
        }
    }
}

impl McpStart {
    /// As the config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            McpStart::Boot => "boot",
            McpStart::Lazy => "lazy",
        }
    }
}

/// How Flynn talks to an MCP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on its stdin and stdout.
    Stdio,
    /// Streamable HTTP.
    #[serde(
        alias = "streamable-http",
        alias = "streamable_http",
        alias = "streamableHttp"
    )]
    Http,
    /// The older HTTP+SSE transport, which Flynn does not speak: refused
    /// with a pointer to streamable HTTP.
    Sse,
}

/// When an MCP server is started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum McpStart {
    /// With Flynn, in the background.
    #[default]
    Boot,
    /// Before the first turn of an agent whose tools include it.
    Lazy,
}

fn default_mcp_startup_secs() -> u64 {
    30
}

fn default_mcp_timeout_secs() -> u64 {
    60
}

fn default_mcp_ping_interval_secs() -> u64 {
    30
}
