use std::path::PathBuf;

/// Why a session store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database file could not be opened or created.
    #[error("cannot open session database {}: {source}", .path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: sqlx::Error,
    },
    /// The database directory could not be created.
    #[error("cannot create directory {}: {source}", .path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The schema migrations failed (a newer Flynn wrote this file?).
    #[error("cannot migrate session database {}: {source}", .path.display())]
    Migrate {
        path: PathBuf,
        #[source]
        source: sqlx::migrate::MigrateError,
    },
    /// A query failed.
    #[error("session database error: {0}")]
    Database(#[from] sqlx::Error),
    /// A stored message could not be read back.
    #[error("session '{key}' message {seq} is corrupt: {source}")]
    Corrupt {
        key: String,
        seq: i64,
        #[source]
        source: serde_json::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether retrying the same operation may succeed (a locked database).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Database(sqlx::Error::Database(db)) => {
                matches!(db.code().as_deref(), Some("5" | "6"))
            }
            Error::Database(sqlx::Error::PoolTimedOut) => true,
            _ => false,
        }
    }
}
