//! The protocol's machine-readable description, generated from
//! [`METHODS`]: every method with its scopes, parameter
//! and result schemas, the notifications and the error codes
//! (`docs/protocol.schema.json`, written by `cargo xtask codegen`).

use schemars::SchemaGenerator;
use serde_json::{Value, json};

use crate::{Kind, METHODS, codes};

/// The description, as JSON.
pub fn protocol_schema() -> Value {
    let mut g = SchemaGenerator::default();
    let methods: Vec<Value> = METHODS
        .iter()
        .map(|method| {
            let scopes: Vec<&str> = method.scopes.iter().map(|scope| scope.as_str()).collect();
            let params = (method.params)(&mut g);
            let output = (method.output)(&mut g);
            match method.kind {
                Kind::Method => json!({
                    "name": method.name,
                    "kind": "method",
                    "summary": method.summary,
                    "params": params,
                    "result": output,
                    "scopes": scopes,
                }),
                Kind::Subscription {
                    notification,
                    unsubscribe,
                } => json!({
                    "name": method.name,
                    "kind": "subscription",
                    "notification": notification,
                    "unsubscribe": unsubscribe,
                    "summary": method.summary,
                    "params": params,
                    "notification_params": output,
                    "scopes": scopes,
                }),
            }
        })
        .collect();
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
