//! The tools policy against a real registry: `check` and `specs_for`,
//! and what the built-in tools declare.

use flynn_protocol::ToolEffect;
use flynn_protocol::config::{ToolPolicyConfig, ToolProfile};
use flynn_tools::{ToolPolicy, UnknownTools};

use super::*;

fn names(specs: &[flynn_protocol::ToolSpec]) -> Vec<&str> {
    specs.iter().map(|s| s.name.as_str()).collect()
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|&n| n.to_owned()).collect()
}

#[test]
fn the_builtin_registry_holds_every_tool_whatever_is_enabled() {
    let config = ToolsConfig {
        enabled: Some(strings(&["shell.exec"])),
        ..ToolsConfig::default()
    };
    let registry = builtin::registry(&config);
    assert_eq!(registry.names().collect::<Vec<_>>(), BUILTIN);
    assert_eq!(
        names(&registry.specs_for(&ToolPolicy::new(&config, None))),
        ["shell.exec", "tool.output", "tools.search"]
    );
}

#[test]
fn specs_for_lists_only_allowed_tools_sorted() {
    let registry = builtin::registry(&ToolsConfig::default());
    let specs_for = |tools: &ToolsConfig| registry.specs_for(&ToolPolicy::new(tools, None));
    assert_eq!(
        registry.specs_for(&ToolPolicy::allow_all()),
        registry.specs()
    );
    assert_eq!(
        names(&registry.specs_for(&ToolPolicy::allow_all())),
        BUILTIN
    );
    let deny_shell = ToolsConfig {
        deny: strings(&["shell.*", "process.*"]),
        ..ToolsConfig::default()
    };
    assert_eq!(
        names(&specs_for(&deny_shell)),
        [
            "agents.spawn",
            "file.edit",
            "file.list",
            "file.read",
            "file.search",
            "file.write",
            "sessions.history",
            "sessions.list",
            "sessions.send",
            "tool.output",
            "tools.search",
            "web.fetch",
            "web.search"
        ]
    );
    let minimal = ToolsConfig {
        profile: ToolProfile::Minimal,
        ..ToolsConfig::default()
    };
    assert_eq!(names(&specs_for(&minimal)), ["tool.output", "tools.search"]);
}

#[test]
fn check_reports_enabled_patterns_that_match_no_tool() {
    let registry = builtin::registry(&ToolsConfig::default());
    let global = ToolsConfig {
        enabled: Some(strings(&["file.*", "shell.exce", "browser.*"])),
        ..ToolsConfig::default()
    };
    let agent = ToolPolicyConfig {
        enabled: Some(strings(&["memory.search", "file.read", "browser.*"])),
        ..ToolPolicyConfig::default()
    };
    let error = ToolPolicy::new(&global, Some(&agent))
        .check(&registry)
        .unwrap_err();
    assert_eq!(
        error,
        UnknownTools {
            unknown: strings(&["shell.exce", "browser.*", "memory.search"]),
            available: strings(BUILTIN),
        }
    );
    assert_eq!(
        error.to_string(),
        format!(
            "tools.enabled: unknown tool(s) shell.exce, browser.*, memory.search (available: {})",
            BUILTIN.join(", ")
        )
    );

    let fine = ToolsConfig {
        enabled: Some(strings(&["file.*", "shell.exec", "*"])),
        // Denying a tool that does not exist is not an error.
        deny: strings(&["browser.*"]),
        ..ToolsConfig::default()
    };
    assert_eq!(ToolPolicy::new(&fine, None).check(&registry), Ok(()));
    assert_eq!(ToolPolicy::allow_all().check(&registry), Ok(()));
    assert_eq!(
        ToolPolicy::new(&fine, None)
            .check(&ToolRegistry::new())
            .unwrap_err()
            .to_string(),
        "tools.enabled: unknown tool(s) file.*, shell.exec, * (available: none)"
    );
}

/// Marks itself safe to run in parallel although it reaches the network.
struct Probe;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

#[async_trait::async_trait]
impl flynn_tools::TypedTool for Probe {
    type Args = NoArgs;

    fn name(&self) -> &str {
        "web.probe"
    }

    fn description(&self) -> &str {
        "Probe."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::Network
    }

    fn parallel_safe(&self) -> bool {
        true
    }

    async fn run(&self, _: NoArgs, _: &ToolContext) -> Result<String, flynn_tools::ToolError> {
        Ok(String::new())
    }
}

#[test]
fn tools_declare_their_effect_and_only_read_only_ones_run_in_parallel() {
    let mut registry = builtin::registry(&ToolsConfig::default());
    registry.register(Probe);
    let declared: Vec<(&str, ToolEffect, bool)> = registry
        .names()
        .map(|name| {
            let tool = registry.get(name).unwrap();
            (name, tool.effect(), tool.parallel_safe())
        })
        .collect();
    assert_eq!(
        declared,
        [
            ("agents.spawn", ToolEffect::ReadOnly, true),
            ("file.edit", ToolEffect::WritesFiles, false),
            ("file.list", ToolEffect::ReadOnly, true),
            ("file.read", ToolEffect::ReadOnly, true),
            ("file.search", ToolEffect::ReadOnly, true),
            ("file.write", ToolEffect::WritesFiles, false),
            ("process.kill", ToolEffect::RunsProcesses, false),
            ("process.list", ToolEffect::ReadOnly, true),
            ("process.output", ToolEffect::ReadOnly, true),
            ("process.start", ToolEffect::RunsProcesses, false),
            ("process.status", ToolEffect::ReadOnly, true),
            ("sessions.history", ToolEffect::ReadOnly, true),
            ("sessions.list", ToolEffect::ReadOnly, true),
            ("sessions.send", ToolEffect::SendsMessages, false),
            ("shell.exec", ToolEffect::RunsProcesses, false),
            ("tool.output", ToolEffect::ReadOnly, true),
            ("tools.search", ToolEffect::ReadOnly, true),
            ("web.fetch", ToolEffect::Network, true),
            ("web.probe", ToolEffect::Network, true),
            ("web.search", ToolEffect::Network, true),
        ]
    );
}
