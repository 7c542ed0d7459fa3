//! Cron jobs and the heartbeat over the real agent runtime (scripted
//! models, real tools, a real SQLite store) on a paused clock, answers
//! delivered to a chat platform in memory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod automation;
mod gmail;

pub use flynn_testkit::runtime::{Harness, Setup, key, manager_with};
pub use flynn_testkit::scripted::{Script, ScriptedModel, last_user_text};
