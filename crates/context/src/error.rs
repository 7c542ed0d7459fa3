//! What can stop a compaction.

/// Why a compaction did not finish. A failing summariser is not among
/// them: compaction then falls back to an extractive summary.
#[derive(Debug, thiserror::Error)]
pub enum CompactionError {
    /// The session store could not be read or written; the history is
    /// unchanged unless the store says otherwise.
    #[error("compaction could not use the session store: {0}")]
    Store(#[from] flynn_sessions::Error),
    /// The cancellation token fired; the history is unchanged.
    #[error("compaction was cancelled; the history is unchanged")]
    Cancelled,
}

impl CompactionError {
    /// Whether trying again may succeed (a busy store).
    pub fn is_retryable(&self) -> bool {
        matches!(self, CompactionError::Store(error) if error.is_retryable())
    }
}
