//! Which tools an agent may use: a profile, narrowed by `enabled` globs,
//! minus `deny` globs.

use flynn_protocol::config::{ToolPolicyConfig, ToolProfile, ToolsConfig};

use crate::ToolRegistry;
use crate::glob::{Glob, any_matches};

/// The tools one agent may see and run. Built from the global `tools`
/// block and the agent's own; the registry lists a tool only when
/// [`allows`](Self::allows) says so, and the executor refuses it otherwise.
#[derive(Debug, Clone)]
pub struct ToolPolicy {
    profile: ToolProfile,
    profile_globs: Vec<Glob>,
    /// `None`: every tool of the profile.
    enabled: Option<Vec<Glob>>,
    deny: Vec<Glob>,
    /// Every `enabled` pattern written (global and agent), for [`check`](Self::check).
    declared: Vec<Glob>,
}

impl ToolPolicy {
    /// Every tool, nothing denied.
    pub fn allow_all() -> Self {
        ToolPolicy::new(&ToolsConfig::default(), None)
    }

    /// The global `tools` block, narrowed or replaced by an agent's `tools`
    /// block: an agent's `profile` and `enabled`, when set, replace the
    /// global ones; the global `deny` and the agent's `deny` both always
    /// apply.
    pub fn new(tools: &ToolsConfig, agent: Option<&ToolPolicyConfig>) -> Self {
        let profile = agent.and_then(|a| a.profile).unwrap_or(tools.profile);
        let enabled = agent
            .and_then(|a| a.enabled.as_ref())
            .or(tools.enabled.as_ref())
            .map(|patterns| compile(patterns));
        let deny = tools
            .deny
            .iter()
            .chain(agent.map(|a| a.deny.as_slice()).unwrap_or_default())
            .map(|pattern| Glob::new(pattern))
            .collect();
        let mut declared: Vec<Glob> = Vec::new();
        for pattern in tools
            .enabled
            .iter()
            .chain(agent.and_then(|a| a.enabled.as_ref()))
            .flatten()
        {
            if declared.iter().all(|glob| glob.as_str() != pattern) {
                declared.push(Glob::new(pattern));
            }
        }
        ToolPolicy {
            profile,
            profile_globs: compile(profile_patterns(profile)),
            enabled,
            deny,
            declared,
        }
    }

    /// Whether the tool named `name` may be offered and run: its profile
    /// has it, `enabled` (when set) matches it, and no `deny` glob does.
    pub fn allows(&self, name: &str) -> bool {
        any_matches(&self.profile_globs, name)
            && self
                .enabled
                .as_ref()
                .is_none_or(|enabled| any_matches(enabled, name))
            && !any_matches(&self.deny, name)
    }

    pub fn profile(&self) -> ToolProfile {
        self.profile
    }

    /// Fails on `enabled` patterns (global and agent) that match no tool in
    /// `registry`, so a typo is an error rather than a tool that silently
    /// never appears.
    pub fn check(&self, registry: &ToolRegistry) -> Result<(), UnknownTools> {
        let unknown: Vec<String> = self
            .declared
            .iter()
            .filter(|glob| !registry.names().any(|name| glob.matches(name)))
            .map(|glob| glob.as_str().to_owned())
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(UnknownTools {
                unknown,
                available: registry.names().map(str::to_owned).collect(),
            })
        }
    }
}

/// `enabled` patterns that match no tool in the registry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tools.enabled: unknown tool(s) {} (available: {})",
    .unknown.join(", "),
    list_or_none(.available)
)]
pub struct UnknownTools {
    /// The patterns, as written.
    pub unknown: Vec<String>,
    /// Every tool in the registry, sorted.
    pub available: Vec<String>,
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// The tools a profile starts with, as globs.
fn profile_patterns(profile: ToolProfile) -> &'static [&'static str] {
    match profile {
        ToolProfile::Minimal => &["memory.*"],
        ToolProfile::Messaging => &["memory.*", "web.*", "sessions.*"],
        ToolProfile::Coding => &[
            "file.*",
            "shell.*",
            "process.*",
            "web.*",
            "memory.*",
            "sessions.*",
        ],
        ToolProfile::Full => &["*"],
    }
}

fn compile<S: AsRef<str>>(patterns: &[S]) -> Vec<Glob> {
    patterns.iter().map(|p| Glob::new(p.as_ref())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: [&str; 9] = [
        "file.read",
        "file.write",
        "shell.exec",
        "process.list",
        "web.fetch",
        "memory.search",
        "sessions.list",
        "browser.open",
        "mcp.github.issue",
    ];

    fn allowed(policy: &ToolPolicy) -> Vec<&'static str> {
        NAMES.into_iter().filter(|n| policy.allows(n)).collect()
    }

    fn tools(profile: ToolProfile) -> ToolsConfig {
        ToolsConfig {
            profile,
            ..ToolsConfig::default()
        }
    }

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|&n| n.to_owned()).collect()
    }

    #[test]
    fn each_profile_allows_its_tool_families() {
        let by_profile = |profile| allowed(&ToolPolicy::new(&tools(profile), None));
        assert_eq!(by_profile(ToolProfile::Minimal), ["memory.search"]);
        assert_eq!(
            by_profile(ToolProfile::Messaging),
            ["web.fetch", "memory.search", "sessions.list"]
        );
        assert_eq!(
            by_profile(ToolProfile::Coding),
            [
                "file.read",
                "file.write",
                "shell.exec",
                "process.list",
                "web.fetch",
                "memory.search",
                "sessions.list"
            ]
        );
        assert_eq!(by_profile(ToolProfile::Full), NAMES);
        assert_eq!(allowed(&ToolPolicy::allow_all()), NAMES);
        assert_eq!(ToolPolicy::allow_all().profile(), ToolProfile::Full);
    }

    #[test]
    fn enabled_globs_narrow_the_profile() {
        let config = ToolsConfig {
            profile: ToolProfile::Coding,
            enabled: Some(strings(&["file.*", "shell.exec", "browser.open"])),
            ..ToolsConfig::default()
        };
        // browser.open is enabled but outside the coding profile.
        assert_eq!(
            allowed(&ToolPolicy::new(&config, None)),
            ["file.read", "file.write", "shell.exec"]
        );
    }

    #[test]
    fn deny_wins_over_profile_and_enabled() {
        let config = ToolsConfig {
            enabled: Some(strings(&["file.*", "shell.exec"])),
            deny: strings(&["file.w?ite", "shell.*"]),
            ..ToolsConfig::default()
        };
        assert_eq!(allowed(&ToolPolicy::new(&config, None)), ["file.read"]);
    }

    #[test]
    fn an_agent_replaces_profile_and_enabled_but_global_deny_stays() {
        let global = ToolsConfig {
            profile: ToolProfile::Minimal,
            enabled: Some(strings(&["memory.*"])),
            deny: strings(&["shell.exec"]),
            ..ToolsConfig::default()
        };
        let agent = ToolPolicyConfig {
            profile: Some(ToolProfile::Coding),
            enabled: Some(strings(&["file.*", "shell.*", "web.*"])),
            deny: strings(&["web.fetch"]),
        };
        let policy = ToolPolicy::new(&global, Some(&agent));
        assert_eq!(policy.profile(), ToolProfile::Coding);
        assert_eq!(allowed(&policy), ["file.read", "file.write"]);

        // An agent block that sets only `deny` keeps the global profile and
        // `enabled`, and adds its own denials.
        let agent = ToolPolicyConfig {
            deny: strings(&["memory.search"]),
            ..ToolPolicyConfig::default()
        };
        let policy = ToolPolicy::new(&tools(ToolProfile::Messaging), Some(&agent));
        assert_eq!(policy.profile(), ToolProfile::Messaging);
        assert_eq!(allowed(&policy), ["web.fetch", "sessions.list"]);
    }
}
