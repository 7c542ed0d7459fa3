//! What model calls cost: a built-in price table of well-known hosted
//! models, overridable per model in config (`models.prices`).
//!
//! Prices are USD per million tokens, as the vendors list them for
//! standard (non-batch) use; they change, so the table is a convenience
//! and `models.prices` is the authority. Self-hosted providers (Ollama,
//! llama.cpp, vLLM, LM Studio, or any provider marked `local: true`) cost
//! nothing unless configured otherwise. A model with no known price has no
//! cost (`None`), never a guessed one.

use std::collections::BTreeMap;

use flynn_protocol::Usage;
use flynn_protocol::config::{Price, ProviderConfig};

/// Built-in prices: (model id prefix, input, output, cache read, cache write).
/// Longer, more specific prefixes come first.
const TABLE: &[(&str, f64, f64, f64, f64)] = &[
    // Anthropic (cache write = 5-minute cache).
    ("claude-opus-4-6", 5.0, 25.0, 0.5, 6.25),
    ("claude-opus-4-5", 5.0, 25.0, 0.5, 6.25),
    ("claude-opus-4-1", 15.0, 75.0, 1.5, 18.75),
    ("claude-opus-4", 15.0, 75.0, 1.5, 18.75),
    ("claude-sonnet-4", 3.0, 15.0, 0.3, 3.75),
    ("claude-3-7-sonnet", 3.0, 15.0, 0.3, 3.75),
    ("claude-haiku-4-5", 1.0, 5.0, 0.1, 1.25),
    ("claude-3-5-haiku", 0.8, 4.0, 0.08, 1.0),
    // OpenAI (cache write is billed as input).
    ("gpt-5-nano", 0.05, 0.4, 0.005, 0.05),
    ("gpt-5-mini", 0.25, 2.0, 0.025, 0.25),
    ("gpt-5", 1.25, 10.0, 0.125, 1.25),
    ("gpt-4.1-nano", 0.1, 0.4, 0.025, 0.1),
    ("gpt-4.1-mini", 0.4, 1.6, 0.1, 0.4),
    ("gpt-4.1", 2.0, 8.0, 0.5, 2.0),
    ("gpt-4o-mini", 0.15, 0.6, 0.075, 0.15),
    ("gpt-4o", 2.5, 10.0, 1.25, 2.5),
    ("o4-mini", 1.1, 4.4, 0.275, 1.1),
    ("o3-mini", 1.1, 4.4, 0.55, 1.1),
    ("o3", 2.0, 8.0, 0.5, 2.0),
    // Google Gemini (prompts up to 200k tokens).
    ("gemini-2.5-pro", 1.25, 10.0, 0.31, 1.25),
    ("gemini-2.5-flash-lite", 0.1, 0.4, 0.025, 0.1),
    ("gemini-2.5-flash", 0.3, 2.5, 0.075, 0.3),
    ("gemini-2.0-flash", 0.1, 0.4, 0.025, 0.1),
];

/// Prices for the configured providers and models.
#[derive(Debug, Clone, Default)]
pub struct PriceTable {
    overrides: BTreeMap<String, Price>,
    /// Providers whose calls are free unless a price is configured.
    free_providers: Vec<String>,
}

impl PriceTable {
    pub fn new(
        providers: &BTreeMap<String, ProviderConfig>,
        overrides: &BTreeMap<String, Price>,
    ) -> Self {
        PriceTable {
            overrides: overrides.clone(),
            free_providers: providers
                .iter()
                .filter(|(_, p)| p.local.unwrap_or(false) || p.kind.is_self_hosted())
                .map(|(name, _)| name.clone())
                .collect(),
        }
    }

    /// The price of `model` from `provider`: `models.prices["provider/model"]`,
    /// then `models.prices["model"]`, then free for self-hosted providers,
    /// then the built-in table (by the longest matching prefix, ignoring a
    /// vendor prefix such as `anthropic.` or `openai/`).
    pub fn price(&self, provider: &str, model: &str) -> Option<Price> {
        if let Some(price) = self
            .overrides
            .get(&format!("{provider}/{model}"))
            .or_else(|| self.overrides.get(model))
        {
            return Some(price.clone());
        }
        if self.free_providers.iter().any(|p| p == provider) {
            return Some(Price {
                input_per_mtok: 0.0,
                output_per_mtok: 0.0,
                cache_read_per_mtok: None,
                cache_write_per_mtok: None,
            });
        }
        let id = model.rsplit(['/', '.']).next().unwrap_or(model);
        let id = if id.starts_with(char::is_alphabetic) {
            id
        } else {
            model
        };
        TABLE
            .iter()
            .find(|(prefix, ..)| id.starts_with(prefix) || model.starts_with(prefix))
            .map(|&(_, input, output, read, write)| Price {
                input_per_mtok: input,
                output_per_mtok: output,
                cache_read_per_mtok: Some(read),
                cache_write_per_mtok: Some(write),
            })
    }

    /// The cost in USD of a call's usage, if the model's price is known.
    pub fn cost(&self, provider: &str, model: &str, usage: &Usage) -> Option<f64> {
        self.price(provider, model).map(|price| cost(&price, usage))
    }
}

/// The cost in USD of `usage` at `price`. `input_tokens` excludes cached
/// tokens, which are billed at their own rates.
pub fn cost(price: &Price, usage: &Usage) -> f64 {
    let per_token = |per_mtok: f64| per_mtok / 1_000_000.0;
    usage.input_tokens as f64 * per_token(price.input_per_mtok)
        + usage.output_tokens as f64 * per_token(price.output_per_mtok)
        + usage.cache_read_tokens as f64
            * per_token(price.cache_read_per_mtok.unwrap_or(price.input_per_mtok))
        + usage.cache_write_tokens as f64
            * per_token(price.cache_write_per_mtok.unwrap_or(price.input_per_mtok))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flynn_protocol::config::ProviderKind;

    fn usage(input: u64, output: u64, read: u64, write: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: read,
            cache_write_tokens: write,
        }
    }

    fn table() -> PriceTable {
        let mut providers = BTreeMap::new();
        providers.insert(
            "anthropic".to_owned(),
            ProviderConfig::new(ProviderKind::Anthropic),
        );
        providers.insert(
            "ollama".to_owned(),
            ProviderConfig::new(ProviderKind::Ollama),
        );
        let mut box_config = ProviderConfig::new(ProviderKind::OpenaiCompatible);
        box_config.local = Some(true);
        providers.insert("homebox".to_owned(), box_config);
        let mut overrides = BTreeMap::new();
        overrides.insert(
            "anthropic/claude-sonnet-4-5".to_owned(),
            Price {
                input_per_mtok: 1.0,
                output_per_mtok: 2.0,
                cache_read_per_mtok: None,
                cache_write_per_mtok: None,
            },
        );
        PriceTable::new(&providers, &overrides)
    }

    #[test]
    fn built_in_prices_match_by_prefix_and_count_cache_tokens() {
        let table = table();
        // Haiku 4.5: $1 in, $5 out, $0.10 cache read, $1.25 cache write.
        let cost = table.cost(
            "anthropic",
            "claude-haiku-4-5-20251001",
            &usage(1_000_000, 100_000, 1_000_000, 100_000),
        );
        assert_eq!(
            cost.map(|c| (c * 1e6).round() / 1e6),
            Some(1.0 + 0.5 + 0.1 + 0.125)
        );
        // A vendor prefix in the id (Bedrock, OpenRouter) is looked through.
        assert_eq!(
            table
                .price("openrouter", "openai/gpt-4o-mini")
                .map(|p| p.input_per_mtok),
            Some(0.15)
        );
        assert_eq!(
            table
                .price("openai", "gpt-4o-mini-2024-07-18")
                .map(|p| p.output_per_mtok),
            Some(0.6)
        );
        assert_eq!(
            table.price("openai", "gpt-4o").map(|p| p.input_per_mtok),
            Some(2.5)
        );
    }

    #[test]
    fn config_overrides_win_and_missing_cache_prices_use_the_input_price() {
        let cost = table().cost(
            "anthropic",
            "claude-sonnet-4-5",
            &usage(1_000_000, 1_000_000, 1_000_000, 0),
        );
        assert_eq!(cost, Some(1.0 + 2.0 + 1.0));
    }

    #[test]
    fn self_hosted_is_free_and_unknown_models_have_no_price() {
        let table = table();
        assert_eq!(
            table.cost("ollama", "llama3.2", &usage(1000, 1000, 0, 0)),
            Some(0.0)
        );
        assert_eq!(
            table.cost("homebox", "qwen2.5", &usage(1000, 1000, 0, 0)),
            Some(0.0)
        );
        assert_eq!(
            table.cost("anthropic", "some-future-model", &usage(1, 1, 0, 0)),
            None
        );
    }
}
