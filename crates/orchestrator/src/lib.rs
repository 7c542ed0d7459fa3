//! The Flynn agent loop.
//!
//! [`Agent::run_turn`] takes one user message through a whole turn: it
//! persists the message, calls the model with the conversation and the
//! tools, runs the tools the model asks for, feeds their results back, and
//! repeats until the model answers in text or `max_iterations` is reached.
//! Progress is reported as [`AgentEvent`]s to a callback; the turn stops
//! promptly when its cancellation token fires, leaving every tool call in
//! the history paired with a result.

mod agent;
mod error;

pub use agent::{Agent, AgentSettings, DEFAULT_SYSTEM_PROMPT, TurnRequest};
pub use error::{Error, Result};
pub use flynn_protocol::AgentEvent;
