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

mod agents;
mod automation;
mod channels;
mod context;
mod gateway;
mod google;
mod mcp;
mod models;
mod sessions;
mod tools;
mod voice;

pub use agents::*;
pub use automation::*;
pub use channels::*;
pub use context::*;
pub use gateway::*;
pub use google::*;
pub use mcp::*;
pub use models::*;
pub use sessions::*;
pub use tools::*;
pub use voice::*;

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
    /// Voice notes: speech to text before the turn.
    #[serde(default)]
    pub voice: VoiceConfig,
    /// The owner's Google accounts: Gmail, Calendar, Drive, Docs and Tasks
    /// tools; absent, none are offered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub google: Option<GoogleConfig>,
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
            voice: VoiceConfig::default(),
            google: None,
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
        secrets.extend(self.google.iter().filter_map(|g| g.client_secret.clone()));
        secrets
    }
}

fn default_version() -> u32 {
    CONFIG_VERSION
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
