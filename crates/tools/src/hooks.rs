//! What happens before a tool runs (`tools.hooks`): ask a person, log the
//! call, or just run it.

use flynn_protocol::config::{HookAction, HookRule};

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

    /// The first matching rule's action; [`HookAction::Silent`] when no
    /// rule matches.
    pub fn action(&self, tool: &str) -> HookAction {
        self.rules
            .iter()
            .find(|(glob, _)| glob.matches(tool))
            .map_or(HookAction::Silent, |&(_, action)| action)
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
    fn the_first_matching_rule_wins_and_the_default_is_silent() {
        let hooks = Hooks::new(&[
            rule("shell.exec", HookAction::Log),
            rule("shell.*", HookAction::Confirm),
            rule("*", HookAction::Log),
            rule("file.read", HookAction::Confirm),
        ]);
        let actions: Vec<HookAction> = ["shell.exec", "shell.kill", "file.read"]
            .into_iter()
            .map(|tool| hooks.action(tool))
            .collect();
        assert_eq!(
            actions,
            [HookAction::Log, HookAction::Confirm, HookAction::Log]
        );
        assert_eq!(Hooks::new(&[]).action("shell.exec"), HookAction::Silent);
        assert_eq!(
            Hooks::new(&[rule("file.*", HookAction::Confirm)]).action("shell.exec"),
            HookAction::Silent
        );
    }
}
