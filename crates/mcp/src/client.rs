//! MCP servers as sources of tools: each configured server is started
//! (a child process over stdio, or a connection over streamable HTTP),
//! watched, restarted with backoff when it dies, and its tools offered as
//! `<server>.<tool>` through the same executor as the built-in ones.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use flynn_protocol::config::{McpConfig, McpServerConfig, McpStart, McpTransport};
use flynn_tools::sandbox::inherited_env;
use flynn_tools::{Tool, ToolSource};
use rmcp::model::{ClientCapabilities, ClientConfig, ClientRequest, Implementation};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService, ServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceError};
use serde::Serialize;
use tokio::io::AsyncBufReadExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::bridge::McpTool;

/// The first wait before restarting a server that died or failed to
/// start; doubled after each failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A server that stayed up this long starts again from [`FIRST_BACKOFF`].
const STABLE_AFTER: Duration = Duration::from_secs(60);
/// Lines of a server's stderr kept to explain why it stopped.
const STDERR_LINES: usize = 20;
/// How long a stopping server gets to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long the end of a dead server's stderr is waited for, to explain
/// why it stopped.
const STDERR_DRAIN: Duration = Duration::from_millis(500);

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Not started yet (`start: lazy`, and no agent needed it so far).
    Idle,
    /// Starting, or listing its tools.
    Starting,
    /// Up; its tools can be called.
    Running,
    /// It died or could not start; it is started again after a wait.
    Restarting,
    /// Flynn is shutting down, or it was stopped.
    Stopped,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Idle => "idle",
            Phase::Starting => "starting",
            Phase::Running => "running",
            Phase::Restarting => "restarting",
            Phase::Stopped => "stopped",
        }
    }
}

/// What `flynn mcp list`, the doctor and the gateway show of one server.
#[derive(Debug, Clone, Serialize)]
pub struct ServerStatus {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// The command line or the URL (never a header).
    pub target: String,
    pub phase: Phase,
    /// The server's own name and version, once it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// How many tools it offers.
    pub tools: usize,
    /// Why it last stopped or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Seconds until the next start attempt, while restarting.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_in_secs: Option<u64>,
    /// How many times it was started again after dying or failing.
    pub restarts: u32,
}

/// Why a call could not reach a server.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unreachable {
    #[error("MCP server '{server}' is not running yet")]
    NotStarted { server: String },
    #[error("MCP server '{server}' is restarting after: {error} (next attempt in {retry_in}s)")]
    Restarting {
        server: String,
        error: String,
        retry_in: u64,
    },
    #[error("MCP server '{server}' is stopped")]
    Stopped { server: String },
}

#[derive(Default)]
struct State {
    phase: Option<Phase>,
    peer: Option<Peer<RoleClient>>,
    tools: Vec<Arc<dyn Tool>>,
    server: Option<String>,
    error: Option<String>,
    retry_at: Option<Instant>,
    restarts: u32,
    /// Set once the first start attempt ended, either way.
    settled: bool,
}

/// One configured MCP server: its state, its tools, its supervisor.
pub struct McpServer {
    name: String,
    config: McpServerConfig,
    workspace: PathBuf,
    state: Mutex<State>,
    /// Bumped on every change of state; [`prepare`](ToolSource::prepare)
    /// waits on it.
    changed: watch::Sender<u64>,
    stop: CancellationToken,
    supervisor: Mutex<Option<JoinHandle<()>>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// The task reading the current process's stderr into `stderr`.
    stderr_reader: Mutex<Option<JoinHandle<()>>>,
    refresh: Mutex<Refresh>,
    me: Weak<McpServer>,
}

/// Listing the tools again after `notifications/tools/list_changed`.
#[derive(Debug, Default)]
struct Refresh {
    /// A listing runs.
    running: bool,
    /// A notification arrived while it ran: list once more after it.
    pending: bool,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("phase", &self.phase())
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// A server named `name`; relative paths and a missing `cwd` start
    /// from `workspace`. Nothing starts until [`start`](Self::start).
    pub fn new(name: &str, config: McpServerConfig, workspace: &Path) -> Arc<Self> {
        Arc::new_cyclic(|me| McpServer {
            name: name.to_owned(),
            config,
            workspace: workspace.to_path_buf(),
            state: Mutex::new(State::default()),
            changed: watch::Sender::new(0),
            stop: CancellationToken::new(),
            supervisor: Mutex::new(None),
            stderr: Arc::new(Mutex::new(VecDeque::new())),
            stderr_reader: Mutex::new(None),
            refresh: Mutex::new(Refresh::default()),
            me: me.clone(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    fn phase(&self) -> Phase {
        self.with_state(|state| state.phase.unwrap_or(Phase::Idle))
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut state)
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        self.with_state(f);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Starts the supervisor, once: it connects, lists the tools, and
    /// restarts the server with backoff whenever it dies. Does not wait.
    pub fn start(&self) {
        let mut supervisor = self
            .supervisor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if supervisor.is_some() || self.stop.is_cancelled() {
            return;
        }
        let Some(me) = self.me.upgrade() else {
            return;
        };
        self.update(|state| state.phase = Some(Phase::Starting));
        *supervisor = Some(tokio::spawn(async move { me.supervise().await }));
    }

    /// Starts the server if needed and waits until its first start ended
    /// (up, or failed), at most `startup_timeout_secs`.
    pub async fn ready(&self) {
        self.start();
        let mut changes = self.changed.subscribe();
        let limit = Duration::from_secs(self.config.startup_timeout_secs.max(1));
        let settled = async {
            loop {
                if self.with_state(|state| state.settled) {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(limit, settled).await;
    }

    /// The current state, for people.
    pub fn status(&self) -> ServerStatus {
        let (transport, target) = (self.config.transport().as_str(), self.config.target());
        self.with_state(|state| ServerStatus {
            name: self.name.clone(),
            transport,
            target,
            phase: state.phase.unwrap_or(Phase::Idle),
            server: state.server.clone(),
            tools: state.tools.len(),
            error: state.error.clone(),
            retry_in_secs: state
                .retry_at
                .filter(|_| state.phase == Some(Phase::Restarting))
                .map(secs_until),
            restarts: state.restarts,
        })
    }

    /// The connection to call tools on, or why there is none.
    pub(crate) fn peer(&self) -> Result<Peer<RoleClient>, Unreachable> {
        self.with_state(
            |state| match (state.phase.unwrap_or(Phase::Idle), &state.peer) {
                (Phase::Running, Some(peer)) => Ok(peer.clone()),
                (Phase::Restarting, _) => Err(Unreachable::Restarting {
                    server: self.name.clone(),
                    error: state.error.clone().unwrap_or_else(|| "unknown".to_owned()),
                    retry_in: state.retry_at.map(secs_until).unwrap_or(0),
                }),
                (Phase::Stopped, _) => Err(Unreachable::Stopped {
                    server: self.name.clone(),
                }),
                _ => Err(Unreachable::NotStarted {
                    server: self.name.clone(),
                }),
            },
        )
    }

    /// The last lines the server wrote to stderr, oldest first.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.stderr
            .lock()
            .map(|lines| lines.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Stops the server and its supervisor; it is not started again.
    pub async fn stop(&self) {
        self.stop.cancel();
        let handle = self
            .supervisor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            let _ = tokio::time::timeout(STOP_GRACE * 2, handle).await;
        }
        self.update(|state| {
            state.phase = Some(Phase::Stopped);
            state.peer = None;
            state.settled = true;
        });
    }

    async fn supervise(self: Arc<Self>) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            self.update(|state| state.phase = Some(Phase::Starting));
            let limit = Duration::from_secs(self.config.startup_timeout_secs.max(1));
            let started = tokio::select! {
                result = tokio::time::timeout(limit, self.connect()) => match result {
                    Ok(result) => result,
                    Err(_) => Err(format!(
                        "did not start and list its tools within {}s (mcp.servers.{}.startup_timeout_secs)",
                        limit.as_secs(),
                        self.name
                    )),
                },
                () = self.stop.cancelled() => return,
            };
            let error = match started {
                Ok(running) => {
                    let up_since = Instant::now();
                    let reason = self.run(running).await;
                    if self.stop.is_cancelled() {
                        return;
                    }
                    if up_since.elapsed() >= STABLE_AFTER {
                        backoff = FIRST_BACKOFF;
                    }
                    reason
                }
                Err(error) => error,
            };
            self.finish_stderr().await;
            let error = self.with_stderr(error);
            tracing::warn!(server = %self.name, %error, retry_in = ?backoff, "MCP server stopped; restarting");
            self.update(|state| {
                state.phase = Some(Phase::Restarting);
                state.peer = None;
                state.error = Some(error);
                state.retry_at = Some(Instant::now() + backoff);
                state.settled = true;
            });
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = self.stop.cancelled() => return,
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            self.update(|state| state.restarts += 1);
        }
    }

    /// Waits (briefly) until the stderr of the process that just ended is
    /// read to its end: its last line may say why it ended, and the
    /// reading task may not have caught up with the exit yet.
    async fn finish_stderr(&self) {
        let reader = self
            .stderr_reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(reader) = reader {
            let _ = tokio::time::timeout(STDERR_DRAIN, reader).await;
        }
    }

    /// Adds the server's last stderr line to `error`, when it wrote one.
    fn with_stderr(&self, error: String) -> String {
        match self.stderr_tail().last() {
            Some(line) if !error.contains(line.as_str()) => format!("{error} (stderr: {line})"),
            _ => error,
        }
    }

    /// Holds the server up until it dies, stops answering pings, or Flynn
    /// stops; returns why it ended.
    async fn run(&self, running: RunningService<RoleClient, Handler>) -> String {
        let cancel = running.cancellation_token();
        let peer = running.peer().clone();
        let waiting = running.waiting();
        tokio::pin!(waiting);
        tokio::select! {
            ended = &mut waiting => match ended {
                Ok(_) => "the connection closed (the server exited)".to_owned(),
                Err(error) => format!("its connection task failed: {error}"),
            },
            hung = self.watch(&peer) => {
                // Closing the connection ends (kills) the process; it is
                // started again like one that died.
                cancel.cancel();
                let _ = tokio::time::timeout(STOP_GRACE, waiting).await;
                hung
            }
            () = self.stop.cancelled() => {
                cancel.cancel();
                let _ = tokio::time::timeout(STOP_GRACE * 2, waiting).await;
                "stopped".to_owned()
            }
        }
    }

    /// Pings the server every `ping_interval_secs` (0: never) and returns
    /// once one is not answered within that time: the process may be
    /// alive, but it is hung. Any answer counts, an error too (a server
    /// that knows no `ping` still answers).
    async fn watch(&self, peer: &Peer<RoleClient>) -> String {
        let every = Duration::from_secs(self.config.ping_interval_secs);
        if every.is_zero() {
            return std::future::pending().await;
        }
        loop {
            tokio::time::sleep(every).await;
            let ping = peer.send_request(ClientRequest::PingRequest(Default::default()));
            match tokio::time::timeout(every, ping).await {
                Ok(Ok(_) | Err(ServiceError::McpError(_))) => {}
                Ok(Err(error)) => return format!("a ping failed: {error}"),
                Err(_) => {
                    return format!(
                        "it did not answer a ping within {}s (mcp.servers.{}.ping_interval_secs): it seems hung",
                        every.as_secs(),
                        self.name
                    );
                }
            }
        }
    }

    /// Starts or reaches the server, runs the MCP handshake and lists its
    /// tools.
    async fn connect(&self) -> Result<RunningService<RoleClient, Handler>, String> {
        let handler = Handler {
            server: self.me.clone(),
        };
        let running = match self.config.transport() {
            McpTransport::Stdio => {
                let transport = self.spawn()?;
                handler
                    .serve(transport)
                    .await
                    .map_err(|error| format!("the MCP handshake failed: {error}"))?
            }
            McpTransport::Http => {
                let transport = self.http_transport()?;
                handler.serve(transport).await.map_err(|error| {
                    if error.is_authorization_required() {
                        format!(
                            "the server refused the credentials (401/403): check mcp.servers.{}.bearer_token or its Authorization header ({error})",
                            self.name
                        )
                    } else {
                        format!("cannot reach {}: {error}", self.config.url.as_deref().unwrap_or(""))
                    }
                })?
            }
            McpTransport::Sse => {
                return Err(
                    "the HTTP+SSE transport is not supported; use streamable HTTP".to_owned(),
                );
            }
        };
        let peer = running.peer().clone();
        let server = peer.peer_info().and_then(|info| {
            let implementation = info.server_info.as_ref()?;
            Some(format!(
                "{} {}",
                implementation.name, implementation.version
            ))
        });
        let tools = self.list_tools(&peer).await?;
        tracing::info!(server = %self.name, tools = tools.len(), "MCP server ready");
        self.update(|state| {
            state.phase = Some(Phase::Running);
            state.peer = Some(peer);
            state.tools = tools;
            state.server = server;
            state.error = None;
            state.retry_at = None;
            state.settled = true;
        });
        Ok(running)
    }

    async fn list_tools(&self, peer: &Peer<RoleClient>) -> Result<Vec<Arc<dyn Tool>>, String> {
        let listed = peer
            .list_all_tools()
            .await
            .map_err(|error| format!("listing its tools failed: {error}"))?;
        let timeout = Duration::from_secs(self.config.timeout_secs.max(1));
        let mut seen = BTreeMap::new();
        for tool in listed {
            let bridged = McpTool::new(
                self.me.clone(),
                &self.name,
                tool,
                timeout,
                self.config.trusted,
            );
            match bridged {
                Ok(bridged) => {
                    seen.insert(
                        bridged.name().to_owned(),
                        Arc::new(bridged) as Arc<dyn Tool>,
                    );
                }
                Err(reason) => {
                    tracing::warn!(server = %self.name, %reason, "MCP tool left out");
                }
            }
        }
        Ok(seen.into_values().collect())
    }

    /// Lists the tools again soon (the server said they changed): at most
    /// one listing runs at a time, and notifications that arrive while it
    /// runs ask for one more after it, however many they are.
    fn request_refresh(&self, peer: Peer<RoleClient>) {
        {
            let mut refresh = self.lock_refresh();
            if refresh.running {
                refresh.pending = true;
                return;
            }
            refresh.running = true;
        }
        let Some(me) = self.me.upgrade() else {
            return;
        };
        // Not on the connection's own task: listing needs it to read the
        // answer.
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = me.refresh(&peer) => {}
                    () = me.stop.cancelled() => {}
                }
                let mut refresh = me.lock_refresh();
                if !refresh.pending || me.stop.is_cancelled() {
                    *refresh = Refresh::default();
                    return;
                }
                refresh.pending = false;
            }
        });
    }

    fn lock_refresh(&self) -> std::sync::MutexGuard<'_, Refresh> {
        self.refresh
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Lists the tools again, within `startup_timeout_secs`; the tools
    /// known stay when that fails.
    async fn refresh(&self, peer: &Peer<RoleClient>) {
        let limit = Duration::from_secs(self.config.startup_timeout_secs.max(1));
        match tokio::time::timeout(limit, self.list_tools(peer)).await {
            Ok(Ok(tools)) => {
                tracing::info!(server = %self.name, tools = tools.len(), "MCP tool list changed");
                self.update(|state| state.tools = tools);
            }
            Ok(Err(error)) => {
                tracing::warn!(server = %self.name, %error, "cannot list the changed MCP tools");
            }
            Err(_) => {
                tracing::warn!(
                    server = %self.name,
                    "the changed MCP tools were not listed within {}s (mcp.servers.{}.startup_timeout_secs); keeping the tools it had",
                    limit.as_secs(),
                    self.name
                );
            }
        }
    }

    fn spawn(&self) -> Result<TokioChildProcess, String> {
        let program = self.config.command.as_deref().unwrap_or_default();
        let cwd = match &self.config.cwd {
            Some(dir) if dir.is_absolute() => dir.clone(),
            Some(dir) => self.workspace.join(dir),
            None => self.workspace.clone(),
        };
        let mut command = tokio::process::Command::new(program);
        command
            .args(&self.config.args)
            .current_dir(&cwd)
            .env_clear()
            // The same basic variables as sandboxed commands get
            // (`flynn_tools::sandbox::INHERITED_ENV`): API keys, tokens and
            // socket addresses stay out unless the server's `env` sets them.
            .envs(inherited_env(std::env::vars_os(), &[]))
            .envs(&self.config.env);
        let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
        #[cfg(unix)]
        wrapped.wrap(process_wrap::tokio::ProcessGroup::leader());
        wrapped.wrap(process_wrap::tokio::KillOnDrop);
        let (transport, stderr) = TokioChildProcess::builder(wrapped)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|error| {
                if !cwd.is_dir() {
                    format!(
                        "cannot start '{program}': its working directory {} does not exist",
                        cwd.display()
                    )
                } else if error.kind() == std::io::ErrorKind::NotFound {
                    format!("cannot start '{program}': not found (is it installed and on PATH?)")
                } else {
                    format!("cannot start '{program}': {error}")
                }
            })?;
        if let Some(stderr) = stderr {
            let lines = self.stderr.clone();
            // A new process: an earlier one's lines would explain the wrong
            // failure.
            lines
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clear();
            let name = self.name.clone();
            let reader = tokio::spawn(async move {
                let mut reader = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    tracing::debug!(server = %name, "{line}");
                    if let Ok(mut lines) = lines.lock() {
                        if lines.len() == STDERR_LINES {
                            lines.pop_front();
                        }
                        lines.push_back(line);
                    }
                }
            });
            *self
                .stderr_reader
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reader);
        }
        Ok(transport)
    }

    fn http_transport(&self) -> Result<StreamableHttpClientTransport<reqwest::Client>, String> {
        let url = self.config.url.clone().unwrap_or_default();
        let mut headers = HashMap::new();
        let mut bearer = self.config.bearer_token.clone();
        for (name, value) in &self.config.headers {
            // The transport sets `Authorization` itself; a bearer token
            // given as a header goes the same way.
            if name.eq_ignore_ascii_case("authorization")
                && let Some(token) = value.strip_prefix("Bearer ")
                && bearer.is_none()
            {
                bearer = Some(token.trim().to_owned());
                continue;
            }
            let name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("'{name}' is not an HTTP header name"))?;
            let value = http::HeaderValue::from_str(value)
                .map_err(|_| format!("the value of header '{name}' is not valid"))?;
            headers.insert(name, value);
        }
        let mut config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers);
        if let Some(token) = bearer {
            config = config.auth_header(token);
        }
        // No redirects at all: the custom headers and the bearer token
        // would follow one to whatever host it names.
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|error| format!("cannot build the HTTP client: {error}"))?;
        Ok(StreamableHttpClientTransport::with_client(client, config))
    }
}

#[async_trait]
impl ToolSource for McpServer {
    fn name(&self) -> &str {
        &self.name
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.with_state(|state| state.tools.clone())
    }

    async fn prepare(&self) {
        self.ready().await;
    }

    async fn shutdown(&self) {
        self.stop().await;
    }
}

/// Answers what a server sends Flynn: tool-list changes, log messages.
#[derive(Clone)]
struct Handler {
    server: Weak<McpServer>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        if let Some(server) = self.server.upgrade() {
            server.request_refresh(context.peer);
        }
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("flynn", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// Whole seconds until `at`, rounded up: a restart due in 0.4 s is "in
/// 1s", not "in 0s".
fn secs_until(at: Instant) -> u64 {
    let left = at.saturating_duration_since(Instant::now());
    left.as_secs() + u64::from(left.subsec_nanos() > 0)
}

/// Every configured server that is enabled, by name.
#[derive(Debug, Clone, Default)]
pub struct McpServers {
    servers: Vec<Arc<McpServer>>,
}

impl McpServers {
    /// The enabled servers of `config`; none is started yet.
    pub fn new(config: &McpConfig, workspace: &Path) -> Self {
        McpServers {
            servers: config
                .servers
                .iter()
                .filter(|(_, server)| server.enabled)
                .map(|(name, server)| McpServer::new(name, server.clone(), workspace))
                .collect(),
        }
    }

    /// Starts the servers configured with `start: boot`, in the
    /// background.
    pub fn start_boot(&self) {
        for server in &self.servers {
            if server.config.start == McpStart::Boot {
                server.start();
            }
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<McpServer>> {
        self.servers.iter().find(|server| server.name == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<McpServer>> {
        self.servers.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Each server as a source for the tool registry.
    pub fn sources(&self) -> Vec<Arc<dyn ToolSource>> {
        self.servers
            .iter()
            .map(|server| server.clone() as Arc<dyn ToolSource>)
            .collect()
    }

    pub fn status(&self) -> Vec<ServerStatus> {
        self.servers.iter().map(|server| server.status()).collect()
    }

    /// Stops every server.
    pub async fn stop(&self) {
        futures::future::join_all(self.servers.iter().map(|server| server.stop())).await;
    }
}

/// Maps a failed call to what the model is told.
pub(crate) fn call_error(server: &str, tool: &str, error: ServiceError) -> String {
    match error {
        ServiceError::McpError(error) => {
            format!(
                "{server}.{tool} failed: {} (code {})",
                error.message, error.code.0
            )
        }
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => format!(
            "MCP server '{server}' closed the connection during the call (it is restarted); the call may or may not have taken effect"
        ),
        ServiceError::Timeout { timeout } => {
            format!(
                "{server}.{tool} got no answer within {}s",
                timeout.as_secs()
            )
        }
        other => format!("{server}.{tool} failed: {other}"),
    }
}
