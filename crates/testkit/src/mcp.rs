//! A real MCP server for Flynn's MCP client to talk to, written with rmcp
//! (the official SDK) as a hand-written [`ServerHandler`].
//!
//! It serves over stdio (the `flynn-mcp-fixture` binary, see
//! [`fixture_binary`]) or over streamable HTTP ([`HttpFixture`], on
//! `127.0.0.1:0`, optionally behind a bearer token). Its tools:
//!
//! | tool | does |
//! |---|---|
//! | `add {a, b}` | the sum; `readOnlyHint: true`, `openWorldHint: false` |
//! | `echo {text}` | the text, unchanged; no hints |
//! | `slow {secs}` | sleeps, or stops early when the request is cancelled and logs `cancelled <id>` |
//! | `fail` | a result with `isError: true` |
//! | `toggle` | adds or removes the tool `extra`, then sends `notifications/tools/list_changed` |
//! | `extra` | exists only while toggled on |
//! | `getenv {name}` | the value of an environment variable of the server, or `unset` |
//! | `crash` | stdio only: exits with status 3 in the middle of the call |
//! | `freeze` | stdio only: stops its own process (`SIGSTOP`): alive, but answering nothing, pings included (and never this call, even once continued) |
//! | `list_delay {secs}` | stdio only: from now on, `tools/list` takes that long to answer |
//! | `notify {times}` | stdio only: sends `notifications/tools/list_changed` that many times |
//! | `whoami` | HTTP only: the `Authorization` header of the request, or `none` |
//!
//! Everything the server sees goes to an [`EventLog`]: in memory for the
//! HTTP fixture, a file named by [`LOG_ENV`] for the binary. Lines:
//! `started pid <pid>`, `call <tool> <id> <arguments>`, `cancelled <id>`
//! (a `slow` call noticed its cancellation), `notified cancelled <id>`
//! (`notifications/cancelled` arrived), `done slow <id>`, `list` and
//! `listed` (a `tools/list` began and was answered), and for HTTP
//! `refused <method> <path> authorization=<value or none>`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ContentBlock, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, ServiceExt};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};

use crate::server::Server;

/// The environment variable naming the file the `flynn-mcp-fixture`
/// binary appends its events to.
pub const LOG_ENV: &str = "FLYNN_MCP_FIXTURE_LOG";

/// The name of the fixture's stdio binary.
pub const BINARY: &str = "flynn-mcp-fixture";

/// What the fixture saw, one line per event, in order.
#[derive(Debug, Clone)]
pub struct EventLog {
    sink: Arc<Sink>,
}

#[derive(Debug)]
enum Sink {
    Memory(Mutex<Vec<String>>),
    File(PathBuf),
}

impl EventLog {
    /// A log kept in memory, shared by every clone.
    pub fn memory() -> Self {
        EventLog {
            sink: Arc::new(Sink::Memory(Mutex::new(Vec::new()))),
        }
    }

    /// A log in the file at `path`: appended to by the server, read by the
    /// test (the same path on both sides).
    pub fn file(path: impl Into<PathBuf>) -> Self {
        EventLog {
            sink: Arc::new(Sink::File(path.into())),
        }
    }

    /// Appends one event.
    pub fn record(&self, event: impl Into<String>) {
        let event = event.into().replace('\n', " ");
        match self.sink.as_ref() {
            Sink::Memory(events) => events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(event),
            Sink::File(path) => {
                use std::io::Write;
                // One write per line, in append mode: lines from concurrent
                // calls never interleave.
                let written = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .and_then(|mut file| file.write_all(format!("{event}\n").as_bytes()));
                if let Err(error) = written {
                    eprintln!(
                        "{BINARY}: cannot append to the event log {}: {error}",
                        path.display()
                    );
                }
            }
        }
    }

    /// Every event so far; none when the file does not exist yet.
    pub fn events(&self) -> Vec<String> {
        match self.sink.as_ref() {
            Sink::Memory(events) => events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            Sink::File(path) => std::fs::read_to_string(path)
                .map(|text| text.lines().map(str::to_owned).collect())
                .unwrap_or_default(),
        }
    }

    /// The first event that `matches`, waiting for it up to `within`
    /// (events of a cancelled call arrive after the client moved on).
    pub async fn wait_for(
        &self,
        within: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(event) = self.events().into_iter().find(|event| matches(event)) {
                return Some(event);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// How the fixture is reached, which decides two of its tools: `crash`
/// (it would end the test process itself in process) only over stdio,
/// `whoami` (there are no headers on stdio) only over HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Stdio,
    Http,
}

/// The fixture's [`ServerHandler`]. Clones share the log and the state of
/// `toggle`.
#[derive(Debug, Clone)]
pub struct FixtureServer {
    log: EventLog,
    transport: Transport,
    extra: Arc<AtomicBool>,
    /// How long `tools/list` takes, in milliseconds.
    list_delay: Arc<AtomicU64>,
}

impl FixtureServer {
    pub fn new(log: EventLog, transport: Transport) -> Self {
        FixtureServer {
            log,
            transport,
            extra: Arc::new(AtomicBool::new(false)),
            list_delay: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn log(&self) -> &EventLog {
        &self.log
    }

    /// The tools offered now.
    pub fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            Tool::new(
                "add",
                "Adds two numbers.",
                schema(json!({
                    "a": {"type": "number", "description": "The first number."},
                    "b": {"type": "number", "description": "The second number."},
                })),
            )
            .with_annotations(ToolAnnotations::new().read_only(true).open_world(false)),
            Tool::new(
                "echo",
                "Returns the text it is given.",
                schema(json!({"text": {"type": "string"}})),
            ),
            Tool::new(
                "slow",
                "Sleeps for `secs` seconds, or until the call is cancelled.",
                schema(json!({"secs": {"type": "number"}})),
            ),
            Tool::new(
                "fail",
                "Always fails, with an error result.",
                schema(json!({})),
            ),
            Tool::new(
                "toggle",
                "Adds or removes the tool `extra` and says the tool list changed.",
                schema(json!({})),
            ),
            Tool::new(
                "getenv",
                "The value of one of the server's environment variables.",
                schema(json!({"name": {"type": "string"}})),
            ),
        ];
        match self.transport {
            Transport::Stdio => tools.extend([
                Tool::new(
                    "crash",
                    "Exits the server process in the middle of the call.",
                    schema(json!({})),
                ),
                Tool::new(
                    "freeze",
                    "Stops the server process: it stays alive but answers nothing.",
                    schema(json!({})),
                ),
                Tool::new(
                    "list_delay",
                    "From now on, listing the tools takes `secs` seconds.",
                    schema(json!({"secs": {"type": "number"}})),
                ),
                Tool::new(
                    "notify",
                    "Says the tool list changed, `times` times.",
                    schema(json!({"times": {"type": "number"}})),
                ),
            ]),
            Transport::Http => tools.push(Tool::new(
                "whoami",
                "The Authorization header the server received.",
                schema(json!({})),
            )),
        }
        if self.extra.load(Ordering::SeqCst) {
            tools.push(Tool::new(
                "extra",
                "Exists only while `toggle` turned it on.",
                schema(json!({})),
            ));
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        tools
    }

    async fn call(
        &self,
        name: &str,
        args: &JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let id = context.id.to_string();
        match name {
            "add" => {
                let a = number(args, "a")?;
                let b = number(args, "b")?;
                let sum = match (a.as_i64(), b.as_i64()) {
                    (Some(a), Some(b)) => a.saturating_add(b).to_string(),
                    _ => (a.as_f64().unwrap_or_default() + b.as_f64().unwrap_or_default())
                        .to_string(),
                };
                Ok(text(sum))
            }
            "echo" => Ok(text(string(args, "text")?)),
            "slow" => {
                let secs = number(args, "secs")?.as_f64().unwrap_or_default();
                let nap = Duration::try_from_secs_f64(secs)
                    .map_err(|error| ErrorData::invalid_params(format!("secs: {error}"), None))?;
                tokio::select! {
                    () = tokio::time::sleep(nap) => {
                        self.log.record(format!("done slow {id}"));
                        Ok(text(format!("slept {secs}s")))
                    }
                    () = context.ct.cancelled() => {
                        self.log.record(format!("cancelled {id}"));
                        Err(ErrorData::internal_error("cancelled", None))
                    }
                }
            }
            "fail" => Ok(CallToolResult::error(vec![ContentBlock::text(
                "the fixture failed on purpose",
            )])),
            "toggle" => {
                let on = !self.extra.fetch_xor(true, Ordering::SeqCst);
                if let Err(error) = context.peer.notify_tool_list_changed().await {
                    self.log
                        .record(format!("cannot send tools/list_changed: {error}"));
                }
                Ok(text(if on { "extra on" } else { "extra off" }))
            }
            "extra" if self.extra.load(Ordering::SeqCst) => Ok(text("extra")),
            "getenv" => {
                let name = string(args, "name")?;
                Ok(text(
                    std::env::var(&name).unwrap_or_else(|_| "unset".to_owned()),
                ))
            }
            "freeze" if self.transport == Transport::Stdio => {
                let pid = std::process::id().to_string();
                self.log.record(format!("freezing pid {pid}"));
                let stopped = tokio::process::Command::new("kill")
                    .args(["-STOP", &pid])
                    .status()
                    .await;
                // Only reached if the stop failed, or once something
                // continued the process (seen once, under load, while the
                // client restarted it). A frozen server answers nothing,
                // ever: the call ends only with its connection.
                self.log
                    .record(format!("continued after freezing: {stopped:?}"));
                std::future::pending().await
            }
            "list_delay" if self.transport == Transport::Stdio => {
                let secs = number(args, "secs")?.as_f64().unwrap_or_default();
                let delay = Duration::try_from_secs_f64(secs)
                    .map_err(|error| ErrorData::invalid_params(format!("secs: {error}"), None))?;
                let millis = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                self.list_delay.store(millis, Ordering::SeqCst);
                Ok(text(format!("listing takes {secs}s")))
            }
            "notify" if self.transport == Transport::Stdio => {
                let times = number(args, "times")?.as_u64().unwrap_or_default();
                for _ in 0..times {
                    if let Err(error) = context.peer.notify_tool_list_changed().await {
                        self.log
                            .record(format!("cannot send tools/list_changed: {error}"));
                    }
                }
                Ok(text(format!("notified {times} times")))
            }
            "crash" if self.transport == Transport::Stdio => {
                eprintln!("{BINARY}: crashing on purpose");
                std::process::exit(3);
            }
            "whoami" if self.transport == Transport::Http => {
                let authorization = context
                    .extensions
                    .get::<axum::http::request::Parts>()
                    .and_then(|parts| parts.headers.get(AUTHORIZATION))
                    .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
                Ok(text(authorization.unwrap_or_else(|| "none".to_owned())))
            }
            other => Err(ErrorData::invalid_params(
                format!("no tool named '{other}'"),
                None,
            )),
        }
    }
}

impl ServerHandler for FixtureServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new(BINARY, env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.log.record("list");
        let delay = self.list_delay.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let tools = self.tools();
        self.log.record("listed");
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        self.log.record(format!(
            "call {} {} {}",
            request.name,
            context.id,
            Value::Object(args.clone())
        ));
        self.call(&request.name, &args, context)
            .await
            .map(Into::into)
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        let id = notification
            .request_id
            .map_or_else(|| "?".to_owned(), |id| id.to_string());
        self.log.record(format!("notified cancelled {id}"));
    }
}

fn schema(properties: Value) -> JsonObject {
    let required: Vec<Value> = properties
        .as_object()
        .map(|object| object.keys().cloned().map(Value::String).collect())
        .unwrap_or_default();
    let mut object = JsonObject::new();
    object.insert("type".to_owned(), json!("object"));
    object.insert("properties".to_owned(), properties);
    object.insert("required".to_owned(), Value::Array(required));
    object
}

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

fn number<'a>(args: &'a JsonObject, name: &str) -> Result<&'a serde_json::Number, ErrorData> {
    match args.get(name) {
        Some(Value::Number(number)) => Ok(number),
        _ => Err(ErrorData::invalid_params(
            format!("'{name}' must be a number"),
            None,
        )),
    }
}

fn string(args: &JsonObject, name: &str) -> Result<String, ErrorData> {
    match args.get(name) {
        Some(Value::String(value)) => Ok(value.clone()),
        _ => Err(ErrorData::invalid_params(
            format!("'{name}' must be a string"),
            None,
        )),
    }
}

/// The `flynn-mcp-fixture` binary's whole work: serves the fixture on
/// stdin/stdout, logging to the file named by [`LOG_ENV`] (when set),
/// until the client closes the connection.
pub async fn serve_stdio() -> Result<(), String> {
    let log = match std::env::var_os(LOG_ENV) {
        Some(path) => EventLog::file(path),
        None => EventLog::memory(),
    };
    log.record(format!("started pid {}", std::process::id()));
    let server = FixtureServer::new(log.clone(), Transport::Stdio);
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|error| format!("the MCP handshake failed: {error}"))?;
    let ended = running.waiting().await;
    log.record("stopped");
    ended
        .map(|_| ())
        .map_err(|error| format!("the connection task failed: {error}"))
}

/// The fixture over streamable HTTP on `127.0.0.1:0`, on a thread of its
/// own. Stopped when dropped.
#[derive(Debug)]
pub struct HttpFixture {
    server: Server,
    log: EventLog,
}

#[derive(Debug)]
struct Gate {
    /// The whole expected `Authorization` value (`Bearer <token>`).
    expected: Option<String>,
    log: EventLog,
}

impl HttpFixture {
    /// Serves the fixture at `/mcp`. With `required_token`, a request
    /// without `Authorization: Bearer <required_token>` is refused with
    /// `401` and a `WWW-Authenticate: Bearer` challenge, as a real server
    /// does, and never reaches the MCP handler.
    pub fn start(required_token: Option<&str>) -> HttpFixture {
        let log = EventLog::memory();
        let handler = FixtureServer::new(log.clone(), Transport::Http);
        let service = StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let gate = Arc::new(Gate {
            expected: required_token.map(|token| format!("Bearer {token}")),
            log: log.clone(),
        });
        let router = Router::new()
            .route_service("/mcp", service)
            .layer(axum::middleware::from_fn_with_state(gate, authorize));
        HttpFixture {
            server: Server::start_router("mcp", router),
            log,
        }
    }

    /// The MCP endpoint: `http://127.0.0.1:<port>/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.server.addr())
    }

    pub fn log(&self) -> &EventLog {
        &self.log
    }

    /// Every event so far.
    pub fn events(&self) -> Vec<String> {
        self.log.events()
    }
}

async fn authorize(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    let Some(expected) = &gate.expected else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(AUTHORIZATION)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    if given.as_deref() == Some(expected.as_str()) {
        return next.run(request).await;
    }
    gate.log.record(format!(
        "refused {} {} authorization={}",
        request.method(),
        request.uri().path(),
        given.as_deref().unwrap_or("none")
    ));
    (
        StatusCode::UNAUTHORIZED,
        [(
            WWW_AUTHENTICATE,
            r#"Bearer realm="flynn-mcp-fixture", error="invalid_token""#,
        )],
        "a valid bearer token is required",
    )
        .into_response()
}

/// The path of the `flynn-mcp-fixture` binary, built for the running test's
/// profile: `<target>/<profile>/flynn-mcp-fixture`, next to the `deps`
/// folder the test executable runs from. Built with cargo (`$CARGO`, else
/// `cargo`) once per process when it is missing or older than its sources;
/// panics with cargo's output when that fails.
pub fn fixture_binary() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match BUILT.get_or_init(locate_or_build) {
        Ok(path) => path.clone(),
        Err(message) => panic!("{message}"),
    }
}

fn locate_or_build() -> Result<PathBuf, String> {
    let exe = std::env::current_exe()
        .map_err(|error| format!("{BINARY}: cannot find the running test executable: {error}"))?;
    // `<target>/<profile>/deps/<test>` for tests; `<target>/<profile>/<bin>`
    // for binaries.
    let mut profile_dir = exe
        .parent()
        .ok_or_else(|| format!("{BINARY}: {} has no parent folder", exe.display()))?;
    if profile_dir.file_name().is_some_and(|name| name == "deps") {
        profile_dir = profile_dir
            .parent()
            .ok_or_else(|| format!("{BINARY}: {} has no parent folder", exe.display()))?;
    }
    let binary = profile_dir.join(format!("{BINARY}{}", std::env::consts::EXE_SUFFIX));
    if is_fresh(&binary) {
        return Ok(binary);
    }
    let target_dir = profile_dir
        .parent()
        .ok_or_else(|| format!("{BINARY}: {} has no parent folder", profile_dir.display()))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(&cargo);
    command
        .args([
            "build",
            "-p",
            "flynn-testkit",
            "--features",
            "mcp",
            "--bin",
            BINARY,
        ])
        .env("CARGO_TARGET_DIR", target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match profile_dir.file_name().and_then(|name| name.to_str()) {
        Some("debug") | None => {}
        Some("release") => {
            command.arg("--release");
        }
        Some(profile) => {
            command.args(["--profile", profile]);
        }
    }
    let output = command.output().map_err(|error| {
        format!(
            "{BINARY} is missing and cannot be built: cannot run {}: {error}",
            Path::new(&cargo).display()
        )
    })?;
    if !output.status.success() || !binary.is_file() {
        return Err(format!(
            "{BINARY} is missing and `cargo build -p flynn-testkit --features mcp --bin {BINARY}` failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(binary)
}

/// Whether `binary` exists and is newer than the sources it is built from
/// (a stale fixture would test old behaviour).
fn is_fresh(binary: &Path) -> bool {
    let Ok(built) = std::fs::metadata(binary).and_then(|meta| meta.modified()) else {
        return false;
    };
    let sources = Path::new(env!("CARGO_MANIFEST_DIR"));
    ["src/mcp.rs", "src/bin/flynn-mcp-fixture.rs"]
        .iter()
        .filter_map(|source| {
            std::fs::metadata(sources.join(source))
                .and_then(|meta| meta.modified())
                .ok()
        })
        .all(|changed| changed <= built)
}
