//! Plain HTTP routes: `/healthz`, `/metrics`, and the 404 for the rest.

use std::sync::Arc;

use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
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
