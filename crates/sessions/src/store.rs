use async_trait::async_trait;
use flynn_protocol::{Message, SessionKey, Tier, Usage};
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

/// One model call's usage, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub session: SessionKey,
    pub provider: String,
    pub model: String,
    pub tier: Tier,
    pub usage: Usage,
    /// USD; `None` when the model's price is unknown.
    pub cost_usd: Option<f64>,
}

/// Usage summed over a group of calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotal {
    pub calls: u64,
    pub usage: Usage,
    /// USD, summed over the calls whose price is known.
    pub cost_usd: f64,
    /// Calls whose price is unknown (not in `cost_usd`).
    pub unpriced_calls: u64,
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

    /// Records one model call's usage.
    async fn record_usage(&self, record: &UsageRecord) -> Result<()>;

    /// Usage per tier, over one session or (with `None`) every session.
    /// Tiers without calls are left out.
    async fn usage_by_tier(&self, session: Option<&SessionKey>) -> Result<Vec<(Tier, UsageTotal)>>;
}
