//! The AWS Bedrock client (Converse / ConverseStream API), on the AWS SDK
//! for Rust. Compiled with the `bedrock` feature only.
//!
//! Credentials come from the standard AWS chain (environment, shared
//! profile and SSO cache, web identity, ECS and EC2 instance metadata), or
//! from a Bedrock API key: `api_key` in config, else the SDK reads
//! `AWS_BEARER_TOKEN_BEDROCK`. The region is `region` in config, else the
//! chain's (`AWS_REGION`, the profile). `base_url` overrides the endpoint.
//!
//! The SDK's configuration is loaded on the first call, not when the client
//! is built: loading reads profile files and may ask instance metadata, and
//! a provider configured only as a fallback should not pay for it.

mod wire;

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::BehaviorVersion;
use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_bedrockruntime::config::{Credentials, Region, StalledStreamProtectionConfig, Token};
use aws_sdk_bedrockruntime::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_bedrockruntime::operation::converse_stream::ConverseStreamError;
use aws_sdk_bedrockruntime::types::error::ConverseStreamOutputError;
use aws_smithy_runtime_api::client::auth::AuthSchemeId;
use aws_smithy_runtime_api::client::auth::http::HTTP_BEARER_AUTH_SCHEME_ID;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::timeout::TimeoutConfig;
use flynn_protocol::config::ProviderConfig;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::OnceCell;

use self::wire::{Assembler, Event, Failure};
use crate::http::{self, quote};
use crate::{
    ClientInfo, Error, ModelClient, ModelRequest, ModelStream, Result, StreamEvent, ToolNameMap,
};

/// The SigV4 auth scheme, preferred when credentials are given explicitly
/// so that `AWS_BEARER_TOKEN_BEDROCK` in the environment cannot override
/// them.
const SIGV4: AuthSchemeId = AuthSchemeId::new("sigv4");

/// Static AWS credentials, for embedding Flynn where the standard chain is
/// not wanted (and for tests). Prefer the chain: it refreshes temporary
/// credentials on its own.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// For temporary credentials (STS).
    pub session_token: Option<String>,
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"** redacted **")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "** redacted **"),
            )
            .finish()
    }
}

/// Builds a Bedrock client that signs with `credentials` instead of the
/// standard AWS credential chain. Everything else (region, endpoint,
/// timeouts) comes from `config` as with [`crate::build_client`].
pub fn build_bedrock_client(
    name: &str,
    config: &ProviderConfig,
    credentials: AwsCredentials,
) -> Result<Arc<dyn ModelClient>> {
    let mut client = BedrockClient::new(name, config)?;
    client.settings.credentials = Some(credentials);
    Ok(Arc::new(client))
}

/// What the SDK client is built from.
#[derive(Debug, Clone)]
struct Settings {
    region: Option<String>,
    endpoint: Option<String>,
    api_key: Option<String>,
    credentials: Option<AwsCredentials>,
    connect_timeout: Duration,
    read_timeout: Duration,
}

/// A Converse client. Always streams (ConverseStream); `complete()` drains
/// the stream.
#[derive(Debug)]
pub(crate) struct BedrockClient {
    info: ClientInfo,
    settings: Settings,
    /// The SDK client and the endpoint it calls (for error messages),
    /// loaded on the first call.
    sdk: OnceCell<(aws_sdk_bedrockruntime::Client, String)>,
}

impl BedrockClient {
    pub fn new(name: &str, config: &ProviderConfig) -> Result<Self> {
        let endpoint = match config.base_url.as_deref().map(str::trim) {
            Some(url) if !url.is_empty() => Some(http::base_url(name, config)?),
            _ => None,
        };
        let region = config
            .region
            .as_deref()
            .map(str::trim)
            .filter(|region| !region.is_empty())
            .map(str::to_owned);
        Ok(BedrockClient {
            info: ClientInfo::for_provider(name, config),
            settings: Settings {
                region,
                endpoint,
                api_key: http::api_key(config),
                credentials: None,
                connect_timeout: Duration::from_secs(config.connect_timeout_secs),
                read_timeout: Duration::from_secs(config.read_timeout_secs),
            },
            sdk: OnceCell::new(),
        })
    }

    /// The SDK client, loading the AWS configuration on the first call.
    async fn sdk(&self) -> Result<&(aws_sdk_bedrockruntime::Client, String)> {
        self.sdk.get_or_try_init(|| self.load()).await
    }

    async fn load(&self) -> Result<(aws_sdk_bedrockruntime::Client, String)> {
        let settings = &self.settings;
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(settings.connect_timeout)
            .read_timeout(settings.read_timeout)
            .build();
        // Retries are the router's job; the stream has its own read
        // timeout, which a long pause before the first token must not trip
        // twice.
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .retry_config(RetryConfig::disabled())
            .timeout_config(timeouts)
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled());
        if let Some(region) = &settings.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(endpoint) = &settings.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        if let Some(credentials) = &settings.credentials {
            loader = loader.credentials_provider(Credentials::new(
                credentials.access_key_id.clone(),
                credentials.secret_access_key.clone(),
                credentials.session_token.clone(),
                None,
                "flynn",
            ));
        }
        let shared = loader.load().await;
        let mut builder = aws_sdk_bedrockruntime::config::Builder::from(&shared);
        if let Some(key) = &settings.api_key {
            builder = builder
                .token_provider(Token::new(key.clone(), None))
                .auth_scheme_preference([HTTP_BEARER_AUTH_SCHEME_ID]);
        } else if settings.credentials.is_some() {
            builder = builder.auth_scheme_preference([SIGV4]);
        }
        let config = builder.build();
        let Some(region) = config.region().map(ToString::to_string) else {
            return Err(Error::Config {
                message: format!(
                    "provider '{}' (bedrock): no AWS region: set `region` for the provider in config.yaml, or AWS_REGION",
                    self.info.provider
                ),
            });
        };
        let endpoint = settings
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://bedrock-runtime.{region}.amazonaws.com"));
        Ok((aws_sdk_bedrockruntime::Client::from_conf(config), endpoint))
    }
}

#[async_trait]
impl ModelClient for BedrockClient {
    fn info(&self) -> &ClientInfo {
        &self.info
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream> {
        let provider = self.info.provider.clone();
        let names = ToolNameMap::new(&request.tools);
        let parts = wire::request_parts(&provider, &request, &names)?;
        let (client, endpoint) = self.sdk().await?;
        let failures = Failures {
            provider: provider.clone(),
            endpoint: endpoint.clone(),
            read_timeout: self.settings.read_timeout,
        };
        let output = client
            .converse_stream()
            .model_id(request.model.as_ref())
            .set_system(parts.system)
            .set_messages(Some(parts.messages))
            .set_tool_config(parts.tool_config)
            .inference_config(parts.inference)
            .send()
            .await
            .map_err(|error| failures.call(error))?;
        let mut events = output.stream;
        let mut assembler = Assembler::new(&provider, &request.model, names);
        let read_timeout = self.settings.read_timeout;
        Ok(Box::pin(async_stream::stream! {
            let mut out = Vec::new();
            loop {
                let received = match tokio::time::timeout(read_timeout, events.recv()).await {
                    Ok(received) => received,
                    Err(_) => {
                        yield Err(Error::Timeout {
                            provider: failures.provider.clone(),
                            after: read_timeout,
                        });
                        return;
                    }
                };
                match received {
                    Ok(Some(event)) => {
                        let fed = assembler.feed(Event::from(event), &mut out);
                        for delta in out.drain(..) {
                            yield Ok(delta);
                        }
                        if let Err(error) = fed {
                            yield Err(error);
                            return;
                        }
                    }
                    Ok(None) => {
                        yield assembler.finish().map(StreamEvent::Completed);
                        return;
                    }
                    Err(error) => {
                        yield Err(failures.stream(error));
                        return;
                    }
                }
            }
        }))
    }
}

/// Turns the SDK's errors into typed [`Error`]s.
#[derive(Debug, Clone)]
struct Failures {
    provider: String,
    endpoint: String,
    read_timeout: Duration,
}

impl Failures {
    /// An error of the call itself: the HTTP response before the stream.
    fn call(&self, error: SdkError<ConverseStreamError, HttpResponse>) -> Error {
        match error {
            SdkError::ServiceError(context) => {
                let status = context.raw().status().as_u16();
                let retry_after = retry_after(context.raw());
                let error = context.into_err();
                wire::classify(
                    &self.provider,
                    Failure {
                        code: error.code().map(str::to_owned),
                        status: Some(status),
                        message: message(&error),
                        retry_after,
                    },
                )
            }
            other => self.transport(&other),
        }
    }

    /// An error inside the stream: an exception event, or a broken stream.
    fn stream(
        &self,
        error: SdkError<ConverseStreamOutputError, aws_smithy_types::event_stream::RawMessage>,
    ) -> Error {
        match error {
            SdkError::ServiceError(context) => {
                let error = context.into_err();
                // Exception events name their type in a header, which the
                // SDK turns into the variant; the code in the metadata may
                // be missing.
                let code = match &error {
                    ConverseStreamOutputError::InternalServerException(_) => {
                        Some("InternalServerException")
                    }
                    ConverseStreamOutputError::ModelStreamErrorException(_) => {
                        Some("ModelStreamErrorException")
                    }
                    ConverseStreamOutputError::ValidationException(_) => {
                        Some("ValidationException")
                    }
                    ConverseStreamOutputError::ThrottlingException(_) => {
                        Some("ThrottlingException")
                    }
                    ConverseStreamOutputError::ServiceUnavailableException(_) => {
                        Some("ServiceUnavailableException")
                    }
                    other => other.code(),
                };
                wire::classify(
                    &self.provider,
                    Failure {
                        code: code.map(str::to_owned),
                        status: None,
                        message: message(&error),
                        retry_after: None,
                    },
                )
            }
            other => match self.transport(&other) {
                // Bytes that are not event-stream frames, or frames the SDK
                // cannot read, break the stream.
                Error::Protocol { provider, message } => Error::Stream { provider, message },
                error => error,
            },
        }
    }

    /// Every failure that is not the service's answer.
    fn transport<E, R>(&self, error: &SdkError<E, R>) -> Error
    where
        E: StdError + 'static,
        R: fmt::Debug + 'static,
    {
        let provider = self.provider.clone();
        let text = quote(&DisplayErrorContext(error).to_string());
        // No credentials anywhere in the chain: the SDK reports it from
        // whichever phase asked for them, so look for the typed cause.
        if let Some(credentials) = find::<CredentialsError>(error) {
            return match credentials {
                CredentialsError::CredentialsNotLoaded(_) => Error::MissingApiKey {
                    provider,
                    env: Some(wire::CREDENTIALS_ENV),
                },
                _ => Error::Auth {
                    provider,
                    status: 403,
                    message: text,
                    env: Some(wire::CREDENTIALS_ENV),
                },
            };
        }
        match error {
            SdkError::TimeoutError(_) => Error::Timeout {
                provider,
                after: self.read_timeout,
            },
            SdkError::DispatchFailure(failure) if failure.is_timeout() => Error::Timeout {
                provider,
                after: self.read_timeout,
            },
            SdkError::DispatchFailure(failure) if failure.is_io() => Error::Connect {
                provider,
                url: self.endpoint.clone(),
                message: text,
            },
            SdkError::DispatchFailure(_) => Error::Stream {
                provider,
                message: format!("the request to {} failed: {text}", self.endpoint),
            },
            SdkError::ConstructionFailure(_) => Error::Config {
                message: format!("provider '{provider}': cannot build the request: {text}"),
            },
            _ => Error::Protocol {
                provider,
                message: text,
            },
        }
    }
}

/// The service error's message, or its whole description when it has none.
fn message<E: ProvideErrorMetadata + StdError>(error: &E) -> String {
    match error.message() {
        Some(message) if !message.is_empty() => message.to_owned(),
        _ => quote(&DisplayErrorContext(error).to_string()),
    }
}

/// The first error of type `T` in `error`'s chain of sources.
fn find<'a, T: StdError + 'static>(error: &'a (dyn StdError + 'static)) -> Option<&'a T> {
    let mut next = Some(error);
    while let Some(current) = next {
        if let Some(found) = current.downcast_ref::<T>() {
            return Some(found);
        }
        next = current.source();
    }
    None
}

/// `Retry-After` (or `retry-after-ms`) on an error response, read as the
/// other providers read it.
fn retry_after(response: &HttpResponse) -> Option<std::time::Duration> {
    let mut headers = HeaderMap::new();
    for name in ["retry-after", "retry-after-ms"] {
        if let Some(value) = response.headers().get(name)
            && let Ok(value) = HeaderValue::from_str(value)
        {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    http::retry_after(&headers)
}

#[cfg(test)]
mod tests {
    use flynn_protocol::config::ProviderKind;

    use super::*;

    #[test]
    fn the_endpoint_is_checked_when_built() {
        let mut config = ProviderConfig::new(ProviderKind::Bedrock);
        config.base_url = Some("bedrock.local".into());
        assert_eq!(
            BedrockClient::new("aws", &config).map(|c| c.info),
            Err(Error::Config {
                message:
                    "provider 'aws': invalid base_url 'bedrock.local': relative URL without a base"
                        .into()
            })
        );
        config.base_url = Some("http://127.0.0.1:9/".into());
        config.region = Some(" eu-west-1 ".into());
        let client = BedrockClient::new("aws", &config).unwrap();
        assert_eq!(
            (
                client.settings.endpoint.as_deref(),
                client.settings.region.as_deref()
            ),
            (Some("http://127.0.0.1:9"), Some("eu-west-1"))
        );
    }

    #[test]
    fn credentials_never_show_their_secrets() {
        let credentials = AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: Some("token".into()),
        };
        assert_eq!(
            format!("{credentials:?}"),
            "AwsCredentials { access_key_id: \"AKIDEXAMPLE\", secret_access_key: \"** redacted **\", session_token: Some(\"** redacted **\") }"
        );
    }
}
