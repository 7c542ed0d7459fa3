//! An OpenAI-compatible Chat Completions endpoint, so existing OpenAI
//! clients can talk to Flynn: `GET /v1/models` lists the agents and the
//! tiers, `POST /v1/chat/completions` answers with one (streaming as
//! server-sent events or not). Tools run inside Flynn; the client sees the
//! final answer.
//!
//! Sessions: the conversation continues in one Flynn session and only the
//! last user message is new. The session is `X-Flynn-Session` when sent,
//! else one per token and `user` field: `openai:<user>` (or
//! `openai:default`) for the default admin token, `token-<name>:openai-<user>`
//! for the others. A token without `admin` stays in its own sessions: the
//! channel of an `X-Flynn-Session` it names becomes `token-<name>`. When
//! the session is new, the earlier messages a request carries become its
//! history.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flynn_orchestrator::{Followed, TurnRequest};
use flynn_protocol::{AgentEvent, Message, SessionKey, Tier, TurnOutcome};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::Client;
use crate::server::State as Gateway;

/// An OpenAI-shaped error: `{"error": {"message", "type", "param", "code"}}`.
fn error(
    status: StatusCode,
    kind: &str,
    message: impl Into<String>,
    param: Option<&str>,
) -> Response {
    let body = json!({
        "error": {
            "message": message.into(),
            "type": kind,
            "param": param,
            "code": Value::Null,
        }
    });
    (status, Json(body)).into_response()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `GET /v1/models`: every agent, then every tier with models.
pub(crate) async fn models(State(gateway): State<Arc<Gateway>>) -> Response {
    let created = now_secs();
    let mut data: Vec<Value> = gateway
        .manager
        .agents()
        .names()
        .map(|name| json!({"id": name, "object": "model", "created": created, "owned_by": "flynn"}))
        .collect();
    for tier in Tier::ALL {
        let taken = gateway.manager.agents().get(tier.as_str()).is_some();
        if !taken && gateway.manager.router().check_tier(tier).is_ok() {
            data.push(json!({"id": tier.as_str(), "object": "model", "created": created, "owned_by": "flynn"}));
        }
    }
    Json(json!({"object": "list", "data": data})).into_response()
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChatRequest {
    model: String,
    messages: Vec<ChatMessage>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    n: Option<u32>,
    // Sampling settings, tools and the rest are Flynn's business: its
    // agents have their own. They are accepted and not used.
    #[serde(flatten)]
    _other: serde_json::Map<String, Value>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Deserialize)]
struct ChatMessage {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

impl ChatMessage {
    fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(Content::Text(text)) => text.clone(),
            Some(Content::Parts(parts)) => parts
                .iter()
                .filter(|p| p.kind == "text")
                .filter_map(|p| p.text.as_deref())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// Resolves `model` to an agent or a tier.
fn route(gateway: &Gateway, model: &str) -> Result<(Option<String>, Option<Tier>), Box<Response>> {
    let model = model.strip_prefix("flynn/").unwrap_or(model);
    if model == "flynn" {
        return Ok((None, None));
    }
    if gateway.manager.agents().get(model).is_some() {
        return Ok((Some(model.to_owned()), None));
    }
    if let Some(tier) = Tier::ALL.into_iter().find(|t| t.as_str() == model) {
        return Ok((None, Some(tier)));
    }
    let mut known: Vec<&str> = gateway.manager.agents().names().collect();
    known.extend(Tier::ALL.iter().map(|t| t.as_str()));
    Err(Box::new(error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        format!(
            "the model '{model}' does not exist: name an agent or a tier ({})",
            known.join(", ")
        ),
        Some("model"),
    )))
}

/// The session of a request: see the module's documentation.
fn session_of(
    client: &Client,
    named: Option<&str>,
    user: Option<&str>,
) -> Result<SessionKey, String> {
    if let Some(named) = named {
        let session: SessionKey = named
            .parse()
            .map_err(|e| format!("the session '{named}' is not a valid session key: {e}"))?;
        if client.owns(&session) {
            return Ok(session);
        }
        return SessionKey::new(&client.namespace, session.peer()).map_err(|e| e.to_string());
    }
    let user: String = user
        .unwrap_or("default")
        .chars()
        .map(|c| {
            if c.is_whitespace() || c.is_control() {
                '-'
            } else {
                c
            }
        })
        .take(128)
        .collect();
    let user = if user.is_empty() {
        "default".to_owned()
    } else {
        user
    };
    if client.is_admin() && client.name == crate::token::ADMIN_TOKEN_NAME {
        SessionKey::new("openai", &user)
    } else {
        SessionKey::new(&client.namespace, &format!("openai-{user}"))
    }
    .map_err(|e| e.to_string())
}

/// Whether the request says its body is JSON (a page's form or
/// `text/plain` post cannot).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(
    State(gateway): State<Arc<Gateway>>,
    Extension(client): Extension<Client>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if !is_json(&headers) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            "send the request as JSON: `Content-Type: application/json`",
            None,
        );
    }
    let request: ChatRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!("the request is not a Chat Completions request: {e}"),
                None,
            );
        }
    };
    if request.n.is_some_and(|n| n != 1) {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "only n = 1 is supported",
            Some("n"),
        );
    }
    let (agent, tier) = match route(&gateway, &request.model) {
        Ok(route) => route,
        Err(response) => return *response,
    };
    let Some(last) = request.messages.iter().rposition(|m| m.role == "user") else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "expected at least one message with role `user`",
            Some("messages"),
        );
    };
    let message = request.messages[last].text();
    if message.trim().is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "the last user message is empty",
            Some("messages"),
        );
    }

    let named = headers.get("x-flynn-session").and_then(|v| v.to_str().ok());
    let session = match session_of(&client, named, request.user.as_deref()) {
        Ok(session) => session,
        Err(message) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                message,
                Some(if named.is_some() {
                    "x-flynn-session"
                } else {
                    "user"
                }),
            );
        }
    };
    let fresh = match gateway.manager.store().info(&session).await {
        Ok(info) => info.is_none_or(|info| info.message_count == 0),
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                e.to_string(),
                None,
            );
        }
    };
    if fresh {
        // A new conversation: what the client sent before the last
        // message becomes its history.
        let earlier: Vec<Message> = request.messages[..last]
            .iter()
            .filter_map(|m| {
                let text = m.text();
                if text.trim().is_empty() {
                    return None;
                }
                match m.role.as_str() {
                    "user" => Some(Message::user(text)),
                    "assistant" => Some(Message::assistant(text)),
                    "system" | "developer" => Some(Message::user(format!(
                        "(Instructions from the client: {text})"
                    ))),
                    _ => None,
                }
            })
            .collect();
        if !earlier.is_empty()
            && let Err(e) = gateway.manager.store().append(&session, &earlier).await
        {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                e.to_string(),
                None,
            );
        }
    }

    let mut turn = TurnRequest::text(session.clone(), message);
    turn.principal = client.turn_principal();
    turn.agent = agent;
    turn.tier = tier;
    turn.approver = Some(Arc::new(gateway.approver.clone()));
    let model = request.model.clone();
    let id = format!("chatcmpl-{}", uuid::Uuid::now_v7().simple());
    let created = now_secs();

    let mut followed = match gateway.manager.submit_and_follow(turn).await {
        Ok(Followed::Turn(turn)) => turn,
        Ok(Followed::Command { reply, .. }) => {
            let outcome = TurnOutcome::command_reply(reply);
            return completion(&id, created, &model, &session, &outcome);
        }
        Err(e) => {
            let status = match e.code() {
                flynn_protocol::ErrorCode::Config | flynn_protocol::ErrorCode::Refused => {
                    if matches!(e, flynn_orchestrator::Error::ShuttingDown) {
                        StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        StatusCode::BAD_REQUEST
                    }
                }
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            return error(status, "invalid_request_error", e.to_string(), None);
        }
    };

    if !request.stream {
        return match followed.outcome().await {
            Ok(outcome) => completion(&id, created, &model, &session, &outcome),
            Err(e) => error(StatusCode::BAD_GATEWAY, "server_error", e.to_string(), None),
        };
    }

    let include_usage = request.stream_options.is_some_and(|o| o.include_usage);
    let session_header = session.to_string();
    let stream = async_stream::stream! {
        let chunk = |delta: Value, finish: Option<&str>| {
            json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            })
        };
        yield Ok::<_, Infallible>(sse(&chunk(json!({"role": "assistant", "content": ""}), None)));
        while let Some(event) = followed.next().await {
            if let Ok(envelope) = event
                && envelope.turn == Some(followed.turn())
                && let AgentEvent::ContentDelta { text } = envelope.event
                && !text.is_empty()
            {
                yield Ok(sse(&chunk(json!({"content": text}), None)));
            }
        }
        let outcome = followed.outcome().await;
        match outcome {
            Ok(outcome) => {
                yield Ok(sse(&chunk(json!({}), Some("stop"))));
                if include_usage {
                    let usage = usage_json(&outcome);
                    yield Ok(sse(&json!({
                        "id": id, "object": "chat.completion.chunk", "created": created,
                        "model": model, "choices": [], "usage": usage,
                    })));
                }
            }
            Err(e) => {
                yield Ok(sse(&json!({"error": {"message": e.to_string(), "type": "server_error", "param": null, "code": null}})));
            }
        }
        yield Ok(bytes::Bytes::from_static(b"data: [DONE]\n\n"));
    };
    let mut response = Response::new(axum::body::Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    if let Ok(value) = header::HeaderValue::from_str(&session_header) {
        headers.insert("x-flynn-session", value);
    }
    response
}

fn sse(value: &Value) -> bytes::Bytes {
    bytes::Bytes::from(format!("data: {value}\n\n"))
}

fn usage_json(outcome: &TurnOutcome) -> Value {
    let input = outcome.usage.input_tokens;
    let output = outcome.usage.output_tokens;
    json!({"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output})
}

fn completion(
    id: &str,
    created: u64,
    model: &str,
    session: &SessionKey,
    outcome: &TurnOutcome,
) -> Response {
    let body = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": outcome.reply, "refusal": null},
            "finish_reason": "stop",
            "logprobs": null,
        }],
        "usage": usage_json(outcome),
    });
    let mut response = Json(body).into_response();
    if let Ok(value) = header::HeaderValue::from_str(session.as_str()) {
        response.headers_mut().insert("x-flynn-session", value);
    }
    response
}
