use flynn_protocol::ErrorCode;

/// Why building or running Flynn failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration cannot be used as it is.
    #[error("{0}")]
    Config(String),
    /// A model provider could not be set up.
    #[error(transparent)]
    Model(#[from] flynn_models::Error),
    /// The session store could not be opened.
    #[error(transparent)]
    Storage(#[from] flynn_sessions::Error),
    /// Memory files or their index could not be opened.
    #[error(transparent)]
    Memory(#[from] flynn_memory::Error),
    /// A message was refused, or its turn failed.
    #[error(transparent)]
    Turn(#[from] flynn_orchestrator::Error),
    /// The daemon could not start serving (the address is taken, the
    /// token file cannot be written).
    #[error("{0}")]
    Serve(String),
    /// A backup or restore could not be made, or the database failed its
    /// integrity check.
    #[error("{0}")]
    Backup(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The stable code for events, JSON output and exit codes.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Config(_) => ErrorCode::Config,
            Error::Model(error) if error.is_config() => ErrorCode::Config,
            Error::Model(_) => ErrorCode::Provider,
            Error::Storage(_) => ErrorCode::Storage,
            Error::Memory(flynn_memory::Error::Embed(flynn_memory::EmbedError::Config(_))) => {
                ErrorCode::Config
            }
            Error::Memory(_) => ErrorCode::Storage,
            Error::Turn(error) => error.code(),
            Error::Serve(_) => ErrorCode::Internal,
            Error::Backup(_) => ErrorCode::Storage,
        }
    }
}
