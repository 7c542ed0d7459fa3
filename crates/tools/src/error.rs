use std::path::PathBuf;
use std::time::Duration;

use crate::sandbox::Backend;

/// Why a tool call failed. The executor turns every variant into an error
/// result for the model; none of them ends the turn.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    #[error("unknown tool '{name}' (tools you can call, by these names: {available})")]
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
    /// The tool ran and failed with words from outside Flynn: a web page's
    /// error body, an MCP server's error text. `message` is Flynn's;
    /// `quoted` is theirs, and reaches the model wrapped as untrusted
    /// content, marking the turn as any untrusted output does (the
    /// executor does that; shown elsewhere, both are written as they are).
    #[error("{message}: {quoted}")]
    FailedQuoting { message: String, quoted: String },
}

impl ToolError {
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError::Failed(message.into())
    }

    /// A failure that quotes an outside party: see
    /// [`ToolError::FailedQuoting`].
    pub fn quoting(message: impl Into<String>, quoted: impl Into<String>) -> Self {
        ToolError::FailedQuoting {
            message: message.into(),
            quoted: quoted.into(),
        }
    }

    /// The gate refused the call, so the tool never ran.
    pub fn is_denied(&self) -> bool {
        matches!(self, ToolError::Denied { .. })
    }
}

/// Why the sandbox could not start a command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// `tools.sandbox.mode` names a sandbox this host does not have.
    #[error("tools.sandbox.mode is {mode}, but {reason}; {fix}")]
    Unavailable {
        mode: Backend,
        reason: String,
        /// What to install or change.
        fix: String,
    },
    #[error("working directory {} does not exist", path.display())]
    NoDirectory { path: PathBuf },
    /// A directory cannot be given to the sandbox as it is named.
    #[error("cannot make {} writable in the sandbox: {reason}", path.display())]
    BadPath { path: PathBuf, reason: String },
    #[error("cannot start {program} in {}: {message}", cwd.display())]
    Spawn {
        program: String,
        cwd: PathBuf,
        message: String,
    },
    #[error("cannot apply the Landlock rules: {message}")]
    Landlock { message: String },
    /// A path Flynn keeps from commands (`FLYNN_HOME`, its config) would
    /// be open to them, so no command runs until `setting` changes.
    #[error(
        "{setting} is {}, which {relation} {}, Flynn's own files (the gateway token, sessions, credentials), so commands do not run: {fix}",
        dir.display(),
        hidden.display()
    )]
    Exposed {
        /// The setting to change: `tools.workspace`, `tools.sandbox.writable`.
        setting: &'static str,
        dir: PathBuf,
        /// "is" or "contains".
        relation: &'static str,
        hidden: PathBuf,
        fix: String,
    },
}

impl SandboxError {
    /// The configured sandbox is missing on this host, so nothing can run
    /// until it is installed or the config changes.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, SandboxError::Unavailable { .. })
    }

    /// Flynn's own files would be open to commands under this config, so
    /// nothing runs until the named setting changes.
    pub fn is_exposed(&self) -> bool {
        matches!(self, SandboxError::Exposed { .. })
    }
}

impl From<SandboxError> for ToolError {
    fn from(error: SandboxError) -> Self {
        ToolError::Failed(error.to_string())
    }
}
