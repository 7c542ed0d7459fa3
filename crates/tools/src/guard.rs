//! Limits a turn takes on after it started: a skill the model read
//! declares what it may use, and from then on every call of the turn must
//! fit what one of the turn's skills declares. The guards are added by the
//! tools that start such a limit (`skills.read`) and checked by the
//! executor after the agent's policy.

use std::path::Path;
use std::sync::{Arc, Mutex};

use flynn_protocol::ToolEffect;
use serde_json::Value;

/// A tool call as a guard sees it.
#[derive(Debug, Clone, Copy)]
pub struct GuardedCall<'a> {
    pub tool: &'a str,
    pub effect: ToolEffect,
    pub arguments: &'a Value,
    /// Where relative paths in the arguments start.
    pub workspace: &'a Path,
}

/// One limit on a turn's calls, such as the declared permissions of a skill
/// in use.
pub trait CallGuard: Send + Sync + std::fmt::Debug {
    /// What the limit comes from, for messages and to add it once
    /// (`skill 'git'`).
    fn name(&self) -> &str;

    /// `Err` with the reason, naming what was asked and what is allowed,
    /// when the call does not fit.
    fn check(&self, call: &GuardedCall<'_>) -> Result<(), String>;
}

/// Tools no guard limits: they only read Flynn's own skills, find tools or
/// read back this turn's output.
const UNGUARDED: &[&str] = &["skills.read", "tools.search", "tool.output"];

/// The guards of one turn. Empty: nothing beyond the policy applies. With
/// guards, a call runs when one of them allows it.
#[derive(Debug, Default)]
pub struct Guards {
    guards: Mutex<Vec<Arc<dyn CallGuard>>>,
}

impl Guards {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `guard` unless one of the same name is there already.
    pub fn add(&self, guard: Arc<dyn CallGuard>) {
        let mut guards = self
            .guards
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if guards.iter().all(|g| g.name() != guard.name()) {
            guards.push(guard);
        }
    }

    /// The names of the guards in force.
    pub fn names(&self) -> Vec<String> {
        self.guards
            .lock()
            .map(|guards| guards.iter().map(|g| g.name().to_owned()).collect())
            .unwrap_or_default()
    }

    /// Whether `call` may run: no guard, an unguarded tool, or one guard
    /// allowing it. The error joins every guard's reason.
    pub fn check(&self, call: &GuardedCall<'_>) -> Result<(), String> {
        if UNGUARDED.contains(&call.tool) {
            return Ok(());
        }
        let guards = self
            .guards
            .lock()
            .map(|guards| guards.clone())
            .unwrap_or_default();
        if guards.is_empty() {
            return Ok(());
        }
        let mut reasons = Vec::new();
        for guard in &guards {
            match guard.check(call) {
                Ok(()) => return Ok(()),
                Err(reason) => reasons.push(reason),
            }
        }
        Err(reasons.join("; "))
    }
}
