//! Entry points for `flynn-fuzz`: what Meta posts to the webhook, as the
//! adapter reads it. Not part of the API.

use std::sync::OnceLock;

use super::{WhatsAppAdapter, webhook};

/// The number the fuzz notifications are addressed to.
pub const PHONE_NUMBER_ID: &str = "1234567890";

/// One adapter for every input (building one makes an HTTP client).
fn adapter() -> Option<&'static WhatsAppAdapter> {
    static ADAPTER: OnceLock<Option<WhatsAppAdapter>> = OnceLock::new();
    ADAPTER
        .get_or_init(|| {
            let config = serde_json::from_value(serde_json::json!({
                "access_token": "token",
                "phone_number_id": PHONE_NUMBER_ID,
                "app_secret": "secret",
                "verify_token": "verify",
                "api_url": "http://127.0.0.1:9",
            }))
            .ok()?;
            WhatsAppAdapter::new(&config).ok()
        })
        .as_ref()
}

/// A notification body read as the webhook reads it: the message ids
/// it carried, each sender's 24-hour window opened as a delivery opens
/// it. `Err` when the body is not a notification.
pub fn webhook(body: &[u8]) -> Result<Vec<String>, String> {
    let incoming = webhook::parse(body, PHONE_NUMBER_ID)?;
    let adapter = adapter();
    Ok(incoming
        .into_iter()
        .map(|item| {
            if let Some(adapter) = adapter {
                adapter.opened_window(&item.from, item.timestamp);
            }
            item.id
        })
        .collect())
}

/// Whether `header` signs `body` under `app_secret`.
pub fn signed(app_secret: &str, body: &[u8], header: Option<&str>) -> bool {
    webhook::signed(app_secret, body, header)
}

/// Meta's subscription handshake on `query`: whether it was accepted.
pub fn handshake(query: &str) -> bool {
    matches!(
        webhook::handshake(query, "verify"),
        webhook::Handshake::Accept(_)
    )
}
