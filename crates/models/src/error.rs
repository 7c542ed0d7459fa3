use std::time::Duration;

use crate::Attempt;

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
    /// The server answered with a redirect, which is not followed: API
    /// keys travel in headers (`x-api-key`, configured `headers`) that a
    /// redirect would carry to another host.
    #[error(
        "{provider}: the provider answered with a redirect (HTTP {status}) to {to}; API keys are not sent across redirects: check base_url"
    )]
    Redirect {
        provider: String,
        status: u16,
        /// Where it pointed: `host[:port]`, or what the `Location` said.
        to: String,
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
    /// The router skipped the provider: its circuit breaker is open after
    /// `failures` infrastructure failures in a row. `retry_in` is how long
    /// until a trial call is let through; `None` while a trial call is
    /// already under way.
    #[error("{provider}: skipped: {}", circuit_hint(*.failures, .retry_in))]
    CircuitOpen {
        provider: String,
        failures: u32,
        retry_in: Option<Duration>,
    },
    /// Every model tried failed; one entry per model, in order.
    #[error("every model failed:\n{}", format_attempts(.attempts))]
    AllFailed { attempts: Vec<Attempt> },
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

fn circuit_hint(failures: u32, retry_in: &Option<Duration>) -> String {
    let failures = match failures {
        1 => "1 failure".to_owned(),
        n => format!("{n} failures in a row"),
    };
    match retry_in {
        // Rounded up: "in 0s" would read as "now".
        Some(wait) => format!(
            "circuit open after {failures}, next try in {}s",
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
        ),
        None => format!("circuit open after {failures}, a trial call is under way"),
    }
}

fn format_attempts(attempts: &[Attempt]) -> String {
    attempts
        .iter()
        .map(|attempt| format!("  - {attempt}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `attempts` is not empty and `test` holds for each one's error.
fn every(attempts: &[Attempt], test: impl Fn(&Error) -> bool) -> bool {
    !attempts.is_empty() && attempts.iter().all(|attempt| test(&attempt.error))
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
            | Error::Stream { .. }
            | Error::CircuitOpen { .. } => true,
            Error::AllFailed { attempts } => every(attempts, Error::is_retryable),
            Error::MissingApiKey { .. }
            | Error::Auth { .. }
            | Error::ContextOverflow { .. }
            | Error::InvalidRequest { .. }
            | Error::Redirect { .. }
            | Error::Protocol { .. }
            | Error::Config { .. } => false,
        }
    }

    /// Whether the fix is in the configuration (no model for a tier, a
    /// missing API key, an unknown provider): the user's to fix, not the
    /// provider's. CLI exit code 2.
    pub fn is_config(&self) -> bool {
        match self {
            Error::Config { .. } | Error::MissingApiKey { .. } | Error::Redirect { .. } => true,
            Error::AllFailed { attempts } => every(attempts, Error::is_config),
            _ => false,
        }
    }

    /// Whether the fix is a different key (for an aggregate: every model
    /// failed on its key).
    pub fn is_auth(&self) -> bool {
        match self {
            Error::Auth { .. } | Error::MissingApiKey { .. } => true,
            Error::AllFailed { attempts } => every(attempts, Error::is_auth),
            _ => false,
        }
    }

    /// Whether the conversation is too long (for an aggregate: too long for
    /// every model tried), so compacting it is the fix.
    pub fn is_context_overflow(&self) -> bool {
        match self {
            Error::ContextOverflow { .. } => true,
            Error::AllFailed { attempts } => every(attempts, Error::is_context_overflow),
            _ => false,
        }
    }

    /// How long the server asked us to wait, if it said; for a skipped
    /// provider, how long until its circuit breaker lets a call through.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::RateLimited { retry_after, .. } | Error::Overloaded { retry_after, .. } => {
                *retry_after
            }
            Error::CircuitOpen { retry_in, .. } => *retry_in,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use flynn_protocol::config::ModelRef;

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
                Attempt {
                    model: ModelRef::new("a", "m1"),
                    tries: 3,
                    error: Error::Server {
                        provider: "a".into(),
                        status: 500,
                        message: "boom".into(),
                    },
                },
                Attempt {
                    model: ModelRef::new("b", "m2"),
                    tries: 1,
                    error: Error::Timeout {
                        provider: "b".into(),
                        after: Duration::from_secs(5),
                    },
                },
                Attempt {
                    model: ModelRef::new("c", "m3"),
                    tries: 0,
                    error: Error::CircuitOpen {
                        provider: "c".into(),
                        failures: 3,
                        retry_in: Some(Duration::from_millis(11_200)),
                    },
                },
            ],
        };
        assert_eq!(
            error.to_string(),
            "every model failed:\n  \
             - a/m1 (3 tries): a: server error (HTTP 500): boom\n  \
             - b/m2: b: no response within 5s\n  \
             - c/m3: c: skipped: circuit open after 3 failures in a row, next try in 12s"
        );
        assert!(error.is_retryable());
        assert!(!error.is_auth());
        assert_eq!(error.retry_after(), None);
    }

    fn attempt(model: &str, error: Error) -> Attempt {
        Attempt {
            model: model.parse().unwrap(),
            tries: 1,
            error,
        }
    }

    #[test]
    fn an_aggregate_is_auth_or_overflow_only_when_every_attempt_is() {
        let auth = |provider: &str| Error::Auth {
            provider: provider.into(),
            status: 401,
            message: "bad key".into(),
            env: None,
        };
        let missing = Error::MissingApiKey {
            provider: "b".into(),
            env: Some("OPENAI_API_KEY"),
        };
        let overflow = |provider: &str| Error::ContextOverflow {
            provider: provider.into(),
            message: "too long".into(),
        };
        let down = Error::Connect {
            provider: "c".into(),
            url: "http://127.0.0.1:9".into(),
            message: "refused".into(),
        };
        let all = |errors: Vec<Error>| Error::AllFailed {
            attempts: errors
                .into_iter()
                .enumerate()
                .map(|(i, e)| attempt(&format!("p{i}/m"), e))
                .collect(),
        };
        let flags = |e: &Error| (e.is_auth(), e.is_context_overflow(), e.is_retryable());
        assert_eq!(
            [
                flags(&all(vec![auth("a"), missing.clone()])),
                flags(&all(vec![auth("a"), down.clone()])),
                flags(&all(vec![overflow("a"), overflow("b")])),
                flags(&all(vec![overflow("a"), down.clone()])),
                flags(&all(vec![down.clone(), down])),
                flags(&all(vec![])),
            ],
            [
                (true, false, false),
                (false, false, false),
                (false, true, false),
                (false, false, false),
                (false, false, true),
                (false, false, false),
            ]
        );
    }

    #[test]
    fn a_skipped_provider_says_why_and_when() {
        let open = Error::CircuitOpen {
            provider: "anthropic".into(),
            failures: 1,
            retry_in: Some(Duration::from_secs(30)),
        };
        let trial = Error::CircuitOpen {
            provider: "anthropic".into(),
            failures: 4,
            retry_in: None,
        };
        assert_eq!(
            [open.to_string(), trial.to_string()],
            [
                "anthropic: skipped: circuit open after 1 failure, next try in 30s",
                "anthropic: skipped: circuit open after 4 failures in a row, a trial call is under way",
            ]
        );
        assert!(open.is_retryable());
        assert_eq!(open.retry_after(), Some(Duration::from_secs(30)));
    }
}
