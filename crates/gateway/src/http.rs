//! Plain HTTP routes: `/healthz`, `/metrics`, and the 404 for the rest.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::metrics::{Snapshot, rss_bytes};
use crate::server::State as Gateway;

/// `GET /healthz`: 200 with [`Health`](crate::api::Health) while serving,
/// 503 while draining. Needs no token and tells nothing private.
pub(crate) async fn healthz(State(gateway): State<Arc<Gateway>>) -> Response {
    let health = crate::rpc::health(&gateway);
    let status = if gateway.manager.is_draining() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (status, Json(health)).into_response()
}

/// `GET /metrics`: Prometheus text.
pub(crate) async fn metrics(State(gateway): State<Arc<Gateway>>) -> Response {
    let tiers = gateway
        .manager
        .store()
        .usage_by_tier(None)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|(tier, total)| (tier.as_str().to_owned(), total))
        .collect();
    let snapshot = Snapshot {
        tiers,
        active_sessions: gateway.manager.active_lanes(),
        running_turns: gateway.manager.running().len(),
        pending_confirmations: gateway.approver.len(),
        rss_bytes: rss_bytes(),
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
