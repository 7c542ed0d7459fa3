//! The protocol's machine-readable description: every method with its
//! parameter and result schemas, the notifications and the error codes
//! (`docs/protocol.schema.json`, written by `cargo xtask codegen`).

use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Value, json};

use crate::api::*;
use crate::codes;

fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Value {
    serde_json::to_value(generator.subschema_for::<T>()).unwrap_or(Value::Null)
}

/// The description, as JSON.
pub fn protocol_schema() -> Value {
    let mut g = SchemaGenerator::default();
    let none = json!({"type": "null", "description": "no parameters (omit them, or send {})"});
    let mut methods = json!([
        {"name": "agent.send", "kind": "subscription", "notification": "agent.event", "unsubscribe": "agent.unsubscribe",
         "summary": "Accepts a message and streams its turn's events; the last is a run_state of complete, cancelled or error (a chat command: one command event).",
         "params": schema::<SendParams>(&mut g), "notification_params": schema::<Notification>(&mut g)},
        {"name": "agent.cancel", "kind": "method", "summary": "Cancels a session's running turn, or one turn by id (running or waiting).",
         "params": schema::<CancelParams>(&mut g), "result": schema::<CancelResult>(&mut g)},
        {"name": "agent.status", "kind": "method", "summary": "Running and open turns, active sessions, whether the daemon is draining.",
         "params": schema::<StatusParams>(&mut g), "result": schema::<StatusResult>(&mut g)},
        {"name": "sessions.list", "kind": "method", "summary": "Every session, most recently updated first.",
         "params": none, "result": schema::<Vec<SessionSummary>>(&mut g)},
        {"name": "sessions.history", "kind": "method", "summary": "A session's messages: the last page, a page before a cursor, or what came after one.",
         "params": schema::<HistoryParams>(&mut g), "result": schema::<HistoryResult>(&mut g)},
        {"name": "sessions.send", "kind": "method", "summary": "Like agent.send, answering once the turn is over (for HTTP clients).",
         "params": schema::<SendParams>(&mut g), "result": schema::<SendResult>(&mut g)},
        {"name": "sessions.reset", "kind": "method", "summary": "Deletes a session's history and metadata (usage records stay).",
         "params": schema::<SessionParams>(&mut g), "result": schema::<ResetResult>(&mut g)},
        {"name": "sessions.subscribe", "kind": "subscription", "notification": "sessions.event", "unsubscribe": "sessions.unsubscribe",
         "summary": "Every event of the named sessions, or of all sessions.",
         "params": schema::<SubscribeParams>(&mut g), "notification_params": schema::<Notification>(&mut g)},
        {"name": "tools.list", "kind": "method", "summary": "Every registered tool, with whether the agent's policy allows it.",
         "params": schema::<ToolsListParams>(&mut g), "result": schema::<Vec<ToolInfo>>(&mut g)},
        {"name": "tools.invoke", "kind": "method", "summary": "Runs one tool call outside a turn, under the agent's policy, hooks and audit log.",
         "params": schema::<InvokeParams>(&mut g), "result": schema::<InvokeResult>(&mut g)},
        {"name": "confirmations.list", "kind": "method", "summary": "Tool calls of gateway turns waiting for a person.",
         "params": none, "result": schema::<Vec<PendingConfirmation>>(&mut g)},
        {"name": "confirmations.resolve", "kind": "method", "summary": "Approves or denies one waiting tool call.",
         "params": schema::<ResolveParams>(&mut g), "result": schema::<ResolveResult>(&mut g)},
        {"name": "config.get", "kind": "method", "summary": "The running config (or one value by dotted path), secrets masked.",
         "params": schema::<ConfigGetParams>(&mut g), "result": {"description": "any JSON value"}},
        {"name": "config.patch", "kind": "method", "summary": "Sets values in the config file by dotted path, keeping its comments; validated before it is written; applies after a restart.",
         "params": schema::<ConfigPatchParams>(&mut g), "result": schema::<ConfigPatchResult>(&mut g)},
        {"name": "usage.summary", "kind": "method", "summary": "Tokens and cost per tier and per purpose, over every session or one.",
         "params": schema::<UsageParams>(&mut g), "result": schema::<UsageSummary>(&mut g)},
        {"name": "system.health", "kind": "method", "summary": "Status, version, uptime and load.",
         "params": none, "result": schema::<Health>(&mut g)},
        {"name": "system.version", "kind": "method", "summary": "The daemon's and the protocol's versions.",
         "params": none, "result": schema::<VersionInfo>(&mut g)},
        {"name": "system.restart", "kind": "method", "summary": "Drains (running turns finish) and starts the daemon again.",
         "params": none, "result": schema::<RestartResult>(&mut g)},
        {"name": "system.logs", "kind": "method", "summary": "The daemon's recent log lines (the last 1000 are kept), newest last.",
         "params": schema::<LogsParams>(&mut g), "result": schema::<LogsResult>(&mut g)},
        {"name": "providers.status", "kind": "method", "summary": "Whether each configured provider answers (its model list, asked with the key; cached 30 s unless refresh).",
         "params": schema::<ProvidersParams>(&mut g), "result": schema::<Vec<ProviderStatus>>(&mut g)},
        {"name": "channels.status", "kind": "method", "summary": "Each chat channel's health: connected, retrying (with the last error), unavailable; the web chat included.",
         "params": none, "result": schema::<Vec<ChannelInfo>>(&mut g)},
        {"name": "mcp.status", "kind": "method", "summary": "Each enabled MCP server Flynn uses as a client: its phase, tool count, last error and next retry.",
         "params": none, "result": schema::<Vec<McpServerStatus>>(&mut g)},
        {"name": "pairing.list", "kind": "method", "summary": "Pairing codes waiting for approval, and the senders approved by pairing.",
         "params": none, "result": schema::<PairingList>(&mut g)},
        {"name": "pairing.approve", "kind": "method", "summary": "Approves a pairing code: its sender may talk to Flynn on that channel from now on.",
         "params": schema::<PairingApproveParams>(&mut g), "result": schema::<PairedSender>(&mut g)},
        {"name": "pairing.revoke", "kind": "method", "summary": "Takes back a sender's approval by pairing.",
         "params": schema::<PairingRevokeParams>(&mut g), "result": schema::<PairingRevokeResult>(&mut g)},
    ]);
    // Each method's scope, from the one table the gateway enforces.
    if let Some(list) = methods.as_array_mut() {
        for method in list {
            let scopes: Vec<&str> = method["name"]
                .as_str()
                .and_then(crate::scope::of_method)
                .unwrap_or_default()
                .iter()
                .map(|scope| scope.as_str())
                .collect();
            method["scopes"] = json!(scopes);
        }
    }
    let errors = json!([
        {"code": -32700, "kind": "parse_error", "meaning": "the frame is not JSON"},
        {"code": -32600, "kind": "invalid_request", "meaning": "the frame is not a JSON-RPC 2.0 request"},
        {"code": -32601, "kind": "method_not_found", "meaning": "no such method"},
        {"code": -32602, "kind": "invalid_params", "meaning": "the parameters are missing, malformed or have unknown fields"},
        {"code": -32603, "kind": "internal_error", "meaning": "the server failed to answer (JSON-RPC's own)"},
        {"code": -32007, "kind": "oversized", "meaning": "the request is larger than gateway.max_request_bytes"},
        {"code": codes::INTERNAL, "kind": "internal", "meaning": "anything else that went wrong inside Flynn"},
        {"code": codes::RATE_LIMITED, "kind": "rate_limited", "meaning": "too many calls from this client; data.retry_after_secs says when to retry"},
        {"code": codes::REFUSED, "kind": "refused", "meaning": "refused before it was accepted: unknown agent, full queue, empty message"},
        {"code": codes::NOT_FOUND, "kind": "not_found", "meaning": "no such session message, confirmation, tool or agent"},
        {"code": codes::SHUTTING_DOWN, "kind": "shutting_down", "meaning": "the daemon is draining and takes no new messages"},
        {"code": codes::CONFIG, "kind": "config", "meaning": "the config, or a change to it, is invalid"},
        {"code": codes::PROVIDER, "kind": "provider", "meaning": "the model provider failed after retries and fallback"},
        {"code": codes::STORAGE, "kind": "storage", "meaning": "the session store failed"},
        {"code": codes::CANCELLED, "kind": "cancelled", "meaning": "the turn was cancelled"},
        {"code": codes::FORBIDDEN, "kind": "forbidden", "meaning": "the token's scopes do not allow the call, or the session is not its own; data.scope names the scope needed"},
    ]);
    let definitions = serde_json::to_value(g.definitions()).unwrap_or(Value::Null);
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Flynn gateway protocol",
        "protocol_version": crate::PROTOCOL_VERSION,
        "transport": "JSON-RPC 2.0 at /rpc: WebSocket (subscriptions) or HTTP POST (methods). Parameters by name, as one object.",
        "methods": methods,
        "errors": errors,
        "$defs": definitions,
    })
}

/// [`protocol_schema`] pretty-printed with a trailing newline.
pub fn protocol_schema_json() -> String {
    let mut out = serde_json::to_string_pretty(&protocol_schema()).unwrap_or_default();
    out.push('\n');
    out
}
