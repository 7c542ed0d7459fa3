//! A server the project did not write: `@modelcontextprotocol/server-everything`
//! from npm, installed by `scripts/install-mcp-reference.sh` (which
//! `scripts/test.sh` runs), its command named by `FLYNN_MCP_REFERENCE`.
//! Without that variable these tests fail, naming the command that
//! installs the server (a bare `cargo test` would otherwise pass without
//! testing anything).

use std::process::Stdio;
use std::time::Duration;

use flynn_mcp::Phase;
use flynn_protocol::ToolEffect;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

use crate::support::{Harness, ok};

/// The reference server's command; fails the test when it is not set.
fn reference(test: &str) -> String {
    match std::env::var("FLYNN_MCP_REFERENCE") {
        Ok(command) if !command.is_empty() => command,
        _ => panic!(
            "{test} needs the reference MCP server and FLYNN_MCP_REFERENCE is not set: run \
             `export FLYNN_MCP_REFERENCE=$(scripts/install-mcp-reference.sh)` (scripts/test.sh, \
             the README's test command, does)"
        ),
    }
}

/// What both transports must show of the reference server: its tools,
/// their hints, and answers to calls.
async fn check_reference_tools(harness: &Harness, name: &str) {
    let status = harness.server(name).status();
    assert_eq!(status.phase, Phase::Running, "{status:?}");
    assert!(
        status
            .server
            .as_deref()
            .is_some_and(|server| server.starts_with("mcp-servers/everything ")),
        "{status:?}"
    );
    let names = harness.names();
    for tool in [
        "echo",
        "get-sum",
        "get-tiny-image",
        "trigger-long-running-operation",
    ] {
        assert!(
            names.contains(&format!("{name}.{tool}")),
            "{tool} missing from {names:?}"
        );
    }

    // `echo` says it is read-only and stays in a closed world (believed:
    // the server is marked trusted).
    let echo = harness.registry.get(&format!("{name}.echo")).unwrap();
    assert_eq!(echo.effect(), ToolEffect::ReadOnly);
    assert!(!echo.untrusted_output());
    assert_eq!(
        echo.input_schema()["properties"]["message"]["type"],
        json!("string")
    );
    assert_eq!(
        harness
            .call(
                &format!("{name}.echo"),
                json!({"message": "hello from flynn"})
            )
            .await,
        ok("Echo: hello from flynn")
    );
    assert_eq!(
        harness
            .call(&format!("{name}.get-sum"), json!({"a": 2, "b": 40}))
            .await,
        ok("The sum of 2 and 40 is 42.")
    );
    // An image comes back described, not as base64 for the model.
    let image = harness
        .call(&format!("{name}.get-tiny-image"), json!({}))
        .await;
    assert!(!image.is_error, "{image:?}");
    assert!(image.content.contains("[image image/png, "), "{image:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_over_stdio_lists_its_tools_and_answers_calls() {
    let command = reference("the_reference_server_over_stdio_lists_its_tools_and_answers_calls");
    let harness = Harness::new(|_| {
        json!({
            "everything": { "command": command, "args": ["stdio"], "startup_timeout_secs": 30, "trusted": true }
        })
    });
    harness.server("everything").ready().await;
    check_reference_tools(&harness, "everything").await;
    harness.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_server_over_streamable_http_lists_its_tools_and_answers_calls() {
    let command =
        reference("the_reference_server_over_streamable_http_lists_its_tools_and_answers_calls");
    // A free port: bound, read, released for the server to take.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .unwrap()
        .port();
    let mut server = tokio::process::Command::new(&command)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stderr = tokio::io::BufReader::new(server.stderr.take().unwrap()).lines();
    let listening = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            if line.contains("listening on port") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(listening, Ok(true), "the reference server did not start");

    let harness = Harness::new(|_| {
        json!({
            "everything": { "url": format!("http://127.0.0.1:{port}/mcp"), "startup_timeout_secs": 30, "trusted": true }
        })
    });
    harness.server("everything").ready().await;
    check_reference_tools(&harness, "everything").await;
    harness.stop().await;
    server.kill().await.unwrap();
}
