//! A strict fake of Anthropic's Messages API (`POST /v1/messages`).
//!
//! Streams follow "Streaming Messages" event for event (see
//! `fixtures/anthropic/`); errors use the documented body
//! `{"type":"error","error":{"type","message"}}` with the documented error
//! type for each status.

use std::collections::HashSet;
use std::sync::Arc;

use axum::response::Response;
use serde_json::{Value, json};

use crate::server::{
    self, CapturedRequest, INPUT_TOKENS, OUTPUT_TOKENS, Reply, Server, Shared, tool_name_problem,
};

/// A fake Anthropic Messages server on `127.0.0.1`.
#[derive(Debug)]
pub struct FakeAnthropic {
    shared: Arc<Shared>,
    server: Server,
}

impl FakeAnthropic {
    crate::server::scripted_fake_methods!();

    /// Starts a fake that accepts any (or no) API key.
    pub async fn start() -> Self {
        Self::start_inner(None)
    }

    /// Starts a fake that requires `x-api-key: <key>`: a missing header is a
    /// violation (answered 401); a wrong key is answered 401
    /// `authentication_error`, which is not a violation.
    pub async fn start_with_key(key: impl Into<String>) -> Self {
        Self::start_inner(Some(key.into()))
    }

    fn start_inner(key: Option<String>) -> Self {
        let shared = Arc::new(Shared::default());
        let for_handler = Arc::clone(&shared);
        let server = Server::start(
            "anthropic",
            Arc::clone(&shared),
            Arc::new(move |request| answer(&for_handler, key.as_deref(), request)),
        );
        FakeAnthropic { shared, server }
    }

    /// The base URL to configure, without `/v1` (as `ANTHROPIC_BASE_URL` is).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }
}

/// Anthropic's documented error body.
fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

fn answer(shared: &Shared, key: Option<&str>, request: &CapturedRequest) -> Response {
    let served = matches!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/v1/messages") | ("GET", "/v1/models")
    );
    if !served {
        shared.violation(format!(
            "unexpected request {} {} (only POST /v1/messages and GET /v1/models are served)",
            request.method, request.path
        ));
        return server::json(
            404,
            &error_body(
                "not_found_error",
                "The requested resource could not be found.",
            ),
        );
    }
    if let Some(key) = key {
        match request.header("x-api-key") {
            Some(value) if value == key => {}
            Some(_) => {
                return server::json(
                    401,
                    &error_body("authentication_error", "invalid x-api-key"),
                );
            }
            None => {
                shared.violation("the x-api-key header is missing".to_owned());
                return server::json(
                    401,
                    &error_body("authentication_error", "x-api-key header is required"),
                );
            }
        }
    }
    if request.method == "GET" {
        if request.header("anthropic-version").is_none() {
            shared.violation("the anthropic-version header is missing".to_owned());
            return server::json(
                400,
                &error_body(
                    "invalid_request_error",
                    "anthropic-version header is required",
                ),
            );
        }
        // The documented list shape (`GET /v1/models`).
        return server::json(
            200,
            &json!({
                "data": [{
                    "type": "model",
                    "id": "claude-sonnet-4-5",
                    "display_name": "Claude Sonnet 4.5",
                    "created_at": "2025-09-29T00:00:00Z",
                }],
                "has_more": false,
                "first_id": "claude-sonnet-4-5",
                "last_id": "claude-sonnet-4-5",
            }),
        );
    }
    let mut problems = Vec::new();
    if request.header("anthropic-version").is_none() {
        problems.push("the anthropic-version header is missing".to_owned());
    }
    problems.extend(check(&request.body));
    if let Some(first) = problems.first() {
        for problem in &problems {
            shared.violation(problem.clone());
        }
        return server::json(400, &error_body("invalid_request_error", first));
    }
    let Some(reply) = shared.next_reply() else {
        let message = "flynn-testkit: the fake Anthropic server has no scripted reply left for this request (push a Reply first)";
        shared.violation(message.to_owned());
        return server::json(500, &error_body("api_error", message));
    };
    let model = request.body["model"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let stream = request.body["stream"] == Value::Bool(true);
    let message_id = format!("msg_{:02}", shared.next_id("message"));
    let blocks = match reply {
        Reply::Text(text) => vec![Block::Text(text)],
        Reply::ToolCalls(calls) => calls
            .into_iter()
            .map(|(name, input)| Block::ToolUse {
                id: format!("toolu_{:02}", shared.next_id("tool_use")),
                name,
                input,
            })
            .collect(),
        Reply::Thinking {
            thinking,
            signature,
            text,
        } => vec![
            Block::Thinking {
                thinking,
                signature,
            },
            Block::Text(text),
        ],
        Reply::Error {
            status,
            headers,
            body,
        } => return server::scripted_error(status, &headers, &body),
        Reply::RawSse(body) => return server::raw_sse(&body),
        Reply::Stall(body) => return server::stalled_sse(&body),
    };
    let stop_reason = if blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })) {
        "tool_use"
    } else {
        "end_turn"
    };
    let request_id = [("request-id", format!("req_{message_id}"))];
    let request_id: Vec<(&str, &str)> = request_id.iter().map(|(k, v)| (*k, v.as_str())).collect();
    if !stream {
        return server::json(
            200,
            &json!({
                "id": message_id, "type": "message", "role": "assistant", "model": model,
                "content": blocks.iter().map(Block::whole).collect::<Vec<_>>(),
                "stop_reason": stop_reason, "stop_sequence": null,
                "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS}
            }),
        );
    }
    let mut events = vec![event(&json!({
        "type": "message_start",
        "message": {
            "id": message_id, "type": "message", "role": "assistant", "content": [],
            "model": model, "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1}
        }
    }))];
    for (index, block) in blocks.iter().enumerate() {
        events.push(event(&json!({
            "type": "content_block_start", "index": index, "content_block": block.start()
        })));
        if index == 0 {
            events.push(event(&json!({"type": "ping"})));
        }
        for delta in block.deltas() {
            events.push(event(&json!({
                "type": "content_block_delta", "index": index, "delta": delta
            })));
        }
        events.push(event(
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    events.push(event(&json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": OUTPUT_TOKENS}
    })));
    events.push(event(&json!({"type": "message_stop"})));
    server::event_stream(events, &request_id)
}

/// `event: <type>` then `data: <json>`, as the documentation shows them.
fn event(data: &Value) -> String {
    let name = data["type"].as_str().unwrap_or("message");
    format!("event: {name}\ndata: {data}\n\n")
}

enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    Thinking {
        thinking: String,
        signature: String,
    },
}

impl Block {
    /// The block as a non-streamed response holds it.
    fn whole(&self) -> Value {
        match self {
            Block::Text(text) => json!({"type": "text", "text": text}),
            Block::ToolUse { id, name, input } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": input})
            }
            Block::Thinking {
                thinking,
                signature,
            } => json!({"type": "thinking", "thinking": thinking, "signature": signature}),
        }
    }

    /// The `content_block` of its `content_block_start`.
    fn start(&self) -> Value {
        match self {
            Block::Text(_) => json!({"type": "text", "text": ""}),
            Block::ToolUse { id, name, .. } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": {}})
            }
            Block::Thinking { .. } => json!({"type": "thinking", "thinking": ""}),
        }
    }

    /// The `delta`s of its `content_block_delta` events.
    fn deltas(&self) -> Vec<Value> {
        match self {
            Block::Text(text) => server::pieces(text)
                .into_iter()
                .map(|piece| json!({"type": "text_delta", "text": piece}))
                .collect(),
            Block::ToolUse { input, .. } => std::iter::once(String::new())
                .chain(server::json_pieces(&input.to_string()))
                .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
                .collect(),
            Block::Thinking {
                thinking,
                signature,
            } => server::pieces(thinking)
                .into_iter()
                .map(|piece| json!({"type": "thinking_delta", "thinking": piece}))
                .chain(std::iter::once(
                    json!({"type": "signature_delta", "signature": signature}),
                ))
                .collect(),
        }
    }
}

/// Every way `body` breaks the documented request format.
pub(crate) fn check(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(object) = body.as_object() else {
        return vec!["the request body is not a JSON object".to_owned()];
    };
    match object.get("model") {
        Some(Value::String(model)) if !model.is_empty() => {}
        _ => problems.push("model: Field required".to_owned()),
    }
    match object.get("max_tokens").and_then(Value::as_u64) {
        Some(n) if n >= 1 => {}
        _ => problems.push("max_tokens: Field required (a positive integer)".to_owned()),
    }
    if !matches!(object.get("stream"), None | Some(Value::Bool(_))) {
        problems.push("stream: must be a boolean".to_owned());
    }
    match object.get("system") {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(blocks)) if blocks.iter().all(|b| b["type"] == "text") => {}
        Some(_) => problems.push("system: must be a string or a list of text blocks".to_owned()),
    }
    if let Some(tools) = object.get("tools") {
        match tools.as_array() {
            Some(tools) => {
                for (i, tool) in tools.iter().enumerate() {
                    problems.extend(tool_name_problem(
                        &format!("tools.{i}.name"),
                        tool["name"].as_str(),
                    ));
                    if !tool["input_schema"].is_object() {
                        problems.push(format!("tools.{i}.input_schema: Field required"));
                    }
                }
            }
            None => problems.push("tools: must be a list".to_owned()),
        }
    }
    check_cache_control(object, &mut problems);
    match object.get("messages") {
        Some(Value::Array(messages)) if !messages.is_empty() => {
            check_messages(messages, &mut problems);
        }
        Some(Value::Array(_)) => {
            problems.push("messages: at least one message is required".to_owned())
        }
        _ => problems.push("messages: Field required".to_owned()),
    }
    problems
}

/// "Prompt caching": a breakpoint is `{"type": "ephemeral"}` with an
/// optional `ttl` of `5m` or `1h`, on a system, tool or content block (never
/// on a thinking block), and a request holds at most four.
fn check_cache_control(object: &serde_json::Map<String, Value>, problems: &mut Vec<String>) {
    let blocks = |key: &'static str| {
        object
            .get(key)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(move |(i, block)| (format!("{key}.{i}"), block))
    };
    let content = object
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
        .flat_map(|(i, message)| {
            message["content"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .enumerate()
                .map(move |(j, block)| (format!("messages.{i}.content.{j}"), block))
        });
    let mut breakpoints = 0;
    for (at, block) in blocks("system").chain(blocks("tools")).chain(content) {
        let Some(cache_control) = block.get("cache_control") else {
            continue;
        };
        breakpoints += 1;
        let ok = cache_control["type"] == "ephemeral"
            && cache_control.as_object().is_some_and(|c| {
                c.keys().all(|k| k == "type" || k == "ttl")
                    && matches!(
                        c.get("ttl").map(Value::as_str),
                        None | Some(Some("5m" | "1h"))
                    )
            });
        if !ok {
            problems.push(format!(
                "{at}.cache_control: expected {{\"type\": \"ephemeral\"}} with an optional ttl of \"5m\" or \"1h\", got {cache_control}"
            ));
        }
        if matches!(
            block["type"].as_str(),
            Some("thinking" | "redacted_thinking")
        ) {
            problems.push(format!(
                "{at}.cache_control: thinking blocks cannot be marked for caching"
            ));
        }
    }
    if breakpoints > 4 {
        problems.push(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
        ));
    }
}

fn check_messages(messages: &[Value], problems: &mut Vec<String>) {
    if messages[0]["role"] != "user" {
        problems.push(format!(
            "messages: the first message must use the \"user\" role, not {}",
            messages[0]["role"]
        ));
    }
    let mut known: HashSet<String> = HashSet::new();
    // Tool calls of the previous assistant message, awaiting results.
    let mut pending: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        if !matches!(role, "user" | "assistant") {
            problems.push(format!(
                "messages.{i}.role: must be \"user\" or \"assistant\", not {:?} (the system prompt is the top-level 'system')",
                role
            ));
            continue;
        }
        let blocks: Vec<Value> = match &message["content"] {
            Value::String(text) => vec![json!({"type": "text", "text": text})],
            Value::Array(blocks) if !blocks.is_empty() => blocks.clone(),
            Value::Array(_) => {
                if i + 1 != messages.len() || role != "assistant" {
                    problems.push(format!(
                        "messages.{i}: all messages must have non-empty content"
                    ));
                }
                Vec::new()
            }
            _ => {
                problems.push(format!("messages.{i}.content: Field required"));
                Vec::new()
            }
        };
        let mut answered: Vec<String> = Vec::new();
        let mut seen_other = false;
        let mut calls: Vec<String> = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let at = format!("messages.{i}.content.{j}");
            let kind = block["type"].as_str().unwrap_or("");
            match (role, kind) {
                (_, "text") => {
                    seen_other = true;
                    match block["text"].as_str() {
                        Some(text) if !text.is_empty() => {}
                        _ => problems.push(format!("{at}: text content blocks must be non-empty")),
                    }
                }
                ("user", "image") => {
                    seen_other = true;
                    let source = &block["source"];
                    let ok = match source["type"].as_str() {
                        Some("base64") => {
                            source["media_type"].is_string() && source["data"].is_string()
                        }
                        Some("url") => source["url"].is_string(),
                        _ => false,
                    };
                    if !ok {
                        problems.push(format!(
                            "{at}.source: expected base64 {{media_type, data}} or url {{url}}"
                        ));
                    }
                }
                ("user", "tool_result") => {
                    if seen_other {
                        problems.push(format!(
                            "{at}: tool_result blocks must come before any other content in the user message"
                        ));
                    }
                    let id = block["tool_use_id"].as_str().unwrap_or("");
                    if !known.contains(id) {
                        problems.push(format!(
                            "{at}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                        ));
                    } else if !pending.iter().any(|p| p == id) {
                        problems.push(format!(
                            "{at}: tool_result for '{id}' does not answer the previous assistant message"
                        ));
                    }
                    if !matches!(
                        block["content"],
                        Value::String(_) | Value::Array(_) | Value::Null
                    ) {
                        problems.push(format!(
                            "{at}.content: must be a string or a list of blocks"
                        ));
                    }
                    if !matches!(block.get("is_error"), None | Some(Value::Bool(_))) {
                        problems.push(format!("{at}.is_error: must be a boolean"));
                    }
                    answered.push(id.to_owned());
                }
                ("assistant", "tool_use") => {
                    seen_other = true;
                    match block["id"].as_str().filter(|id| !id.is_empty()) {
                        Some(id) => {
                            known.insert(id.to_owned());
                            calls.push(id.to_owned());
                        }
                        None => problems.push(format!("{at}.id: Field required")),
                    }
                    problems.extend(tool_name_problem(
                        &format!("{at}.name"),
                        block["name"].as_str(),
                    ));
                    if !block["input"].is_object() {
                        problems.push(format!("{at}.input: must be an object"));
                    }
                }
                ("assistant", "thinking") => {
                    seen_other = true;
                    if !block["thinking"].is_string() {
                        problems.push(format!("{at}.thinking: Field required"));
                    }
                    match block["signature"].as_str() {
                        Some(signature) if !signature.is_empty() => {}
                        _ => problems.push(format!("{at}.signature: Field required")),
                    }
                }
                ("assistant", "redacted_thinking") => {
                    seen_other = true;
                    if !block["data"].is_string() {
                        problems.push(format!("{at}.data: Field required"));
                    }
                }
                _ => {
                    seen_other = true;
                    problems.push(format!(
                        "{at}: a {role} message cannot hold a block of type {kind:?}"
                    ));
                }
            }
        }
        if !pending.is_empty() {
            let missing: Vec<&String> =
                pending.iter().filter(|id| !answered.contains(id)).collect();
            if !missing.is_empty() {
                problems.push(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {missing:?}. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
                ));
            }
        }
        pending = calls;
    }
    if !pending.is_empty() {
        problems.push(format!(
            "the conversation ends with `tool_use` ids {pending:?} that have no `tool_result`"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_well_formed_tool_conversation_passes() {
        let body = json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": "Be brief.",
            "stream": true,
            "tools": [{"name": "shell_exec", "description": "Run", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": "ls"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "tool_use", "id": "toolu_01", "name": "shell_exec", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": "a.txt", "is_error": false},
                    {"type": "text", "text": "and?"}
                ]}
            ]
        });
        assert_eq!(check(&body), Vec::<String>::new());
    }

    #[test]
    fn cache_breakpoints_are_checked() {
        let marked = json!({"type": "ephemeral"});
        let body = json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": marked}],
            "tools": [{"name": "a", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": marked}]}
            ]
        });
        assert_eq!(check(&body), Vec::<String>::new());
        let body = json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "persistent"}}],
            "tools": [
                {"name": "a", "input_schema": {"type": "object"}, "cache_control": marked},
                {"name": "b", "input_schema": {"type": "object"}, "cache_control": marked}
            ],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": marked}]},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "s", "cache_control": marked}, {"type": "text", "text": "yes"}]}
            ]
        });
        assert_eq!(
            check(&body),
            vec![
                "system.0.cache_control: expected {\"type\": \"ephemeral\"} with an optional ttl of \"5m\" or \"1h\", got {\"type\":\"persistent\"}",
                "messages.1.content.0.cache_control: thinking blocks cannot be marked for caching",
                "A maximum of 4 blocks with cache_control may be provided. Found 5.",
            ]
        );
    }

    #[test]
    fn protocol_breaks_are_named() {
        let body = json!({
            "model": "claude-sonnet-4-5",
            "tools": [{"name": "shell.exec", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "assistant", "content": "Hi"},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_09", "content": "?"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm"},
                    {"type": "tool_use", "id": "toolu_01", "name": "shell_exec", "input": {}}
                ]},
                {"role": "user", "content": "what now?"}
            ]
        });
        assert_eq!(
            check(&body),
            vec![
                "max_tokens: Field required (a positive integer)",
                "tools.0.name: 'shell.exec' does not match '^[a-zA-Z0-9_-]{1,64}$'",
                "messages: the first message must use the \"user\" role, not \"assistant\"",
                "messages.1.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_09. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
                "messages.2.content.0.signature: Field required",
                "messages.3: `tool_use` ids were found without `tool_result` blocks immediately after: [\"toolu_01\"]. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
            ]
        );
    }
}
