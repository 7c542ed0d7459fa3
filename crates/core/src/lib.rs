//! Flynn as a library.
//!
//! [`Flynn::builder`] composes the model router, the tools, the session
//! store, the agents and the session manager from a [`FlynnConfig`] value;
//! [`Flynn::send`] answers one message, streaming [`AgentEvent`]s to a
//! callback, and [`Flynn::subscribe`] / [`Flynn::subscribe_all`] stream
//! the events of one session or all of them. Session lanes are tasks on
//! the caller's tokio runtime (no threads of their own), tracked and
//! stopped by [`Flynn::shutdown`]; there is no global state: two `Flynn`
//! values in one process are independent.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use flynn_core::{Flynn, FlynnConfig, TurnRequest};
//!
//! let flynn = Flynn::builder()
//!     .config(FlynnConfig::default())
//!     .home("/tmp/flynn-demo")
//!     .build()
//!     .await?;
//! let turn = TurnRequest::text("cli:demo".parse()?, "hello");
//! let outcome = flynn.send(turn, Default::default(), &mut |_event| {}).await?;
//! println!("{}", outcome.reply);
//! # Ok(()) }
//! ```

pub mod backup;
mod builder;
#[cfg(feature = "daemon")]
pub mod cluster;
/// The chat channels a config asks for, built with the adapters this
/// binary was compiled with (`flynn_channels::configured`).
pub use flynn_channels::configured as channels;
#[cfg(feature = "daemon")]
pub mod daemon;
mod error;
pub mod retention;

pub use builder::{Flynn, FlynnBuilder, open_memory, unused_memory_files};
pub use error::{Error, Result};

pub use flynn_channels as channel;
#[cfg(feature = "daemon")]
pub use flynn_chat as chat;
pub use flynn_config as config;
pub use flynn_context as context;
pub use flynn_context::MemoryFlush;
pub use flynn_cron as cron;
#[cfg(feature = "daemon")]
pub use flynn_gateway as gateway;
pub use flynn_google as google;
pub use flynn_mcp as mcp;
pub use flynn_memory as memory;
pub use flynn_memory::Memory;
pub use flynn_models as models;
pub use flynn_orchestrator::memory::render_hits as render_memory_hits;
pub use flynn_orchestrator::{
    AgentOrchestrator, AgentProfile, Agents, DEFAULT_SYSTEM_PROMPT, EventStream, MemoryRuntime,
    PromptContext, PromptSlot, SessionManager, SubAgentRequest, SubAgentResult, Submitted,
    TurnHandle, TurnRequest,
};
pub use flynn_protocol as protocol;
pub use flynn_protocol::config::FlynnConfig;
pub use flynn_protocol::{
    AgentEvent, ErrorCode, EventEnvelope, Lagged, Message, RunState, SessionKey, Tier, TurnId,
    TurnOutcome,
};
pub use flynn_sessions as sessions;
pub use flynn_sessions::{
    Conversations, Error as SessionsError, Jobs, Pairing, SessionInfo, SessionMeta, SessionStore,
    SqliteStore, StoredMessage, Turns, UsageLog,
};
pub use flynn_skills as skills;
pub use flynn_tools as tools;
pub use flynn_tools::{
    ApprovalRequest, ApproveAll, Approver, Decision, DenyAll, Tool, ToolContext, ToolError,
    TypedTool,
};
pub use flynn_voice as voice;
pub use tokio_util::sync::CancellationToken;
