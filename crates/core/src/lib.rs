//! Flynn as a library.
//!
//! [`Flynn::builder`] composes the model router, the tools, the session
//! store and the agent loop from a [`FlynnConfig`] value; [`Flynn::send`]
//! answers one message, streaming [`AgentEvent`]s to a callback. Nothing
//! here spawns threads or tasks of its own, and there is no global state:
//! two `Flynn` values in one process are independent.
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

mod builder;
mod error;

pub use builder::{Flynn, FlynnBuilder};
pub use error::{Error, Result};

pub use flynn_config as config;
pub use flynn_models as models;
pub use flynn_orchestrator::{Agent, AgentSettings, DEFAULT_SYSTEM_PROMPT, TurnRequest};
pub use flynn_protocol as protocol;
pub use flynn_protocol::config::FlynnConfig;
pub use flynn_protocol::{AgentEvent, ErrorCode, Message, SessionKey, Tier, TurnOutcome};
pub use flynn_sessions::{Error as SessionsError, SessionInfo, SessionStore, SqliteStore};
pub use flynn_tools::{Tool, ToolContext, ToolError, TypedTool};
pub use tokio_util::sync::CancellationToken;
