//! Limits a turn takes on after it started: a skill the model read
//! declares what it may use, and from then on every call of the turn must
//! fit what every skill the turn read declares (the strictest wins:
//! reading a broad skill after a narrow one lifts nothing). The guards are
//! added by the tools that start such a limit (`skills.read`), checked by
//! the executor after the agent's policy, and handed down to the
//! sub-agents the turn starts.

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

    /// Whether some call of `tool` could fit: a tool no call of which
    /// could is left out of the model's offer. Every tool by default.
    fn offers(&self, tool: &str) -> bool {
        let _ = tool;
        true
    }
}

/// Tools no guard limits: they only read Flynn's own skills, find tools or
/// read back this turn's output.
const UNGUARDED: &[&str] = &["skills.read", "tools.search", "tool.output"];

/// The guards of one turn. Empty: nothing beyond the policy applies. With
/// guards, a call runs only when every one of them allows it.
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

    /// Whether `tool` is offered to the model under these guards: the
    /// ungated tools always, the rest when every guard could let a call of
    /// it through.
    pub fn offers(&self, tool: &str) -> bool {
        UNGUARDED.contains(&tool)
            || self
                .guards
                .lock()
                .map(|guards| guards.iter().all(|g| g.offers(tool)))
                .unwrap_or(true)
    }

    /// The names of the guards in force.
    pub fn names(&self) -> Vec<String> {
        self.guards
            .lock()
            .map(|guards| guards.iter().map(|g| g.name().to_owned()).collect())
            .unwrap_or_default()
    }

    /// A copy of these guards for a turn this one starts (a sub-agent):
    /// it is held to the same limits, and what it takes on later stays
    /// its own.
    pub fn snapshot(&self) -> Guards {
        let guards = self
            .guards
            .lock()
            .map(|guards| guards.clone())
            .unwrap_or_default();
        Guards {
            guards: Mutex::new(guards),
        }
    }

    /// Whether `call` may run: no guard, an unguarded tool, or every
    /// guard allowing it. The error joins the reasons of the guards that
    /// refuse.
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
        let reasons: Vec<String> = guards
            .iter()
            .filter_map(|guard| guard.check(call).err())
            .collect();
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allows only the tools named.
    #[derive(Debug)]
    struct Only(&'static str, &'static [&'static str]);

    impl CallGuard for Only {
        fn name(&self) -> &str {
            self.0
        }

        fn check(&self, call: &GuardedCall<'_>) -> Result<(), String> {
            if self.1.contains(&call.tool) {
                Ok(())
            } else {
                Err(format!("{} refuses {}", self.0, call.tool))
            }
        }
    }

    fn call(tool: &str) -> GuardedCall<'_> {
        GuardedCall {
            tool,
            effect: ToolEffect::ReadOnly,
            arguments: &Value::Null,
            workspace: Path::new("/w"),
        }
    }

    #[test]
    fn every_guard_must_allow_a_call() {
        let guards = Guards::new();
        guards.add(Arc::new(Only("narrow", &["file.read"])));
        guards.add(Arc::new(Only("broad", &["file.read", "shell.exec"])));
        assert_eq!(guards.check(&call("file.read")), Ok(()));
        assert_eq!(
            guards.check(&call("shell.exec")),
            Err("narrow refuses shell.exec".to_owned())
        );
        assert_eq!(
            guards.check(&call("web.fetch")),
            Err("narrow refuses web.fetch; broad refuses web.fetch".to_owned())
        );
    }

    #[test]
    fn a_snapshot_keeps_the_limits_and_grows_on_its_own() {
        let parent = Guards::new();
        parent.add(Arc::new(Only("narrow", &["file.read", "file.list"])));
        let child = parent.snapshot();
        assert_eq!(child.names(), vec!["narrow".to_owned()]);
        child.add(Arc::new(Only("narrower", &["file.read"])));
        assert!(child.check(&call("file.list")).is_err());
        assert_eq!(parent.check(&call("file.list")), Ok(()));
    }
}
