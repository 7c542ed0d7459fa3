//! What goes wrong with Google, in words that say what to do.

use flynn_protocol::config::GoogleService;
use flynn_tools::ToolError;

#[derive(Debug, thiserror::Error)]
pub enum GoogleError {
    /// No account is signed in (or not the one asked for).
    #[error("{0}")]
    NotSignedIn(String),
    /// The account did not grant the service's scope.
    #[error(
        "the Google account {account} has not given Flynn access to {service} (scope {scope}); run `flynn auth google login --account {account} --services {service}` to grant it"
    )]
    MissingScope {
        account: String,
        service: GoogleService,
        scope: String,
    },
    /// Google no longer honours the account's refresh token.
    #[error(
        "Google no longer accepts Flynn's sign-in for {account} ({reason}); sign in again with `flynn auth google login --account {account}`"
    )]
    SignedOut { account: String, reason: String },
    /// No OAuth client to refresh or sign in with.
    #[error(
        "no Google OAuth client is set: give `google.client_id` and `google.client_secret` in the config (or GOOGLE_CLIENT_ID and GOOGLE_CLIENT_SECRET); docs/google.md shows how to make one"
    )]
    NoClient,
    /// Google answered with an error.
    #[error("Google answered {status}{}: {message}", reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    Api {
        status: u16,
        reason: Option<String>,
        message: String,
    },
    /// Google asks to wait longer than Flynn waits within one call.
    #[error(
        "Google's rate limit for this account is reached; it asks to wait {retry_after_secs} s"
    )]
    RateLimited { retry_after_secs: u64 },
    /// The request did not reach Google, or its answer was not readable.
    #[error("{0}")]
    Transport(String),
    /// The auth store could not be read or written.
    #[error("{0}")]
    Store(String),
    /// The caller asked for something that cannot be done.
    #[error("{0}")]
    Invalid(String),
}

impl From<GoogleError> for ToolError {
    fn from(error: GoogleError) -> Self {
        ToolError::failed(error.to_string())
    }
}

impl From<reqwest::Error> for GoogleError {
    fn from(error: reqwest::Error) -> Self {
        GoogleError::Transport(format!("cannot reach Google: {}", chain(&error)))
    }
}

/// An error with its causes, `: `-separated.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
