use flynn_protocol::ErrorCode;

/// Why a turn ended without an answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model could not be reached or failed, after fallback.
    #[error(transparent)]
    Model(#[from] flynn_models::Error),
    /// The conversation could not be read or saved.
    #[error(transparent)]
    Storage(#[from] flynn_sessions::Error),
    /// The turn was cancelled.
    #[error("the turn was cancelled")]
    Cancelled,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The stable code for events and JSON output.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Model(
                flynn_models::Error::Config { .. } | flynn_models::Error::MissingApiKey { .. },
            ) => ErrorCode::Config,
            Error::Model(_) => ErrorCode::Provider,
            Error::Storage(_) => ErrorCode::Storage,
            Error::Cancelled => ErrorCode::Cancelled,
        }
    }
}
