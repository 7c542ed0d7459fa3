use std::time::Duration;

/// Why a model call failed. Every variant names the provider (the key of
/// `providers` in config) so aggregated errors read well.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The provider needs an API key and none is configured.
    #[error("{provider}: no API key configured{}", key_hint(.env))]
    MissingApiKey {
        provider: String,
        env: Option<&'static str>,
    },
    /// The server refused the key (401/403).
    #[error("{provider}: the API key was rejected (HTTP {status}): {message}{}", key_hint(.env))]
    Auth {
        provider: String,
        status: u16,
        message: String,
        env: Option<&'static str>,
    },
    /// Too many requests (429).
    #[error("{provider}: rate limited (HTTP 429){}: {message}", retry_hint(.retry_after))]
    RateLimited {
        provider: String,
        retry_after: Option<Duration>,
        message: String,
    },
    /// The provider is overloaded (Anthropic 529, 503).
    #[error("{provider}: overloaded (HTTP {status}){}: {message}", retry_hint(.retry_after))]
    Overloaded {
        provider: String,
        status: u16,
        retry_after: Option<Duration>,
        message: String,
    },
    /// Any other 5xx.
    #[error("{provider}: server error (HTTP {status}): {message}")]
    Server {
        provider: String,
        status: u16,
        message: String,
    },
    /// The prompt does not fit the model's context window.
    #[error("{provider}: the conversation is too long for the model's context window: {message}")]
    ContextOverflow { provider: String, message: String },
    /// The server rejected the request (other 4xx), e.g. an unknown model.
    #[error("{provider}: request rejected (HTTP {status}): {message}")]
    InvalidRequest {
        provider: String,
        status: u16,
        message: String,
    },
    /// No connection could be made.
    #[error("{provider}: cannot connect to {url}: {message}")]
    Connect {
        provider: String,
        url: String,
        message: String,
    },
    /// The server went quiet for longer than the configured timeout.
    #[error("{provider}: no response within {}s", .after.as_secs())]
    Timeout { provider: String, after: Duration },
    /// The stream broke: cut off, an error event, or bytes that are not SSE.
    #[error("{provider}: stream failed: {message}")]
    Stream { provider: String, message: String },
    /// The server answered with something that is not the documented format.
    #[error("{provider}: unexpected response: {message}")]
    Protocol { provider: String, message: String },
    /// The configuration does not allow the call (unknown provider, bad URL).
    #[error("{message}")]
    Config { message: String },
    /// Every model tried failed; one entry per attempt, in order.
    #[error("every model failed:\n{}", format_attempts(.attempts))]
    AllFailed { attempts: Vec<(String, Error)> },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

fn key_hint(env: &Option<&'static str>) -> String {
    match env {
        Some(env) => format!(" (check {env})"),
        None => String::new(),
    }
}

fn retry_hint(after: &Option<Duration>) -> String {
    match after {
        Some(after) => format!(", retry after {}s", after.as_secs()),
        None => String::new(),
    }
}

fn format_attempts(attempts: &[(String, Error)]) -> String {
    attempts
        .iter()
        .map(|(model, error)| format!("  - {model}: {error}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Error {
    /// Whether the same call may succeed if tried again (or elsewhere).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::RateLimited { .. }
            | Error::Overloaded { .. }
            | Error::Server { .. }
            | Error::Connect { .. }
            | Error::Timeout { .. }
            | Error::Stream { .. } => true,
            Error::AllFailed { attempts } => attempts.iter().all(|(_, e)| e.is_retryable()),
            Error::MissingApiKey { .. }
            | Error::Auth { .. }
            | Error::ContextOverflow { .. }
            | Error::InvalidRequest { .. }
            | Error::Protocol { .. }
            | Error::Config { .. } => false,
        }
    }

    /// Whether the fix is a different key.
    pub fn is_auth(&self) -> bool {
        matches!(self, Error::Auth { .. } | Error::MissingApiKey { .. })
    }

    pub fn is_context_overflow(&self) -> bool {
        matches!(self, Error::ContextOverflow { .. })
    }

    /// How long the server asked us to wait, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::RateLimited { retry_after, .. } | Error::Overloaded { retry_after, .. } => {
                *retry_after
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_error_names_the_env_var_to_check() {
        let error = Error::Auth {
            provider: "anthropic".into(),
            status: 401,
            message: "invalid x-api-key".into(),
            env: Some("ANTHROPIC_API_KEY"),
        };
        assert_eq!(
            error.to_string(),
            "anthropic: the API key was rejected (HTTP 401): invalid x-api-key (check ANTHROPIC_API_KEY)"
        );
        assert!(error.is_auth());
        assert!(!error.is_retryable());
    }

    #[test]
    fn aggregated_error_lists_every_attempt() {
        let error = Error::AllFailed {
            attempts: vec![
                (
                    "a/m1".into(),
                    Error::Server {
                        provider: "a".into(),
                        status: 500,
                        message: "boom".into(),
                    },
                ),
                (
                    "b/m2".into(),
                    Error::Timeout {
                        provider: "b".into(),
                        after: Duration::from_secs(5),
                    },
                ),
            ],
        };
        assert_eq!(
            error.to_string(),
            "every model failed:\n  - a/m1: a: server error (HTTP 500): boom\n  - b/m2: b: no response within 5s"
        );
        assert!(error.is_retryable());
    }
}
