//! Entry points for `flynn-fuzz`: what Discord sends, as the adapter
//! reads it. Not part of the API.

use super::model::{Interaction, Message};
use super::{convert, rest};
use crate::adapter::ChannelError;
use reqwest::{Method, StatusCode};

/// The bot the fuzz inputs address.
pub const BOT: u64 = 42;

fn identity() -> convert::Identity {
    convert::Identity {
        bot: BOT,
        application: 43,
        name: "flynn#0001".to_owned(),
    }
}

/// A MESSAGE_CREATE (JSON) read as an inbound message: its text, when
/// Flynn answers it. `Err` when the JSON is not a message.
pub fn message(json: &[u8]) -> Result<Option<String>, serde_json::Error> {
    let message: Message = serde_json::from_slice(json)?;
    Ok(convert::message(&identity(), &message)
        .ok()
        .map(|(inbound, _)| inbound.text))
}

/// An INTERACTION_CREATE (JSON) read: whether Flynn uses it.
pub fn interaction(json: &[u8]) -> Result<bool, serde_json::Error> {
    let interaction: Interaction = serde_json::from_slice(json)?;
    Ok(convert::interaction(&interaction).is_some())
}

/// The text without the bot's mentions.
pub fn strip_mention(text: &str) -> String {
    convert::strip_mention(text, BOT)
}

/// The error a failed REST response stands for.
pub fn error_from(status: u16, retry_header: Option<f64>, body: &[u8]) -> Option<ChannelError> {
    let status = StatusCode::from_u16(status).ok()?;
    Some(rest::error_from(
        status,
        retry_header,
        body,
        &Method::POST,
        "/channels/1/messages",
        true,
    ))
}
