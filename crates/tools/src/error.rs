use std::time::Duration;

/// Why a tool call failed. The executor turns every variant into an error
/// result for the model; none of them ends the turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("unknown tool '{name}' (available: {available})")]
    UnknownTool { name: String, available: String },
    #[error("invalid arguments for {tool}: {message}")]
    InvalidArguments { tool: String, message: String },
    #[error("{tool} timed out after {after:?}")]
    Timeout { tool: String, after: Duration },
    #[error("{tool} was cancelled")]
    Cancelled { tool: String },
    /// The gate refused the call: the agent's policy, a person, or nobody
    /// answering a confirmation in time. The tool did not run.
    #[error("{tool} was denied: {reason}")]
    Denied { tool: String, reason: String },
    /// The tool ran and failed; the message is for the model.
    #[error("{0}")]
    Failed(String),
}

impl ToolError {
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError::Failed(message.into())
    }

    /// The gate refused the call, so the tool never ran.
    pub fn is_denied(&self) -> bool {
        matches!(self, ToolError::Denied { .. })
    }
}
