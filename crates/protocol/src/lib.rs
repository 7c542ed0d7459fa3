//! Plain data shared by every Flynn crate.
//!
//! Messages and their content blocks, tool specs and calls, token usage,
//! model tiers, session keys, job names, agent events and the
//! configuration structs.
//! This crate does no I/O and knows nothing of tokio: it is serde and
//! schemars types only, so every other crate can depend on it.

pub mod clock;
pub mod config;
mod event;
pub mod fault;
mod job;
mod message;
mod principal;
mod session;
pub mod sync;
pub mod text;
mod tier;
mod tool;
mod tool_names;
mod untrusted;
mod usage;

pub use event::{
    AgentEvent, ErrorCode, EventEnvelope, Lagged, MediaFile, MediaKind, RecoveryAction, Resolution,
    RunState, ToolCallSummary, ToolEffect, TurnId, TurnOutcome, TurnTiming,
};
pub use job::{JobName, JobNameError};
pub use message::{ContentBlock, ImageSource, Message, Role};
pub use principal::{Principal, PrincipalError};
pub use session::{SessionKey, SessionKeyError};
pub use tier::{Tier, UnknownTier};
pub use tool::{INVALID_ARGUMENTS_KEY, ToolCall, ToolResult, ToolSpec, invalid_arguments};
pub use tool_names::{
    BUILTIN_TOOL_FAMILIES, GOOGLE_TOOL_FAMILIES, ToolNameMap, is_builtin_tool, wire_name,
};
pub use untrusted::{is_untrusted, message_is_untrusted, strip_untrusted, wrap_untrusted};
pub use usage::{Purpose, Usage};
