//! Entry points for `flynn-fuzz`: the Bot API's updates as the adapter
//! reads them. Not part of the API.

use super::api::{CallbackQuery, Message, MessageEntity};
use super::parse::{self, Me};

/// The bot the fuzz inputs address.
fn me() -> Me {
    Me {
        id: 42,
        username: "flynn_bot".to_owned(),
    }
}

/// A `Message` (JSON) read as an inbound message: its text, when Flynn
/// answers it. `Err` when the JSON is not a message.
pub fn message(json: &[u8]) -> Result<Option<String>, serde_json::Error> {
    let message: Message = serde_json::from_slice(json)?;
    Ok(parse::message(&message, &me()).map(|inbound| inbound.text))
}

/// A `CallbackQuery` (JSON) read as a button press: its data.
pub fn callback(json: &[u8]) -> Result<Option<String>, serde_json::Error> {
    let query: CallbackQuery = serde_json::from_slice(json)?;
    Ok(parse::action(&query).map(|action| action.data))
}

/// The text without the bot's mentions, for entities given as
/// `(type, offset, length)` in UTF-16 units: whether it was addressed.
pub fn strip_mentions(text: &str, entities: &[(&str, u16, u16)]) -> (bool, String) {
    let entities: Vec<MessageEntity> = entities
        .iter()
        .filter_map(|(kind, offset, length)| {
            serde_json::from_value(serde_json::json!({
                "type": kind,
                "offset": offset,
                "length": length,
                "user": {"id": 42, "is_bot": true, "first_name": "Flynn"},
            }))
            .ok()
        })
        .collect();
    parse::strip_mentions(text, &entities, &me())
}
