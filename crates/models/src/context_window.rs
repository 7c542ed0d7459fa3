//! How many tokens a model can take: configuration first, then what the
//! server says, then a built-in table of known models, then an assumption.
//!
//! Precedence, highest first (see [`WindowSource`]):
//!
//! 1. `models.context_windows["provider/model"]`
//! 2. `models.context_windows["model"]` (the bare model id)
//! 3. the provider's `context_window`
//! 4. what the server reports ([`ModelClient::context_window`]: Ollama's
//!    `/api/show`, llama.cpp's `/props`)
//! 5. the built-in table ([`known_context_window`]), capped by a service
//!    limit where the kind has one (GitHub Models' free tier)
//! 6. an assumption: 8,192 tokens for an unknown model on a server people
//!    run themselves (a small model's window is rarely smaller, and
//!    overrunning a local server's window loses the start of the prompt
//!    silently), 128,000 for an unknown model of a hosted API.

use std::collections::BTreeMap;

use flynn_protocol::config::{ModelsConfig, ProviderConfig, ProviderKind};
use serde_json::Value;

use crate::ModelClient;
use crate::preset::{SELF_HOSTED_DEFAULT_WINDOW, preset};

/// Where a context window came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowSource {
    /// `models.context_windows["provider/model"]`.
    ConfiguredModel,
    /// `models.context_windows["model"]`.
    ConfiguredBareModel,
    /// The provider's `context_window`.
    ConfiguredProvider,
    /// What the server reported for the model.
    Server,
    /// The built-in table of known models.
    Table,
    /// Nothing knew the model: the kind's assumption.
    Default,
}

/// A model's context window and where it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContextWindow {
    pub tokens: u32,
    pub source: WindowSource,
}

impl ContextWindow {
    fn new(tokens: u32, source: WindowSource) -> Self {
        ContextWindow { tokens, source }
    }
}

/// What the resolver keeps of one provider's config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProviderWindow {
    kind: ProviderKind,
    context_window: Option<u32>,
}

/// Resolves context windows from the config, the servers and the built-in
/// table. Cheap to clone; build it once from the config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextWindows {
    overrides: BTreeMap<String, u32>,
    providers: BTreeMap<String, ProviderWindow>,
}

impl ContextWindows {
    pub fn new(providers: &BTreeMap<String, ProviderConfig>, models: &ModelsConfig) -> Self {
        ContextWindows {
            overrides: models.context_windows.clone(),
            providers: providers
                .iter()
                .map(|(name, config)| {
                    (
                        name.clone(),
                        ProviderWindow {
                            kind: config.kind,
                            context_window: config.context_window,
                        },
                    )
                })
                .collect(),
        }
    }

    /// The window the configuration sets for `model` of `provider`, if it
    /// sets one.
    pub fn configured(&self, provider: &str, model: &str) -> Option<ContextWindow> {
        if let Some(tokens) = self.overrides.get(&format!("{provider}/{model}")) {
            return Some(ContextWindow::new(*tokens, WindowSource::ConfiguredModel));
        }
        if let Some(tokens) = self.overrides.get(model) {
            return Some(ContextWindow::new(
                *tokens,
                WindowSource::ConfiguredBareModel,
            ));
        }
        self.providers
            .get(provider)
            .and_then(|p| p.context_window)
            .map(|tokens| ContextWindow::new(tokens, WindowSource::ConfiguredProvider))
    }

    /// The window without asking any server: the configuration, else the
    /// built-in table, else the kind's assumption.
    pub fn offline(&self, provider: &str, model: &str) -> ContextWindow {
        self.configured(provider, model)
            .unwrap_or_else(|| self.fallback(provider, model))
    }

    /// The window of `model` served by `client`: the configuration, else
    /// what the server says (asked once per model, then cached by the
    /// client), else the built-in table, else the kind's assumption.
    pub async fn resolve(&self, client: &dyn ModelClient, model: &str) -> ContextWindow {
        let provider = client.info().provider.as_str();
        if let Some(window) = self.configured(provider, model) {
            return window;
        }
        if let Some(tokens) = client.context_window(model).await {
            return ContextWindow::new(tokens, WindowSource::Server);
        }
        self.fallback(provider, model)
    }

    /// The table (capped by the service's limit) or the assumption.
    fn fallback(&self, provider: &str, model: &str) -> ContextWindow {
        let preset = self.providers.get(provider).map(|p| preset(p.kind));
        match known_context_window(model) {
            Some(tokens) => {
                let cap = preset.and_then(|p| p.context_cap).unwrap_or(u32::MAX);
                ContextWindow::new(tokens.min(cap), WindowSource::Table)
            }
            None => ContextWindow::new(
                preset.map_or(SELF_HOSTED_DEFAULT_WINDOW, |p| p.default_window),
                WindowSource::Default,
            ),
        }
    }
}

/// Known context windows in tokens, by model id or id prefix, from the
/// vendors' model pages. A model matches its exact id first, then the
/// longest prefix. Ids are compared after [`canonical`] (lower case,
/// without a `publisher/` path, an Ollama `:tag` or a Bedrock
/// `region.vendor.` prefix).
const KNOWN_WINDOWS: &[(&str, u32)] = &[
    // Anthropic: every Claude model has a 200k window (1M for some in beta).
    ("claude", 200_000),
    // OpenAI.
    ("gpt-5", 400_000),
    ("gpt-5-chat", 128_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4.5", 128_000),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-1106", 128_000),
    ("gpt-4-0125", 128_000),
    ("gpt-4", 8_192),
    ("gpt-4-32k", 32_768),
    ("gpt-3.5-turbo", 16_385),
    ("o1", 200_000),
    ("o1-mini", 128_000),
    ("o1-preview", 128_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("gpt-oss", 131_072),
    // Google.
    ("gemini", 1_048_576),
    ("gemini-1.5-pro", 2_097_152),
    ("gemma-2", 8_192),
    ("gemma2", 8_192),
    ("gemma-3", 131_072),
    ("gemma3", 131_072),
    ("gemma-3-1b", 32_768),
    ("gemma3n", 32_768),
    // Meta Llama (Llama 4's hosts serve it with 128k).
    ("llama3", 8_192),
    ("llama-3", 8_192),
    ("meta-llama-3", 8_192),
    ("llama3.1", 131_072),
    ("llama3.2", 131_072),
    ("llama3.3", 131_072),
    ("llama-3.1", 131_072),
    ("llama-3.2", 131_072),
    ("llama-3.3", 131_072),
    ("meta-llama-3.1", 131_072),
    ("meta-llama-3.2", 131_072),
    ("meta-llama-3.3", 131_072),
    ("llama3-1", 131_072),
    ("llama3-2", 131_072),
    ("llama3-3", 131_072),
    ("llama4", 131_072),
    ("llama-4", 131_072),
    // Qwen (native windows, without YaRN scaling).
    ("qwen2", 32_768),
    ("qwen2.5", 32_768),
    ("qwen-2.5", 32_768),
    ("qwen3", 32_768),
    ("qwen3-coder", 262_144),
    ("qwq", 131_072),
    // Mistral.
    ("mistral", 32_768),
    ("mistral-small", 131_072),
    ("mistral-medium", 131_072),
    ("mistral-large", 131_072),
    ("mistral-nemo", 131_072),
    ("ministral", 131_072),
    ("mixtral", 32_768),
    ("mixtral-8x22b", 65_536),
    ("codestral", 262_144),
    ("devstral", 131_072),
    // DeepSeek (its API documents 128K).
    ("deepseek-chat", 128_000),
    ("deepseek-reasoner", 128_000),
    ("deepseek-r1", 131_072),
    ("deepseek-v3", 131_072),
    // Microsoft.
    ("phi4", 16_384),
    ("phi-4", 16_384),
    // Amazon (Bedrock).
    ("nova-micro", 128_000),
    ("nova-lite", 300_000),
    ("nova-pro", 300_000),
    ("nova-premier", 1_000_000),
];

/// The built-in window of `model`, if the table knows it.
pub fn known_context_window(model: &str) -> Option<u32> {
    let id = canonical(model);
    KNOWN_WINDOWS
        .iter()
        .filter(|(key, _)| id.starts_with(key))
        .max_by_key(|(key, _)| key.len())
        .map(|(_, tokens)| *tokens)
}

/// The form model ids are compared in: lower case, the last path segment
/// (`anthropic/claude-sonnet-4.5` on OpenRouter, `openai/gpt-4.1` on GitHub
/// Models, `Qwen/Qwen2.5-7B-Instruct` on vLLM), without an Ollama tag
/// (`llama3.1:8b`) or Bedrock version (`...-v1:0`), and without Bedrock's
/// `us.`/`eu.`/`apac.`/`global.` and vendor prefixes.
pub(crate) fn canonical(model: &str) -> String {
    let lower = model.trim().to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or_default();
    let mut name = name.split(':').next().unwrap_or_default();
    for region in ["us.", "eu.", "apac.", "global."] {
        if let Some(rest) = name.strip_prefix(region) {
            name = rest;
            break;
        }
    }
    for vendor in [
        "anthropic.",
        "meta.",
        "mistral.",
        "amazon.",
        "deepseek.",
        "qwen.",
    ] {
        if let Some(rest) = name.strip_prefix(vendor) {
            name = rest;
            break;
        }
    }
    name.to_owned()
}

/// Ollama serves a model with its `num_ctx` parameter when the model sets
/// one, else with the server's default: 4,096 tokens on most machines
/// (`OLLAMA_CONTEXT_LENGTH` raises it, which the API does not report), and
/// never more than the model was trained for.
pub(crate) const OLLAMA_DEFAULT_NUM_CTX: u32 = 4_096;

/// The window an Ollama `/api/show` answer describes: `num_ctx` from its
/// `parameters` text when set, else [`OLLAMA_DEFAULT_NUM_CTX`], capped by
/// `model_info["<architecture>.context_length"]`. `None` when the answer
/// holds neither.
pub(crate) fn ollama_show_window(show: &Value) -> Option<u32> {
    let info = show.get("model_info");
    let trained = info.and_then(|info| {
        let arch = info.get("general.architecture").and_then(Value::as_str);
        arch.and_then(|arch| info.get(format!("{arch}.context_length")))
            .or_else(|| {
                // An architecture key missing or misspelt: any
                // `*.context_length` will do.
                info.as_object()?
                    .iter()
                    .find(|(key, _)| key.ends_with(".context_length"))
                    .map(|(_, value)| value)
            })
            .and_then(as_window)
    });
    // `parameters` is text, one `name value` per line.
    let num_ctx = show
        .get("parameters")
        .and_then(Value::as_str)
        .into_iter()
        .flat_map(str::lines)
        .filter_map(|line| line.trim().strip_prefix("num_ctx"))
        .filter_map(|rest| rest.trim().parse::<u32>().ok())
        .find(|n| *n > 0);
    match (num_ctx, trained) {
        (None, None) => None,
        (num_ctx, trained) => Some(
            num_ctx
                .unwrap_or(OLLAMA_DEFAULT_NUM_CTX)
                .min(trained.unwrap_or(u32::MAX)),
        ),
    }
}

/// The window a llama.cpp `/props` answer describes: the context of one
/// slot, `default_generation_settings.n_ctx` (newer servers also put it at
/// the top level).
pub(crate) fn llamacpp_props_window(props: &Value) -> Option<u32> {
    props
        .pointer("/default_generation_settings/n_ctx")
        .or_else(|| props.get("n_ctx"))
        .and_then(as_window)
}

/// A positive token count.
fn as_window(value: &Value) -> Option<u32> {
    value
        .as_u64()
        .filter(|n| *n > 0)
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_table_matches_exact_ids_then_the_longest_prefix() {
        let cases = [
            ("claude-sonnet-4-5", Some(200_000)),
            ("claude-opus-4-6", Some(200_000)),
            ("gpt-4o-mini", Some(128_000)),
            ("gpt-4.1-nano", Some(1_047_576)),
            ("gpt-4-0613", Some(8_192)),
            ("gpt-4-turbo-2024-04-09", Some(128_000)),
            ("gpt-5-mini", Some(400_000)),
            ("gpt-5-chat-latest", Some(128_000)),
            ("o1-mini", Some(128_000)),
            ("o3-mini", Some(200_000)),
            ("gemini-2.5-flash", Some(1_048_576)),
            ("gemini-1.5-pro-002", Some(2_097_152)),
            ("mistral-large-latest", Some(131_072)),
            ("mistral", Some(32_768)),
            ("deepseek-chat", Some(128_000)),
            ("some-private-finetune", None),
        ];
        for (model, expected) in cases {
            assert_eq!(known_context_window(model), expected, "{model}");
        }
    }

    #[test]
    fn ids_are_compared_without_paths_tags_and_bedrock_prefixes() {
        let cases = [
            // OpenRouter, GitHub Models, Groq, vLLM.
            ("anthropic/claude-sonnet-4.5", Some(200_000)),
            ("openai/gpt-4.1", Some(1_047_576)),
            ("meta-llama/llama-4-scout-17b-16e-instruct", Some(131_072)),
            ("Qwen/Qwen2.5-7B-Instruct", Some(32_768)),
            ("qwen/qwen3-32b", Some(32_768)),
            // Ollama tags.
            ("llama3.1:8b", Some(131_072)),
            ("llama3:latest", Some(8_192)),
            ("qwen2.5-coder:7b", Some(32_768)),
            // LM Studio.
            ("meta-llama-3.1-8b-instruct", Some(131_072)),
            // Bedrock.
            (
                "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                Some(200_000),
            ),
            ("meta.llama3-1-70b-instruct-v1:0", Some(131_072)),
            ("amazon.nova-pro-v1:0", Some(300_000)),
        ];
        for (model, expected) in cases {
            assert_eq!(known_context_window(model), expected, "{model}");
        }
    }

    fn providers() -> BTreeMap<String, ProviderConfig> {
        let mut providers = BTreeMap::new();
        providers.insert(
            "anthropic".to_owned(),
            ProviderConfig::new(ProviderKind::Anthropic),
        );
        let mut local = ProviderConfig::new(ProviderKind::Ollama);
        local.context_window = Some(16_384);
        providers.insert("local".to_owned(), local);
        providers.insert("vllm".to_owned(), ProviderConfig::new(ProviderKind::Vllm));
        providers.insert(
            "github".to_owned(),
            ProviderConfig::new(ProviderKind::GithubModels),
        );
        providers
    }

    #[test]
    fn configuration_wins_in_its_documented_order() {
        let mut models = ModelsConfig::default();
        models
            .context_windows
            .insert("anthropic/claude-haiku-4-5".to_owned(), 50_000);
        models
            .context_windows
            .insert("claude-haiku-4-5".to_owned(), 60_000);
        models
            .context_windows
            .insert("llama3.1:8b".to_owned(), 32_000);
        let windows = ContextWindows::new(&providers(), &models);
        let cases = [
            (
                "anthropic",
                "claude-haiku-4-5",
                ContextWindow::new(50_000, WindowSource::ConfiguredModel),
            ),
            (
                "other",
                "claude-haiku-4-5",
                ContextWindow::new(60_000, WindowSource::ConfiguredBareModel),
            ),
            (
                "local",
                "llama3.1:8b",
                ContextWindow::new(32_000, WindowSource::ConfiguredBareModel),
            ),
            (
                "local",
                "qwen3:8b",
                ContextWindow::new(16_384, WindowSource::ConfiguredProvider),
            ),
            (
                "anthropic",
                "claude-sonnet-4-5",
                ContextWindow::new(200_000, WindowSource::Table),
            ),
            (
                "anthropic",
                "claude-next",
                ContextWindow::new(200_000, WindowSource::Table),
            ),
            (
                "anthropic",
                "unknown-model",
                ContextWindow::new(128_000, WindowSource::Default),
            ),
            (
                "vllm",
                "my-finetune",
                ContextWindow::new(8_192, WindowSource::Default),
            ),
            // GitHub Models' free tier caps every request at 8,000 tokens.
            (
                "github",
                "openai/gpt-4.1",
                ContextWindow::new(8_000, WindowSource::Table),
            ),
            // A provider the config does not name: the cautious assumption.
            (
                "nowhere",
                "my-finetune",
                ContextWindow::new(8_192, WindowSource::Default),
            ),
        ];
        for (provider, model, expected) in cases {
            assert_eq!(
                windows.offline(provider, model),
                expected,
                "{provider}/{model}"
            );
        }
    }

    fn ollama_show(context_length: u64, parameters: &str) -> Value {
        json!({
            "parameters": parameters,
            "model_info": {
                "general.architecture": "llama",
                "llama.context_length": context_length,
                "llama.embedding_length": 4096
            }
        })
    }

    #[test]
    fn ollama_serves_num_ctx_when_set_else_its_default_never_more_than_trained() {
        let documented: Value = serde_json::from_str(flynn_testkit::fixtures::OLLAMA_SHOW).unwrap();
        assert_eq!(ollama_show_window(&documented), Some(4_096));
        let stop = "stop                           \"<|eot_id|>\"";
        assert_eq!(
            ollama_show_window(&ollama_show(
                131_072,
                &format!("num_ctx                        32768\n{stop}")
            )),
            Some(32_768)
        );
        assert_eq!(ollama_show_window(&ollama_show(131_072, stop)), Some(4_096));
        assert_eq!(ollama_show_window(&ollama_show(2_048, stop)), Some(2_048));
        assert_eq!(
            ollama_show_window(&ollama_show(8_192, "num_ctx 65536")),
            Some(8_192)
        );
        // No architecture key: any `*.context_length` is read.
        assert_eq!(
            ollama_show_window(&json!({"model_info": {"qwen3.context_length": 2_000}})),
            Some(2_000)
        );
        assert_eq!(
            ollama_show_window(&json!({"parameters": "num_ctx 8192"})),
            Some(8_192)
        );
        assert_eq!(ollama_show_window(&json!({"details": {}})), None);
    }

    #[test]
    fn llamacpp_props_give_the_slot_context() {
        let documented: Value =
            serde_json::from_str(flynn_testkit::fixtures::LLAMACPP_PROPS).unwrap();
        assert_eq!(llamacpp_props_window(&documented), Some(1_024));
        assert_eq!(llamacpp_props_window(&json!({"n_ctx": 8192})), Some(8_192));
        assert_eq!(
            llamacpp_props_window(&json!({"default_generation_settings": {"n_ctx": 0}})),
            None
        );
        assert_eq!(llamacpp_props_window(&json!({})), None);
    }
}
