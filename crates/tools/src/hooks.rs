//! What happens before a tool runs (`tools.hooks`): ask a person, log the
//! call, or just run it.

use flynn_protocol::ToolEffect;
use flynn_protocol::config::{Autonomy, HookAction, HookRule};

use crate::glob::Glob;

/// The hook rules, in order; the first whose glob matches a tool decides.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    rules: Vec<(Glob, HookAction)>,
}

impl Hooks {
    pub fn new(rules: &[HookRule]) -> Self {
        Hooks {
            rules: rules
                .iter()
                .map(|rule| (Glob::new(&rule.tool), rule.action))
                .collect(),
        }
    }

    /// The first matching rule's action, if any rule matches.
    pub fn rule(&self, tool: &str) -> Option<HookAction> {
        self.rules
            .iter()
            .find(|(glob, _)| glob.matches(tool))
            .map(|&(_, action)| action)
    }

    /// What happens before `tool` runs: the first matching rule, else what
    /// the autonomy level says for its effect (`supervised` asks before
    /// writing, running or sending and is silent otherwise; `full` logs
    /// everything but acting on the owner's accounts, which it asks about;
    /// `read_only` never offers risky tools, and is silent).
    pub fn decide(&self, tool: &str, effect: ToolEffect, autonomy: Autonomy) -> HookAction {
        self.rule(tool).unwrap_or(match autonomy {
            Autonomy::Full if effect == ToolEffect::ActsOnAccount => HookAction::Confirm,
            Autonomy::Full => HookAction::Log,
            Autonomy::Supervised if effect.is_risky() => HookAction::Confirm,
            Autonomy::Supervised | Autonomy::ReadOnly => HookAction::Silent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(tool: &str, action: HookAction) -> HookRule {
        HookRule {
            tool: tool.to_owned(),
            action,
        }
    }

    #[test]
    fn the_first_matching_rule_wins() {
        let hooks = Hooks::new(&[
            rule("shell.exec", HookAction::Log),
            rule("shell.*", HookAction::Confirm),
            rule("*", HookAction::Log),
            rule("file.read", HookAction::Confirm),
        ]);
        let actions: Vec<HookAction> = ["shell.exec", "shell.kill", "file.read"]
            .into_iter()
            .map(|tool| hooks.rule(tool).unwrap())
            .collect();
        assert_eq!(
            actions,
            [HookAction::Log, HookAction::Confirm, HookAction::Log]
        );
        assert_eq!(Hooks::new(&[]).rule("shell.exec"), None);
        assert_eq!(
            Hooks::new(&[rule("file.*", HookAction::Confirm)]).rule("shell.exec"),
            None
        );
    }

    #[test]
    fn without_a_rule_the_autonomy_decides_by_effect() {
        let hooks = Hooks::new(&[rule("shell.exec", HookAction::Log)]);
        let decide = |tool, effect, autonomy| hooks.decide(tool, effect, autonomy);
        use Autonomy::*;
        assert_eq!(
            decide("file.write", ToolEffect::WritesFiles, Supervised),
            HookAction::Confirm
        );
        assert_eq!(
            decide("process.start", ToolEffect::RunsProcesses, Supervised),
            HookAction::Confirm
        );
        assert_eq!(
            decide("sessions.send", ToolEffect::SendsMessages, Supervised),
            HookAction::Confirm
        );
        assert_eq!(
            decide("file.read", ToolEffect::ReadOnly, Supervised),
            HookAction::Silent
        );
        assert_eq!(
            decide("web.fetch", ToolEffect::Network, Supervised),
            HookAction::Silent
        );
        assert_eq!(
            decide("file.write", ToolEffect::WritesFiles, Full),
            HookAction::Log
        );
        assert_eq!(
            decide("gmail.send", ToolEffect::ActsOnAccount, Full),
            HookAction::Confirm
        );
        assert_eq!(
            decide("gmail.send", ToolEffect::ActsOnAccount, Supervised),
            HookAction::Confirm
        );
        assert_eq!(
            decide("file.read", ToolEffect::ReadOnly, Full),
            HookAction::Log
        );
        // An explicit rule wins over the autonomy.
        assert_eq!(
            decide("shell.exec", ToolEffect::RunsProcesses, Supervised),
            HookAction::Log
        );
    }
}
