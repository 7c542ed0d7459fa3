//! What Meta posts to the webhook: the verification handshake, the
//! signature, and the `messages` notifications read into [`Incoming`]
//! items (media still to download).

use serde::Deserialize;
use serde_json::Value;

use crate::signature::{hmac_sha256_hex, verify_hmac_sha256};

/// The answer to `GET /webhook`: the challenge to echo, or why not.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Handshake {
    Accept(String),
    /// Wrong mode or token: 403.
    Refuse,
    /// The right token without a challenge: 400.
    NoChallenge,
}

/// Meta's subscription check: `hub.mode=subscribe`, `hub.verify_token`
/// equal to ours (compared in constant time), `hub.challenge` echoed.
pub(super) fn handshake(query: &str, verify_token: &str) -> Handshake {
    let mut mode = None;
    let mut token = None;
    let mut challenge = None;
    for (key, value) in form_pairs(query) {
        match key.as_str() {
            "hub.mode" => mode = Some(value),
            "hub.verify_token" => token = Some(value),
            "hub.challenge" => challenge = Some(value),
            _ => {}
        }
    }
    let token_ok = token.is_some_and(|given| same_secret(verify_token, &given));
    if mode.as_deref() != Some("subscribe") || !token_ok {
        return Handshake::Refuse;
    }
    match challenge {
        Some(challenge) if !challenge.is_empty() => Handshake::Accept(challenge),
        _ => Handshake::NoChallenge,
    }
}

/// `a == b` in time independent of where they differ (and of their
/// lengths): compares their HMACs under `a`.
fn same_secret(a: &str, b: &str) -> bool {
    !a.is_empty()
        && verify_hmac_sha256(
            a.as_bytes(),
            b.as_bytes(),
            &hmac_sha256_hex(a.as_bytes(), a.as_bytes()),
        )
}

/// A query string's pairs, form-decoded.
fn form_pairs(query: &str) -> Vec<(String, String)> {
    match reqwest::Url::parse(&format!("http://webhook.invalid/?{query}")) {
        Ok(url) => url
            .query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Whether `header` (`X-Hub-Signature-256`) is `sha256=<hex>` of `body`
/// under the app secret.
pub(super) fn signed(app_secret: &str, body: &[u8], header: Option<&str>) -> bool {
    let Some(hex) = header.and_then(|h| h.trim().strip_prefix("sha256=")) else {
        return false;
    };
    !app_secret.is_empty() && verify_hmac_sha256(app_secret.as_bytes(), body, hex)
}

/// One thing a notification carried for us, ready to become an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Incoming {
    /// The message's `wamid`.
    pub id: String,
    /// The sender's number (E.164 digits without `+`).
    pub from: String,
    /// The sender's profile name, from `contacts[]`.
    pub name: Option<String>,
    /// Unix seconds the person sent it.
    pub timestamp: Option<u64>,
    pub kind: IncomingKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum IncomingKind {
    Text(String),
    Media {
        image: bool,
        media_id: String,
        mime_type: Option<String>,
        filename: Option<String>,
        caption: String,
    },
    /// A reply button pressed (`interactive.button_reply`, or a template's
    /// quick reply `button`).
    Press {
        data: String,
        /// The message that carried the button (`context.id`).
        message: Option<String>,
    },
    /// A message type Flynn does not take (audio, sticker, location...):
    /// it still opens the 24-hour window.
    Unsupported(String),
}

#[derive(Debug, Deserialize)]
struct Notification {
    #[serde(default)]
    object: String,
    #[serde(default)]
    entry: Vec<Value>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    #[serde(default)]
    changes: Vec<Value>,
}

#[derive(Debug, Deserialize)]
struct Change {
    #[serde(default)]
    field: String,
    #[serde(default)]
    value: Value,
}

#[derive(Debug, Default, Deserialize)]
struct ChangeValue {
    #[serde(default)]
    metadata: Option<Metadata>,
    #[serde(default)]
    contacts: Vec<Contact>,
    #[serde(default)]
    messages: Vec<Value>,
    #[serde(default)]
    statuses: Vec<Value>,
    #[serde(default)]
    errors: Vec<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct Metadata {
    #[serde(default)]
    phone_number_id: String,
}

#[derive(Debug, Default, Deserialize)]
struct Contact {
    #[serde(default)]
    wa_id: String,
    #[serde(default)]
    profile: Option<Profile>,
}

#[derive(Debug, Default, Deserialize)]
struct Profile {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Message {
    id: String,
    from: String,
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    timestamp: Option<String>,
    #[serde(default)]
    context: Option<Context>,
    #[serde(default)]
    text: Option<Text>,
    #[serde(default)]
    image: Option<MediaRef>,
    #[serde(default)]
    document: Option<MediaRef>,
    /// A voice note (`voice: true`) or an audio file.
    #[serde(default)]
    audio: Option<MediaRef>,
    #[serde(default)]
    interactive: Option<Interactive>,
    #[serde(default)]
    button: Option<QuickReply>,
}

#[derive(Debug, Deserialize)]
struct Context {
    #[serde(default)]
    id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Text {
    #[serde(default)]
    body: String,
}

#[derive(Debug, Deserialize)]
struct MediaRef {
    id: String,
    #[serde(default)]
    mime_type: Option<String>,
    #[serde(default)]
    filename: Option<String>,
    #[serde(default)]
    caption: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Interactive {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    button_reply: Option<ButtonReply>,
}

#[derive(Debug, Deserialize)]
struct ButtonReply {
    id: String,
}

#[derive(Debug, Deserialize)]
struct QuickReply {
    #[serde(default)]
    payload: Option<String>,
    #[serde(default)]
    text: Option<String>,
}

/// The messages of a notification addressed to `phone_number_id`, in
/// order. Statuses (delivery receipts) and errors are logged; anything
/// malformed is skipped with a warning. `Err` when the body is not JSON.
pub(super) fn parse(body: &[u8], phone_number_id: &str) -> Result<Vec<Incoming>, String> {
    let notification: Notification =
        serde_json::from_slice(body).map_err(|e| format!("the body is not a notification: {e}"))?;
    if notification.object != "whatsapp_business_account" {
        tracing::warn!(object = %notification.object, "whatsapp webhook: not a WhatsApp Business notification; ignored");
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for entry in notification.entry {
        let entry: Entry = match serde_json::from_value(entry) {
            Ok(entry) => entry,
            Err(e) => {
                tracing::warn!(error = %e, "whatsapp webhook: malformed entry skipped");
                continue;
            }
        };
        for change in entry.changes {
            let change: Change = match serde_json::from_value(change) {
                Ok(change) => change,
                Err(e) => {
                    tracing::warn!(error = %e, "whatsapp webhook: malformed change skipped");
                    continue;
                }
            };
            if change.field != "messages" {
                tracing::debug!(field = %change.field, "whatsapp webhook: field not subscribed to; ignored");
                continue;
            }
            let value: ChangeValue = match serde_json::from_value(change.value) {
                Ok(value) => value,
                Err(e) => {
                    tracing::warn!(error = %e, "whatsapp webhook: malformed value skipped");
                    continue;
                }
            };
            read_value(value, phone_number_id, &mut out);
        }
    }
    Ok(out)
}

fn read_value(value: ChangeValue, phone_number_id: &str, out: &mut Vec<Incoming>) {
    let number = value
        .metadata
        .as_ref()
        .map(|m| m.phone_number_id.as_str())
        .unwrap_or_default();
    if number != phone_number_id {
        tracing::warn!(
            phone_number_id = number,
            "whatsapp webhook: a notification for another business number of this app; ignored"
        );
        return;
    }
    for error in &value.errors {
        tracing::warn!(code = %error["code"], title = %error["title"], "whatsapp webhook: the platform reported an error");
    }
    for status in &value.statuses {
        log_status(status);
    }
    for message in value.messages {
        let message: Message = match serde_json::from_value(message) {
            Ok(message) => message,
            Err(e) => {
                tracing::warn!(error = %e, "whatsapp webhook: malformed message skipped");
                continue;
            }
        };
        let name = value
            .contacts
            .iter()
            .find(|c| c.wa_id == message.from)
            .or(value.contacts.first().filter(|_| value.contacts.len() == 1))
            .and_then(|c| c.profile.as_ref())
            .and_then(|p| p.name.as_deref())
            // A profile name anyone can set, `@alice` included.
            .and_then(crate::adapter::Sender::display_name);
        let from = message.from.trim_start_matches('+').to_owned();
        if from.is_empty() || message.id.is_empty() {
            tracing::warn!("whatsapp webhook: a message without a sender or id skipped");
            continue;
        }
        out.push(Incoming {
            id: message.id.clone(),
            timestamp: message
                .timestamp
                .as_deref()
                .and_then(|t| t.trim().parse().ok()),
            name,
            kind: kind(message),
            from,
        });
    }
}

fn kind(message: Message) -> IncomingKind {
    let context = message.context.and_then(|c| c.id);
    match message.kind.as_str() {
        "text" => IncomingKind::Text(message.text.map(|t| t.body).unwrap_or_default()),
        "image" | "document" | "audio" => {
            let image = message.kind == "image";
            let media = match message.kind.as_str() {
                "image" => message.image,
                "document" => message.document,
                // A file of an `audio/` type: the router transcribes it.
                _ => message.audio,
            };
            match media {
                Some(media) => IncomingKind::Media {
                    image,
                    media_id: media.id,
                    mime_type: media.mime_type,
                    filename: media.filename,
                    caption: media.caption.unwrap_or_default(),
                },
                None => IncomingKind::Unsupported(format!("{} without its object", message.kind)),
            }
        }
        "interactive" => match message.interactive {
            Some(Interactive {
                button_reply: Some(reply),
                ..
            }) => IncomingKind::Press {
                data: reply.id,
                message: context,
            },
            Some(other) => IncomingKind::Unsupported(format!("interactive {}", other.kind)),
            None => IncomingKind::Unsupported("interactive without its object".to_owned()),
        },
        "button" => match message.button.and_then(|b| b.payload.or(b.text)) {
            Some(data) => IncomingKind::Press {
                data,
                message: context,
            },
            None => IncomingKind::Unsupported("button without a payload".to_owned()),
        },
        other => IncomingKind::Unsupported(other.to_owned()),
    }
}

/// Delivery receipts need nothing; a failed send is worth a warning (the
/// API reports some refusals only here, 131047 among them).
fn log_status(status: &Value) {
    let state = status["status"].as_str().unwrap_or_default();
    if state == "failed" {
        let errors: Vec<String> = status["errors"]
            .as_array()
            .map(|errors| {
                errors
                    .iter()
                    .map(|e| format!("{} {}", e["code"], e["title"].as_str().unwrap_or_default()))
                    .collect()
            })
            .unwrap_or_default();
        tracing::warn!(
            message = status["id"].as_str().unwrap_or_default(),
            recipient = status["recipient_id"].as_str().unwrap_or_default(),
            errors = %errors.join("; "),
            "whatsapp: a sent message failed"
        );
    } else {
        tracing::debug!(
            message = status["id"].as_str().unwrap_or_default(),
            status = state,
            "whatsapp: delivery status"
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_handshake_needs_mode_token_and_challenge() {
        assert_eq!(
            handshake(
                "hub.mode=subscribe&hub.challenge=11%2B22&hub.verify_token=s%C3%A9cret",
                "sécret"
            ),
            Handshake::Accept("11+22".to_owned())
        );
        assert_eq!(
            handshake(
                "hub.mode=subscribe&hub.challenge=1&hub.verify_token=other",
                "sécret"
            ),
            Handshake::Refuse
        );
        assert_eq!(
            handshake(
                "hub.mode=unsubscribe&hub.challenge=1&hub.verify_token=t",
                "t"
            ),
            Handshake::Refuse
        );
        assert_eq!(
            handshake("hub.mode=subscribe&hub.verify_token=t", "t"),
            Handshake::NoChallenge
        );
        assert_eq!(handshake("", ""), Handshake::Refuse);
    }

    #[test]
    fn signatures_follow_meta() {
        let body = br#"{"object":"whatsapp_business_account"}"#;
        let good = format!("sha256={}", hmac_sha256_hex(b"app-secret", body));
        assert!(signed("app-secret", body, Some(&good)));
        assert!(!signed("other", body, Some(&good)));
        assert!(!signed(
            "app-secret",
            body,
            Some(good.trim_start_matches("sha256="))
        ));
        assert!(!signed("app-secret", body, None));
    }

    #[test]
    fn odd_shapes_are_skipped_not_fatal() {
        assert!(parse(b"not json", "1").is_err());
        let body = json!({
            "object": "whatsapp_business_account",
            "entry": [
                "not an object",
                {"changes": [
                    {"field": "messages", "value": {"metadata": {"phone_number_id": "1"},
                        "messages": [{"id": 5}, {"id": "wamid.A", "from": "+4912", "type": "text", "text": {"body": "hi"}, "timestamp": "17"}]}},
                    {"field": "messages", "value": {"metadata": {"phone_number_id": "2"},
                        "messages": [{"id": "wamid.B", "from": "4913", "type": "text", "text": {"body": "not ours"}}]}}
                ]}
            ]
        });
        let parsed = parse(body.to_string().as_bytes(), "1").unwrap();
        assert_eq!(
            parsed,
            vec![Incoming {
                id: "wamid.A".to_owned(),
                from: "4912".to_owned(),
                name: None,
                timestamp: Some(17),
                kind: IncomingKind::Text("hi".to_owned()),
            }]
        );
    }
}
