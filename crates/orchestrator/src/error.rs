use flynn_protocol::{ErrorCode, SessionKey};

/// Why a message was refused or a turn ended without an answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model could not be reached or failed, after fallback; or no
    /// model is configured for the turn (refused before acceptance).
    #[error(transparent)]
    Model(#[from] flynn_models::Error),
    /// The conversation could not be read or saved.
    #[error(transparent)]
    Storage(#[from] flynn_sessions::Error),
    /// The turn was cancelled.
    #[error("the turn was cancelled")]
    Cancelled,
    /// The configuration cannot be used as it is.
    #[error("{0}")]
    Config(String),
    /// A message, command or config named an agent that does not exist.
    #[error("{context}: unknown agent '{name}' (agents: {available})")]
    UnknownAgent {
        name: String,
        available: String,
        /// Where the name came from (`--agent`, `agents.default`...).
        context: String,
    },
    /// The session already has `limit` messages waiting; this one was not
    /// accepted.
    #[error(
        "session {session} already has {limit} messages waiting (sessions.queue_limit); this one was not accepted, send it again later"
    )]
    QueueFull { session: SessionKey, limit: usize },
    /// The session's lane took no more operations for `waited` (it is
    /// stuck or flooded); this one was not accepted.
    #[error(
        "session {session} took nothing for {} s (too much is waiting for it); the message was not accepted, send it again later",
        waited.as_secs()
    )]
    LaneBusy {
        session: SessionKey,
        waited: std::time::Duration,
    },
    /// The message has nothing in it.
    #[error("the message is empty (expected text or an image)")]
    EmptyMessage,
    /// The runtime is shutting down and accepts nothing more.
    #[error("Flynn is shutting down; the message was not accepted")]
    ShuttingDown,
    /// A delegated call would nest deeper than `agents.max_delegation_depth`.
    #[error(
        "delegation depth {depth} is more than agents.max_delegation_depth ({max}); do this part yourself instead of delegating it"
    )]
    DelegationTooDeep { depth: u32, max: u32 },
    /// The turn ran on another node of the cluster and failed there.
    #[error("the turn failed on node {node}: {message}")]
    Remote {
        node: String,
        code: ErrorCode,
        message: String,
    },
    /// The process running the turn stopped before it finished (in a
    /// cluster: the node running it died, and the one that took the
    /// session over reported it).
    #[error("the turn was interrupted: {0}")]
    Interrupted(String),
    /// The turn's task ended without reporting (a bug or a panic in a tool).
    #[error("the turn ended unexpectedly: {0}")]
    Lost(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The stable code for events, JSON output and exit codes.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Model(error) if error.is_config() => ErrorCode::Config,
            Error::Model(_) => ErrorCode::Provider,
            Error::Storage(_) => ErrorCode::Storage,
            Error::Cancelled => ErrorCode::Cancelled,
            Error::Config(_) | Error::UnknownAgent { .. } | Error::EmptyMessage => {
                ErrorCode::Config
            }
            Error::QueueFull { .. }
            | Error::LaneBusy { .. }
            | Error::ShuttingDown
            | Error::DelegationTooDeep { .. } => ErrorCode::Refused,
            Error::Remote { code, .. } => *code,
            Error::Interrupted(_) => ErrorCode::Internal,
            Error::Lost(_) => ErrorCode::Internal,
        }
    }
}
