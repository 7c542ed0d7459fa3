use std::sync::Arc;

use flynn_protocol::config::{ProviderConfig, ProviderKind};

use crate::anthropic::AnthropicClient;
use crate::openai::OpenAiClient;
use crate::{ModelClient, Result};

/// Builds the client for one configured provider: the Messages API client
/// for `anthropic`, the Chat Completions client for every other kind.
/// Fails with [`crate::Error::Config`] on a bad base URL or header; a
/// missing API key is reported on the first call instead, so a provider
/// kept only as a fallback does not stop the others from loading.
pub fn build_client(name: &str, config: &ProviderConfig) -> Result<Arc<dyn ModelClient>> {
    build_shared(name, config, &mut Shared::default())
}

/// What clients built together share: the local models loaded, by file.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    #[cfg(feature = "local-llm")]
    local: crate::local::LocalModels,
}

/// [`build_client`], sharing loaded local models through `shared`.
pub(crate) fn build_shared(
    name: &str,
    config: &ProviderConfig,
    shared: &mut Shared,
) -> Result<Arc<dyn ModelClient>> {
    let _ = &shared;
    Ok(match config.kind {
        ProviderKind::Anthropic => Arc::new(AnthropicClient::new(name, config)?),
        #[cfg(feature = "bedrock")]
        ProviderKind::Bedrock => Arc::new(crate::bedrock::BedrockClient::new(name, config)?),
        #[cfg(not(feature = "bedrock"))]
        ProviderKind::Bedrock => {
            return Err(crate::Error::Config {
                message: format!(
                    "provider '{name}': kind 'bedrock' needs a Flynn built with the `bedrock` feature (cargo install --path bins/flynn --features bedrock)"
                ),
            });
        }
        #[cfg(feature = "local-llm")]
        ProviderKind::Local => crate::local::build(name, config, &mut shared.local)?,
        #[cfg(not(feature = "local-llm"))]
        ProviderKind::Local => {
            return Err(crate::Error::Config {
                message: format!(
                    "provider '{name}': kind 'local' needs a Flynn built with the `local-llm` feature (cargo install --path bins/flynn --features local-llm)"
                ),
            });
        }
        _ => Arc::new(OpenAiClient::new(name, config)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClientInfo, Error};

    #[test]
    fn each_kind_gets_its_client_and_info() {
        for kind in ProviderKind::ALL
            .into_iter()
            .filter(|k| cfg!(feature = "bedrock") || *k != ProviderKind::Bedrock)
            .filter(|k| *k != ProviderKind::Local)
        {
            let client = build_client(
                "p",
                &ProviderConfig::new(kind).with_base("http://127.0.0.1:1/v1"),
            );
            assert_eq!(
                client.map(|c| c.info().clone()),
                Ok(ClientInfo {
                    provider: "p".into(),
                    kind,
                    local: true,
                })
            );
        }
    }

    #[test]
    fn a_bad_base_url_names_the_provider_and_the_url() {
        let config = ProviderConfig::new(ProviderKind::Anthropic).with_base("api.anthropic.com");
        assert_eq!(
            build_client("claude", &config).map(|c| c.info().clone()),
            Err(Error::Config {
                message: "provider 'claude': invalid base_url 'api.anthropic.com': relative URL without a base".into()
            })
        );
    }

    trait WithBase {
        fn with_base(self, url: &str) -> Self;
    }

    impl WithBase for ProviderConfig {
        fn with_base(mut self, url: &str) -> Self {
            self.base_url = Some(url.into());
            self
        }
    }
}
