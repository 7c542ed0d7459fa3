use async_trait::async_trait;
use flynn_protocol::{Message, SessionKey};
use serde::{Deserialize, Serialize};

use crate::Result;

/// A summary of one stored session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub key: SessionKey,
    pub message_count: u64,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds of the last change.
    pub updated_at: i64,
}

/// Where conversations are kept.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Adds messages to the end of a session, creating it if needed. All or
    /// none of them are stored.
    async fn append(&self, key: &SessionKey, messages: &[Message]) -> Result<()>;

    /// The whole history of a session, oldest first; empty if unknown.
    async fn history(&self, key: &SessionKey) -> Result<Vec<Message>>;

    /// Every session, most recently updated first.
    async fn list(&self) -> Result<Vec<SessionInfo>>;

    /// One session's summary, if it exists.
    async fn info(&self, key: &SessionKey) -> Result<Option<SessionInfo>>;

    /// Deletes a session and its history. Returns whether it existed.
    async fn clear(&self, key: &SessionKey) -> Result<bool>;

    /// Replaces a session's whole history in one transaction (compaction):
    /// readers see either the old or the new history, never a mix.
    async fn replace_history(&self, key: &SessionKey, messages: &[Message]) -> Result<()>;
}
