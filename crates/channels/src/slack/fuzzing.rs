//! Entry points for `flynn-fuzz`: what Slack sends, as the adapter reads
//! it. Not part of the API.

use bytes::Bytes;
use serde_json::Value;

use super::{api, events, wire};
use crate::adapter::WebhookRequest;

/// The bot the fuzz inputs address.
const BOT: &str = "U0BOT";

fn identity() -> wire::Identity {
    wire::Identity {
        user_id: BOT.to_owned(),
        user: "flynn".to_owned(),
        team: "fuzz".to_owned(),
    }
}

/// An Events API `event` (JSON) read as a message for the bot: its text.
pub fn message_event(event: &Value) -> Option<String> {
    wire::message_event(event, &identity()).map(|draft| draft.message.text)
}

/// A `block_actions` payload (JSON) read as a button press: its data.
pub fn block_actions(payload: &Value) -> Option<String> {
    wire::block_actions(payload).map(|action| action.data)
}

/// A slash command's form body read as a message: its text.
pub fn slash_command(body: &[u8]) -> Option<String> {
    wire::slash_command(&Value::Object(events::form(body))).map(|message| message.text)
}

/// The text without the bot's mention, and whether it was there.
pub fn without_mention(text: &str) -> (String, bool) {
    wire::without_mention(text, BOT)
}

/// Checks a request's signature headers against `secret` at `now` (Unix
/// seconds).
pub fn verify(
    secret: &str,
    timestamp: &[u8],
    signature: &[u8],
    body: &[u8],
    now: i64,
) -> Result<(), &'static str> {
    let mut headers = http::HeaderMap::new();
    for (name, value) in [
        ("x-slack-request-timestamp", timestamp),
        ("x-slack-signature", signature),
    ] {
        if let Ok(value) = http::HeaderValue::from_bytes(value) {
            headers.insert(name, value);
        }
    }
    let request = WebhookRequest {
        method: http::Method::POST,
        path: "/events".to_owned(),
        query: String::new(),
        headers,
        body: Bytes::copy_from_slice(body),
    };
    events::verify(secret, &request, now)
}

/// The wait a `Retry-After` header value asks for.
pub fn retry_after(value: &[u8]) -> Option<std::time::Duration> {
    let value = http::HeaderValue::from_bytes(value).ok()?;
    let response = http::Response::builder()
        .status(429)
        .header(http::header::RETRY_AFTER, value)
        .body(Vec::<u8>::new())
        .ok()?;
    api::retry_after(&reqwest::Response::from(response))
}
