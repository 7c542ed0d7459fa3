//! `POST /webhooks/<name>`: a request signed with the webhook's secret
//! becomes a message to an agent, as untrusted content. The message is
//! accepted (stored) before the sender gets its 202.
//!
//! Two ways to sign, both HMAC-SHA256 in hex:
//! - `X-Flynn-Timestamp: <unix seconds>` and `X-Flynn-Signature:
//!   sha256=<hmac of "<timestamp>.<body>">`: refused outside 5 minutes of
//!   the gateway's clock, and a signature is accepted once;
//! - over the body alone (`X-Hub-Signature-256`, as GitHub sends it, or
//!   `X-Flynn-Signature`) with a delivery id (`X-GitHub-Delivery` or
//!   `X-Flynn-Delivery`): each delivery id and each signature is accepted
//!   once. The delivery id is not signed; the signature, over a body that
//!   differs per delivery, is what makes a replay fail. Ids are kept for a
//!   week in memory (up to 100,000): a restart forgets them, so prefer the
//!   timestamped form where the sender can.
//!
//! A delivery id (`X-Flynn-Delivery`, else `X-GitHub-Delivery`) is also
//! stored with the message, in either form: a sender's retry of an
//! accepted delivery is answered `409 replayed` even after a restart,
//! and runs no second turn. A delivery that could not be stored for now
//! (the database busy, the session's queue full, shutting down) gets
//! `503` with `Retry-After`, so the sender tries it again.
//!
//! An unknown name, another method or a bad signature get the same
//! answer, so what is configured cannot be found out.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use flynn_channels::signature;
use flynn_orchestrator::{Submitted, TurnRequest};
use flynn_protocol::SessionKey;

use crate::auth::{Conn, refusal};
use crate::server::State as Gateway;

/// Headers a signature is read from, in order.
const SIGNATURE_HEADERS: [&str; 2] = ["x-flynn-signature", "x-hub-signature-256"];
/// Headers a delivery id is read from, in order.
const DELIVERY_HEADERS: [&str; 2] = ["x-flynn-delivery", "x-github-delivery"];
/// How far a signed timestamp may be from the gateway's clock.
pub const TIMESTAMP_WINDOW: Duration = Duration::from_secs(300);
/// How long a body-only delivery is remembered.
const DELIVERY_KEPT: Duration = Duration::from_secs(7 * 24 * 3600);
/// Deliveries remembered at most (the oldest are forgotten first).
const MAX_SEEN: usize = 100_000;
/// What a `503` asks the sender to wait before trying again.
const RETRY_AFTER_SECS: u64 = 30;

/// Whether `signature` (`sha256=<hex>` or bare hex) is the HMAC-SHA256 of
/// `body` under `secret`; compared in constant time.
pub fn verify_signature(secret: &[u8], body: &[u8], signature: &str) -> bool {
    let hex_part = signature.trim();
    let hex_part = hex_part.strip_prefix("sha256=").unwrap_or(hex_part);
    signature::verify_hmac_sha256(secret, body, hex_part)
}

/// The signature header value for `body` under `secret`, as senders
/// compute it: `sha256=<hex>`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    format!("sha256={}", signature::hmac_sha256_hex(secret, body))
}

/// The `X-Flynn-Signature` for `body` sent at `timestamp` (Unix seconds):
/// the HMAC of `<timestamp>.<body>`.
pub fn sign_timestamped(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let mut signed = format!("{timestamp}.").into_bytes();
    signed.extend_from_slice(body);
    sign(secret, &signed)
}

/// Signatures and delivery ids accepted, until they expire.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    inner: Mutex<SeenInner>,
}

#[derive(Debug, Default)]
struct SeenInner {
    /// Key → expiry (Unix milliseconds).
    expiry: HashMap<String, i64>,
    order: VecDeque<(i64, String)>,
}

impl Seen {
    /// Records every key, unless one was seen already (then nothing is
    /// recorded and `false` comes back).
    fn first_time(&self, keys: &[String], expires_at: i64, now: i64) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // Forget what expired at the front, and the oldest beyond the cap.
        while let Some((at, _)) = inner.order.front() {
            if *at > now && inner.order.len() <= MAX_SEEN {
                break;
            }
            if let Some((at, key)) = inner.order.pop_front()
                && inner.expiry.get(&key) == Some(&at)
            {
                inner.expiry.remove(&key);
            }
        }
        if keys
            .iter()
            .any(|key| inner.expiry.get(key).is_some_and(|e| *e > now))
        {
            return false;
        }
        for key in keys {
            inner.expiry.insert(key.clone(), expires_at);
            inner.order.push_back((expires_at, key.clone()));
        }
        true
    }

    fn forget(&self, keys: &[String]) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        for key in keys {
            inner.expiry.remove(key);
        }
    }
}

/// The one answer to an unknown name, another method and a bad or
/// missing signature.
fn not_signed(gateway: &Gateway, ip: Option<std::net::IpAddr>) -> Response {
    gateway.metrics.auth_failure();
    if let Some(ip) = ip {
        let _ = gateway.failures.check(&ip.to_string());
    }
    refusal(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "the request is not signed for a webhook here: POST with `X-Flynn-Timestamp: <unix seconds>` and `X-Flynn-Signature: sha256=<HMAC-SHA256 of \"<timestamp>.<body>\", hex>` (docs/protocol.md, Webhooks)",
    )
}

fn header<'a>(headers: &'a HeaderMap, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
        .map(str::trim)
}

pub(crate) async fn receive(
    State(gateway): State<Arc<Gateway>>,
    Path(name): Path<String>,
    request: Request,
) -> Response {
    flynn_protocol::fault::point("webhook");
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
    let body = match crate::http::read_body(&gateway, body).await {
        Ok(body) => body,
        Err(response) => return *response,
    };
    let hook = gateway.settings.webhooks.get(&name);
    let Some(hook) = hook.filter(|_| parts.method == Method::POST) else {
        return not_signed(&gateway, ip);
    };
    let headers = &parts.headers;
    let Some(signature) = header(headers, &SIGNATURE_HEADERS) else {
        return not_signed(&gateway, ip);
    };
    let secret = hook.secret.as_bytes();
    let now = crate::approver::now_millis();
    let window = i64::try_from(TIMESTAMP_WINDOW.as_millis()).unwrap_or(i64::MAX);
    let (keys, expires_at) = if let Some(timestamp) = headers.get("x-flynn-timestamp") {
        let Some(timestamp) = timestamp
            .to_str()
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok())
        else {
            return not_signed(&gateway, ip);
        };
        let mut signed = format!("{timestamp}.").into_bytes();
        signed.extend_from_slice(&body);
        if !verify_signature(secret, &signed, signature) {
            tracing::warn!(webhook = %name, "refused a webhook with a bad signature");
            return not_signed(&gateway, ip);
        }
        let at = timestamp.saturating_mul(1000);
        if now.saturating_sub(at).abs() > window {
            tracing::warn!(webhook = %name, timestamp, "refused a webhook signed too long ago (or ahead)");
            return refusal(
                StatusCode::UNAUTHORIZED,
                "stale",
                "X-Flynn-Timestamp is more than 5 minutes from the gateway's clock: sign each request when it is sent (and keep the clocks in sync)",
            );
        }
        let mut keys = vec![format!("{name}:sig:{}", signature_key(signature))];
        if let Some(delivery) = header(headers, &DELIVERY_HEADERS).filter(|d| !d.is_empty()) {
            keys.push(format!("{name}:id:{delivery}"));
        }
        (keys, at.saturating_add(window))
    } else {
        if !verify_signature(secret, &body, signature) {
            tracing::warn!(webhook = %name, "refused a webhook with a bad signature");
            return not_signed(&gateway, ip);
        }
        let Some(delivery) = header(headers, &DELIVERY_HEADERS).filter(|d| !d.is_empty()) else {
            return refusal(
                StatusCode::UNAUTHORIZED,
                "no_delivery_id",
                "a signature over the body alone needs a delivery id (`X-GitHub-Delivery` or `X-Flynn-Delivery`), or sign `<timestamp>.<body>` and send `X-Flynn-Timestamp`",
            );
        };
        let kept = i64::try_from(DELIVERY_KEPT.as_millis()).unwrap_or(i64::MAX);
        (
            vec![
                format!("{name}:sig:{}", signature_key(signature)),
                format!("{name}:id:{delivery}"),
            ],
            now.saturating_add(kept),
        )
    };
    if !gateway.deliveries.first_time(&keys, expires_at, now) {
        tracing::warn!(webhook = %name, "refused a webhook delivery seen before (a replay)");
        return refusal(
            StatusCode::CONFLICT,
            "replayed",
            "this delivery (its signature or delivery id) was received before",
        );
    }
    let Ok(text) = std::str::from_utf8(&body) else {
        gateway.deliveries.forget(&keys);
        return refusal(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "the body is not UTF-8 text",
        );
    };
    // Whoever can post here (a CI system, a form, anyone who can comment on
    // a GitHub issue) writes this text: it is untrusted content, never a
    // command or instructions.
    let source = format!("webhook {name}");
    let body = flynn_tools::wrap_untrusted(&source, text);
    let message = match &hook.template {
        Some(template) => template
            .replace("{{body}}", &body)
            .replace("{{name}}", &name),
        None => body,
    };
    let session = match &hook.session {
        Some(session) => session.parse::<SessionKey>(),
        None => SessionKey::new("webhook", &name),
    };
    let Ok(session) = session else {
        return refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "config",
            &format!("gateway.webhooks.{name}.session is not a valid session key"),
        );
    };
    let mut request = TurnRequest::text(session.clone(), message);
    request.agent = hook.agent.clone();
    request.approver = Some(Arc::new(gateway.approver.clone()));
    request.untrusted = Some(source);
    request.principal = flynn_protocol::Principal::automation(format!("webhook:{name}"));
    // Stored with the message: a retry after a restart is still known.
    request.external_id = header(headers, &DELIVERY_HEADERS)
        .filter(|d| !d.is_empty())
        .map(|delivery| format!("webhook:{delivery}"));
    match gateway.manager.submit(request).await {
        Ok(Submitted::Turn(handle)) => {
            let turn = handle.turn;
            if let Some(to) = &hook.deliver_to {
                deliver_later(&gateway, &name, to, handle);
            }
            (
                StatusCode::ACCEPTED,
                Json(serde_json::json!({
                    "accepted": true,
                    "session": session,
                    "turn": turn,
                })),
            )
                .into_response()
        }
        Ok(Submitted::Command { reply, .. }) => (
            StatusCode::OK,
            Json(serde_json::json!({ "session": session, "reply": reply })),
        )
            .into_response(),
        Err(flynn_orchestrator::Error::Storage(flynn_sessions::Error::Duplicate { .. })) => {
            tracing::warn!(webhook = %name, "refused a webhook delivery stored before (a retry or a replay)");
            refusal(
                StatusCode::CONFLICT,
                "replayed",
                "this delivery (its delivery id) was received before",
            )
        }
        Err(error) => {
            // Not taken: the sender may try the same delivery again.
            gateway.deliveries.forget(&keys);
            if for_now(&error) {
                let mut response = refusal(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    &error.to_string(),
                );
                response.headers_mut().insert(
                    axum::http::header::RETRY_AFTER,
                    axum::http::HeaderValue::from(RETRY_AFTER_SECS),
                );
                return response;
            }
            refusal(
                StatusCode::UNPROCESSABLE_ENTITY,
                "refused",
                &error.to_string(),
            )
        }
    }
}

/// Whether a refusal is for now only: the same delivery may succeed later.
fn for_now(error: &flynn_orchestrator::Error) -> bool {
    use flynn_orchestrator::Error;
    match error {
        Error::ShuttingDown | Error::QueueFull { .. } | Error::LaneBusy { .. } => true,
        // Not the sender's fault: a busy or failing database.
        Error::Storage(_) => true,
        _ => false,
    }
}

/// A signature as a store key: its hex, lower case, without `sha256=`.
fn signature_key(signature: &str) -> String {
    signature
        .trim()
        .trim_start_matches("sha256=")
        .to_ascii_lowercase()
}

/// Sends the answer of a webhook's turn to `to` (its `deliver_to`) once the
/// turn ends; a failure is logged, as the sender was answered already.
fn deliver_later(gateway: &Gateway, name: &str, to: &str, handle: flynn_orchestrator::TurnHandle) {
    let name = name.to_owned();
    let Ok(to) = to.parse::<SessionKey>() else {
        tracing::warn!(webhook = %name, to, "deliver_to is not a session key; the answer stays in the webhook's session");
        return;
    };
    let registry = gateway.channels.clone();
    tokio::spawn(async move {
        let answer = match handle.outcome().await {
            Ok(outcome) => outcome.reply,
            Err(error) => format!("⚠️ the webhook {name} failed: {error}"),
        };
        if answer.trim().is_empty() {
            return;
        }
        let Some(adapter) = registry.as_ref().and_then(|r| r.get(to.channel())) else {
            tracing::warn!(webhook = %name, to = %to, "the answer could not be delivered: the channel is not running");
            return;
        };
        let target = flynn_channels::Target::session(&to);
        let sent = match adapter.can_send(&target) {
            Ok(()) => flynn_channels::outbound::send(adapter.as_ref(), &target, &answer, &[])
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err(error) => Err(error.to_string()),
        };
        if let Err(error) = sent {
            tracing::warn!(webhook = %name, to = %to, %error, "the answer could not be delivered");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_is_taken_once_until_it_expires() {
        let seen = Seen::default();
        let keys = vec!["ci:sig:ab".to_owned(), "ci:id:1".to_owned()];
        assert!(seen.first_time(&keys, 1_000, 0));
        assert!(!seen.first_time(&keys, 1_000, 10), "a replay");
        assert!(
            !seen.first_time(&["ci:id:1".to_owned()], 1_000, 10),
            "the same delivery id with another signature"
        );
        assert!(seen.first_time(&keys, 3_000, 2_000), "expired: forgotten");
        seen.forget(&keys);
        assert!(seen.first_time(&keys, 5_000, 2_000));
    }

    #[test]
    fn timestamped_signatures_cover_the_timestamp() {
        let signature = sign_timestamped(b"k", 1_700_000_000, b"{}");
        assert!(verify_signature(b"k", b"1700000000.{}", &signature));
        assert!(!verify_signature(b"k", b"1700000001.{}", &signature));
    }

    #[test]
    fn signatures_verify_only_for_their_body_and_secret() {
        // RFC 4231 test case 2.
        let signature = sign(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            signature,
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert!(verify_signature(
            b"Jefe",
            b"what do ya want for nothing?",
            &signature
        ));
        assert!(verify_signature(
            b"Jefe",
            b"what do ya want for nothing?",
            signature.trim_start_matches("sha256=")
        ));
        assert!(!verify_signature(
            b"Jefe",
            b"what do ya want for nothing!",
            &signature
        ));
        assert!(!verify_signature(
            b"jefe",
            b"what do ya want for nothing?",
            &signature
        ));
        assert!(!verify_signature(b"Jefe", b"x", "sha256=zz"));
    }
}
