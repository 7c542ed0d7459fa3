//! `POST /webhooks/<name>`: a request signed with the webhook's secret
//! (HMAC-SHA256 of the raw body) becomes a message to an agent. The
//! message is accepted (stored) before the sender gets its 202.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use flynn_orchestrator::{Submitted, TurnRequest};
use flynn_protocol::SessionKey;
use hmac::{KeyInit, Mac};
use sha2::Sha256;

use crate::auth::refusal;
use crate::server::State as Gateway;

type HmacSha256 = hmac::Hmac<Sha256>;

/// Headers a signature is read from, in order.
const SIGNATURE_HEADERS: [&str; 2] = ["x-flynn-signature", "x-hub-signature-256"];

/// Whether `signature` (`sha256=<hex>` or bare hex) is the HMAC-SHA256 of
/// `body` under `secret`; compared in constant time.
pub fn verify_signature(secret: &[u8], body: &[u8], signature: &str) -> bool {
    let hex_part = signature.trim();
    let hex_part = hex_part.strip_prefix("sha256=").unwrap_or(hex_part);
    let Ok(expected) = hex::decode(hex_part) else {
        return false;
    };
    let Ok(mut mac) = HmacSha256::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// The signature header value for `body` under `secret`, as senders
/// compute it: `sha256=<hex>`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    let mut mac = match HmacSha256::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

pub(crate) async fn receive(
    State(gateway): State<Arc<Gateway>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(hook) = gateway.settings.webhooks.get(&name) else {
        return refusal(
            StatusCode::NOT_FOUND,
            "not_found",
            &format!("no webhook named '{name}' (gateway.webhooks)"),
        );
    };
    let signature = SIGNATURE_HEADERS
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()));
    let Some(signature) = signature else {
        gateway.metrics.auth_failure();
        return refusal(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the request is not signed: send `X-Flynn-Signature: sha256=<HMAC-SHA256 of the body, hex>`",
        );
    };
    if !verify_signature(hook.secret.as_bytes(), &body, signature) {
        gateway.metrics.auth_failure();
        tracing::warn!(webhook = %name, "refused a webhook with a bad signature");
        return refusal(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the signature does not match the body",
        );
    }
    let Ok(text) = std::str::from_utf8(&body) else {
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
    match gateway.manager.submit(request).await {
        Ok(Submitted::Turn(handle)) => (
            StatusCode::ACCEPTED,
            Json(serde_json::json!({
                "accepted": true,
                "session": session,
                "turn": handle.turn,
            })),
        )
            .into_response(),
        Ok(Submitted::Command { reply, .. }) => (
            StatusCode::OK,
            Json(serde_json::json!({ "session": session, "reply": reply })),
        )
            .into_response(),
        Err(error) => {
            let status = if matches!(error, flynn_orchestrator::Error::ShuttingDown) {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::UNPROCESSABLE_ENTITY
            };
            refusal(status, "refused", &error.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
