//! What every test shares: servers from a config written as a user writes
//! it, a registry and executor as the daemon builds them, and waits with a
//! deadline.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flynn_mcp::{McpServer, McpServers, Phase, ServerStatus};
use flynn_protocol::config::McpConfig;
use flynn_protocol::{ToolCall, ToolResult};
use flynn_testkit::mcp::{EventLog, LOG_ENV, fixture_binary};
use flynn_tools::{ToolContext, ToolExecutor, ToolRegistry};
use serde_json::{Value, json};
use tempfile::TempDir;

const FIXTURE_LOG: &str = "fixture.log";

/// The executor's output limit in these tests; far above any answer.
const OUTPUT_LIMIT: usize = 64 * 1024;

/// Configured servers, the registry that offers their tools and the
/// executor that runs them, in a workspace of their own.
pub struct Harness {
    pub servers: McpServers,
    pub registry: Arc<ToolRegistry>,
    pub executor: ToolExecutor,
    pub workspace: TempDir,
}

impl Harness {
    /// Servers from `mcp.servers` as YAML would give it (`{name: config}`,
    /// written knowing the workspace), none started yet.
    pub fn new(servers: impl FnOnce(&Path) -> Value) -> Harness {
        let workspace = tempfile::tempdir().expect("a temp dir");
        let config: McpConfig =
            serde_json::from_value(json!({ "servers": servers(workspace.path()) }))
                .expect("the test's mcp config is valid");
        let servers = McpServers::new(&config, workspace.path());
        let mut registry = ToolRegistry::new();
        for source in servers.sources() {
            registry.add_source(source);
        }
        let registry = Arc::new(registry);
        let executor = ToolExecutor::new(registry.clone(), OUTPUT_LIMIT);
        Harness {
            servers,
            registry,
            executor,
            workspace,
        }
    }

    pub fn server(&self, name: &str) -> &Arc<McpServer> {
        self.servers
            .get(name)
            .unwrap_or_else(|| panic!("no server named {name}"))
    }

    /// A context as a turn of agent `main` with every tool allowed has.
    pub fn context(&self) -> ToolContext {
        ToolContext::new(self.workspace.path())
    }

    /// Runs one call through the executor.
    pub async fn call(&self, tool: &str, arguments: Value) -> ToolResult {
        self.call_in(tool, arguments, &self.context()).await
    }

    pub async fn call_in(&self, tool: &str, arguments: Value, ctx: &ToolContext) -> ToolResult {
        let call = ToolCall {
            id: "call_1".to_owned(),
            name: tool.to_owned(),
            arguments,
        };
        self.executor.execute(&call, ctx).await
    }

    /// Every tool name the registry offers now.
    pub fn names(&self) -> Vec<String> {
        self.registry.names()
    }

    /// Waits until server `name` is in `phase`; its status then.
    pub async fn phase(&self, name: &str, phase: Phase, within: Duration) -> ServerStatus {
        let server = self.server(name);
        let mut last = server.status();
        let deadline = Instant::now() + within;
        while last.phase != phase {
            assert!(
                Instant::now() < deadline,
                "server {name} did not become {} within {within:?}; last status: {last:?}",
                phase.as_str()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
            last = server.status();
        }
        last
    }

    pub async fn stop(&self) {
        self.servers.stop().await;
    }
}

/// The fixture over stdio as a server config, logging to
/// [`fixture_log`]; `extra` keys are merged in.
pub fn fixture(workspace: &Path, extra: Value) -> Value {
    let mut config = json!({
        "command": fixture_binary(),
        "env": { LOG_ENV: workspace.join(FIXTURE_LOG) },
        "startup_timeout_secs": 20,
        "timeout_secs": 20,
        // The project's own server: its hints are believed unless a test
        // says otherwise.
        "trusted": true,
    });
    if let (Some(config), Value::Object(extra)) = (config.as_object_mut(), extra) {
        for (key, value) in extra {
            match (config.get_mut(&key), value) {
                // `env` adds to the log's variable.
                (Some(Value::Object(to)), Value::Object(from)) => to.extend(from),
                (_, value) => {
                    config.insert(key, value);
                }
            }
        }
    }
    config
}

/// The log of the stdio fixture of a harness (of every process of it).
pub fn fixture_log(harness: &Harness) -> EventLog {
    EventLog::file(harness.workspace.path().join(FIXTURE_LOG))
}

/// Waits until `done`, failing the test after `within`.
pub async fn wait_until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The calls the fixture saw: `(tool, request id, arguments)`.
pub fn calls(log: &EventLog) -> Vec<(String, String, Value)> {
    log.events()
        .iter()
        .filter_map(|event| {
            let rest = event.strip_prefix("call ")?;
            let mut parts = rest.splitn(3, ' ');
            let tool = parts.next()?.to_owned();
            let id = parts.next()?.to_owned();
            let args = serde_json::from_str(parts.next()?).ok()?;
            Some((tool, id, args))
        })
        .collect()
}

/// The calls without their ids, for a whole-value assertion.
pub fn calls_made(log: &EventLog) -> Vec<(String, Value)> {
    calls(log)
        .into_iter()
        .map(|(tool, _, args)| (tool, args))
        .collect()
}

/// The pids the fixture logged at each start.
pub fn pids(log: &EventLog) -> Vec<i32> {
    log.events()
        .iter()
        .filter_map(|event| event.strip_prefix("started pid ")?.parse().ok())
        .collect()
}

/// The result the executor gives for an answer of a tool whose output is
/// untrusted (no `openWorldHint: false`).
pub fn untrusted(tool: &str, content: &str) -> ToolResult {
    ToolResult {
        tool_use_id: "call_1".to_owned(),
        content: flynn_tools::wrap_untrusted(tool, content),
        is_error: false,
        images: Vec::new(),
    }
}

pub fn ok(content: &str) -> ToolResult {
    ToolResult {
        tool_use_id: "call_1".to_owned(),
        content: content.to_owned(),
        is_error: false,
        images: Vec::new(),
    }
}

pub fn error(content: &str) -> ToolResult {
    ToolResult {
        tool_use_id: "call_1".to_owned(),
        content: content.to_owned(),
        is_error: true,
        images: Vec::new(),
    }
}

/// Whether process `pid` still exists (a zombie counts: it was not
/// reaped).
pub fn alive(pid: i32) -> bool {
    let Some(pid) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    rustix::process::test_kill_process(pid).is_ok()
}
