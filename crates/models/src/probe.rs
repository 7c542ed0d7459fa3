//! Asking a provider's server whether it is there and takes the key,
//! without a model call: `flynn doctor` uses it.

use std::time::{Duration, Instant};

use flynn_protocol::config::{ProviderConfig, ProviderKind};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use crate::anthropic::ANTHROPIC_VERSION;
use crate::http::{self, Transport};
use crate::{Error, Result};

/// What a provider's server answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    /// The URL asked.
    pub url: String,
    /// How long the answer took.
    pub latency: Duration,
    /// The model ids the server lists.
    pub models: Vec<String>,
}

/// Asks the provider for its model list (`GET …/models`), with the
/// configured key and headers: the cheapest request that proves the
/// server is reachable and accepts the key. Costs nothing on hosted APIs.
///
/// Fails as a model call would: [`Error::MissingApiKey`] when the kind
/// needs a key and none is set, [`Error::Connect`]-style errors when
/// nothing answers, the vendor's 401 as an auth error. Bedrock is not
/// probed ([`Error::Config`]): its model list is not an HTTP endpoint of
/// the runtime.
pub async fn probe(name: &str, config: &ProviderConfig, timeout: Duration) -> Result<Probe> {
    if config.kind == ProviderKind::Bedrock {
        return Err(Error::Config {
            message: format!("provider '{name}': bedrock is not probed (no model list to ask)"),
        });
    }
    if config.kind == ProviderKind::Local {
        return Err(Error::Config {
            message: format!("provider '{name}': a local model is not probed (it runs in process)"),
        });
    }
    let base = http::base_url(name, config)?;
    let key = http::api_key(config);
    let mut headers = HeaderMap::new();
    let url = if config.kind == ProviderKind::Anthropic {
        let Some(key) = key else {
            return Err(Error::MissingApiKey {
                provider: name.to_owned(),
                env: config.kind.api_key_env(),
            });
        };
        let mut value = http::header_value(name, "API key", &key)?;
        value.set_sensitive(true);
        headers.insert(HeaderName::from_static("x-api-key"), value);
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        if base.ends_with("/v1") {
            format!("{base}/models")
        } else {
            format!("{base}/v1/models")
        }
    } else {
        match key {
            Some(key) => {
                let mut value = http::header_value(name, "API key", &format!("Bearer {key}"))?;
                value.set_sensitive(true);
                headers.insert(AUTHORIZATION, value);
            }
            None if config.kind.requires_api_key() => {
                return Err(Error::MissingApiKey {
                    provider: name.to_owned(),
                    env: config.kind.api_key_env(),
                });
            }
            None => {}
        }
        format!("{base}/models")
    };
    let transport = Transport::new(name, config)?;
    let started = Instant::now();
    let answer = transport
        .json_request(reqwest::Method::GET, &url, None, headers, timeout)
        .await?;
    let latency = started.elapsed();
    // OpenAI, Anthropic and the compatible servers all answer `data: [{id}]`.
    let models = answer["data"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    Ok(Probe {
        url,
        latency,
        models,
    })
}
