//! Which tools an agent may use: a profile, narrowed by `enabled` globs,
//! minus `deny` globs, and the autonomy that says which of them ask first.

use flynn_protocol::ToolEffect;
use flynn_protocol::config::{Autonomy, TaintPolicy, ToolPolicyConfig, ToolProfile, ToolsConfig};

use crate::glob::{Glob, any_matches};
use crate::{Tool, ToolRegistry};

/// The tools one agent may see and run. Built from the global `tools`
/// block, the agent's own, and the override for the provider it talks to;
/// the registry lists a tool only when [`permits`](Self::permits) says so,
/// and the executor refuses it otherwise.
#[derive(Debug, Clone)]
pub struct ToolPolicy {
    profile: ToolProfile,
    autonomy: Autonomy,
    /// `tools.taint`, or the agent's.
    taint: TaintPolicy,
    profile_globs: Vec<Glob>,
    /// `None`: every tool of the profile.
    enabled: Option<Vec<Glob>>,
    deny: Vec<Glob>,
    /// Every `enabled` pattern written (global and overrides), for [`check`](Self::check).
    declared: Vec<Glob>,
    /// Policies this one must also satisfy (a guest's, a parent agent's):
    /// a tool is allowed only when every one of them allows it too.
    within: Vec<ToolPolicy>,
}

impl ToolPolicy {
    /// Every tool, nothing denied, nothing asks (autonomy `full`).
    pub fn allow_all() -> Self {
        ToolPolicy::new(
            &ToolsConfig {
                autonomy: Autonomy::Full,
                ..ToolsConfig::default()
            },
            None,
        )
    }

    /// The global `tools` block, narrowed or replaced by an agent's `tools`
    /// block: an agent's `profile`, `enabled` and `autonomy`, when set,
    /// replace the global ones; the global `deny` and the agent's `deny`
    /// both always apply.
    pub fn new(tools: &ToolsConfig, agent: Option<&ToolPolicyConfig>) -> Self {
        Self::layered(tools, agent.into_iter())
    }

    /// The global `tools` block with overrides applied in order (an
    /// agent's block, then its provider's): each one's `profile`, `enabled`
    /// and `autonomy` replace what came before; every `deny` applies.
    pub fn layered<'a>(
        tools: &ToolsConfig,
        overrides: impl Iterator<Item = &'a ToolPolicyConfig> + Clone,
    ) -> Self {
        let mut profile = tools.profile;
        let mut autonomy = tools.autonomy;
        let mut taint = tools.taint;
        let mut enabled = tools.enabled.as_ref();
        let mut deny: Vec<Glob> = tools.deny.iter().map(|p| Glob::new(p)).collect();
        let mut declared: Vec<Glob> = Vec::new();
        let mut declare = |patterns: Option<&Vec<String>>| {
            for pattern in patterns.into_iter().flatten() {
                if declared.iter().all(|glob| glob.as_str() != pattern) {
                    declared.push(Glob::new(pattern));
                }
            }
        };
        declare(tools.enabled.as_ref());
        for layer in overrides {
            profile = layer.profile.unwrap_or(profile);
            autonomy = layer.autonomy.unwrap_or(autonomy);
            taint = layer.taint.unwrap_or(taint);
            enabled = layer.enabled.as_ref().or(enabled);
            deny.extend(layer.deny.iter().map(|p| Glob::new(p)));
            declare(layer.enabled.as_ref());
        }
        ToolPolicy {
            profile,
            autonomy,
            taint,
            profile_globs: compile(profile_patterns(profile)),
            enabled: enabled.map(|patterns| compile(patterns)),
            deny,
            declared,
            within: Vec::new(),
        }
    }

    /// A restriction built from one `tools`-shaped block alone (a guest's
    /// `guest_tools`): `profile` (else `default_profile`), `enabled` and
    /// `deny` as written, autonomy `full` and taint `allow` unless set, so
    /// that, applied with [`within`](Self::within), it only ever narrows.
    pub fn restriction(config: Option<&ToolPolicyConfig>, default_profile: ToolProfile) -> Self {
        let empty = ToolPolicyConfig::default();
        let config = config.unwrap_or(&empty);
        ToolPolicy::new(
            &ToolsConfig {
                profile: config.profile.unwrap_or(default_profile),
                enabled: config.enabled.clone(),
                deny: config.deny.clone(),
                autonomy: config.autonomy.unwrap_or(Autonomy::Full),
                taint: config.taint.unwrap_or(TaintPolicy::Allow),
                ..ToolsConfig::default()
            },
            None,
        )
    }

    /// This policy, narrowed to what `outer` allows as well: a tool must
    /// pass both, the lower autonomy and the stricter taint rule apply. A
    /// guest's turn runs the agent's policy within the guest restriction;
    /// a sub-agent runs its own within its parent's.
    pub fn within(&self, outer: &ToolPolicy) -> Self {
        let mut policy = self.capped(outer.autonomy());
        if outer.taint == TaintPolicy::Ask {
            policy.taint = TaintPolicy::Ask;
        }
        policy.within.push(outer.clone());
        policy
    }

    /// Whether the tool named `name` may be offered and run, by name alone:
    /// its profile has it, `enabled` (when set) matches it, and no `deny`
    /// glob does. [`permits`](Self::permits) also applies the autonomy.
    pub fn allows(&self, name: &str) -> bool {
        // `tools.search` only ever offers tools this policy permits, and
        // `tool.output` only reads back this session's own tool output, so
        // `enabled` lists need not name them; `deny` can still remove them.
        let own = if name == crate::TOOL_SEARCH || name == crate::builtin::TOOL_OUTPUT {
            !any_matches(&self.deny, name)
        } else {
            self.in_profile(name)
                && self
                    .enabled
                    .as_ref()
                    .is_none_or(|enabled| any_matches(enabled, name))
                && !any_matches(&self.deny, name)
        };
        own && self.within.iter().all(|outer| outer.allows(name))
    }

    /// Whether the profile has `name`: its families, and under `messaging`,
    /// `coding` and `full` the tools of MCP servers (every name outside the
    /// built-in families).
    fn in_profile(&self, name: &str) -> bool {
        any_matches(&self.profile_globs, name)
            || (self.profile != ToolProfile::Minimal && !flynn_protocol::is_builtin_tool(name))
    }

    /// Whether some tool named `<family>.<...>` could be allowed, judging
    /// by the patterns alone: a source (an MCP server) whose tools no
    /// policy allows need not be started for this agent.
    pub fn may_allow_family(&self, family: &str) -> bool {
        let probe = format!("{family}.");
        let could_match = |glob: &Glob| {
            let pattern = glob.as_str();
            pattern.starts_with(&probe)
                || pattern == family
                || pattern.starts_with('*')
                || pattern.starts_with('?')
                || family.starts_with(pattern.trim_end_matches('*')) && pattern.ends_with('*')
        };
        let everything_denied = self
            .deny
            .iter()
            .any(|glob| glob.as_str() == "*" || glob.as_str() == format!("{family}.*"));
        let in_profile = self.in_profile(&format!("{family}.x"));
        let enabled = self
            .enabled
            .as_ref()
            .is_none_or(|enabled| enabled.iter().any(could_match));
        !everything_denied
            && in_profile
            && enabled
            && self
                .within
                .iter()
                .all(|outer| outer.may_allow_family(family))
    }

    /// Whether `tool` may be offered and run: [`allows`](Self::allows) its
    /// name, and under `read_only` autonomy it does not write, run or send.
    pub fn permits(&self, tool: &dyn Tool) -> bool {
        self.permits_effect(tool.name(), tool.effect())
    }

    /// [`permits`](Self::permits) for a tool known by name and effect.
    pub fn permits_effect(&self, name: &str, effect: ToolEffect) -> bool {
        self.allows(name) && !(self.autonomy == Autonomy::ReadOnly && effect.changes_state())
    }

    pub fn autonomy(&self) -> Autonomy {
        self.autonomy
    }

    /// What the agent does once untrusted content is in its session.
    pub fn taint(&self) -> TaintPolicy {
        self.taint
    }

    /// This policy with its autonomy lowered to `cap` when `cap` allows
    /// less (`read_only` < `supervised` < `full`): what a sub-agent gets, so
    /// it never does more than the agent that started it.
    pub fn capped(&self, cap: Autonomy) -> Self {
        let rank = |autonomy: Autonomy| match autonomy {
            Autonomy::ReadOnly => 0,
            Autonomy::Supervised => 1,
            Autonomy::Full => 2,
        };
        let mut policy = self.clone();
        if rank(cap) < rank(policy.autonomy) {
            policy.autonomy = cap;
        }
        policy
    }

    pub fn profile(&self) -> ToolProfile {
        self.profile
    }

    /// Fails on `enabled` patterns (global and agent) that match no tool in
    /// `registry`, so a typo is an error rather than a tool that silently
    /// never appears.
    pub fn check(&self, registry: &ToolRegistry) -> Result<(), UnknownTools> {
        let names = registry.names();
        let unknown: Vec<String> = self
            .declared
            .iter()
            .filter(|glob| {
                !names.iter().any(|name| glob.matches(name))
                    && !registry.source_covers(glob.as_str())
            })
            .map(|glob| glob.as_str().to_owned())
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(UnknownTools {
                unknown,
                available: names,
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

/// The tools a profile starts with, as globs. (`tools.search` is allowed
/// whatever the profile; see [`ToolPolicy::allows`].)
fn profile_patterns(profile: ToolProfile) -> &'static [&'static str] {
    match profile {
        ToolProfile::Minimal => &["memory.*"],
        ToolProfile::Messaging => &[
            "memory.*",
            "skills.*",
            "web.*",
            "sessions.*",
            "agents.*",
            "cron.*",
            "voice.*",
        ],
        // `media.*` sends workspace files: where the files are, not for
        // the messaging profile guests get.
        // The Google tools (offered only when `google` is configured) act
        // for the owner: never in the messaging profile guests get.
        ToolProfile::Coding => &[
            "google.*",
            "file.*",
            "media.*",
            "voice.*",
            "shell.*",
            "process.*",
            "web.*",
            "memory.*",
            "skills.*",
            "sessions.*",
            "agents.*",
            "cron.*",
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

    const NAMES: [&str; 10] = [
        "file.read",
        "file.write",
        "shell.exec",
        "process.list",
        "web.fetch",
        "memory.search",
        "sessions.list",
        "cron.add",
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
            ["web.fetch", "memory.search", "sessions.list", "cron.add"]
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
                "sessions.list",
                "cron.add"
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
            autonomy: Some(Autonomy::Full),
            taint: None,
        };
        let policy = ToolPolicy::new(&global, Some(&agent));
        assert_eq!(policy.profile(), ToolProfile::Coding);
        assert_eq!(policy.autonomy(), Autonomy::Full);
        assert_eq!(allowed(&policy), ["file.read", "file.write"]);

        // An agent block that sets only `deny` keeps the global profile and
        // `enabled`, and adds its own denials.
        let agent = ToolPolicyConfig {
            deny: strings(&["memory.search"]),
            ..ToolPolicyConfig::default()
        };
        let policy = ToolPolicy::new(&tools(ToolProfile::Messaging), Some(&agent));
        assert_eq!(policy.profile(), ToolProfile::Messaging);
        assert_eq!(allowed(&policy), ["web.fetch", "sessions.list", "cron.add"]);
    }

    #[test]
    fn a_provider_override_applies_after_the_agent() {
        let global = ToolsConfig {
            deny: strings(&["browser.*"]),
            ..ToolsConfig::default()
        };
        let agent = ToolPolicyConfig {
            profile: Some(ToolProfile::Coding),
            ..ToolPolicyConfig::default()
        };
        let provider = ToolPolicyConfig {
            enabled: Some(strings(&["file.read", "memory.*"])),
            deny: strings(&["memory.search"]),
            ..ToolPolicyConfig::default()
        };
        let policy = ToolPolicy::layered(&global, [&agent, &provider].into_iter());
        assert_eq!(policy.profile(), ToolProfile::Coding);
        assert_eq!(policy.autonomy(), Autonomy::Supervised);
        assert_eq!(allowed(&policy), ["file.read"]);
    }

    #[test]
    fn read_only_autonomy_hides_tools_that_write_run_or_send() {
        let policy = ToolPolicy::new(
            &ToolsConfig {
                autonomy: Autonomy::ReadOnly,
                ..ToolsConfig::default()
            },
            None,
        );
        let permitted: Vec<(&str, bool)> = [
            ("file.read", ToolEffect::ReadOnly),
            ("web.fetch", ToolEffect::Network),
            ("file.write", ToolEffect::WritesFiles),
            ("shell.exec", ToolEffect::RunsProcesses),
            ("sessions.send", ToolEffect::SendsMessages),
            ("cron.add", ToolEffect::SendsMessages),
        ]
        .into_iter()
        .map(|(name, effect)| (name, policy.permits_effect(name, effect)))
        .collect();
        assert_eq!(
            permitted,
            [
                ("file.read", true),
                ("web.fetch", true),
                ("file.write", false),
                ("shell.exec", false),
                ("sessions.send", false),
                ("cron.add", false)
            ]
        );
        // Supervised and full offer them all.
        assert!(ToolPolicy::allow_all().permits_effect("shell.exec", ToolEffect::RunsProcesses));
    }

    #[test]
    fn mcp_tools_come_with_every_profile_but_minimal() {
        let github = "github.create_issue";
        for (profile, expected) in [
            (ToolProfile::Minimal, false),
            (ToolProfile::Messaging, true),
            (ToolProfile::Coding, true),
            (ToolProfile::Full, true),
        ] {
            let policy = ToolPolicy::new(&tools(profile), None);
            assert_eq!(policy.allows(github), expected, "{profile:?}");
            assert_eq!(policy.may_allow_family("github"), expected, "{profile:?}");
        }
        // A name in a built-in family is never an MCP tool: `mcp.*` and
        // `browser.*` stay outside the messaging profile.
        let messaging = ToolPolicy::new(&tools(ToolProfile::Messaging), None);
        assert!(!messaging.allows("mcp.github.issue"));
        assert!(!messaging.allows("browser.open"));
    }

    #[test]
    fn a_server_is_wanted_only_when_some_pattern_could_reach_it() {
        let with = |enabled: Option<&[&str]>, deny: &[&str]| {
            ToolPolicy::new(
                &ToolsConfig {
                    enabled: enabled.map(strings),
                    deny: strings(deny),
                    ..ToolsConfig::default()
                },
                None,
            )
        };
        assert!(with(None, &[]).may_allow_family("github"));
        assert!(with(Some(&["github.create_*"]), &[]).may_allow_family("github"));
        assert!(with(Some(&["git*"]), &[]).may_allow_family("github"));
        assert!(with(Some(&["*"]), &[]).may_allow_family("github"));
        assert!(!with(Some(&["file.*", "shell.exec"]), &[]).may_allow_family("github"));
        assert!(!with(None, &["github.*"]).may_allow_family("github"));
        assert!(!with(None, &["*"]).may_allow_family("github"));
        // Denying one tool of a server still wants the server.
        assert!(with(None, &["github.delete_repo"]).may_allow_family("github"));
    }

    #[test]
    fn a_policy_within_another_gets_only_what_both_allow() {
        let agent = ToolPolicy::new(&tools(ToolProfile::Full), None);
        let guest = ToolPolicy::restriction(None, ToolProfile::Messaging);
        let narrowed = agent.within(&guest);
        assert!(narrowed.allows("web.fetch"));
        assert!(narrowed.allows("memory.read"));
        assert!(!narrowed.allows("shell.exec"), "messaging runs nothing");
        assert!(!narrowed.allows("file.read"));
        assert!(!narrowed.may_allow_family("file"));
        // The restriction never widens: a minimal agent stays minimal.
        let minimal = ToolPolicy::new(&tools(ToolProfile::Minimal), None);
        assert!(!minimal.within(&guest).allows("web.fetch"));
        // Autonomy and taint take the stricter side.
        let ask = ToolPolicy::restriction(
            Some(&ToolPolicyConfig {
                autonomy: Some(Autonomy::ReadOnly),
                taint: Some(TaintPolicy::Ask),
                deny: vec!["web.*".to_owned()],
                ..ToolPolicyConfig::default()
            }),
            ToolProfile::Full,
        );
        let full = ToolPolicy::allow_all().within(&ask);
        assert_eq!(full.autonomy(), Autonomy::ReadOnly);
        assert_eq!(full.taint(), TaintPolicy::Ask);
        assert!(!full.allows("web.search"));
        assert!(full.allows("shell.exec"));
    }

    #[test]
    fn a_cap_only_ever_lowers_autonomy() {
        let full = ToolPolicy::allow_all();
        assert_eq!(
            full.capped(Autonomy::Supervised).autonomy(),
            Autonomy::Supervised
        );
        assert_eq!(
            full.capped(Autonomy::ReadOnly).autonomy(),
            Autonomy::ReadOnly
        );
        let read_only = full.capped(Autonomy::ReadOnly);
        assert_eq!(
            read_only.capped(Autonomy::Full).autonomy(),
            Autonomy::ReadOnly
        );
        assert!(!read_only.permits_effect("shell.exec", ToolEffect::RunsProcesses));
    }

    #[test]
    fn tool_output_needs_no_enabled_entry_but_can_be_denied() {
        let narrow = ToolPolicy::new(
            &ToolsConfig {
                enabled: Some(vec!["file.read".to_owned()]),
                ..ToolsConfig::default()
            },
            None,
        );
        assert!(narrow.allows("tool.output"));
        assert!(!narrow.allows("agents.spawn"));
        let denied = ToolPolicy::new(
            &ToolsConfig {
                deny: vec!["tool.*".to_owned()],
                ..ToolsConfig::default()
            },
            None,
        );
        assert!(!denied.allows("tool.output"));
    }
}
