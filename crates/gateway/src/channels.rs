//! The chat channels' side of the gateway: platform webhooks under
//! `/channels/<name>/…` (no gateway token: each adapter checks its
//! platform's signature or secret), and their health.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use flynn_channels::{ChannelState, WebhookRequest};

use crate::api::ChannelInfo;
use crate::auth::{Conn, refusal};
use crate::server::State as Gateway;

/// The one answer to an unknown channel and to a request its adapter
/// refuses (a bad signature, another method), so what runs cannot be found
/// out.
fn refused(gateway: &Gateway, ip: Option<std::net::IpAddr>) -> Response {
    gateway.metrics.auth_failure();
    if let Some(ip) = ip {
        let _ = gateway.failures.check(&ip.to_string());
    }
    refusal(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "the request was refused",
    )
}

/// Hands a request to the named channel's adapter.
pub(crate) async fn receive(
    State(gateway): State<Arc<Gateway>>,
    Path((name, rest)): Path<(String, String)>,
    request: Request,
) -> Response {
    let ip = request
        .extensions()
        .get::<Conn>()
        .map(|conn| crate::auth::client_ip(conn, request.headers()));
    if let Some(ip) = ip
        && let Err(wait) = gateway.failures.peek(&ip.to_string())
    {
        return crate::auth::rate_limited(wait);
    }
    let (parts, body) = request.into_parts();
    // Read the body whatever the name, so that unknown names take as long.
    let body: Bytes = match crate::http::read_body(&gateway, body).await {
        Ok(body) => body,
        Err(response) => return *response,
    };
    let Some(registry) = &gateway.channels else {
        return refused(&gateway, ip);
    };
    let webhook = WebhookRequest {
        method: parts.method,
        path: format!("/{rest}"),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        headers: parts.headers,
        body,
    };
    let Some(answer) = registry.webhook(&name, webhook).await else {
        return refused(&gateway, ip);
    };
    if matches!(answer.status, 401 | 403 | 404 | 405) {
        return refused(&gateway, ip);
    }
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, answer.body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(answer.content_type),
    );
    response
}

/// Every channel's health, and the web chat's (always up while the
/// gateway serves).
pub(crate) fn status(gateway: &Gateway) -> Vec<ChannelInfo> {
    let mut all: Vec<ChannelInfo> = gateway
        .channels
        .as_ref()
        .map(|registry| registry.status())
        .unwrap_or_default()
        .into_iter()
        .map(|s| ChannelInfo {
            name: s.name,
            state: match s.state {
                ChannelState::Connecting => "connecting",
                ChannelState::Connected => "connected",
                ChannelState::Retrying => "retrying",
                ChannelState::Stopped => "stopped",
                ChannelState::Unavailable => "unavailable",
                ChannelState::Standby => "standby",
            }
            .to_owned(),
            detail: s.detail,
            last_error: s.last_error,
            unauthorized: s.unauthorized,
            since: s.since,
            restarts: s.restarts,
            received: s.received,
            retry_in_ms: s.retry_in_ms,
        })
        .collect();
    all.push(ChannelInfo {
        name: "web".to_owned(),
        state: "connected".to_owned(),
        detail: Some(format!("web chat at http://{}/", gateway.settings.bind)),
        last_error: None,
        unauthorized: false,
        since: crate::approver::now_millis()
            - i64::try_from(gateway.started.elapsed().as_millis()).unwrap_or(0),
        restarts: 0,
        received: 0,
        retry_in_ms: None,
    });
    all
}
