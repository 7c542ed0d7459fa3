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
    assert_eq!(registry.names(), BUILTIN);
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
            "media.send",
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
    let names = registry.names();
    let declared: Vec<(&str, ToolEffect, bool)> = names
        .iter()
        .map(|name| {
            let tool = registry.get(name).unwrap();
            (name.as_str(), tool.effect(), tool.parallel_safe())
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
            ("media.send", ToolEffect::ReadOnly, false),
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

/// A source whose tools a test sets, counting `prepare` calls.
struct Server {
    name: &'static str,
    tools: std::sync::Mutex<Vec<std::sync::Arc<dyn flynn_tools::Tool>>>,
    prepared: std::sync::atomic::AtomicUsize,
}

struct Named(&'static str, ToolEffect);

#[async_trait::async_trait]
impl flynn_tools::Tool for Named {
    fn name(&self) -> &str {
        self.0
    }
    fn description(&self) -> &str {
        "A tool of a server."
    }
    fn input_schema(&self) -> Arc<serde_json::Value> {
        Arc::new(serde_json::json!({"type": "object"}))
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn effect(&self) -> ToolEffect {
        self.1
    }
    async fn call(
        &self,
        _args: serde_json::Value,
        _ctx: &flynn_tools::ToolContext,
    ) -> Result<String, flynn_tools::ToolError> {
        Ok(self.0.to_owned())
    }
}

#[async_trait::async_trait]
impl flynn_tools::ToolSource for Server {
    fn name(&self) -> &str {
        self.name
    }
    fn tools(&self) -> Vec<std::sync::Arc<dyn flynn_tools::Tool>> {
        self.tools.lock().unwrap().clone()
    }
    async fn prepare(&self) {
        self.prepared
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_sources_tools_join_the_registry_as_they_change() {
    let server = std::sync::Arc::new(Server {
        name: "github",
        tools: Default::default(),
        prepared: Default::default(),
    });
    let mut registry = builtin::registry(&ToolsConfig::default());
    registry.add_source(server.clone());
    let built_in = registry.names().len();

    // Before the server listed anything, `enabled: [github.*]` is no typo.
    let config = ToolsConfig {
        enabled: Some(vec!["github.*".to_owned(), "file.read".to_owned()]),
        ..ToolsConfig::default()
    };
    ToolPolicy::new(&config, None).check(&registry).unwrap();
    assert!(registry.get("github.create_issue").is_none());

    *server.tools.lock().unwrap() = vec![
        std::sync::Arc::new(Named("github.create_issue", ToolEffect::External)),
        // A server cannot stand in for a built-in tool.
        std::sync::Arc::new(Named("file.read", ToolEffect::External)),
    ];
    assert_eq!(registry.names().len(), built_in + 1);
    let tool = registry.get("github.create_issue").unwrap();
    assert_eq!(tool.effect(), ToolEffect::External);
    assert_eq!(
        registry.get("file.read").unwrap().effect(),
        ToolEffect::ReadOnly
    );
    assert_eq!(
        names(&registry.specs_for(&ToolPolicy::new(&config, None))),
        [
            "file.read",
            "github.create_issue",
            "tool.output",
            "tools.search"
        ]
    );

    // A policy that cannot reach the server does not start it.
    let files_only = ToolsConfig {
        enabled: Some(vec!["file.*".to_owned()]),
        ..ToolsConfig::default()
    };
    registry.prepare(&ToolPolicy::new(&files_only, None)).await;
    assert_eq!(server.prepared.load(std::sync::atomic::Ordering::SeqCst), 0);
    registry.prepare(&ToolPolicy::new(&config, None)).await;
    assert_eq!(server.prepared.load(std::sync::atomic::Ordering::SeqCst), 1);

    server.tools.lock().unwrap().clear();
    assert!(registry.get("github.create_issue").is_none());
    assert_eq!(registry.names().len(), built_in);
}
