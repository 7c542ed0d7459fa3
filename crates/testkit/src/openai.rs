//! A strict fake of OpenAI's Chat Completions API (`POST /v1/chat/completions`)
//! and its model list (`GET /v1/models`).
//!
//! Shapes follow the API reference (the chat completion object and chunk
//! object), the function calling guide's streaming example, and the
//! documented error body `{"error":{"message","type","param","code"}}`; see
//! `fixtures/openai/`. Reasoning deltas use `reasoning_content`, the field
//! DeepSeek's API documents and vLLM and llama.cpp serve.

use std::collections::HashSet;
use std::sync::Arc;

use axum::response::Response;
use serde_json::{Value, json};

use crate::server::{
    self, CapturedRequest, INPUT_TOKENS, OUTPUT_TOKENS, Reply, Server, Shared, tool_name_problem,
};

/// The `created` timestamp of every answer, from the documented examples.
const CREATED: u64 = 1694268190;
/// The `system_fingerprint` of every answer, from the documented examples.
const FINGERPRINT: &str = "fp_44709d6fcb";

/// A fake OpenAI Chat Completions server on `127.0.0.1`.
#[derive(Debug)]
pub struct FakeOpenAi {
    shared: Arc<Shared>,
    server: Server,
}

impl FakeOpenAi {
    crate::server::scripted_fake_methods!();

    /// Starts a fake that accepts any (or no) API key.
    pub async fn start() -> Self {
        Self::start_inner(None)
    }

    /// Starts a fake that requires `Authorization: Bearer <key>`: a missing
    /// header is a violation (answered 401); a wrong key is answered 401 in
    /// OpenAI's error shape, which is not a violation.
    pub async fn start_with_key(key: impl Into<String>) -> Self {
        Self::start_inner(Some(key.into()))
    }

    fn start_inner(key: Option<String>) -> Self {
        let shared = Arc::new(Shared::default());
        let for_handler = Arc::clone(&shared);
        let server = Server::start(
            "openai",
            Arc::clone(&shared),
            Arc::new(move |request| answer(&for_handler, key.as_deref(), request)),
        );
        FakeOpenAi { shared, server }
    }

    /// The base URL to configure, ending in `/v1` (as `OPENAI_BASE_URL` does).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr())
    }
}

/// The documented 401s for a missing or wrong key; `None` when the key is
/// right or none is required.
fn check_key(shared: &Shared, key: Option<&str>, request: &CapturedRequest) -> Option<Response> {
    let key = key?;
    match request.header("authorization") {
        Some(value) if value == format!("Bearer {key}") => None,
        Some(value) if value.starts_with("Bearer ") => Some(server::json(
            401,
            &error_body(
                "Incorrect API key provided. You can find your API key at https://platform.openai.com/account/api-keys.",
                "invalid_request_error",
                Some("invalid_api_key"),
            ),
        )),
        other => {
            shared.violation(format!(
                "the Authorization header is {} (expected 'Bearer <key>')",
                other.map_or_else(|| "missing".to_owned(), |v| format!("malformed: '{v}'"))
            ));
            Some(server::json(
                401,
                &error_body(
                    "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
                    "invalid_request_error",
                    None,
                ),
            ))
        }
    }
}

/// OpenAI's documented error body.
fn error_body(message: &str, kind: &str, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
}

pub(crate) fn answer(shared: &Shared, key: Option<&str>, request: &CapturedRequest) -> Response {
    let served = matches!(
        (request.method.as_str(), request.path.as_str()),
        ("POST", "/v1/chat/completions") | ("GET", "/v1/models")
    );
    if !served {
        let message = format!("Invalid URL ({} {})", request.method, request.path);
        shared.violation(format!(
            "unexpected request {} {} (only POST /v1/chat/completions and GET /v1/models are served)",
            request.method, request.path
        ));
        return server::json(404, &error_body(&message, "invalid_request_error", None));
    }
    if let Some(refusal) = check_key(shared, key, request) {
        return refusal;
    }
    if request.method == "GET" {
        // The documented list object; the model ids the tests configure.
        return server::json(
            200,
            &json!({"object": "list", "data": [
                {"id": "gpt-4o-mini", "object": "model", "created": 1686935002, "owned_by": "openai"},
                {"id": "gpt-4o", "object": "model", "created": 1686935002, "owned_by": "openai"},
            ]}),
        );
    }
    let problems = check(&request.body);
    if let Some(first) = problems.first() {
        for problem in &problems {
            shared.violation(problem.clone());
        }
        return server::json(400, &error_body(first, "invalid_request_error", None));
    }
    let Some(reply) = shared.next_reply() else {
        let message = "flynn-testkit: the fake OpenAI server has no scripted reply left for this request (push a Reply first)";
        shared.violation(message.to_owned());
        return server::json(500, &error_body(message, "server_error", None));
    };
    let model = request.body["model"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let stream = request.body["stream"] == Value::Bool(true);
    let include_usage = request.body["stream_options"]["include_usage"] == Value::Bool(true);
    let id = format!("chatcmpl-{}", shared.next_id("completion"));
    let answer = Answer::from_reply(shared, reply);
    match answer {
        Answer::Scripted(response) => response,
        Answer::Message {
            reasoning,
            text,
            calls,
        } if stream => {
            let chunk = |delta: Value, finish: Option<&str>| {
                sse(&json!({
                    "id": id, "object": "chat.completion.chunk", "created": CREATED,
                    "model": model, "system_fingerprint": FINGERPRINT,
                    "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
                }))
            };
            let mut events = Vec::new();
            if calls.is_empty() {
                events.push(chunk(json!({"role": "assistant", "content": ""}), None));
                for piece in reasoning.iter().flat_map(|r| server::pieces(r)) {
                    events.push(chunk(json!({"reasoning_content": piece}), None));
                }
                for piece in server::pieces(&text) {
                    events.push(chunk(json!({"content": piece}), None));
                }
            }
            for (index, (call_id, name, arguments)) in calls.iter().enumerate() {
                let first = json!({"index": index, "id": call_id,
                    "function": {"arguments": "", "name": name}, "type": "function"});
                let delta = if index == 0 {
                    json!({"role": "assistant", "content": null, "tool_calls": [first]})
                } else {
                    json!({"tool_calls": [first]})
                };
                events.push(chunk(delta, None));
                for piece in server::json_pieces(&arguments.to_string()) {
                    events.push(chunk(
                        json!({"tool_calls": [{"index": index, "id": null,
                            "function": {"arguments": piece, "name": null}, "type": null}]}),
                        None,
                    ));
                }
            }
            let finish = if calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            events.push(chunk(json!({}), Some(finish)));
            if include_usage {
                // "an additional chunk will be streamed before the data: [DONE]
                // message ... the choices field will always be an empty array."
                events.push(sse(&json!({
                    "id": id, "object": "chat.completion.chunk", "created": CREATED,
                    "model": model, "system_fingerprint": FINGERPRINT,
                    "choices": [], "usage": usage()
                })));
            }
            events.push("data: [DONE]\n\n".to_owned());
            server::event_stream(events, &[("x-request-id", &format!("req_{id}"))])
        }
        Answer::Message {
            reasoning,
            text,
            calls,
        } => {
            let mut message = if calls.is_empty() {
                json!({"role": "assistant", "content": text, "refusal": null})
            } else {
                json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": calls
                    .iter()
                    .map(|(call_id, name, arguments)| json!({"id": call_id, "type": "function",
                        "function": {"name": name, "arguments": arguments.to_string()}}))
                    .collect::<Vec<_>>()})
            };
            if let Some(reasoning) = reasoning {
                message["reasoning_content"] = Value::String(reasoning);
            }
            let finish = if calls.is_empty() {
                "stop"
            } else {
                "tool_calls"
            };
            server::json(
                200,
                &json!({
                    "id": id, "object": "chat.completion", "created": CREATED, "model": model,
                    "system_fingerprint": FINGERPRINT,
                    "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
                    "usage": usage()
                }),
            )
        }
    }
}

fn usage() -> Value {
    json!({"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS,
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS})
}

fn sse(data: &Value) -> String {
    format!("data: {data}\n\n")
}

/// A reply resolved to what the answer holds.
enum Answer {
    Scripted(Response),
    Message {
        reasoning: Option<String>,
        text: String,
        /// `(id, name, arguments)`.
        calls: Vec<(String, String, Value)>,
    },
}

impl Answer {
    fn from_reply(shared: &Shared, reply: Reply) -> Answer {
        match reply {
            Reply::Text(text) => Answer::Message {
                reasoning: None,
                text,
                calls: Vec::new(),
            },
            Reply::ToolCalls(calls) => Answer::Message {
                reasoning: None,
                text: String::new(),
                calls: calls
                    .into_iter()
                    .map(|(name, arguments)| {
                        (format!("call_{}", shared.next_id("call")), name, arguments)
                    })
                    .collect(),
            },
            Reply::Thinking { thinking, text, .. } => Answer::Message {
                reasoning: Some(thinking),
                text,
                calls: Vec::new(),
            },
            Reply::Error {
                status,
                headers,
                body,
            } => Answer::Scripted(server::scripted_error(status, &headers, &body)),
            Reply::RawSse(body) => Answer::Scripted(server::raw_sse(&body)),
            Reply::Stall(body) => Answer::Scripted(server::stalled_sse(&body)),
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
        _ => problems.push("missing required parameter: 'model'".to_owned()),
    }
    let stream = object.get("stream");
    if !matches!(stream, None | Some(Value::Bool(_))) {
        problems.push("'stream' must be a boolean".to_owned());
    }
    if object.contains_key("stream_options") && stream != Some(&Value::Bool(true)) {
        problems.push(
            "the 'stream_options' parameter is only allowed when 'stream' is enabled".to_owned(),
        );
    }
    if let Some(tools) = object.get("tools") {
        check_tools(tools, &mut problems);
    }
    match object.get("messages") {
        Some(Value::Array(messages)) if !messages.is_empty() => {
            check_messages(messages, &mut problems);
        }
        Some(Value::Array(_)) => problems.push("'messages' is empty".to_owned()),
        _ => problems.push("missing required parameter: 'messages'".to_owned()),
    }
    problems
}

fn check_tools(tools: &Value, problems: &mut Vec<String>) {
    let Some(tools) = tools.as_array() else {
        problems.push("'tools' must be an array".to_owned());
        return;
    };
    for (i, tool) in tools.iter().enumerate() {
        if tool["type"] != "function" {
            problems.push(format!("tools[{i}].type must be 'function'"));
        }
        problems.extend(tool_name_problem(
            &format!("tools[{i}].function.name"),
            tool["function"]["name"].as_str(),
        ));
        if !matches!(
            tool["function"].get("parameters"),
            None | Some(Value::Object(_))
        ) {
            problems.push(format!("tools[{i}].function.parameters must be an object"));
        }
    }
}

fn check_messages(messages: &[Value], problems: &mut Vec<String>) {
    // The first message after any system/developer messages is the user's.
    match messages
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .find(|role| !matches!(*role, "system" | "developer"))
    {
        Some("user") | None => {}
        Some(role) => problems.push(format!(
            "messages must start with a user message (after any system messages), not '{role}'"
        )),
    }
    let mut known: HashSet<String> = HashSet::new();
    let mut pending: Vec<String> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        match role {
            "system" | "developer" => {
                if !message["content"].is_string() && !message["content"].is_array() {
                    problems.push(format!(
                        "messages[{i}].content must be a string or an array"
                    ));
                }
            }
            "user" => {
                if !pending.is_empty() {
                    problems.push(format!(
                        "messages[{i}]: tool call(s) {pending:?} have no tool message before this user message"
                    ));
                    pending.clear();
                }
                check_user_content(&message["content"], i, problems);
            }
            "assistant" => {
                if !pending.is_empty() {
                    problems.push(format!(
                        "messages[{i}]: tool call(s) {pending:?} have no tool message before this assistant message"
                    ));
                    pending.clear();
                }
                let calls = message.get("tool_calls");
                let has_calls = calls
                    .and_then(Value::as_array)
                    .is_some_and(|c| !c.is_empty());
                match message.get("content") {
                    Some(Value::String(_) | Value::Array(_)) => {}
                    None | Some(Value::Null) if has_calls => {}
                    _ => problems.push(format!(
                        "messages[{i}]: an assistant message needs 'content' unless it has 'tool_calls'"
                    )),
                }
                for (j, call) in calls
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                {
                    let at = format!("messages[{i}].tool_calls[{j}]");
                    let Some(id) = call["id"].as_str().filter(|id| !id.is_empty()) else {
                        problems.push(format!("{at}.id is missing"));
                        continue;
                    };
                    if call["type"] != "function" {
                        problems.push(format!("{at}.type must be 'function'"));
                    }
                    problems.extend(tool_name_problem(
                        &format!("{at}.function.name"),
                        call["function"]["name"].as_str(),
                    ));
                    match call["function"]["arguments"].as_str() {
                        Some(arguments) if serde_json::from_str::<Value>(arguments).is_ok() => {}
                        Some(arguments) => problems.push(format!(
                            "{at}.function.arguments is not a JSON document: {arguments:?}"
                        )),
                        None => problems.push(format!(
                            "{at}.function.arguments must be a JSON-encoded string"
                        )),
                    }
                    known.insert(id.to_owned());
                    pending.push(id.to_owned());
                }
            }
            "tool" => {
                let id = message["tool_call_id"].as_str().unwrap_or("");
                if !known.contains(id) {
                    problems.push(format!(
                        "messages[{i}]: tool message for tool_call_id '{id}', which no earlier assistant message called"
                    ));
                } else if !pending.iter().any(|p| p == id) {
                    problems.push(format!(
                        "messages[{i}]: tool message for '{id}' does not directly follow the assistant message that called it"
                    ));
                }
                pending.retain(|p| p != id);
                if !message["content"].is_string() && !message["content"].is_array() {
                    problems.push(format!(
                        "messages[{i}].content must be a string or an array"
                    ));
                }
            }
            other => problems.push(format!("messages[{i}]: unknown role '{other}'")),
        }
    }
    if !pending.is_empty() {
        problems.push(format!(
            "the conversation ends with tool call(s) {pending:?} that have no tool message"
        ));
    }
}

fn check_user_content(content: &Value, i: usize, problems: &mut Vec<String>) {
    match content {
        Value::String(_) => {}
        Value::Array(parts) => {
            for (j, part) in parts.iter().enumerate() {
                match part["type"].as_str() {
                    Some("text") if part["text"].is_string() => {}
                    Some("image_url") if part["image_url"]["url"].is_string() => {}
                    _ => problems.push(format!(
                        "messages[{i}].content[{j}] is not a text or image_url part: {part}"
                    )),
                }
            }
        }
        _ => problems.push(format!(
            "messages[{i}].content must be a string or an array"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, name: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}})
    }

    #[test]
    fn a_well_formed_tool_conversation_passes() {
        let body = json!({
            "model": "gpt-4o-mini",
            "stream": true,
            "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {"name": "shell_exec", "parameters": {"type": "object"}}}],
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "ls"},
                {"role": "assistant", "content": null, "tool_calls": [call("call_1", "shell_exec")]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"},
                {"role": "assistant", "content": "One file."},
                {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
            ]
        });
        assert_eq!(check(&body), Vec::<String>::new());
    }

    #[test]
    fn protocol_breaks_are_named() {
        let body = json!({
            "stream_options": {"include_usage": true},
            "tools": [{"type": "function", "function": {"name": "shell.exec"}}],
            "messages": [
                {"role": "assistant", "content": "Hi"},
                {"role": "user", "content": "ls"},
                {"role": "assistant", "content": null, "tool_calls": [call("call_1", "shell_exec")]},
                {"role": "user", "content": "well?"},
                {"role": "tool", "tool_call_id": "call_9", "content": "?"}
            ]
        });
        assert_eq!(
            check(&body),
            vec![
                "missing required parameter: 'model'",
                "the 'stream_options' parameter is only allowed when 'stream' is enabled",
                "tools[0].function.name: 'shell.exec' does not match '^[a-zA-Z0-9_-]{1,64}$'",
                "messages must start with a user message (after any system messages), not 'assistant'",
                "messages[3]: tool call(s) [\"call_1\"] have no tool message before this user message",
                "messages[4]: tool message for tool_call_id 'call_9', which no earlier assistant message called",
            ]
        );
    }
}
