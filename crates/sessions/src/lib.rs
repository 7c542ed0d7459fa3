//! Session storage for Flynn.
//!
//! A session is the conversation of one `channel:peer` key. [`SessionStore`]
//! is the storage trait; [`SqliteStore`] implements it on a SQLite file
//! through sqlx, in WAL mode, with migrations embedded in the binary.

mod error;
mod sqlite;
mod store;

pub use error::{Error, Result};
pub use sqlite::{SqliteStore, database_path};
pub use store::{SessionInfo, SessionStore, UsageRecord, UsageTotal};
