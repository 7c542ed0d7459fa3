//! Plain HTTP routes: `/healthz`, `/metrics`, `/media/<id>`, `/transcribe`,
//! and the 404 for the rest.

use std::sync::Arc;

use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use flynn_protocol::config::TokenScope;

use crate::metrics::{Snapshot, open_fds, rss_bytes};
use crate::server::State as Gateway;

/// `GET /healthz`: 200 while serving, 503 while draining. Without a
/// token it says only `{"status": "ok"}` (or `draining`); with a token of
/// the `read` scope, the whole [`Health`](crate::api::Health).
pub(crate) async fn healthz(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let health = crate::rpc::health(&gateway);
    let status = if gateway.manager.is_draining() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let reader = crate::auth::bearer(&headers)
        .and_then(|token| crate::auth::find_token(&token, &gateway.tokens).cloned())
        .is_some_and(|entry| {
            entry.scopes.contains(&TokenScope::Read) || entry.scopes.contains(&TokenScope::Admin)
        });
    if reader {
        (status, Json(health)).into_response()
    } else {
        (status, Json(serde_json::json!({ "status": health.status }))).into_response()
    }
}

/// Reads a request body of at most `gateway.max_request_bytes` within
/// `gateway.body_timeout_secs` (routes that need no token: a slow sender
/// cannot hold a connection open with a trickle).
pub(crate) async fn read_body(gateway: &Gateway, body: Body) -> Result<Bytes, Box<Response>> {
    let limit = usize::try_from(gateway.settings.max_request_bytes).unwrap_or(usize::MAX);
    let deadline = Duration::from_secs(gateway.settings.body_timeout_secs.max(1));
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(_)) => Err(Box::new(crate::auth::refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "oversized",
            "the request is larger than gateway.max_request_bytes",
        ))),
        Err(_) => Err(Box::new(crate::auth::refusal(
            StatusCode::REQUEST_TIMEOUT,
            "too_slow",
            "the request body did not arrive within gateway.body_timeout_secs",
        ))),
    }
}

/// `GET /metrics`: Prometheus text.
pub(crate) async fn metrics(State(gateway): State<Arc<Gateway>>) -> Response {
    // A store that cannot be read leaves the usage series out (zeros
    // would read as a counter reset) and says so in `flynn_store_up`.
    let tiers = match gateway.manager.store().usage_by_tier(None).await {
        Ok(tiers) => Some(
            tiers
                .into_iter()
                .map(|(tier, total)| (tier.as_str().to_owned(), total))
                .collect(),
        ),
        Err(error) => {
            tracing::warn!(%error, "/metrics: cannot read usage from the session store");
            None
        }
    };
    let snapshot = Snapshot {
        tiers,
        active_sessions: gateway.manager.active_lanes(),
        running_turns: gateway.manager.running().len(),
        pending_confirmations: gateway.approver.len(),
        rss_bytes: rss_bytes(),
        tasks: tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks(),
        open_fds: open_fds(),
        uptime_secs: gateway.started.elapsed().as_secs_f64(),
    };
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        gateway.metrics.render(&snapshot),
    )
        .into_response()
}

pub(crate) async fn not_found(uri: Uri) -> Response {
    crate::auth::refusal(
        StatusCode::NOT_FOUND,
        "not_found",
        &format!(
            "nothing at {}: the gateway serves /rpc (JSON-RPC over WebSocket or POST), /healthz, /metrics, /v1/models, /v1/chat/completions and /webhooks/<name>",
            uri.path()
        ),
    )
}

/// `GET /media/<id>`: a file a turn sent to its chat (an
/// [`AgentEvent::Media`](flynn_protocol::AgentEvent::Media) names its id),
/// for the web chat to show. Any token may fetch one: the id is random
/// and handed only to those who may read the session, like a link.
///
/// Only pictures the browser renders safely (PNG, JPEG, GIF, WebP) and
/// audio are served `inline`; everything else is an attachment to
/// download, so a sent HTML or SVG file never runs as a page of the
/// gateway's origin (a `sandbox` policy and `nosniff` besides).
pub(crate) async fn media(State(gateway): State<Arc<Gateway>>, Path(id): Path<String>) -> Response {
    let (name, data) = match gateway.manager.media().read(&id).await {
        Ok(Some((file, data))) => (file.file.name, data),
        Ok(None) => {
            return crate::auth::refusal(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such file: it was never sent, or it was removed after a week",
            );
        }
        Err(e) => {
            tracing::warn!(%id, error = %e, "could not read a sent file");
            return crate::auth::refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the file could not be read",
            );
        }
    };
    let media_type = flynn_tools::builtin::media_type_of(&name);
    let inline = matches!(
        media_type.as_str(),
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    ) || media_type.starts_with("audio/");
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let disposition = format!(
        "{}; filename=\"{ascii}\"; filename*=UTF-8''{}",
        if inline { "inline" } else { "attachment" },
        percent_encode(&name)
    );
    let mut response = (
        [
            (header::CONTENT_TYPE, media_type),
            (header::CONTENT_DISPOSITION, disposition),
            (header::CACHE_CONTROL, "private, max-age=86400".to_owned()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
        ],
        Body::from(data),
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    response
}

/// RFC 5987 encoding of a file name: unreserved characters as they are,
/// every other byte as `%XX`.
fn percent_encode(name: &str) -> String {
    let mut out = String::new();
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `POST /transcribe`: the web chat's microphone. The body is the
/// recording (`Content-Type` `audio/webm`, `audio/ogg`, `audio/mp4`,
/// `audio/mpeg` or `audio/wav`), within `gateway.max_request_bytes`; the
/// answer `{"text": "..."}` from the `voice.stt` service, or an error
/// naming what went wrong (404 with the setting when there is none).
pub(crate) async fn transcribe(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(transcriber) = &gateway.transcriber else {
        return crate::auth::refusal(
            StatusCode::NOT_FOUND,
            "not_configured",
            "nothing turns speech into text here: set voice.stt in the daemon's config",
        );
    };
    let media_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let extension = match media_type.as_str() {
        "audio/webm" => "webm",
        "audio/ogg" => "ogg",
        "audio/mp4" | "audio/m4a" | "audio/x-m4a" => "m4a",
        "audio/mpeg" => "mp3",
        "audio/wav" | "audio/x-wav" | "audio/wave" => "wav",
        _ => {
            return crate::auth::refusal(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "bad_request",
                &format!(
                    "a recording of type {:?} cannot be transcribed: send audio/webm, audio/ogg, audio/mp4, audio/mpeg or audio/wav",
                    media_type
                ),
            );
        }
    };
    if body.is_empty() {
        return crate::auth::refusal(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the recording is empty",
        );
    }
    let audio = flynn_voice::Audio {
        data: body,
        file_name: format!("voice.{extension}"),
        media_type,
    };
    match transcriber.transcribe(audio).await {
        Ok(text) => Json(serde_json::json!({ "text": text })).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "a recording from the web chat could not be transcribed");
            crate::auth::refusal(
                StatusCode::BAD_GATEWAY,
                "transcription_failed",
                &e.to_string(),
            )
        }
    }
}
