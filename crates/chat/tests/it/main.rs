//! The channel router over the real agent runtime (scripted models, real
//! tools, a real SQLite store): deliveries from a chat platform in memory
//! (or the real Telegram adapter against its fake) through the access
//! rules into sessions, answers and confirmations back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "telegram")]
mod attachments;
mod principals;
mod router;

pub use flynn_testkit::runtime::{Harness, Setup, confirm_shell, key, tiers};
pub use flynn_testkit::scripted::{Script, ScriptedModel, last_user_text, tool_use};
