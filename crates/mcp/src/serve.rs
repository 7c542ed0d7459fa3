//! Flynn as an MCP server: other agents (Claude Desktop, an IDE, another
//! Flynn) send messages to Flynn's agents, list and read its sessions and
//! search its memory.
//!
//! [`FlynnServer`] answers MCP over a [`FlynnHost`], which is whatever
//! runs Flynn (the gateway's session manager, or a runtime of the CLI's
//! own); it offers five tools: `send_message`, `list_sessions`,
//! `read_history`, `search_memory` and `list_agents`. [`serve_stdio`]
//! serves it on this process's stdin and stdout (`flynn mcp serve`),
//! [`http_service`] builds the streamable HTTP service the gateway mounts
//! at `/mcp`, and [`proxy_stdio`] serves on stdio what a daemon's `/mcp`
//! serves (`flynn mcp serve --gateway`).
//!
//! A caller's mistake (an unknown agent or session, an empty message, a
//! malformed session key, memory turned off) is a tool result with
//! `isError` that names what exists, so the calling model can correct
//! itself; only an unknown tool is a protocol error.

use std::sync::Arc;

use async_trait::async_trait;
use flynn_protocol::{ContentBlock, Message, Role, SessionKey, Tier, TurnOutcome};
use rmcp::handler::server::tool::{schema_for_input, schema_for_output};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    Implementation, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{Peer, RequestContext, RoleClient, RoleServer, ServiceExt};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
pub use rmcp::transport::streamable_http_server::StreamableHttpService;
pub use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::{ErrorData as McpError, ServerHandler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

/// The session `send_message` uses when the caller names none.
pub const DEFAULT_SESSION: &str = "mcp:default";

/// Messages `read_history` returns when the caller asks for no number,
/// and at most.
const HISTORY_DEFAULT: usize = 20;
const HISTORY_MAX: usize = 100;
/// Characters of one message's text `read_history` returns; the rest is
/// cut with a marker.
const MESSAGE_TEXT_MAX: usize = 4000;
/// Characters of one tool result in `read_history`.
const TOOL_RESULT_MAX: usize = 500;
const SESSIONS_DEFAULT: usize = 20;
const SESSIONS_MAX: usize = 500;
const MEMORY_DEFAULT: usize = 5;
const MEMORY_MAX: usize = 20;
/// Sessions named when `read_history` is asked for one that does not
/// exist.
const SESSIONS_NAMED: usize = 10;

/// What Flynn's MCP server needs from the Flynn it serves.
///
/// Turns started through it are unattended: nobody can answer a
/// confirmation, so an implementation denies every tool call that needs
/// one (as the gateway's `approval: deny` does).
#[async_trait]
pub trait FlynnHost: Send + Sync + 'static {
    /// The agents that can answer; exactly one has `default` set.
    fn agents(&self) -> Vec<AgentSummary>;

    /// Sends `message` and waits for the turn's outcome (a chat command's
    /// reply for `/status` and the like). Cancelling `cancel` cancels the
    /// turn.
    async fn send(
        &self,
        message: Outgoing,
        cancel: CancellationToken,
    ) -> Result<TurnOutcome, HostError>;

    /// At most `limit` sessions, most recently updated first.
    async fn sessions(&self, limit: usize) -> Result<Vec<SessionSummary>, HostError>;

    /// The last `limit` messages of `session`, oldest first; `None` when
    /// there is no such session.
    async fn history(
        &self,
        session: &SessionKey,
        limit: usize,
    ) -> Result<Option<HistoryPage>, HostError>;

    /// The best `limit` memory hits for `query`.
    async fn search_memory(&self, query: &str, limit: usize) -> Result<Vec<MemoryHit>, HostError>;
}

/// Why a [`FlynnHost`] could not do what it was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HostError {
    /// This Flynn keeps no memory (`memory.enabled: false`).
    #[error("memory is turned off in this Flynn (memory.enabled is false)")]
    MemoryOff,
    /// The message was not accepted (shutting down, a full queue...).
    #[error("{0}")]
    Refused(String),
    /// The turn was cancelled.
    #[error("the turn was cancelled")]
    Cancelled,
    /// Anything else: the model provider failed after retries and
    /// fallback, the store could not be read...
    #[error("{0}")]
    Failed(String),
}

/// A message for an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub session: SessionKey,
    pub message: String,
    /// The agent to answer; the routed one when `None`.
    pub agent: Option<String>,
}

/// One agent, as `list_agents` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct AgentSummary {
    pub name: String,
    /// The model tier it answers on.
    pub tier: Tier,
    /// The one model it is pinned to, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Whether it answers when no agent is named.
    pub default: bool,
}

/// One session, as `list_sessions` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct SessionSummary {
    /// The key to pass to `read_history` and `send_message`.
    pub session: String,
    pub messages: u64,
    /// When it last changed, Unix milliseconds.
    pub updated_at: i64,
    /// The agent chosen for it, when one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// The last messages of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryPage {
    /// Oldest first.
    pub messages: Vec<HistoryEntry>,
    /// Whether older messages exist.
    pub more_before: bool,
}

/// One stored message.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    pub seq: u64,
    /// Unix milliseconds.
    pub created_at: i64,
    pub message: Message,
}

/// One memory search hit.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct MemoryHit {
    /// The file, relative to the memory directory (`user.md`).
    pub file: String,
    /// First and last line of the passage, 1-based.
    pub start_line: u32,
    pub end_line: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub heading: Option<String>,
    pub text: String,
    /// Higher is better.
    pub score: f64,
}

// The tools' arguments and results: their schemas are what callers see.

/// Arguments of `send_message`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SendMessageArgs {
    /// The message, as a person would write it to the agent.
    message: String,
    /// The agent to answer (see `list_agents`); the default agent when
    /// absent.
    #[serde(default)]
    agent: Option<String>,
    /// The conversation to continue, as `channel:peer` (default
    /// `mcp:default`). A new key starts a new conversation.
    #[serde(default)]
    session: Option<String>,
}

/// Arguments of `list_sessions`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListSessionsArgs {
    /// Sessions returned at most (default 20, at most 500).
    #[serde(default)]
    limit: Option<usize>,
}

/// Arguments of `read_history`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadHistoryArgs {
    /// The session's key, as `list_sessions` gives it.
    session: String,
    /// The last this many messages (default 20, at most 100).
    #[serde(default)]
    limit: Option<usize>,
}

/// Arguments of `search_memory`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchMemoryArgs {
    /// Words or a question to look for.
    query: String,
    /// Hits returned at most (default 5, at most 20).
    #[serde(default)]
    limit: Option<usize>,
}

/// Arguments of `list_agents`: none.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

#[derive(Debug, Serialize, JsonSchema)]
struct SessionsOutput {
    sessions: Vec<SessionSummary>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct HistoryOutput {
    session: String,
    /// Oldest first.
    messages: Vec<HistoryMessage>,
    /// Whether older messages exist than these.
    more_before: bool,
}

#[derive(Debug, Serialize, JsonSchema)]
struct HistoryMessage {
    seq: u64,
    /// `user` or `assistant`.
    role: &'static str,
    /// Unix milliseconds.
    created_at: i64,
    /// The message's text (long texts are cut).
    text: String,
    /// The tools the assistant called in this message.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<String>,
    /// Results of tool calls carried by this message.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_results: Vec<ToolResultText>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct ToolResultText {
    ok: bool,
    /// The start of the result.
    text: String,
}

#[derive(Debug, Serialize, JsonSchema)]
struct MemoryOutput {
    hits: Vec<MemoryHit>,
}

#[derive(Debug, Serialize, JsonSchema)]
struct AgentsOutput {
    agents: Vec<AgentSummary>,
}

const SEND_MESSAGE: &str = "send_message";
const LIST_SESSIONS: &str = "list_sessions";
const READ_HISTORY: &str = "read_history";
const SEARCH_MEMORY: &str = "search_memory";
const LIST_AGENTS: &str = "list_agents";

/// The tools, as `tools/list` gives them.
fn tools() -> Vec<Tool> {
    fn input<T: JsonSchema + 'static>() -> Arc<JsonObject> {
        schema_for_input::<T>().unwrap_or_else(|_| {
            // Every argument type here is a struct, so this is not reached.
            let mut object = JsonObject::new();
            object.insert("type".into(), "object".into());
            Arc::new(object)
        })
    }
    let read = |title: &str| {
        ToolAnnotations::with_title(title)
            .read_only(true)
            .open_world(false)
    };
    vec![
        Tool::new(
            SEND_MESSAGE,
            "Send a message to one of Flynn's agents and wait for its final answer. The conversation continues in `session` (default `mcp:default`), so later messages there see the earlier ones. The agent may use its tools, except those that need a person's confirmation: nobody can confirm them here, so they are denied.",
            input::<SendMessageArgs>(),
        )
        .with_annotations(
            ToolAnnotations::with_title("Send a message to Flynn")
                .read_only(false)
                .idempotent(false)
                .open_world(true),
        ),
        Tool::new(
            LIST_SESSIONS,
            "List Flynn's conversations, most recently updated first: each one's key (for read_history and send_message), message count, last update, agent and title.",
            input::<ListSessionsArgs>(),
        )
        .with_raw_output_schema(schema_for_output::<SessionsOutput>())
        .with_annotations(read("List Flynn's sessions")),
        Tool::new(
            READ_HISTORY,
            "Read the last messages of one Flynn conversation, oldest first: who wrote each, its text, and the tools called.",
            input::<ReadHistoryArgs>(),
        )
        .with_raw_output_schema(schema_for_output::<HistoryOutput>())
        .with_annotations(read("Read a Flynn session")),
        Tool::new(
            SEARCH_MEMORY,
            "Search Flynn's memory (markdown notes about the user, projects and past conversations) by keywords and meaning; each hit gives its file, lines and text.",
            input::<SearchMemoryArgs>(),
        )
        .with_raw_output_schema(schema_for_output::<MemoryOutput>())
        .with_annotations(read("Search Flynn's memory")),
        Tool::new(
            LIST_AGENTS,
            "List the agents that can answer send_message, with the model tier each answers on and which one is the default.",
            input::<NoArgs>(),
        )
        .with_raw_output_schema(schema_for_output::<AgentsOutput>())
        .with_annotations(read("List Flynn's agents")),
    ]
}

fn server_config() -> ServerConfig {
    ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        .with_server_info(Implementation::new("flynn", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Flynn is a personal AI agent. Use send_message to ask one of its agents to do something (it runs its own tools and answers in text); list_sessions and read_history to see its conversations; search_memory to look up what it remembers.",
        )
}

/// Flynn's MCP server over a [`FlynnHost`]: one per MCP connection.
#[derive(Clone)]
pub struct FlynnServer {
    host: Arc<dyn FlynnHost>,
    tools: Arc<Vec<Tool>>,
}

impl std::fmt::Debug for FlynnServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlynnServer").finish_non_exhaustive()
    }
}

/// A tool result that tells the caller what went wrong.
fn refusal(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![rmcp::model::ContentBlock::text(message.into())])
}

fn structured<T: Serialize>(value: &T) -> CallToolResult {
    match serde_json::to_value(value) {
        Ok(value) => CallToolResult::structured(value),
        Err(error) => refusal(format!("cannot write the result: {error}")),
    }
}

/// The arguments as `T`, or a result naming what is wrong with them.
fn arguments<T: serde::de::DeserializeOwned>(
    tool: &str,
    arguments: Option<JsonObject>,
) -> Result<T, CallToolResult> {
    let value = serde_json::Value::Object(arguments.unwrap_or_default());
    serde_json::from_value(value)
        .map_err(|error| refusal(format!("invalid arguments for {tool}: {error}")))
}

/// `text` cut to at most `max` characters, with a marker saying so.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => {
            let rest = text[end..].chars().count();
            format!("{}… [{rest} more characters]", &text[..end])
        }
    }
}

fn history_message(entry: HistoryEntry) -> HistoryMessage {
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    let mut tool_results = Vec::new();
    for block in &entry.message.content {
        match block {
            ContentBlock::Text { text: part } => text.push_str(part),
            ContentBlock::Image { .. } => text.push_str("[image]"),
            ContentBlock::ToolUse { name, .. } => tool_calls.push(name.clone()),
            ContentBlock::ToolResult {
                content, is_error, ..
            } => tool_results.push(ToolResultText {
                ok: !is_error,
                text: cut(content, TOOL_RESULT_MAX),
            }),
            ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => {}
        }
    }
    HistoryMessage {
        seq: entry.seq,
        role: match entry.message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        },
        created_at: entry.created_at,
        text: cut(&text, MESSAGE_TEXT_MAX),
        tool_calls,
        tool_results,
    }
}

impl FlynnServer {
    pub fn new(host: Arc<dyn FlynnHost>) -> Self {
        FlynnServer {
            host,
            tools: Arc::new(tools()),
        }
    }

    /// The tools it offers.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Runs one tool. `Err` only for a tool that does not exist.
    pub async fn call(
        &self,
        name: &str,
        args: Option<JsonObject>,
        cancel: CancellationToken,
    ) -> Result<CallToolResult, McpError> {
        let result = match name {
            SEND_MESSAGE => match arguments(name, args) {
                Ok(args) => self.send_message(args, cancel).await,
                Err(refused) => refused,
            },
            LIST_SESSIONS => match arguments(name, args) {
                Ok(args) => self.list_sessions(args).await,
                Err(refused) => refused,
            },
            READ_HISTORY => match arguments(name, args) {
                Ok(args) => self.read_history(args).await,
                Err(refused) => refused,
            },
            SEARCH_MEMORY => match arguments(name, args) {
                Ok(args) => self.search_memory(args).await,
                Err(refused) => refused,
            },
            LIST_AGENTS => match arguments::<NoArgs>(name, args) {
                Ok(_) => structured(&AgentsOutput {
                    agents: self.host.agents(),
                }),
                Err(refused) => refused,
            },
            other => {
                let names: Vec<&str> = self.tools.iter().map(|t| t.name.as_ref()).collect();
                return Err(McpError::invalid_params(
                    format!(
                        "Flynn has no tool '{other}' (its tools: {})",
                        names.join(", ")
                    ),
                    None,
                ));
            }
        };
        Ok(result)
    }

    async fn send_message(
        &self,
        args: SendMessageArgs,
        cancel: CancellationToken,
    ) -> CallToolResult {
        if args.message.trim().is_empty() {
            return refusal("the message is empty: give the text to send in `message`");
        }
        let session = args.session.as_deref().unwrap_or(DEFAULT_SESSION);
        let session: SessionKey = match session.parse() {
            Ok(session) => session,
            Err(error) => {
                return refusal(format!(
                    "'{session}' is not a session key ({error}); use `channel:peer`, such as `mcp:notes`"
                ));
            }
        };
        if let Some(agent) = &args.agent {
            let agents = self.host.agents();
            if !agents.iter().any(|a| &a.name == agent) {
                let names: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
                return refusal(format!(
                    "Flynn has no agent '{agent}'; its agents are: {}",
                    names.join(", ")
                ));
            }
        }
        let outgoing = Outgoing {
            session,
            message: args.message,
            agent: args.agent,
        };
        match self.host.send(outgoing, cancel).await {
            Ok(outcome) => {
                let mut text = if outcome.reply.trim().is_empty() {
                    "(the agent ended its turn without a text answer)".to_owned()
                } else {
                    outcome.reply
                };
                if let Some(warning) = outcome.warning {
                    text.push_str(&format!("\n\n[Flynn: {warning}]"));
                }
                CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)])
            }
            Err(error) => refusal(error.to_string()),
        }
    }

    async fn list_sessions(&self, args: ListSessionsArgs) -> CallToolResult {
        let limit = args
            .limit
            .unwrap_or(SESSIONS_DEFAULT)
            .clamp(1, SESSIONS_MAX);
        match self.host.sessions(limit).await {
            Ok(sessions) => structured(&SessionsOutput { sessions }),
            Err(error) => refusal(error.to_string()),
        }
    }

    async fn read_history(&self, args: ReadHistoryArgs) -> CallToolResult {
        let limit = args.limit.unwrap_or(HISTORY_DEFAULT).clamp(1, HISTORY_MAX);
        let session: SessionKey = match args.session.parse() {
            Ok(session) => session,
            Err(error) => {
                return refusal(format!(
                    "'{}' is not a session key ({error}); list_sessions gives the keys",
                    args.session
                ));
            }
        };
        match self.host.history(&session, limit).await {
            Ok(Some(page)) => structured(&HistoryOutput {
                session: session.to_string(),
                messages: page.messages.into_iter().map(history_message).collect(),
                more_before: page.more_before,
            }),
            Ok(None) => {
                let known = match self.host.sessions(SESSIONS_NAMED).await {
                    Ok(sessions) if sessions.is_empty() => {
                        " (it has no sessions at all yet)".to_owned()
                    }
                    Ok(sessions) => {
                        let names: Vec<&str> =
                            sessions.iter().map(|s| s.session.as_str()).collect();
                        format!(
                            "; the most recent are: {} (list_sessions lists them all)",
                            names.join(", ")
                        )
                    }
                    Err(error) => format!(" (and the sessions cannot be listed: {error})"),
                };
                refusal(format!("Flynn has no session '{session}'{known}"))
            }
            Err(error) => refusal(error.to_string()),
        }
    }

    async fn search_memory(&self, args: SearchMemoryArgs) -> CallToolResult {
        if args.query.trim().is_empty() {
            return refusal("the query is empty: give words to look for in `query`");
        }
        let limit = args.limit.unwrap_or(MEMORY_DEFAULT).clamp(1, MEMORY_MAX);
        match self.host.search_memory(&args.query, limit).await {
            Ok(hits) => structured(&MemoryOutput { hits }),
            Err(error) => refusal(error.to_string()),
        }
    }
}

impl ServerHandler for FlynnServer {
    fn get_info(&self) -> ServerConfig {
        server_config()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.to_vec()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|tool| tool.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.call(&request.name, request.arguments, context.ct)
            .await
            .map(CallToolResponse::from)
    }
}

/// Why serving MCP stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The client on the other end did not complete the MCP handshake.
    #[error("the MCP handshake with the client failed: {0}")]
    Handshake(String),
    /// The daemon's `/mcp` could not be reached.
    #[error("cannot reach Flynn's MCP endpoint at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    /// The daemon refused the token.
    #[error(
        "the daemon at {url} refused the token (set FLYNN_GATEWAY_TOKEN, or run where FLYNN_HOME holds gateway.token)"
    )]
    Unauthorized { url: String },
    /// The connection failed while serving.
    #[error("the MCP connection failed: {0}")]
    Connection(String),
}

impl ServeError {
    /// Whether the daemon refused the credentials.
    pub fn is_auth(&self) -> bool {
        matches!(self, ServeError::Unauthorized { .. })
    }
}

/// Serves `host` on this process's stdin and stdout until the client
/// closes them or `stop` is cancelled. Nothing else may write to stdout
/// meanwhile.
pub async fn serve_stdio(
    host: Arc<dyn FlynnHost>,
    stop: CancellationToken,
) -> Result<(), ServeError> {
    serve_on_stdio(FlynnServer::new(host), stop).await
}

async fn serve_on_stdio<S: ServerHandler>(
    server: S,
    stop: CancellationToken,
) -> Result<(), ServeError> {
    let running = server
        .serve_with_ct(rmcp::transport::stdio_pipes(), stop)
        .await
        .map_err(|error| ServeError::Handshake(error.to_string()))?;
    running
        .waiting()
        .await
        .map(|_| ())
        .map_err(|error| ServeError::Connection(error.to_string()))
}

/// The streamable HTTP service for `host`, to mount at a route (the
/// gateway's `/mcp`, behind its token). Each MCP session gets its own
/// [`FlynnServer`]; cancelling `stop` ends them all.
///
/// `allowed_hosts` are the `Host` names (or `host:port`) requests may
/// carry (DNS rebinding); empty accepts any, for a caller that checks the
/// host itself.
pub fn http_service(
    host: Arc<dyn FlynnHost>,
    stop: CancellationToken,
    allowed_hosts: Vec<String>,
) -> StreamableHttpService<FlynnServer, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .with_cancellation_token(stop);
    StreamableHttpService::new(
        move || Ok(FlynnServer::new(host.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// Serves on stdin and stdout whatever the MCP endpoint at `url` (a
/// daemon's `/mcp`) serves, so a stdio-only client shares the daemon's
/// sessions: `tools/list` and `tools/call` are passed on. Ends when either
/// side closes or `stop` is cancelled.
pub async fn proxy_stdio(
    url: &str,
    token: Option<&str>,
    stop: CancellationToken,
) -> Result<(), ServeError> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(token) = token {
        config = config.auth_header(token.to_owned());
    }
    let client = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|error| ServeError::Unreachable {
            url: url.to_owned(),
            reason: error.to_string(),
        })?;
    let transport = StreamableHttpClientTransport::with_client(client, config);
    let identity = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("flynn-mcp-proxy", env!("CARGO_PKG_VERSION")),
    );
    let upstream = identity
        .serve_with_ct(transport, stop.child_token())
        .await
        .map_err(|error| {
            if error.is_authorization_required() {
                ServeError::Unauthorized {
                    url: url.to_owned(),
                }
            } else {
                ServeError::Unreachable {
                    url: url.to_owned(),
                    reason: error.to_string(),
                }
            }
        })?;
    let info = upstream
        .peer()
        .peer_info()
        .and_then(|info| info.server_info.clone())
        .unwrap_or_else(|| Implementation::new("flynn", env!("CARGO_PKG_VERSION")));
    let proxy = Proxy {
        upstream: upstream.peer().clone(),
        info,
    };
    let upstream_stop = upstream.cancellation_token();
    let served = serve_on_stdio(proxy, stop).await;
    upstream_stop.cancel();
    let _ = upstream.waiting().await;
    served
}

/// Passes `tools/list` and `tools/call` on to another MCP server.
struct Proxy {
    upstream: Peer<RoleClient>,
    info: Implementation,
}

fn upstream_error(error: rmcp::ServiceError) -> McpError {
    match error {
        rmcp::ServiceError::McpError(error) => error,
        other => McpError::internal_error(format!("the daemon did not answer: {other}"), None),
    }
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> ServerConfig {
        server_config().with_server_info(self.info.clone())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.upstream
            .list_tools(request)
            .await
            .map_err(upstream_error)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Dropping the upstream call (the client cancelled) cancels it
        // at the daemon too.
        tokio::select! {
            result = self.upstream.call_tool_once(request) => result.map_err(upstream_error),
            () = context.ct.cancelled() => Err(McpError::internal_error("cancelled", None)),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Mutex;

    use super::*;
    use flynn_protocol::Usage;
    use serde_json::{Value, json};

    /// A host that answers from fixed data and records what it was sent.
    #[derive(Default)]
    struct Fixed {
        sent: Mutex<Vec<Outgoing>>,
        memory_off: bool,
    }

    #[async_trait]
    impl FlynnHost for Fixed {
        fn agents(&self) -> Vec<AgentSummary> {
            vec![
                AgentSummary {
                    name: "main".into(),
                    tier: Tier::Default,
                    model: None,
                    default: true,
                },
                AgentSummary {
                    name: "coder".into(),
                    tier: Tier::Complex,
                    model: None,
                    default: false,
                },
            ]
        }

        async fn send(
            &self,
            message: Outgoing,
            _cancel: CancellationToken,
        ) -> Result<TurnOutcome, HostError> {
            let reply = format!("echo: {}", message.message);
            self.sent.lock().unwrap().push(message);
            Ok(TurnOutcome {
                reply,
                provider: "fake".into(),
                model: "m".into(),
                usage: Usage::default(),
                cost_usd: None,
                tool_calls: Vec::new(),
                warning: None,
                timing: None,
            })
        }

        async fn sessions(&self, limit: usize) -> Result<Vec<SessionSummary>, HostError> {
            let all = ["mcp:default", "cli:default"].map(|key| SessionSummary {
                session: key.into(),
                messages: 2,
                updated_at: 1,
                agent: None,
                title: None,
            });
            Ok(all.into_iter().take(limit).collect())
        }

        async fn history(
            &self,
            session: &SessionKey,
            _limit: usize,
        ) -> Result<Option<HistoryPage>, HostError> {
            if session.as_str() != "mcp:default" {
                return Ok(None);
            }
            Ok(Some(HistoryPage {
                messages: vec![
                    HistoryEntry {
                        seq: 1,
                        created_at: 10,
                        message: Message::user("hi"),
                    },
                    HistoryEntry {
                        seq: 2,
                        created_at: 11,
                        message: Message {
                            role: Role::Assistant,
                            content: vec![
                                ContentBlock::text("x".repeat(MESSAGE_TEXT_MAX + 3)),
                                ContentBlock::ToolUse {
                                    id: "c1".into(),
                                    name: "file.read".into(),
                                    input: json!({}),
                                },
                            ],
                        },
                    },
                ],
                more_before: false,
            }))
        }

        async fn search_memory(
            &self,
            query: &str,
            _limit: usize,
        ) -> Result<Vec<MemoryHit>, HostError> {
            if self.memory_off {
                return Err(HostError::MemoryOff);
            }
            Ok(vec![MemoryHit {
                file: "user.md".into(),
                start_line: 1,
                end_line: 2,
                heading: None,
                text: format!("about {query}"),
                score: 1.0,
            }])
        }
    }

    fn server(host: Fixed) -> (FlynnServer, Arc<Fixed>) {
        let host = Arc::new(host);
        (FlynnServer::new(host.clone()), host)
    }

    async fn call(server: &FlynnServer, name: &str, args: Value) -> CallToolResult {
        let Value::Object(args) = args else {
            panic!("arguments are an object")
        };
        server
            .call(name, Some(args), CancellationToken::new())
            .await
            .unwrap()
    }

    fn text(result: &CallToolResult) -> String {
        result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect()
    }

    #[test]
    fn the_tools_have_strict_schemas_and_read_tools_are_marked_read_only() {
        let tools = tools();
        let summary: Vec<(&str, Option<bool>, bool)> = tools
            .iter()
            .map(|t| {
                (
                    t.name.as_ref(),
                    t.annotations.as_ref().and_then(|a| a.read_only_hint),
                    t.output_schema.is_some(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("send_message", Some(false), false),
                ("list_sessions", Some(true), true),
                ("read_history", Some(true), true),
                ("search_memory", Some(true), true),
                ("list_agents", Some(true), true),
            ]
        );
        let send = Value::Object((*tools[0].input_schema).clone());
        assert_eq!(send["type"], "object");
        assert_eq!(send["required"], json!(["message"]));
        assert_eq!(send["additionalProperties"], json!(false));
        assert!(
            send["properties"]["session"]["description"]
                .as_str()
                .unwrap()
                .contains("mcp:default")
        );
    }

    #[tokio::test]
    async fn send_message_uses_the_default_session_and_checks_the_agent() {
        let (server, host) = server(Fixed::default());
        let result = call(&server, "send_message", json!({"message": "hello"})).await;
        assert_eq!(
            (result.is_error, text(&result)),
            (Some(false), "echo: hello".into())
        );
        let result = call(
            &server,
            "send_message",
            json!({"message": "hi", "agent": "coder", "session": "mcp:work"}),
        )
        .await;
        assert_eq!(result.is_error, Some(false));
        let sent: Vec<(String, Option<String>)> = host
            .sent
            .lock()
            .unwrap()
            .iter()
            .map(|m| (m.session.to_string(), m.agent.clone()))
            .collect();
        assert_eq!(
            sent,
            [
                ("mcp:default".to_owned(), None),
                ("mcp:work".to_owned(), Some("coder".to_owned()))
            ]
        );

        let result = call(
            &server,
            "send_message",
            json!({"message": "hi", "agent": "nope"}),
        )
        .await;
        assert_eq!(
            (result.is_error, text(&result)),
            (
                Some(true),
                "Flynn has no agent 'nope'; its agents are: main, coder".into()
            )
        );
        let result = call(&server, "send_message", json!({"message": "  "})).await;
        assert_eq!(result.is_error, Some(true));
        let result = call(
            &server,
            "send_message",
            json!({"message": "hi", "session": "nokey"}),
        )
        .await;
        assert!(
            text(&result).starts_with("'nokey' is not a session key"),
            "{}",
            text(&result)
        );
        let result = call(&server, "send_message", json!({"text": "hi"})).await;
        assert!(
            text(&result).starts_with("invalid arguments for send_message: unknown field `text`"),
            "{}",
            text(&result)
        );
        assert_eq!(
            host.sent.lock().unwrap().len(),
            2,
            "refused calls send nothing"
        );
    }

    #[tokio::test]
    async fn read_history_renders_messages_and_names_sessions_that_exist() {
        let (server, _) = server(Fixed::default());
        let result = call(&server, "read_history", json!({"session": "mcp:default"})).await;
        let output = result.structured_content.clone().unwrap();
        assert_eq!(
            output["messages"][0],
            json!({"seq": 1, "role": "user", "created_at": 10, "text": "hi"})
        );
        assert_eq!(output["messages"][1]["tool_calls"], json!(["file.read"]));
        assert!(
            output["messages"][1]["text"]
                .as_str()
                .unwrap()
                .ends_with("… [3 more characters]")
        );
        let result = call(&server, "read_history", json!({"session": "web:nobody"})).await;
        assert_eq!(
            (result.is_error, text(&result)),
            (
                Some(true),
                "Flynn has no session 'web:nobody'; the most recent are: mcp:default, cli:default (list_sessions lists them all)".into()
            )
        );
    }

    #[tokio::test]
    async fn memory_off_and_unknown_tools_are_explained() {
        let (server, _) = server(Fixed {
            memory_off: true,
            ..Fixed::default()
        });
        let result = call(&server, "search_memory", json!({"query": "cats"})).await;
        assert_eq!(
            (result.is_error, text(&result)),
            (
                Some(true),
                "memory is turned off in this Flynn (memory.enabled is false)".into()
            )
        );
        let error = server
            .call("shell", None, CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(
            error.message,
            "Flynn has no tool 'shell' (its tools: send_message, list_sessions, read_history, search_memory, list_agents)"
        );
    }

    #[tokio::test]
    async fn list_tools_return_structured_content() {
        let (server, _) = server(Fixed::default());
        let result = call(&server, "list_sessions", json!({"limit": 1})).await;
        assert_eq!(
            result.structured_content,
            Some(json!({"sessions": [{"session": "mcp:default", "messages": 2, "updated_at": 1}]}))
        );
        let result = call(&server, "list_agents", json!({})).await;
        assert_eq!(
            result.structured_content.unwrap()["agents"][1],
            json!({"name": "coder", "tier": "complex", "default": false})
        );
        let result = call(&server, "search_memory", json!({"query": "cats"})).await;
        assert_eq!(
            result.structured_content.unwrap()["hits"][0]["text"],
            "about cats"
        );
    }
}
