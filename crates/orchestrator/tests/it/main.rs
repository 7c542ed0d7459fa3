//! The session manager against scripted in-process models, real tools and
//! a real SQLite store (the runtime harness is `flynn_testkit::runtime`,
//! shared with the crates above the orchestrator).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cluster;
mod commands;
mod compaction;
mod delegation;
mod images;
mod lanes;
mod memory;
mod recovery;
mod skills;
mod taint;
mod turns;

pub use flynn_testkit::runtime::{
    Harness, Setup, confirm_shell, drain_turn, key, manager, manager_with, tiers, with_model,
};
pub use flynn_testkit::scripted::{Script, ScriptedModel, last_user_text, tool_use};
