use std::path::PathBuf;

use flynn_protocol::TurnId;

use crate::TurnStatus;

/// Why a session store operation failed.
///
/// Callers branch on the variants and on [`Error::is_retryable`]; nothing
/// here assumes a particular database: backend errors are classified where
/// they arise (`Busy`, `DiskFull`, `ReadOnly` or `Backend`), and no backend type appears in the
/// public API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store could not be opened or created. A PostgreSQL store's
    /// message says what to check itself (the server, the login, the
    /// database); a SQLite file's is followed by what to check.
    #[error(
        "cannot open the session database {location}: {message}{}",
        open_advice(.location)
    )]
    Open { location: String, message: String },
    /// The directory that should hold the store could not be created.
    #[error(
        "cannot create the directory {} for the session database: {source} (create it, or point sessions.url or sessions.database elsewhere)",
        .path.display()
    )]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The schema could not be brought up to date.
    #[error(
        "cannot bring the session database {location} up to this version's schema: {message} (a newer Flynn may have written it: upgrade Flynn, or point sessions.url at another {})",
        if is_postgres(.location) { "database" } else { "file" }
    )]
    Migrate { location: String, message: String },
    /// The file is damaged, or is not a SQLite database at all.
    #[error(
        "the session database {location} is damaged or is not a SQLite database: {message} (restore a backup with `flynn restore <archive>`, or move the file aside and Flynn starts an empty one)"
    )]
    Damaged { location: String, message: String },
    /// The store is busy (another writer holds it, or every connection is
    /// in use); trying again may work.
    #[error("the session database is busy: {message} (another process may be writing; try again)")]
    Busy { message: String },
    /// The disk holding the database is full (SQLite's `SQLITE_FULL`):
    /// nothing more can be stored until there is room.
    #[error(
        "the session database cannot grow: the disk is full ({message}); free some space (what was stored is kept, and Flynn carries on once there is room)"
    )]
    DiskFull { message: String },
    /// The database may not be written (SQLite's `SQLITE_READONLY`): a
    /// read-only file, directory or file system.
    #[error(
        "the session database is read-only ({message}); make it, its directory and its file system writable for the user running Flynn (nothing stored is lost)"
    )]
    ReadOnly { message: String },
    /// Any other failure of the database.
    #[error("session database error: {message}")]
    Backend { message: String },
    /// A stored message could not be read back.
    #[error(
        "session '{key}' message {seq} cannot be read: {source} (was the database changed by something other than Flynn?)"
    )]
    Corrupt {
        key: String,
        seq: u64,
        #[source]
        source: serde_json::Error,
    },
    /// A stored turn's message could not be read back.
    #[error(
        "turn {turn} cannot be read: {source} (was the database changed by something other than Flynn?)"
    )]
    CorruptTurn {
        turn: TurnId,
        #[source]
        source: serde_json::Error,
    },
    /// A sequence number that is not in the session's history.
    #[error("session '{session}' has no message {seq} in its history")]
    UnknownMessage { session: String, seq: u64 },
    /// A message the session accepted already (same platform id).
    #[error("session '{session}' has message {external_id} already (turn {turn})")]
    Duplicate {
        session: String,
        external_id: String,
        turn: TurnId,
    },
    /// Another tool output is kept under this call id already: call ids
    /// must be unique within a session, and the earlier output stays.
    #[error(
        "session '{session}' keeps another output for tool call {call_id} already (call ids must be unique within a session; the earlier output is kept)"
    )]
    ToolOutputTaken { session: String, call_id: String },
    /// A turn id the store does not know.
    #[error("there is no turn {turn} in the session store")]
    UnknownTurn { turn: TurnId },
    /// A turn that cannot start because it has already ended.
    #[error("turn {turn} cannot start: it has already ended ({})", .status.as_str())]
    TurnFinished { turn: TurnId, status: TurnStatus },
    /// A turn that may not start yet: a turn its session accepted before
    /// it (on another node of a cluster) is still waiting.
    #[error("turn {turn} cannot start before turn {waiting}, accepted earlier in its session")]
    NotNext { turn: TurnId, waiting: TurnId },
    /// A turn this node may not start or write: another node of the
    /// cluster holds its session's lease (this node's lapsed, or was
    /// never had).
    #[error("turn {turn} cannot run on this node: another node runs session '{session}' now")]
    LeaseLost { session: String, turn: TurnId },
    /// `sessions.url` is not a URL this build understands.
    #[error(
        "sessions.url '{url}': {problem}; expected sqlite:///absolute/path.db, sqlite://relative/path.db or postgres://user:password@host:5432/database"
    )]
    InvalidUrl {
        /// The URL as configured, with any password replaced by `***`.
        url: String,
        problem: String,
    },
    /// A pairing request or approval that cannot be granted (see
    /// [`PairingError`](crate::PairingError)).
    #[error(transparent)]
    Pairing(#[from] crate::PairingError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether a store's location is a PostgreSQL URL (a SQLite store's is
/// its file's path).
fn is_postgres(location: &str) -> bool {
    let scheme = location.split_once("://").map_or("", |(scheme, _)| scheme);
    scheme.eq_ignore_ascii_case("postgres") || scheme.eq_ignore_ascii_case("postgresql")
}

/// What to check when a SQLite file cannot be opened; nothing for a
/// PostgreSQL store, whose message says it.
fn open_advice(location: &str) -> &'static str {
    if is_postgres(location) {
        ""
    } else {
        " (check that it names a SQLite file, or a place to create one, that Flynn may write)"
    }
}

/// Whether SQLite said the file is damaged (`SQLITE_CORRUPT`, 11) or not
/// a database (`SQLITE_NOTADB`, 26).
pub(crate) fn is_damage(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => db
            .code()
            .and_then(|code| code.parse::<i64>().ok())
            .is_some_and(|code| matches!(code & 0xff, 11 | 26)),
        _ => false,
    }
}

impl Error {
    /// Whether retrying the same operation may succeed (a busy store).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Busy { .. })
    }

    /// The same failure again, for each write of a batch that failed as a
    /// whole: the database's classes keep their variant (a busy batch is
    /// tried again by each of its writers), anything else is `Backend`
    /// with the same message.
    pub(crate) fn duplicate(&self) -> Error {
        let message = match self {
            Error::Busy { message } => {
                return Error::Busy {
                    message: message.clone(),
                };
            }
            Error::DiskFull { message } => {
                return Error::DiskFull {
                    message: message.clone(),
                };
            }
            Error::ReadOnly { message } => {
                return Error::ReadOnly {
                    message: message.clone(),
                };
            }
            Error::Damaged { location, message } => {
                return Error::Damaged {
                    location: location.clone(),
                    message: message.clone(),
                };
            }
            Error::Backend { message } => message.clone(),
            other => other.to_string(),
        };
        Error::Backend { message }
    }
}

/// A file beside the database (the outbox's marks) could not be read or
/// written.
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Backend {
            message: e.to_string(),
        }
    }
}

/// Classifies a sqlx error at the boundary: SQLite's BUSY and LOCKED (with
/// their extended codes) and a pool that had no free connection in time
/// are `Busy`, READONLY is `ReadOnly`, FULL is `DiskFull`; PostgreSQL's
/// serialization failures, deadlocks and lock timeouts are `Busy` and its
/// full disk `DiskFull`; anything else is `Backend`.
impl From<sqlx::Error> for Error {
    fn from(error: sqlx::Error) -> Self {
        if matches!(error, sqlx::Error::PoolTimedOut) {
            return Error::Busy {
                message: format!(
                    "no database connection was free, nor could one be opened, within {} s (every one of the store's connections was in use, or its server did not answer)",
                    crate::retry::ACQUIRE_TIMEOUT.as_secs()
                ),
            };
        }
        if let sqlx::Error::Database(db) = &error
            && let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        {
            return from_postgres(pg.code(), error.to_string());
        }
        // sqlx reports extended codes, whose low byte is the primary code.
        let code = match &error {
            sqlx::Error::Database(db) => db
                .code()
                .and_then(|code| code.parse::<i64>().ok())
                .map(|code| code & 0xff),
            _ => None,
        };
        let message = error.to_string();
        match code {
            // SQLITE_BUSY and SQLITE_LOCKED.
            Some(5 | 6) => Error::Busy { message },
            Some(8) => Error::ReadOnly { message },
            Some(13) => Error::DiskFull { message },
            _ => Error::Backend { message },
        }
    }
}

/// A PostgreSQL error by its SQLSTATE: a serialization failure (40001),
/// a deadlock (40P01) and a lock not had within the connection's
/// `lock_timeout` (55P03) are `Busy`, as trying again may work; a full
/// disk on the server (53100) is `DiskFull`; anything else is `Backend`.
fn from_postgres(code: &str, message: String) -> Error {
    match code {
        "40001" | "40P01" | "55P03" => Error::Busy { message },
        "53100" => Error::DiskFull { message },
        _ => Error::Backend { message },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn busy_and_locked_are_retryable_and_other_failures_are_not() {
        let timed_out = Error::from(sqlx::Error::PoolTimedOut);
        assert!(timed_out.is_retryable());
        assert_eq!(
            timed_out.to_string(),
            "the session database is busy: no database connection was free, nor could one be opened, within 10 s (every one of the store's connections was in use, or its server did not answer) (another process may be writing; try again)"
        );
        assert!(!Error::from(sqlx::Error::RowNotFound).is_retryable());
        assert!(
            !Error::UnknownTurn { turn: TurnId(3) }.is_retryable(),
            "a missing turn stays missing"
        );
    }

    #[tokio::test]
    async fn a_locked_sqlite_database_reads_as_busy() {
        use sqlx::sqlite::SqliteConnectOptions;
        use sqlx::{ConnectOptions, Connection};

        let dir = tempfile::tempdir().unwrap();
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("locked.db"))
            .create_if_missing(true)
            .busy_timeout(std::time::Duration::ZERO);
        let mut holder = options.connect().await.unwrap();
        sqlx::query("CREATE TABLE t (x)")
            .execute(&mut holder)
            .await
            .unwrap();
        let mut lock = holder.begin_with("BEGIN EXCLUSIVE").await.unwrap();
        sqlx::query("INSERT INTO t VALUES (1)")
            .execute(&mut *lock)
            .await
            .unwrap();

        let mut other = options.connect().await.unwrap();
        let error = Error::from(
            sqlx::query("INSERT INTO t VALUES (2)")
                .execute(&mut other)
                .await
                .unwrap_err(),
        );
        assert!(error.is_retryable(), "{error:?}");
        assert!(
            error
                .to_string()
                .starts_with("the session database is busy: "),
            "{error}"
        );
        lock.rollback().await.unwrap();
    }
}
