//! The Flynn agent runtime: sessions, lanes, turns and their events.
//!
//! A [`SessionManager`] runs turns for many sessions at once. Each active
//! session has a lane, a task that owns the session's state: messages
//! reach it through a bounded queue, are accepted (stored durably with a
//! pending mark) in arrival order, and their turns run one after another;
//! different sessions run concurrently. A turn calls the model with the
//! conversation and the agent's tools, runs the tools the model asks for
//! (each through the tool gate: policy, hooks, an [`Approver`]), feeds their
//! results back, and repeats until the model answers in text or
//! `max_iterations` is reached.
//!
//! Everything that happens is published as an [`EventEnvelope`] to the
//! session's subscribers and the global ones ([`EventStream`]); a slow
//! subscriber is told it lagged, it never stalls a turn. Chat commands
//! (`/status`, `/model`...) are answered without the model. A turn that a
//! crash or kill left unfinished is found when its session's lane starts
//! and reported (or rerun), and a history cut short mid-tool is repaired,
//! so a session always continues.
//!
//! The chat channels (`flynn-chat`), cron jobs (`flynn-cron`), the gateway
//! and the CLI are clients of this runtime: they submit messages and
//! follow the events like anyone.
//!
//! [`Approver`]: flynn_tools::Approver

mod agents;
mod cluster;
mod commands;
mod compact;
mod delegate;
mod error;
mod events;
mod follow;
mod host;
mod lane;
mod media;
pub mod memory;
mod outbox;
mod prompt;
mod runtime;
mod skills;
mod turn;

pub use agents::{AgentProfile, Agents};
pub use cluster::forget_stopped_local_nodes;
pub use commands::{BadArgument, Command, HELP, ModelChoice, VoiceChoice};
pub use delegate::{AgentOrchestrator, DelegationSettings, SubAgentRequest, SubAgentResult};
pub use error::{Error, Result};
pub use events::{EventStream, GLOBAL_CAPACITY, SESSION_CAPACITY};
pub use flynn_protocol::{AgentEvent, EventEnvelope, Lagged};
pub use follow::{Followed, TurnEvents};
pub use host::SUBAGENT_PROMPT;
pub use lane::{RecoveredTurn, Recovery};
pub use media::{KEEP as MEDIA_KEPT, MAX_MEDIA_BYTES, MediaStore};
pub use memory::MemoryRuntime;
pub use outbox::{OUTBOX_WINDOW, Undelivered};
pub use prompt::{
    DEFAULT_SYSTEM_PROMPT, PROMPT_FILE_LIMIT, PromptBuilder, PromptContext, PromptSlot,
};
pub use runtime::{
    LANE_SEND_TIMEOUT, RuntimeParts, SessionManager, Submission, Submitted, TurnHandle, TurnRequest,
};
pub use skills::SkillsRuntime;
pub use turn::TOOL_SUMMARY_PROMPT;
