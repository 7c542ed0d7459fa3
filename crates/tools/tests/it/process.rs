//! `process.*` with real background processes: lifecycle, the output ring
//! buffer, limits, killing whole process trees, shutdown, sessions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flynn_protocol::SessionKey;
use flynn_protocol::config::{ProcessToolConfig, SandboxConfig, SandboxMode, ToolsConfig};
use flynn_protocol::{ToolCall, ToolResult};
use flynn_tools::builtin;
use flynn_tools::{ToolContext, ToolExecutor};
use regex::Regex;
use serde_json::{Value, json};

use super::{assert_gone, bwrap_runs};

fn config(mode: SandboxMode, process: ProcessToolConfig) -> ToolsConfig {
    ToolsConfig {
        sandbox: SandboxConfig {
            mode,
            ..SandboxConfig::default()
        },
        process,
        ..ToolsConfig::default()
    }
}

fn executor(config: &ToolsConfig) -> ToolExecutor {
    ToolExecutor::new(Arc::new(builtin::registry(config)), 1024 * 1024)
}

async fn run(executor: &ToolExecutor, ctx: &ToolContext, name: &str, args: Value) -> ToolResult {
    let call = ToolCall {
        id: "call-1".into(),
        name: name.into(),
        arguments: args,
    };
    executor.execute(&call, ctx).await
}

/// Runs a call that must succeed and returns its output.
async fn ok(executor: &ToolExecutor, ctx: &ToolContext, name: &str, args: Value) -> String {
    let result = run(executor, ctx, name, args).await;
    assert!(!result.is_error, "{name} failed: {}", result.content);
    result.content
}

/// Runs a call that must fail and returns its message.
async fn fails(executor: &ToolExecutor, ctx: &ToolContext, name: &str, args: Value) -> String {
    let result = run(executor, ctx, name, args).await;
    assert!(result.is_error, "{name} succeeded: {}", result.content);
    result.content
}

/// Starts a process; returns its id and pid.
async fn start(executor: &ToolExecutor, ctx: &ToolContext, command: &str) -> (String, String) {
    let text = ok(
        executor,
        ctx,
        "process.start",
        json!({ "command": command }),
    )
    .await;
    let pattern = Regex::new(r"^started (p\d+) \(pid (\d+)\)$").unwrap();
    let captures = pattern.captures(&text).unwrap_or_else(|| panic!("{text}"));
    (captures[1].to_owned(), captures[2].to_owned())
}

/// Replaces what changes from run to run: pids and durations.
fn redact(text: &str) -> String {
    let pid = Regex::new(r"pid \d+").unwrap();
    let secs = Regex::new(r"\b\d+s\b").unwrap();
    secs.replace_all(&pid.replace_all(text, "pid N"), "Ns")
        .into_owned()
}

fn session(name: &str) -> ToolContext {
    let mut ctx = ToolContext::new(std::env::temp_dir());
    ctx.session = SessionKey::new("test", name).unwrap();
    ctx
}

fn in_dir(dir: &Path, name: &str) -> ToolContext {
    let mut ctx = session(name);
    ctx.workspace = dir.to_path_buf();
    ctx
}

/// Polls `process.output` (bounded) until it contains `needle`.
async fn wait_for_output(executor: &ToolExecutor, ctx: &ToolContext, id: &str, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let output = ok(executor, ctx, "process.output", json!({ "id": id })).await;
        if output.contains(needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{id} never printed {needle:?}: {output}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn start_status_output_kill_and_list() {
    let dir = tempfile::tempdir().unwrap();
    let executor = executor(&config(SandboxMode::None, ProcessToolConfig::default()));
    let ctx = in_dir(dir.path(), "a");
    assert_eq!(
        ok(&executor, &ctx, "process.list", json!({})).await,
        "no background processes"
    );

    let (server, server_pid) = start(&executor, &ctx, "echo ready; sleep 300").await;
    assert_eq!(server, "p1");
    wait_for_output(&executor, &ctx, "p1", "ready").await;
    assert_eq!(
        ok(&executor, &ctx, "process.output", json!({"id": "p1"})).await,
        "ready\n"
    );
    assert_eq!(
        redact(&ok(&executor, &ctx, "process.status", json!({"id": "p1"})).await),
        "p1 (pid N) running for Ns: echo ready; sleep 300"
    );

    let (done, _) = start(&executor, &ctx, "pwd >&2; exit 3").await;
    assert_eq!(done, "p2");
    assert_eq!(
        redact(
            &ok(
                &executor,
                &ctx,
                "process.status",
                json!({"id": "p2", "wait_secs": 10})
            )
            .await
        ),
        "p2 (pid N) exited with code 3 after Ns: pwd >&2; exit 3"
    );
    assert_eq!(
        ok(&executor, &ctx, "process.output", json!({"id": "p2"})).await,
        format!("{}\n", dir.path().canonicalize().unwrap().display())
    );

    assert_eq!(
        redact(&ok(&executor, &ctx, "process.list", json!({})).await),
        "p1 (pid N) running for Ns: echo ready; sleep 300\n\
         p2 (pid N) exited with code 3 after Ns: pwd >&2; exit 3"
    );
    assert_eq!(
        redact(&ok(&executor, &ctx, "process.kill", json!({"id": "p1"})).await),
        "p1 (pid N) killed by process.kill after Ns: echo ready; sleep 300"
    );
    assert_gone(&server_pid);
    // Killing what already ended leaves it as it was.
    assert_eq!(
        redact(&ok(&executor, &ctx, "process.kill", json!({"id": "p2"})).await),
        "p2 (pid N) exited with code 3 after Ns: pwd >&2; exit 3"
    );
    assert_eq!(
        fails(&executor, &ctx, "process.status", json!({"id": "p9"})).await,
        "no background process 'p9' in this session (process.list shows them)"
    );
    assert_eq!(
        fails(
            &executor,
            &ctx,
            "process.start",
            json!({"command": "true", "cwd": "missing"})
        )
        .await,
        format!(
            "working directory {} does not exist",
            dir.path().join("missing").display()
        )
    );
}

#[tokio::test]
async fn the_output_buffer_keeps_only_the_last_bytes() {
    let executor = executor(&config(
        SandboxMode::None,
        ProcessToolConfig {
            buffer_bytes: 1000,
            ..ProcessToolConfig::default()
        },
    ));
    let ctx = session("a");
    let (id, _) = start(&executor, &ctx, "yes | head -c 10000000").await;
    assert_eq!(
        redact(
            &ok(
                &executor,
                &ctx,
                "process.status",
                json!({"id": id, "wait_secs": 60})
            )
            .await
        ),
        "p1 (pid N) exited with code 0 after Ns: yes | head -c 10000000"
    );
    assert_eq!(
        ok(&executor, &ctx, "process.output", json!({"id": id})).await,
        format!("[9999000 earlier bytes not shown]\n{}", "y\n".repeat(500))
    );
    assert_eq!(
        ok(
            &executor,
            &ctx,
            "process.output",
            json!({"id": id, "bytes": 10})
        )
        .await,
        "[9999990 earlier bytes not shown; a larger `bytes` shows up to 990 more]\ny\ny\ny\ny\ny\n"
    );
}

#[tokio::test]
async fn start_refuses_more_than_max_processes() {
    let executor = executor(&config(
        SandboxMode::None,
        ProcessToolConfig {
            max_processes: 2,
            ..ProcessToolConfig::default()
        },
    ));
    let ctx = session("a");
    start(&executor, &ctx, "sleep 300").await;
    // Another session's processes count too: the limit protects the host.
    start(&executor, &session("b"), "sleep 300").await;
    assert_eq!(
        fails(
            &executor,
            &ctx,
            "process.start",
            json!({"command": "sleep 300"})
        )
        .await,
        "cannot start another background process: 2 are running, the limit \
         (tools.process.max_processes); stop one with process.kill or wait for one to end"
    );
    ok(&executor, &ctx, "process.kill", json!({"id": "p1"})).await;
    assert_eq!(start(&executor, &ctx, "sleep 300").await.0, "p3");
    executor.registry().shutdown().await;
}

#[tokio::test]
async fn one_session_cannot_take_every_slot() {
    let executor = executor(&config(
        SandboxMode::None,
        ProcessToolConfig {
            max_processes: 4,
            max_per_session: 2,
            ..ProcessToolConfig::default()
        },
    ));
    let greedy = session("greedy");
    start(&executor, &greedy, "sleep 300").await;
    start(&executor, &greedy, "sleep 300").await;
    assert_eq!(
        fails(
            &executor,
            &greedy,
            "process.start",
            json!({"command": "sleep 300"})
        )
        .await,
        "cannot start another background process: this session runs 2, the limit per session \
         (tools.process.max_per_session); stop one with process.kill or wait for one to end"
    );
    // Another session still gets its slots.
    let other = session("other");
    assert_eq!(start(&executor, &other, "sleep 300").await.0, "p3");
    assert_eq!(start(&executor, &other, "sleep 300").await.0, "p4");
    // Once one of its own ends, the first session may start again.
    ok(&executor, &greedy, "process.kill", json!({"id": "p1"})).await;
    assert_eq!(start(&executor, &greedy, "sleep 300").await.0, "p5");
    executor.registry().shutdown().await;
}

#[tokio::test]
async fn a_process_is_killed_after_max_runtime() {
    let executor = executor(&config(
        SandboxMode::None,
        ProcessToolConfig {
            max_runtime_secs: 1,
            ..ProcessToolConfig::default()
        },
    ));
    let ctx = session("a");
    let (id, pid) = start(&executor, &ctx, "sleep 300").await;
    assert_eq!(
        redact(
            &ok(
                &executor,
                &ctx,
                "process.status",
                json!({"id": id, "wait_secs": 20})
            )
            .await
        ),
        "p1 (pid N) killed after Ns, the limit (tools.process.max_runtime_secs): sleep 300"
    );
    assert_gone(&pid);
}

#[tokio::test]
async fn killing_a_forking_process_kills_all_its_children() {
    let mut modes = vec![SandboxMode::None];
    if bwrap_runs().await {
        modes.push(SandboxMode::Bubblewrap);
    }
    for mode in modes {
        let dir = tempfile::tempdir().unwrap();
        let executor = executor(&config(mode, ProcessToolConfig::default()));
        let ctx = in_dir(dir.path(), "a");
        let (id, pid) = start(&executor, &ctx, "sh -c 'sleep 300 & sleep 300 & wait'").await;
        let tree = wait_for_sleepers(&pid, 2);
        ok(&executor, &ctx, "process.kill", json!({ "id": id })).await;
        for pid in &tree {
            assert_gone(pid);
        }
    }
}

#[tokio::test]
async fn shutdown_kills_every_process_and_refuses_new_ones() {
    let executor = executor(&config(SandboxMode::None, ProcessToolConfig::default()));
    let (a, b) = (session("a"), session("b"));
    let (_, first) = start(&executor, &a, "sleep 300").await;
    let (_, second) = start(&executor, &b, "sleep 300 & wait").await;
    let tree = wait_for_sleepers(&second, 1);
    executor.registry().shutdown().await;
    assert_gone(&first);
    for pid in &tree {
        assert_gone(pid);
    }
    assert_eq!(
        redact(&ok(&executor, &a, "process.list", json!({})).await),
        "p1 (pid N) killed at shutdown after Ns: sleep 300"
    );
    assert_eq!(
        fails(&executor, &a, "process.start", json!({"command": "true"})).await,
        "background processes are stopped: Flynn is shutting down"
    );
    // A second shutdown (every process tool has one) changes nothing.
    executor.registry().shutdown().await;
}

#[tokio::test]
async fn dropping_the_tools_kills_their_processes() {
    let executor = executor(&config(SandboxMode::None, ProcessToolConfig::default()));
    let ctx = session("a");
    let (_, pid) = start(&executor, &ctx, "sleep 300 & wait").await;
    let tree = wait_for_sleepers(&pid, 1);
    drop(executor);
    for pid in &tree {
        assert_gone(pid);
    }
}

#[tokio::test]
async fn another_session_can_neither_see_nor_kill_a_process() {
    let executor = executor(&config(SandboxMode::None, ProcessToolConfig::default()));
    let (owner, other) = (session("owner"), session("other"));
    let (id, _) = start(&executor, &owner, "sleep 300").await;
    assert_eq!(
        ok(&executor, &other, "process.list", json!({})).await,
        "no background processes"
    );
    let missing = format!("no background process '{id}' in this session (process.list shows them)");
    for tool in ["process.status", "process.output", "process.kill"] {
        assert_eq!(
            fails(&executor, &other, tool, json!({ "id": id })).await,
            missing
        );
    }
    assert_eq!(
        redact(&ok(&executor, &owner, "process.status", json!({ "id": id })).await),
        "p1 (pid N) running for Ns: sleep 300"
    );
    executor.registry().shutdown().await;
}

/// The processes under `root` (itself included), once at least `sleepers`
/// of them are `sleep` (bounded wait).
fn wait_for_sleepers(root: &str, sleepers: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tree = descendants(root);
        let sleeping = tree
            .iter()
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim() == "sleep")
            })
            .count();
        if sleeping >= sleepers {
            return tree.into_iter().collect();
        }
        assert!(
            Instant::now() < deadline,
            "{root} never had {sleepers} sleeping children: {tree:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `root` and every process below it, from /proc.
fn descendants(root: &str) -> BTreeSet<String> {
    let mut children: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the parenthesised name: state, then the parent's pid.
        let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
            continue;
        };
        if let Some(ppid) = rest.split_whitespace().nth(1) {
            children.entry(ppid.to_owned()).or_default().push(pid);
        }
    }
    let mut found = BTreeSet::from([root.to_owned()]);
    let mut todo = vec![root.to_owned()];
    while let Some(pid) = todo.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            if found.insert(child.clone()) {
                todo.push(child.clone());
            }
        }
    }
    found
}
