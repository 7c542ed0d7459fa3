//! Session storage for Flynn.
//!
//! A session is the conversation of one `channel:peer` key: its messages
//! (each with a sequence number unique across the store and never reused,
//! and a position that orders the session's history), its turns (the
//! durable inbox: a message is accepted as a pending turn before anything
//! else happens to it, and joins the history when its turn starts), its
//! metadata (agent, tier or model override, title, last channel), and the
//! usage of its model calls, which outlives a reset. The store also keeps
//! what the channels and automation need across restarts: pairing
//! ([`pairing`]), agent-created cron jobs and every job's last run
//! ([`automation`]).
//!
//! The backend-neutral interface is five traits by concern:
//! [`Conversations`] (messages, history, metadata, tool outputs),
//! [`Turns`] (the durable inbox), [`UsageLog`], [`Pairing`] and [`Jobs`];
//! [`SessionStore`] is their sum, what a session needs. [`Error`] says
//! what went wrong without naming a database's codes. [`open`] opens the
//! store the config names (see [`location`]); [`SqliteStore`] implements
//! the traits on a SQLite file through sqlx, in WAL mode, with its
//! migrations embedded in the binary.

pub mod automation;
pub mod cluster;
mod codec;
mod copy;
mod delivered;
mod error;
pub mod pairing;
mod postgres;
mod reads;
mod recent;
pub mod retry;
mod sqlite;
mod store;
pub mod title;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flynn_protocol::config::SessionsConfig;

pub use automation::{JobKind, JobRuns, LastRun, RunOutcome, StoredCronJob};
pub use cluster::{Cluster, Lease, NodeId, NodeInfo, NodeKind, Received, Signal, TurnOwner};
pub use copy::{CopyReport, copy};
pub use error::{Error, Result};
pub use pairing::{ApprovedPeer, PairingError, PairingTicket, PendingPairing};
pub use postgres::{PgCluster, PgStore};
pub use sqlite::SqliteStore;
pub use store::{
    Conversations, DayUsage, Files, Jobs, Pairing, SessionInfo, SessionMeta, SessionStore,
    StoredFile, StoredMessage, ToolOutput, TurnOrigin, TurnRecord, TurnStatus, Turns, UsageLine,
    UsageLog, UsageRecord, UsageTotal,
};

/// Where a session store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A SQLite database file (relative paths are relative to the current
    /// directory).
    Sqlite(PathBuf),
    /// A PostgreSQL database, by its `postgres://` URL (which may hold a
    /// password: show it through [`StoreLocation::redacted`]).
    Postgres(String),
}

impl StoreLocation {
    /// Where the store is, fit to show: a file's path, or the URL with its
    /// password hidden.
    pub fn redacted(&self) -> String {
        match self {
            StoreLocation::Sqlite(path) => path.display().to_string(),
            StoreLocation::Postgres(url) => redact(url),
        }
    }
}

/// Where `config` puts the store, without touching the disk:
/// `sessions.url` (`sqlite:///absolute/path.db`, `sqlite://relative/path.db`,
/// `postgres://user:password@host:port/database`),
/// else `sessions.database`, else `<home>/sessions.db`.
///
/// `postgres://` and `postgresql://` URLs name a PostgreSQL database;
/// anything else is [`Error::InvalidUrl`]. Errors show the URL with its
/// password hidden.
pub fn location(config: &SessionsConfig, home: &Path) -> Result<StoreLocation> {
    if let Some(url) = &config.url {
        return location_of_url(url);
    }
    Ok(StoreLocation::Sqlite(
        config
            .database
            .clone()
            .unwrap_or_else(|| home.join("sessions.db")),
    ))
}

/// Opens the store `config` names (see [`location`]), creating it and its
/// directory if needed and bringing its schema up to date.
pub async fn open(config: &SessionsConfig, home: &Path) -> Result<Arc<dyn SessionStore>> {
    match location(config, home)? {
        StoreLocation::Sqlite(path) => Ok(Arc::new(SqliteStore::open(&path).await?)),
        StoreLocation::Postgres(url) => Ok(Arc::new(PgStore::open(&url).await?)),
    }
}

fn location_of_url(url: &str) -> Result<StoreLocation> {
    let invalid = |problem: &str| Error::InvalidUrl {
        url: redact(url),
        problem: problem.to_owned(),
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        if url.to_ascii_lowercase().starts_with("sqlite::memory:") {
            return Err(invalid(
                "in-memory stores would lose every session at exit, so they are not supported",
            ));
        }
        return Err(invalid("not a URL (no '://')"));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "sqlite" if rest.is_empty() => Err(invalid("the URL names no file")),
        "sqlite" if rest.contains(['?', '#']) => Err(invalid(
            "options after '?' or '#' are not supported; name the file only",
        )),
        "sqlite" => Ok(StoreLocation::Sqlite(PathBuf::from(rest))),
        "postgres" | "postgresql" => Ok(StoreLocation::Postgres(url.to_owned())),
        "" => Err(invalid("the URL has no scheme")),
        other => Err(invalid(&format!(
            "'{other}://' is not a session store this build knows"
        ))),
    }
}

/// The URL with its password replaced by `***`, so errors can show it:
/// the one in its `user:password@` part, and a `password=` option after
/// `?` (which PostgreSQL's URLs also take).
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    format!("{scheme}://{authority}{}", redact_query(tail))
}

/// `tail` (path, `?` options, `#` fragment) with the value of every
/// `password` option replaced by `***`.
fn redact_query(tail: &str) -> String {
    let Some((path, after)) = tail.split_once('?') else {
        return tail.to_owned();
    };
    let (query, fragment) = match after.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (after, None),
    };
    let options: Vec<String> = query
        .split('&')
        .map(|option| match option.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
            _ => option.to_owned(),
        })
        .collect();
    let fragment = fragment.map(|f| format!("#{f}")).unwrap_or_default();
    format!("{path}?{}{fragment}", options.join("&"))
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(
            redact("postgres://flynn:s3cr@t@db.local:5432/flynn?sslmode=require"),
            "postgres://flynn:***@db.local:5432/flynn?sslmode=require"
        );
        assert_eq!(
            redact("postgres://flynn@db.local/flynn"),
            "postgres://flynn@db.local/flynn"
        );
        assert_eq!(redact("sqlite:///var/x.db"), "sqlite:///var/x.db");
        assert_eq!(
            redact("postgres://flynn@db.local/flynn?sslmode=require&password=s3cr%40t&x=1#f"),
            "postgres://flynn@db.local/flynn?sslmode=require&password=***&x=1#f"
        );
        assert_eq!(
            redact("postgres://flynn:a@db.local/flynn?PASSWORD=b"),
            "postgres://flynn:***@db.local/flynn?PASSWORD=***"
        );
        assert_eq!(redact("not a url"), "not a url");
    }
}
