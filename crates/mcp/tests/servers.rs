//! The MCP client against real servers: the reference "everything" server
//! from npm (stdio; installed by `scripts/mcp-reference.sh`, which
//! `scripts/test.sh` runs, and named by `FLYNN_MCP_REFERENCE`), and a
//! server built here with rmcp behind a bearer token (streamable HTTP).
//! Calls go through Flynn's own executor, as the agent loop makes them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flynn_mcp::{McpServer, Phase};
use flynn_protocol::config::{McpServerConfig, McpStart};
use flynn_protocol::{ToolCall, ToolEffect};
use flynn_tools::{ToolContext, ToolExecutor, ToolPolicy, ToolRegistry};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

fn config() -> McpServerConfig {
    McpServerConfig {
        kind: None,
        command: None,
        args: Vec::new(),
        env: BTreeMap::new(),
        cwd: None,
        url: None,
        headers: BTreeMap::new(),
        bearer_token: None,
        enabled: true,
        start: McpStart::Boot,
        startup_timeout_secs: 20,
        timeout_secs: 20,
    }
}

/// The reference server's entry point, or `None` (with a note) when the
/// install script has not run.
fn reference() -> Option<String> {
    match std::env::var("FLYNN_MCP_REFERENCE") {
        Ok(path) if !path.is_empty() => Some(path),
        _ => {
            eprintln!(
                "SKIPPED: FLYNN_MCP_REFERENCE is not set; run scripts/mcp-reference.sh (scripts/test.sh does) to test against the reference MCP server"
            );
            None
        }
    }
}

/// The reference server over stdio, with a marker argument that finds its
/// process.
fn everything(entry: &str, marker: &str) -> McpServerConfig {
    McpServerConfig {
        command: Some("node".to_owned()),
        args: vec![entry.to_owned(), "stdio".to_owned(), marker.to_owned()],
        env: BTreeMap::from([("FLYNN_TEST_MARKER".to_owned(), "passed-on".to_owned())]),
        ..config()
    }
}

fn executor(server: &Arc<McpServer>) -> ToolExecutor {
    let mut registry = ToolRegistry::new();
    registry.add_source(server.clone());
    ToolExecutor::new(Arc::new(registry), 64 * 1024)
}

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: "call-1".to_owned(),
        name: name.to_owned(),
        arguments,
    }
}

fn context(dir: &std::path::Path) -> ToolContext {
    ToolContext {
        policy: Arc::new(ToolPolicy::allow_all()),
        ..ToolContext::new(dir)
    }
}

async fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_reference_server_over_stdio_offers_its_tools_to_the_executor() {
    let Some(entry) = reference() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = McpServer::new(
        "everything",
        everything(&entry, "flynn-marker-stdio"),
        dir.path(),
    );
    server.ready().await;
    let status = server.status();
    assert_eq!(status.phase, Phase::Running, "{status:?}");
    assert!(status.server.is_some(), "{status:?}");

    let executor = executor(&server);
    let names = executor.registry().names();
    for tool in [
        "everything.echo",
        "everything.get-sum",
        "everything.get-env",
    ] {
        assert!(names.contains(&tool.to_owned()), "{tool} in {names:?}");
    }
    let echo = executor.registry().get("everything.echo").unwrap();
    assert!(echo.input_schema()["properties"]["message"].is_object());
    let long = executor
        .registry()
        .get("everything.trigger-long-running-operation")
        .unwrap();
    // The server marks that one read-only and closed-world.
    assert_eq!(long.effect(), ToolEffect::ReadOnly);
    assert!(!long.untrusted_output());

    let ctx = context(dir.path());
    let result = executor
        .execute(
            &call("everything.echo", json!({"message": "hello mcp"})),
            &ctx,
        )
        .await;
    assert!(!result.is_error, "{}", result.content);
    assert!(result.content.contains("hello mcp"), "{}", result.content);
    let sum = executor
        .execute(&call("everything.get-sum", json!({"a": 40, "b": 2})), &ctx)
        .await;
    assert!(!sum.is_error, "{}", sum.content);
    assert!(sum.content.contains("42"), "{}", sum.content);

    // A clean environment: its own `env`, not the test's cargo variables.
    let env = executor
        .execute(&call("everything.get-env", json!({})), &ctx)
        .await;
    assert!(!env.is_error, "{}", env.content);
    assert!(env.content.contains("passed-on"), "{}", env.content);
    assert!(
        !env.content.contains("CARGO_MANIFEST_DIR"),
        "{}",
        env.content
    );

    // Bad arguments come back as the server's error, for the model.
    let bad = executor
        .execute(&call("everything.get-sum", json!({"a": "x"})), &ctx)
        .await;
    assert!(bad.is_error, "{}", bad.content);
    assert!(
        bad.content.contains("everything.get-sum"),
        "{}",
        bad.content
    );

    server.stop().await;
    assert_eq!(server.status().phase, Phase::Stopped);
    assert!(
        !process_running("flynn-marker-stdio"),
        "the server process is gone after stop"
    );
}

fn process_running(marker: &str) -> bool {
    std::process::Command::new("pgrep")
        .args(["-f", marker])
        .output()
        .map(|out| out.status.success())
        .unwrap_or(false)
}

#[tokio::test]
async fn a_slow_call_is_cancelled_with_its_turn_and_stopped_by_its_timeout() {
    let Some(entry) = reference() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = McpServer::new(
        "everything",
        McpServerConfig {
            timeout_secs: 1,
            ..everything(&entry, "flynn-marker-slow")
        },
        dir.path(),
    );
    server.ready().await;
    let executor = executor(&server);
    let slow = call(
        "everything.trigger-long-running-operation",
        json!({"duration": 30, "steps": 30}),
    );

    // The turn is cancelled while the call runs.
    let ctx = context(dir.path());
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let result = executor.execute(&slow, &ctx).await;
    assert!(result.is_error);
    assert!(result.content.contains("cancelled"), "{}", result.content);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // The server's own limit (`timeout_secs: 1`) stops the next one.
    let ctx = context(dir.path());
    let started = Instant::now();
    let result = executor.execute(&slow, &ctx).await;
    assert!(result.is_error);
    assert!(result.content.contains("timed out"), "{}", result.content);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // The server is still up and answers.
    let echo = executor
        .execute(
            &call("everything.echo", json!({"message": "still here"})),
            &ctx,
        )
        .await;
    assert!(!echo.is_error, "{}", echo.content);
    assert_eq!(server.status().restarts, 0);
    server.stop().await;
}

#[tokio::test]
async fn a_server_that_dies_mid_call_is_restarted_and_answers_again() {
    let Some(entry) = reference() else { return };
    let dir = tempfile::tempdir().unwrap();
    let marker = "flynn-marker-crash";
    let server = McpServer::new("everything", everything(&entry, marker), dir.path());
    server.ready().await;
    let executor = executor(&server);
    let ctx = context(dir.path());

    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let killed = std::process::Command::new("pkill")
            .args(["-KILL", "-f", marker])
            .status()
            .unwrap();
        assert!(killed.success(), "the server process was found");
    });
    let result = executor
        .execute(
            &call(
                "everything.trigger-long-running-operation",
                json!({"duration": 20, "steps": 20}),
            ),
            &ctx,
        )
        .await;
    assert!(result.is_error);
    assert!(
        result
            .content
            .contains("closed the connection during the call"),
        "{}",
        result.content
    );

    // Restarted after the first backoff second, its tools still listed.
    wait_for("the restart", Duration::from_secs(15), || {
        let status = server.status();
        status.phase == Phase::Running && status.restarts >= 1
    })
    .await;
    let echo = executor
        .execute(&call("everything.echo", json!({"message": "back"})), &ctx)
        .await;
    assert!(!echo.is_error, "{}", echo.content);
    server.stop().await;
}

#[tokio::test]
async fn a_missing_program_is_reported_and_retried_and_a_lazy_server_waits() {
    let dir = tempfile::tempdir().unwrap();
    let lazy = McpServer::new(
        "ghost",
        McpServerConfig {
            command: Some("flynn-no-such-mcp-server".to_owned()),
            start: McpStart::Lazy,
            startup_timeout_secs: 5,
            ..config()
        },
        dir.path(),
    );
    // Nothing runs until something needs it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(lazy.status().phase, Phase::Idle);

    let started = Instant::now();
    let mut registry = ToolRegistry::new();
    registry.add_source(lazy.clone());
    registry.prepare(&ToolPolicy::allow_all()).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    let status = lazy.status();
    assert_eq!(status.phase, Phase::Restarting, "{status:?}");
    let error = status.error.unwrap_or_default();
    assert!(error.contains("not found"), "{error}");
    assert!(status.retry_in_secs.is_some());
    assert!(registry.names().is_empty());
    lazy.stop().await;
}

/// A server built here with rmcp: `add` (read-only, closed world) and
/// `toggle`, which adds or removes `extra` and says the list changed.
#[derive(Clone, Default)]
struct Dynamic {
    extra: Arc<AtomicBool>,
}

fn object_schema(properties: Value) -> Arc<serde_json::Map<String, Value>> {
    match json!({"type": "object", "properties": properties}) {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!(),
    }
}

impl rmcp::ServerHandler for Dynamic {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut annotations = ToolAnnotations::default();
        annotations.read_only_hint = Some(true);
        annotations.open_world_hint = Some(false);
        let mut tools = vec![
            Tool::new(
                "add",
                "Add two numbers.",
                object_schema(json!({"a": {"type": "number"}, "b": {"type": "number"}})),
            )
            .with_annotations(annotations),
            Tool::new(
                "toggle",
                "Add or remove the extra tool.",
                object_schema(json!({})),
            ),
        ];
        if self.extra.load(Ordering::SeqCst) {
            tools.push(Tool::new(
                "extra",
                "Appears on toggle.",
                object_schema(json!({})),
            ));
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let text = match request.name.as_ref() {
            "add" => {
                let number = |key: &str| args.get(key).and_then(Value::as_f64).unwrap_or(0.0);
                (number("a") + number("b")).to_string()
            }
            "toggle" => {
                let now = !self.extra.fetch_xor(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                format!("extra is {}", if now { "on" } else { "off" })
            }
            "extra" => "extra".to_owned(),
            other => {
                return Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                    ContentBlock::text(format!("no tool {other}")),
                ])));
            }
        };
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text(text),
        ])))
    }
}

/// Serves [`Dynamic`] at `/mcp` on a free port, refusing requests without
/// `Authorization: Bearer <token>` with 401 as a real server would.
async fn serve_http(token: &'static str) -> String {
    let service = StreamableHttpService::new(
        || Ok(Dynamic::default()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| async move {
                let expected = format!("Bearer {token}");
                let given = request
                    .headers()
                    .get(http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok());
                if given == Some(expected.as_str()) {
                    next.run(request).await
                } else {
                    axum::response::IntoResponse::into_response((
                        http::StatusCode::UNAUTHORIZED,
                        [(http::header::WWW_AUTHENTICATE, "Bearer")],
                        "unauthorized",
                    ))
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/mcp")
}

#[tokio::test]
async fn an_http_server_needs_its_token_and_its_list_changes_reach_the_registry() {
    let url = serve_http("s3cret-token").await;
    let dir = tempfile::tempdir().unwrap();

    // The token as `bearer_token`.
    let server = McpServer::new(
        "calc",
        McpServerConfig {
            url: Some(url.clone()),
            bearer_token: Some("s3cret-token".to_owned()),
            ..config()
        },
        dir.path(),
    );
    server.ready().await;
    assert_eq!(
        server.status().phase,
        Phase::Running,
        "{:?}",
        server.status()
    );
    let executor = executor(&server);
    assert_eq!(executor.registry().names(), ["calc.add", "calc.toggle"]);
    let add = executor.registry().get("calc.add").unwrap();
    assert_eq!(add.effect(), ToolEffect::ReadOnly);
    assert_eq!(
        executor.registry().get("calc.toggle").unwrap().effect(),
        ToolEffect::External
    );
    let ctx = context(dir.path());
    let sum = executor
        .execute(&call("calc.add", json!({"a": 2, "b": 3})), &ctx)
        .await;
    assert_eq!(sum.content, "5");

    // `toggle` says the list changed: `calc.extra` comes and goes.
    let toggled = executor
        .execute(&call("calc.toggle", json!({})), &ctx)
        .await;
    // Not marked closed-world: its output is wrapped as untrusted.
    assert!(
        toggled.content.contains("extra is on"),
        "{}",
        toggled.content
    );
    assert!(
        toggled.content.starts_with("<untrusted"),
        "{}",
        toggled.content
    );
    wait_for("calc.extra", Duration::from_secs(5), || {
        executor.registry().get("calc.extra").is_some()
    })
    .await;
    // That output is in the turn now: a tool that changes things asks
    // first, and no one is there to approve.
    let asked = executor
        .execute(&call("calc.toggle", json!({})), &ctx)
        .await;
    assert!(asked.is_error);
    assert!(
        asked.content.contains("untrusted content from calc.toggle"),
        "{}",
        asked.content
    );
    let ctx = context(dir.path());
    let toggled = executor
        .execute(&call("calc.toggle", json!({})), &ctx)
        .await;
    assert!(
        toggled.content.contains("extra is off"),
        "{}",
        toggled.content
    );
    wait_for("calc.extra to go", Duration::from_secs(5), || {
        executor.registry().get("calc.extra").is_none()
    })
    .await;
    server.stop().await;

    // The token as an `Authorization` header works the same.
    let by_header = McpServer::new(
        "calc",
        McpServerConfig {
            url: Some(url.clone()),
            headers: BTreeMap::from([(
                "Authorization".to_owned(),
                "Bearer s3cret-token".to_owned(),
            )]),
            ..config()
        },
        dir.path(),
    );
    by_header.ready().await;
    assert_eq!(by_header.status().phase, Phase::Running);
    assert_eq!(by_header.status().tools, 2);
    by_header.stop().await;

    // A wrong token: no tools, and the reason names the credentials.
    let refused = McpServer::new(
        "calc",
        McpServerConfig {
            url: Some(url),
            bearer_token: Some("wrong".to_owned()),
            ..config()
        },
        dir.path(),
    );
    refused.ready().await;
    let status = refused.status();
    assert_eq!(status.phase, Phase::Restarting, "{status:?}");
    assert_eq!(status.tools, 0);
    let error = status.error.unwrap_or_default();
    assert!(error.contains("refused the credentials"), "{error}");
    refused.stop().await;
}
