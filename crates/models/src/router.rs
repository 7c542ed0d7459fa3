use std::collections::HashMap;
use std::sync::Arc;

use flynn_protocol::Tier;
use flynn_protocol::config::{ModelRef, ModelsConfig, ProviderConfig};
use futures::StreamExt;
use std::collections::BTreeMap;

use crate::{Error, ModelClient, ModelRequest, ModelStream, Result, build_client};

/// One failed try of a routed call.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub model: ModelRef,
    pub error: Error,
}

/// A stream from whichever model accepted the call.
pub struct RoutedStream {
    /// The model that is answering.
    pub model: ModelRef,
    pub stream: ModelStream,
    /// Models tried before it, and why they failed.
    pub failed: Vec<Attempt>,
}

impl std::fmt::Debug for RoutedStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutedStream")
            .field("model", &self.model)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

/// Routes a call for a tier to the first model of that tier that answers,
/// then along the global fallback chain.
pub struct ModelRouter {
    clients: HashMap<String, Arc<dyn ModelClient>>,
    models: ModelsConfig,
}

impl std::fmt::Debug for ModelRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelRouter")
            .field("providers", &self.clients.keys().collect::<Vec<_>>())
            .field("models", &self.models)
            .finish()
    }
}

impl ModelRouter {
    /// Builds a client for every provider and checks that every model the
    /// tiers name refers to one of them.
    pub fn from_config(
        providers: &BTreeMap<String, ProviderConfig>,
        models: &ModelsConfig,
    ) -> Result<Self> {
        let mut clients = HashMap::new();
        for (name, config) in providers {
            clients.insert(name.clone(), build_client(name, config)?);
        }
        Ok(Self::new(clients, models.clone()))
    }

    pub fn new(clients: HashMap<String, Arc<dyn ModelClient>>, models: ModelsConfig) -> Self {
        ModelRouter { clients, models }
    }

    pub fn max_tokens(&self) -> u32 {
        self.models.max_tokens
    }

    /// The models tried for a tier, in order: the tier's own list (the
    /// default tier's when it has none), then the fallback chain.
    pub fn chain(&self, tier: Tier) -> Vec<ModelRef> {
        let mut own = self.models.tiers.get(tier);
        if own.is_empty() {
            own = self.models.tiers.get(Tier::Default);
        }
        let mut chain: Vec<ModelRef> = Vec::new();
        for model in own.iter().chain(&self.models.fallback) {
            if !chain.contains(model) {
                chain.push(model.clone());
            }
        }
        chain
    }

    /// Streams from the first model of `tier` that accepts the call.
    pub async fn stream(&self, tier: Tier, request: ModelRequest) -> Result<RoutedStream> {
        let chain = self.chain(tier);
        if chain.is_empty() {
            return Err(Error::Config {
                message: format!(
                    "no model is configured for the '{tier}' tier (set models.tiers.{tier} in the config file, or FLYNN_MODEL, or one of ANTHROPIC_API_KEY, OPENAI_API_KEY, OPENAI_BASE_URL, GEMINI_API_KEY, OLLAMA_HOST)"
                ),
            });
        }
        self.stream_chain(&chain, request).await
    }

    /// Streams from one named model, with no fallback.
    pub async fn stream_model(
        &self,
        model: &ModelRef,
        request: ModelRequest,
    ) -> Result<RoutedStream> {
        self.stream_chain(std::slice::from_ref(model), request)
            .await
    }

    async fn stream_chain(
        &self,
        chain: &[ModelRef],
        request: ModelRequest,
    ) -> Result<RoutedStream> {
        let mut failed = Vec::new();
        for model in chain {
            match self.try_model(model, request.clone()).await {
                Ok(stream) => {
                    return Ok(RoutedStream {
                        model: model.clone(),
                        stream,
                        failed,
                    });
                }
                Err(error) => {
                    tracing::warn!(model = %model, %error, "model call failed");
                    failed.push(Attempt {
                        model: model.clone(),
                        error,
                    });
                }
            }
        }
        if failed.len() == 1
            && let Some(attempt) = failed.pop()
        {
            return Err(attempt.error);
        }
        Err(Error::AllFailed {
            attempts: failed
                .into_iter()
                .map(|a| (a.model.to_string(), a.error))
                .collect(),
        })
    }

    /// Starts a call and waits for its first event, so that a stream that
    /// fails before its first token can fail over to the next model.
    async fn try_model(&self, model: &ModelRef, mut request: ModelRequest) -> Result<ModelStream> {
        let client = self
            .clients
            .get(model.provider())
            .ok_or_else(|| Error::Config {
                message: format!(
                    "model '{model}' names provider '{}', which is not configured (known: {})",
                    model.provider(),
                    self.known_providers()
                ),
            })?;
        request.model = model.model().to_owned();
        let mut stream = client.stream(request).await?;
        match stream.next().await {
            Some(Ok(first)) => Ok(Box::pin(futures::stream::iter([Ok(first)]).chain(stream))),
            Some(Err(error)) => Err(error),
            None => Err(Error::Stream {
                provider: model.provider().to_owned(),
                message: "the server closed the stream without sending anything".to_owned(),
            }),
        }
    }

    fn known_providers(&self) -> String {
        let mut names: Vec<&str> = self.clients.keys().map(String::as_str).collect();
        names.sort_unstable();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    }
}
