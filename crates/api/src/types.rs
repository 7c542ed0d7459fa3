//! The parameter, result and notification types of every method.

use flynn_protocol::config::{McpStart, ModelRef};
use flynn_protocol::{
    EventEnvelope, Message, Purpose, Resolution, SessionKey, Tier, ToolEffect, TurnId, TurnOutcome,
    Usage,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a turn started over the gateway answers tool calls that need a
/// person's confirmation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Approval {
    /// Ask the gateway's clients: a `confirmation_requested` event, answered
    /// with `confirmations.resolve` (or denied when it times out).
    #[default]
    Ask,
    /// Approve every such call (`flynn send --yes`).
    ApproveAll,
    /// Deny every such call.
    Deny,
}

/// Parameters of `agent.send` and `sessions.send`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendParams {
    /// The conversation, `channel:peer` (default `gateway:default`).
    #[serde(default = "default_session")]
    pub session: SessionKey,
    /// The message text; a chat command (`/status`) is answered at once.
    pub message: String,
    /// Overrides the session's and the agent's tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// One model as `provider/model`, with no fallback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub model: Option<ModelRef>,
    /// Answer with this agent instead of the routed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default)]
    pub approval: Approval,
}

/// The session a client gets when it names none (the gateway gives each
/// token its own in its place).
pub fn default_session() -> SessionKey {
    SessionKey::new("gateway", "default")
        .unwrap_or_else(|_| unreachable!("`gateway:default` is a valid session key"))
}

/// What `sessions.send` returns: the accepted turn and how it ended, or
/// the reply of a chat command.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SendResult {
    pub session: SessionKey,
    /// The turn; absent for a chat command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnId>,
    /// The chat command answered, when the message was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    pub outcome: TurnOutcome,
}

/// A notification of `agent.send` and `sessions.subscribe`: an event, or
/// a note that this client fell behind and events were skipped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Notification {
    Event(Box<EventEnvelope>),
    Lagged {
        session: Option<SessionKey>,
        /// Events this client missed.
        skipped: u64,
    },
}

/// Parameters naming one session.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionParams {
    pub session: SessionKey,
}

/// Parameters of `agent.cancel`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelParams {
    pub session: SessionKey,
    /// Only this turn (running or waiting); default: the running one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnId>,
}

/// Result of `agent.cancel`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CancelResult {
    /// Whether a turn was cancelled.
    pub cancelled: bool,
}

/// Parameters of `agent.status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusParams {
    /// Only this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionKey>,
}

/// Result of `agent.status`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StatusResult {
    /// Sessions with a lane (recently active) right now.
    pub active_sessions: usize,
    /// Turns running now.
    pub running: Vec<RunningTurn>,
    /// Turns accepted and not finished (running or waiting).
    pub open_turns: Vec<OpenTurn>,
    /// Whether the daemon is shutting down (new messages are refused).
    pub draining: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunningTurn {
    pub session: SessionKey,
    pub turn: TurnId,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OpenTurn {
    pub session: SessionKey,
    pub turn: TurnId,
    /// `pending` or `running`.
    pub status: String,
    pub agent: String,
    /// Unix milliseconds.
    pub created_at: i64,
}

/// One entry of `sessions.list`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SessionSummary {
    pub key: SessionKey,
    pub message_count: u64,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds.
    pub updated_at: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_channel: Option<String>,
}

/// Parameters of `sessions.history`: the whole history, one page before
/// a cursor, or what came after one.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryParams {
    pub session: SessionKey,
    /// The last `limit` messages before this sequence number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<u64>,
    /// The messages stored after this sequence number (a `cursor` from an
    /// earlier read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
    /// Messages per page (default 100, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// Result of `sessions.history`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct HistoryResult {
    pub session: SessionKey,
    pub messages: Vec<HistoryMessage>,
    /// The highest sequence number returned: pass it as `after` to read
    /// what comes next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<u64>,
    /// Whether older messages exist before this page (pass the first
    /// message's `seq` as `before`).
    pub more_before: bool,
    /// The files the turns of these messages sent to the chat (each as
    /// its `media` event named it, served at `/media/<id>`), oldest first:
    /// a client shows each after the last message of its turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<HistoryFile>,
}

/// A file a turn sent, in `sessions.history`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryFile {
    pub turn: TurnId,
    #[serde(flatten)]
    pub file: flynn_protocol::MediaFile,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct HistoryMessage {
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnId>,
    /// Unix milliseconds.
    pub created_at: i64,
    /// The message: `role` and `content` blocks.
    pub message: Message,
    /// Who sent it (`owner`, `guest:<channel>:<id>`,
    /// `automation:<source>`): on each turn's user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<flynn_protocol::Principal>,
}

/// Result of `sessions.reset`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ResetResult {
    /// Whether the session existed.
    pub existed: bool,
}

/// Parameters of `sessions.subscribe`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscribeParams {
    /// These sessions; empty or absent: every session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<SessionKey>,
}

/// Parameters of `tools.list`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsListParams {
    /// Mark which tools this agent may use (default: the default agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ToolInfo {
    pub name: String,
    pub description: String,
    pub effect: ToolEffect,
    /// Whether the agent's policy offers it.
    pub allowed: bool,
    /// Whether a hook holds its calls for confirmation.
    pub needs_confirmation: bool,
    /// JSON Schema of its input.
    pub input_schema: Value,
}

/// Parameters of `tools.invoke`: one tool call outside any turn, under
/// the agent's policy, hooks and audit log, like a model's call.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InvokeParams {
    pub name: String,
    #[serde(default)]
    pub input: Value,
    /// The agent whose policy and workspace apply (default: the default
    /// agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The session the call is recorded under (default `gateway:tools`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionKey>,
    /// Confirm the call yourself when a hook asks for confirmation
    /// (default: such calls are denied).
    #[serde(default)]
    pub confirm: bool,
}

/// Result of `tools.invoke`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct InvokeResult {
    pub ok: bool,
    /// The output as a model would see it (truncated, secrets redacted).
    pub output: String,
}

/// A tool call waiting for a person (`confirmations.list`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PendingConfirmation {
    /// The server's id for this waiting call (random, unguessable): pass
    /// it to `confirmations.resolve`.
    pub id: String,
    /// The model's id for the call (`id` of the `confirmation_requested`
    /// event); a model may reuse one.
    pub call_id: String,
    pub session: SessionKey,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnId>,
    pub agent: String,
    pub tool: String,
    /// The call's whole input.
    pub input: Value,
    /// SHA-256 (hex) of `input` as the server serialises it: pass it back
    /// to `confirmations.resolve` so that only this input is approved.
    pub input_digest: String,
    pub effect: ToolEffect,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Unix milliseconds when the call is denied if nobody answers.
    pub expires_at: i64,
}

/// Parameters of `confirmations.resolve`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveParams {
    pub session: SessionKey,
    /// The id from `confirmations.list` (or, deprecated, the model's call
    /// id from `confirmation_requested`, accepted while it names one
    /// waiting call only).
    pub id: String,
    pub approve: bool,
    /// The `input_digest` of the input the person was shown: refused when
    /// the waiting call's input is another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_digest: Option<String>,
    /// Shown to the model when denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Result of `confirmations.resolve`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ResolveResult {
    pub resolution: Resolution,
}

/// Parameters of `config.get`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigGetParams {
    /// Dotted path (`models.tiers.default`); empty: the whole config.
    #[serde(default)]
    pub path: String,
}

/// Parameters of `config.patch`: values to set by dotted path, applied to
/// the config file (comments and layout kept where the key exists),
/// validated before anything is written.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigPatchParams {
    pub set: Vec<ConfigSet>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ConfigSet {
    pub path: String,
    pub value: Value,
}

/// Result of `config.patch`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ConfigPatchResult {
    /// The file written.
    pub file: String,
    /// Whether the daemon must restart for the change to apply (every
    /// change today: the running config is not swapped live).
    pub restart_required: bool,
}

/// Parameters of `usage.summary`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageParams {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionKey>,
    /// Also usage per UTC day and tier over every session, for this many
    /// days up to today (at most 366).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub days: Option<u32>,
}

/// Result of `usage.summary`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct UsageSummary {
    pub tiers: Vec<TierUsage>,
    pub purposes: Vec<PurposeUsage>,
    pub total: UsageTotals,
    /// With `days`: per day and tier, oldest first; days without calls
    /// are left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub daily: Vec<DayUsage>,
}

/// Usage of one tier on one UTC day.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DayUsage {
    /// `YYYY-MM-DD`.
    pub day: String,
    pub tier: Tier,
    #[serde(flatten)]
    pub total: UsageTotals,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct UsageTotals {
    pub calls: u64,
    pub usage: Usage,
    pub cost_usd: f64,
    /// Calls whose price is unknown (not in `cost_usd`).
    pub unpriced_calls: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TierUsage {
    pub tier: Tier,
    #[serde(flatten)]
    pub total: UsageTotals,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PurposeUsage {
    pub tier: Tier,
    pub purpose: Purpose,
    #[serde(flatten)]
    pub total: UsageTotals,
}

/// Result of `system.health` (and the body of `GET /healthz`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// `ok`, or `draining` while shutting down.
    pub status: String,
    pub version: String,
    pub uptime_secs: u64,
    pub active_sessions: usize,
    pub running_turns: usize,
    pub pending_confirmations: usize,
}

/// Result of `system.version`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct VersionInfo {
    pub version: String,
    /// The protocol's version: grows with each incompatible change.
    pub protocol: u32,
    /// Who the gateway takes the caller for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientInfo>,
}

/// The calling client as the gateway sees it (`system.version`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ClientInfo {
    /// The token's name (`default` for the daemon's own), or the
    /// Tailscale login.
    pub name: String,
    pub scopes: Vec<flynn_protocol::config::TokenScope>,
    /// The channel of its own sessions (`token-<name>`); with `admin`
    /// every session is its own.
    pub namespace: String,
    pub admin: bool,
}

/// Result of `system.restart`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RestartResult {
    /// Always true: the daemon drains and starts again.
    pub restarting: bool,
}

/// Parameters of `providers.status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProvidersParams {
    /// Ask again even when an answer from the last 30 seconds is kept.
    #[serde(default)]
    pub refresh: bool,
}

/// One configured provider and whether it answers (its model list asked
/// with the configured key; no model call).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ProviderStatus {
    pub name: String,
    pub kind: String,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// Models the server lists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Unix milliseconds of the check.
    pub checked_at: i64,
}

/// Parameters of `system.logs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogsParams {
    /// Lines wanted, newest last (default 200, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

/// Result of `system.logs`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LogsResult {
    /// Whether this process keeps its log lines (the daemon does; an
    /// application embedding the gateway may not).
    pub captured: bool,
    pub lines: Vec<String>,
}

/// One chat channel's health (`channels.status`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChannelInfo {
    pub name: String,
    /// `connecting`, `connected`, `retrying`, `stopped`, or `unavailable`
    /// (configured, but this build lacks the channel's cargo feature).
    pub state: String,
    /// The bot as the platform names it, once connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Why the last connection ended, if it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The platform refused the token or secret.
    pub unauthorized: bool,
    /// Unix milliseconds of the last state change.
    pub since: i64,
    /// Reconnections after failures since the daemon started.
    pub restarts: u64,
    /// Deliveries received since the daemon started.
    pub received: u64,
    /// Milliseconds until the next attempt, while retrying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
}

/// The cluster this daemon is a node of (`cluster.status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterStatus {
    /// This daemon's node id; `None` when its store is not shared (SQLite).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub this_node: Option<String>,
    /// Every node the database knows, oldest first (a stopped node is
    /// kept for an hour, not alive).
    pub nodes: Vec<ClusterNode>,
}

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterNode {
    /// `host/pid/random`.
    pub id: String,
    pub host: String,
    pub pid: u32,
    /// `daemon`, or `command` for a `flynn send` running a turn itself.
    pub kind: String,
    /// It renewed its presence within the last 10 s.
    pub alive: bool,
    /// Milliseconds since it last renewed its presence.
    pub silent_ms: i64,
    /// Unix milliseconds, by the database's clock.
    pub started_at: i64,
    /// Sessions whose turns it runs now.
    pub sessions: u64,
    /// The work it does for all: `automation`, `channel:<name>`.
    pub roles: Vec<String>,
}

/// One MCP server Flynn uses as a client (`mcp.status`): an enabled
/// server of `mcp.servers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct McpServerStatus {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// The command line (stdio) or the URL (HTTP); never a header.
    pub target: String,
    /// `boot` (started with the daemon) or `lazy` (before the first turn
    /// that may use it).
    pub start: McpStart,
    /// `idle` (lazy, not needed yet), `starting`, `running`, `restarting`
    /// (it died or could not start; see `error`), or `stopped`.
    pub phase: String,
    /// The server's own name and version, once it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// How many tools it offers (as `<name>.<tool>`).
    pub tools: usize,
    /// Why it last stopped or failed, with the last line it wrote to
    /// stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Seconds until the next start attempt, while restarting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_secs: Option<u64>,
    /// Times it was started again after dying or failing.
    pub restarts: u32,
}

/// Result of `pairing.list`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PairingList {
    /// Codes unknown senders were given, waiting for approval.
    pub pending: Vec<PairingCode>,
    /// Senders let in by pairing.
    pub approved: Vec<PairedSender>,
}

/// A pairing code waiting for the owner.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PairingCode {
    pub channel: String,
    pub code: String,
    pub sender: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Unix milliseconds.
    pub created_at: i64,
    /// Unix milliseconds.
    pub expires_at: i64,
}

/// A sender let in by pairing.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PairedSender {
    pub channel: String,
    pub sender: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Unix milliseconds.
    pub approved_at: i64,
    /// Promoted to owner: the sender's messages have the owner's rights.
    #[serde(default)]
    pub owner: bool,
}

/// Parameters of `pairing.approve`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PairingApproveParams {
    /// `telegram`, `discord`, `slack` or `whatsapp`.
    pub channel: String,
    /// The code the sender was given (case and spaces do not matter).
    pub code: String,
    /// Make the sender an owner, not a guest.
    #[serde(default)]
    pub owner: bool,
}

/// Parameters of `pairing.revoke`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PairingRevokeParams {
    pub channel: String,
    /// The sender's platform id.
    pub sender: String,
}

/// Result of `pairing.revoke`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PairingRevokeResult {
    /// False when the sender was not approved by pairing.
    pub revoked: bool,
}
