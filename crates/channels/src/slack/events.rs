//! The Events API: Slack posts to the gateway's `/channels/slack/…`:
//! `/events` (JSON event callbacks and the `url_verification`
//! handshake), `/interactive` (form field `payload=` with a button
//! press) and `/commands` (a slash command's form fields). Every post is
//! signed: `X-Slack-Signature: v0=<hex HMAC-SHA256 of
//! "v0:<X-Slack-Request-Timestamp>:<body>" under the signing secret>`.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::SlackAdapter;
use super::api::CHANNEL;
use crate::adapter::{InboundEvent, WebhookRequest, WebhookResponse};
use crate::inbound::Inbound;
use crate::signature::verify_hmac_sha256;

/// How far a request's timestamp may be from now, in seconds, before it
/// is taken for a replay.
pub const MAX_SKEW_SECS: i64 = 5 * 60;

/// Why a signature was refused.
pub(super) fn verify(secret: &str, request: &WebhookRequest, now: i64) -> Result<(), &'static str> {
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let timestamp =
        header("x-slack-request-timestamp").ok_or("missing X-Slack-Request-Timestamp")?;
    let signature = header("x-slack-signature").ok_or("missing X-Slack-Signature")?;
    let at: i64 = timestamp
        .parse()
        .map_err(|_| "X-Slack-Request-Timestamp is not a number")?;
    // `abs_diff` cannot overflow: `now - at` can, for an `at` near
    // `i64::MIN` sent by anyone who can reach the endpoint.
    if now.abs_diff(at) > MAX_SKEW_SECS.unsigned_abs() {
        return Err("X-Slack-Request-Timestamp is more than 5 minutes away (a replay?)");
    }
    let hex = signature
        .strip_prefix("v0=")
        .ok_or("X-Slack-Signature is not v0=")?;
    let mut base = format!("v0:{timestamp}:").into_bytes();
    base.extend_from_slice(&request.body);
    if verify_hmac_sha256(secret.as_bytes(), &base, hex) {
        Ok(())
    } else {
        Err("X-Slack-Signature does not match the signing secret")
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// A form body's fields as a JSON object of strings.
pub(super) fn form(body: &[u8]) -> Map<String, Value> {
    form_urlencoded::parse(body)
        .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
        .collect()
}

impl SlackAdapter {
    /// Answers one post from Slack in Events API mode.
    pub(super) async fn events_webhook(
        &self,
        secret: &str,
        request: WebhookRequest,
        sink: &Inbound,
    ) -> WebhookResponse {
        let path = request.path.trim_end_matches('/');
        if !matches!(path, "/events" | "/interactive" | "/commands") {
            return WebhookResponse::not_found();
        }
        if request.method != http::Method::POST {
            return WebhookResponse::text(405, "Slack posts here; use POST");
        }
        if let Err(why) = verify(secret, &request, unix_now()) {
            tracing::warn!(
                channel = CHANNEL,
                path,
                why,
                "refused an unsigned or stale post"
            );
            return WebhookResponse::text(401, why);
        }
        let retry = request
            .headers
            .get("x-slack-retry-num")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let event = match path {
            "/events" => {
                let callback: Value = match serde_json::from_slice(&request.body) {
                    Ok(callback) => callback,
                    Err(_) => return WebhookResponse::text(400, "the body is not JSON"),
                };
                match callback.get("type").and_then(Value::as_str) {
                    Some("url_verification") => {
                        let challenge = callback.get("challenge").cloned().unwrap_or_default();
                        return WebhookResponse::json(200, &json!({"challenge": challenge}));
                    }
                    Some("event_callback") => {}
                    other => {
                        tracing::info!(channel = CHANNEL, kind = other, "Events API post skipped");
                        return WebhookResponse::text(200, "");
                    }
                }
                let bot = match self.bot().await {
                    Ok(bot) => bot,
                    Err(error) => {
                        tracing::warn!(channel = CHANNEL, %error, "cannot read an event before auth.test answers");
                        return WebhookResponse::text(503, "not ready");
                    }
                };
                self.read_callback(&callback, &bot).await
            }
            "/interactive" => {
                let fields = form(&request.body);
                let payload = fields
                    .get("payload")
                    .and_then(Value::as_str)
                    .and_then(|p| serde_json::from_str::<Value>(p).ok());
                match payload {
                    Some(payload) => super::from_interaction(&payload),
                    None => return WebhookResponse::text(400, "no payload field"),
                }
            }
            _ => super::from_command(&Value::Object(form(&request.body))),
        };
        let Some(event) = event else {
            return WebhookResponse::text(200, "");
        };
        let id = match &event {
            InboundEvent::Message(m) => m.id.clone(),
            InboundEvent::Action(a) => a.id.clone(),
        };
        let disposition = sink.deliver(event).await;
        if disposition.acknowledge() {
            WebhookResponse::text(200, "")
        } else {
            tracing::debug!(
                channel = CHANNEL,
                id,
                retry,
                ?disposition,
                "answered 503; Slack will retry"
            );
            WebhookResponse::text(503, "not stored; retry later")
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::signature::hmac_sha256_hex;

    fn request(timestamp: &str, signature: &str, body: &str) -> WebhookRequest {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-slack-request-timestamp", timestamp.parse().unwrap());
        headers.insert("x-slack-signature", signature.parse().unwrap());
        WebhookRequest {
            method: http::Method::POST,
            path: "/events".into(),
            query: String::new(),
            headers,
            body: Bytes::from(body.to_owned()),
        }
    }

    #[test]
    fn slacks_documented_example_verifies_at_its_time() {
        let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let signature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        let secret = "8f742231b10e8888abcd99yyyzzz85a5";
        let r = request("1531420618", signature, body);
        assert_eq!(verify(secret, &r, 1531420618 + 60), Ok(()));
        assert!(verify(secret, &r, 1531420618 + 301).is_err());
        assert!(verify("other", &r, 1531420618).is_err());
    }

    #[test]
    fn a_signature_needs_the_v0_prefix_and_both_headers() {
        let sig = hmac_sha256_hex(b"s", b"v0:100:{}");
        assert_eq!(
            verify("s", &request("100", &format!("v0={sig}"), "{}"), 100),
            Ok(())
        );
        assert!(verify("s", &request("100", &sig, "{}"), 100).is_err());
        let mut r = request("100", &format!("v0={sig}"), "{}");
        r.headers.remove("x-slack-signature");
        assert!(verify("s", &r, 100).is_err());
    }

    #[test]
    fn timestamps_at_the_ends_of_the_range_are_refused_not_a_panic() {
        for at in [i64::MIN, i64::MAX] {
            let r = request(&at.to_string(), "v0=00", "{}");
            assert_eq!(
                verify("s", &r, 1_700_000_000),
                Err("X-Slack-Request-Timestamp is more than 5 minutes away (a replay?)")
            );
        }
        let r = request("100", "v0=00", "{}");
        assert!(verify("s", &r, i64::MIN).is_err());
    }
}
