//! Tool registry, gate, executor and built-in tools, with real processes
//! and files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "browser")]
mod browser;
mod files;
mod gate;
mod hidden;
mod images;
mod logs;
mod policy;
mod process;
mod safety;
mod sandbox;
mod taint;
mod web;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flynn_protocol::config::{SandboxConfig, SandboxMode, ToolsConfig};
use flynn_protocol::{ToolCall, ToolResult};
use flynn_tools::builtin::{self, FileRead, ShellExec};
use flynn_tools::sandbox::Sandbox;
use flynn_tools::{ToolContext, ToolExecutor, ToolRegistry, truncate_output};
use serde_json::{Value, json};

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: "call-1".into(),
        name: name.into(),
        arguments,
    }
}

fn executor_with(registry: ToolRegistry, limit: usize) -> ToolExecutor {
    ToolExecutor::new(Arc::new(registry), limit)
}

fn default_executor() -> ToolExecutor {
    executor_with(builtin::registry(&ToolsConfig::default()), 50 * 1024)
}

/// Tools config with no sandbox: commands see the host's process ids, so
/// tests can check that the pids they print are gone.
pub fn unsandboxed() -> ToolsConfig {
    ToolsConfig {
        sandbox: SandboxConfig {
            mode: SandboxMode::None,
            ..SandboxConfig::default()
        },
        ..ToolsConfig::default()
    }
}

/// Whether the bubblewrap tests run. They need a working `bwrap` (CI
/// installs it with `scripts/install-test-deps.sh`) and fail without one;
/// `FLYNN_TEST_SKIP_BWRAP=1` skips them on hosts without user namespaces.
pub async fn bwrap_runs() -> bool {
    if std::env::var_os("FLYNN_TEST_SKIP_BWRAP").is_some_and(|v| v == "1") {
        eprintln!("skipping the bubblewrap part: FLYNN_TEST_SKIP_BWRAP=1");
        return false;
    }
    let sandbox = Sandbox::new(SandboxConfig::default(), std::env::temp_dir());
    match sandbox
        .availability(flynn_tools::sandbox::Backend::Bubblewrap)
        .await
    {
        flynn_tools::sandbox::Availability::Available { .. } => true,
        flynn_tools::sandbox::Availability::Unavailable { reason } => panic!(
            "bubblewrap does not work here: {reason}. Run scripts/install-test-deps.sh, or set \
             FLYNN_TEST_SKIP_BWRAP=1 on a host without user namespaces"
        ),
    }
}

/// Every built-in tool, sorted.
pub const BUILTIN: &[&str] = &[
    "agents.spawn",
    "file.edit",
    "file.list",
    "file.read",
    "file.search",
    "file.write",
    "media.send",
    "process.kill",
    "process.list",
    "process.output",
    "process.start",
    "process.status",
    "sessions.history",
    "sessions.list",
    "sessions.send",
    "shell.exec",
    "tool.output",
    "tools.search",
    "web.fetch",
    "web.search",
];

fn ok(content: &str) -> ToolResult {
    ToolResult {
        tool_use_id: "call-1".into(),
        content: content.into(),
        is_error: false,
        images: Vec::new(),
    }
}

fn err(content: &str) -> ToolResult {
    ToolResult {
        tool_use_id: "call-1".into(),
        content: content.into(),
        is_error: true,
        images: Vec::new(),
    }
}

#[test]
fn specs_carry_compact_argument_schemas() {
    let registry = builtin::registry(&ToolsConfig::default());
    let specs = registry.specs();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, BUILTIN);
    assert_eq!(
        *specs
            .iter()
            .find(|s| s.name == "shell.exec")
            .unwrap()
            .input_schema,
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line, run with `sh -c`."},
                "cwd": {"type": "string", "description": "Working directory, relative to the workspace."}
            },
            "required": ["command"]
        })
    );
}

#[test]
fn registry_serialises_for_both_providers_with_wire_names() {
    let mut registry = ToolRegistry::new();
    registry.register(FileRead::new(Duration::from_secs(1)));
    let schema = registry.specs()[0].input_schema.clone();
    assert_eq!(
        registry.to_anthropic(),
        json!([{
            "name": "file_read",
            "description": "Read a text file, with line numbers.",
            "input_schema": schema,
        }])
    );
    assert_eq!(
        registry.to_openai(),
        json!([{
            "type": "function",
            "function": {
                "name": "file_read",
                "description": "Read a text file, with line numbers.",
                "parameters": schema,
            }
        }])
    );
}

#[tokio::test]
async fn unknown_tools_and_bad_arguments_become_error_results() {
    let executor = default_executor();
    let ctx = ToolContext::new(std::env::temp_dir());
    assert_eq!(
        executor.execute(&call("shell.run", json!({})), &ctx).await,
        err(&format!(
            "unknown tool 'shell.run' (tools you can call, by these names: {})",
            BUILTIN
                .iter()
                .map(|name| name.replace('.', "_"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    );
    assert_eq!(
        executor
            .execute(&call("shell.exec", json!({"cmd": "ls"})), &ctx)
            .await,
        err("invalid arguments for shell.exec: unknown field `cmd`, expected `command` or `cwd`")
    );
    // An agent is told only of the tools it may use.
    let mut narrow = ToolContext::new(std::env::temp_dir());
    narrow.policy = std::sync::Arc::new(flynn_tools::ToolPolicy::new(
        &ToolsConfig {
            enabled: Some(vec!["file.*".into()]),
            ..ToolsConfig::default()
        },
        None,
    ));
    assert_eq!(
        executor
            .execute(&call("shell_run", json!({})), &narrow)
            .await,
        err(
            "unknown tool 'shell_run' (tools you can call, by these names: file_edit, file_list, file_read, file_search, file_write, tool_output, tools_search)"
        )
    );
    // A tool called by its wire name is that tool, under the same gate.
    assert_eq!(
        executor
            .execute(&call("shell_exec", json!({})), &narrow)
            .await,
        err("shell.exec was denied: not allowed for agent 'main' by the tools policy")
    );
    let listed = executor
        .execute(&call("file_list", json!({"path": "."})), &narrow)
        .await;
    assert!(!listed.is_error, "{}", listed.content);
}

#[tokio::test]
async fn shell_reports_stdout_stderr_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let executor = default_executor();
    let ctx = ToolContext::new(dir.path());
    let result = executor
        .execute(
            &call(
                "shell.exec",
                json!({"command": "pwd; echo oops >&2; exit 3", "cwd": "sub"}),
            ),
            &ctx,
        )
        .await;
    let sub = dir.path().join("sub").canonicalize().unwrap();
    assert_eq!(
        result,
        ok(&format!("{}\n[stderr]\noops\n[exit code 3]", sub.display()))
    );
}

#[tokio::test]
async fn shell_timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let mut registry = ToolRegistry::new();
    let sandbox = Sandbox::from_tools_config(&unsandboxed());
    registry.register(ShellExec::new(Duration::from_secs(1), Arc::new(sandbox)));
    let executor = executor_with(registry, 1024);
    let ctx = ToolContext::new(dir.path());
    let result = executor
        .execute(
            &call(
                "shell.exec",
                json!({"command": "sleep 30 & echo $! > child.pid; wait"}),
            ),
            &ctx,
        )
        .await;
    assert_eq!(result, err("shell.exec timed out after 1s"));
    let pid = std::fs::read_to_string(dir.path().join("child.pid")).unwrap();
    assert_gone(pid.trim());
}

#[tokio::test]
async fn cancellation_stops_a_running_tool() {
    let dir = tempfile::tempdir().unwrap();
    let executor = executor_with(builtin::registry(&unsandboxed()), 50 * 1024);
    let ctx = ToolContext::new(dir.path());
    // The shell records its own pid and its background child's, then waits;
    // the rename makes the marker appear complete.
    let command = "sleep 30 & echo \"$$ $!\" > pids.tmp && mv pids.tmp pids; wait";
    let sleeper = call("shell.exec", json!({ "command": command }));
    let (result, (pids, cancelled_at)) = tokio::join!(executor.execute(&sleeper, &ctx), async {
        let pids = wait_for_file(&dir.path().join("pids")).await;
        ctx.cancel.cancel();
        (pids, Instant::now())
    });
    let returned_after = cancelled_at.elapsed();
    assert_eq!(result, err("shell.exec was cancelled"));
    assert!(
        returned_after < Duration::from_secs(2),
        "the call returned {returned_after:?} after the cancel"
    );
    let pids: Vec<&str> = pids.split_whitespace().collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    for pid in pids {
        assert_gone(pid);
    }
}

/// Waits (bounded) for `path` to exist, and returns its contents.
pub async fn wait_for_file(path: &Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Asserts that process `pid` is no longer running: gone, or a zombie
/// waiting to be reaped. SIGKILL lands asynchronously, so this waits for it
/// (bounded).
pub fn assert_gone(pid: &str) {
    let running = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the parenthesised command name.
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with(['Z', 'X']) && !rest.is_empty())
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!running(), "process {pid} is still running");
}

#[tokio::test]
async fn long_output_is_truncated_with_a_marker() {
    let executor = executor_with(builtin::registry(&ToolsConfig::default()), 1024);
    let ctx = ToolContext::new(std::env::temp_dir());
    let result = executor
        .execute(
            &call(
                "shell.exec",
                json!({"command": "head -c 5000 /dev/zero | tr '\\0' x"}),
            ),
            &ctx,
        )
        .await;
    assert_eq!(
        result,
        ok(&format!(
            "{}\n[output truncated: showed 1024 of 5000 bytes]",
            "x".repeat(1024)
        ))
    );
}

#[test]
fn truncation_respects_character_boundaries() {
    assert_eq!(
        truncate_output("aé", 2),
        "a\n[output truncated: showed 1 of 3 bytes]"
    );
    assert_eq!(truncate_output("short", 10), "short");
}

#[tokio::test]
async fn file_read_returns_whole_files_and_line_ranges() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\nfour\n").unwrap();
    let executor = default_executor();
    let ctx = ToolContext::new(dir.path());
    assert_eq!(
        executor
            .execute(&call("file.read", json!({"path": "a.txt"})), &ctx)
            .await,
        ok("     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n")
    );
    assert_eq!(
        executor
            .execute(
                &call(
                    "file.read",
                    json!({"path": "a.txt", "offset": 2, "limit": 2})
                ),
                &ctx
            )
            .await,
        ok("     2\ttwo\n     3\tthree\n[lines 2-3 of 4; use offset=4 to read on]")
    );
}

#[tokio::test]
async fn file_read_failures_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.bin"), [0u8, 1, 2]).unwrap();
    let executor = default_executor();
    let ctx = ToolContext::new(dir.path());
    assert_eq!(
        executor
            .execute(&call("file.read", json!({"path": "nope.txt"})), &ctx)
            .await,
        err("cannot open nope.txt: No such file or directory (os error 2)")
    );
    assert_eq!(
        executor
            .execute(&call("file.read", json!({"path": "b.bin"})), &ctx)
            .await,
        err("b.bin is a binary file, not text")
    );
}
