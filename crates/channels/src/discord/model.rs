//! The parts of Discord's gateway objects the adapter reads, and nothing
//! else: a message, its author, mentions, reply and files; an interaction
//! with its command name or button id. Fields Discord adds or the adapter
//! does not read are skipped, so a dispatch with new fields still parses;
//! a missing field the adapter needs fails the parse, and the dispatch is
//! skipped with a warning.
//!
//! Written by hand rather than taken from a crate of every Discord type:
//! those generate deserializers for hundreds of structures the bot never
//! receives (about 0.9 MB of binary for twilight-model).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A Discord id. Discord writes them as strings of digits; a number is
/// taken too. Never 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Snowflake(pub u64);

impl Snowflake {
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Snowflake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl<'de> Deserialize<'de> for Snowflake {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Id;
        impl Visitor<'_> for Id {
            type Value = Snowflake;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Discord id (a string of digits, not 0)")
            }

            fn visit_u64<E: de::Error>(self, value: u64) -> Result<Snowflake, E> {
                if value == 0 {
                    return Err(E::invalid_value(de::Unexpected::Unsigned(0), &self));
                }
                Ok(Snowflake(value))
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Snowflake, E> {
                match u64::try_from(value) {
                    Ok(value) => self.visit_u64(value),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Signed(value), &self)),
                }
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<Snowflake, E> {
                // `u64::from_str` takes a leading `+`; Discord never writes one.
                match value.parse() {
                    Ok(id) if value.bytes().all(|b| b.is_ascii_digit()) => self.visit_u64(id),
                    _ => Err(E::invalid_value(de::Unexpected::Str(value), &self)),
                }
            }
        }
        deserializer.deserialize_any(Id)
    }
}

/// A user, as a message's author, a mention or an interaction's user.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct User {
    pub id: Snowflake,
    /// The unique username (`alice`).
    pub username: String,
    /// The display name, when set.
    #[serde(default)]
    pub global_name: Option<String>,
    #[serde(default)]
    pub bot: bool,
}

/// Only the id of a mentioned user or a referenced message's author.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct UserId {
    pub id: Snowflake,
}

/// MESSAGE_CREATE's `d`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct Message {
    pub id: Snowflake,
    pub channel_id: Snowflake,
    #[serde(default)]
    pub guild_id: Option<Snowflake>,
    pub author: User,
    /// Set for messages a webhook posted.
    #[serde(default)]
    pub webhook_id: Option<Snowflake>,
    /// Discord's message type: 0 a message, 19 a reply; the rest are
    /// system messages.
    #[serde(rename = "type")]
    pub kind: u8,
    /// Empty without the `MESSAGE_CONTENT` intent.
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub mentions: Vec<UserId>,
    /// The message replied to (null when it was deleted).
    #[serde(default)]
    pub referenced_message: Option<Box<Referenced>>,
    #[serde(default)]
    pub attachments: Vec<File>,
}

/// The regular message type.
pub(super) const REGULAR: u8 = 0;
/// A reply.
pub(super) const REPLY: u8 = 19;

/// A message replied to: whose it is.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct Referenced {
    pub author: UserId,
}

/// A file a message carries.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct File {
    pub url: String,
    pub filename: String,
    #[serde(default)]
    pub content_type: Option<String>,
    pub size: u64,
}

/// INTERACTION_CREATE's `d`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct Interaction {
    pub id: Snowflake,
    pub application_id: Snowflake,
    /// 2 a slash command, 3 a button press; others are not used.
    #[serde(rename = "type")]
    pub kind: u8,
    #[serde(default)]
    pub data: Option<InteractionData>,
    #[serde(default)]
    pub guild_id: Option<Snowflake>,
    /// The channel (newer payloads), or only its id (older ones).
    #[serde(default)]
    pub channel: Option<ChannelRef>,
    #[serde(default)]
    pub channel_id: Option<Snowflake>,
    /// In a server: the member, whose `user` pressed or typed.
    #[serde(default)]
    pub member: Option<Member>,
    /// In a DM: the user.
    #[serde(default)]
    pub user: Option<User>,
    pub token: String,
    /// The message a pressed button belongs to.
    #[serde(default)]
    pub message: Option<MessageRef>,
}

/// A slash command.
pub(super) const APPLICATION_COMMAND: u8 = 2;
/// A message component (a button).
pub(super) const MESSAGE_COMPONENT: u8 = 3;

impl Interaction {
    /// Who did it: the member's user in a server, the user in a DM.
    pub fn author(&self) -> Option<&User> {
        self.member
            .as_ref()
            .and_then(|m| m.user.as_ref())
            .or(self.user.as_ref())
    }

    /// The channel it happened in.
    pub fn channel(&self) -> Option<Snowflake> {
        self.channel.as_ref().map(|c| c.id).or(self.channel_id)
    }
}

/// An interaction's data: a command's name or a component's id.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct InteractionData {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub custom_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct ChannelRef {
    pub id: Snowflake,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct Member {
    #[serde(default)]
    pub user: Option<User>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(super) struct MessageRef {
    pub id: Snowflake,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_are_strings_of_digits_and_never_zero() {
        let parse = |value: serde_json::Value| {
            serde_json::from_value::<Snowflake>(value).map_err(|e| e.to_string())
        };
        assert_eq!(
            parse(json!("1098765432109876543")),
            Ok(Snowflake(1_098_765_432_109_876_543))
        );
        assert_eq!(parse(json!(42)), Ok(Snowflake(42)));
        for bad in [
            json!("0"),
            json!(0),
            json!("+5"),
            json!("-5"),
            json!(-5),
            json!(""),
            json!("1a"),
            json!(1.5),
            json!(null),
        ] {
            let error = parse(bad.clone());
            assert!(
                error.as_ref().is_err_and(|e| e.contains("a Discord id")),
                "{bad} gave {error:?}"
            );
        }
        assert!(parse(json!("18446744073709551616")).is_err(), "past u64");
    }

    #[test]
    fn a_message_needs_what_the_adapter_reads_and_ignores_the_rest() {
        let full = json!({
            "id": "3", "channel_id": "2", "guild_id": "1", "type": 19, "content": "hi",
            "author": {"id": "5", "username": "alice", "global_name": "Alice", "discriminator": "0", "avatar": null},
            "mentions": [{"id": "42", "username": "flynn", "bot": true}],
            "referenced_message": {"id": "1", "author": {"id": "42", "username": "flynn"}, "content": "x"},
            "attachments": [{"id": "9", "url": "https://cdn/x.png", "filename": "x.png", "content_type": "image/png", "size": 10}],
            "embeds": [], "tts": false, "pinned": false, "timestamp": "2026-01-02T03:04:05+00:00",
            "a_field_from_next_year": {"nested": [1, 2]}
        });
        let message: Message = serde_json::from_value(full).unwrap();
        assert_eq!(message.kind, REPLY);
        assert_eq!(message.author.global_name.as_deref(), Some("Alice"));
        assert_eq!(message.mentions, vec![UserId { id: Snowflake(42) }]);
        assert_eq!(
            message.referenced_message.map(|r| r.author.id),
            Some(Snowflake(42))
        );
        assert_eq!(message.attachments[0].size, 10);
        let bare = json!({"id": "3", "channel_id": "2", "type": 0,
            "author": {"id": "5", "username": "alice"}, "referenced_message": null});
        let message: Message = serde_json::from_value(bare).unwrap();
        assert_eq!((message.guild_id, message.content.as_str()), (None, ""));
        let no_author = json!({"id": "3", "channel_id": "2", "type": 0});
        let error = serde_json::from_value::<Message>(no_author).unwrap_err();
        assert!(error.to_string().contains("author"), "{error}");
    }

    #[test]
    fn an_interactions_author_is_the_member_in_a_server_and_the_user_in_a_dm() {
        let in_server = json!({
            "id": "7", "application_id": "8", "type": 2, "token": "t", "guild_id": "1",
            "channel": {"id": "2", "type": 0}, "data": {"id": "9", "name": "status", "type": 1},
            "member": {"user": {"id": "5", "username": "alice"}, "roles": []}
        });
        let interaction: Interaction = serde_json::from_value(in_server).unwrap();
        assert_eq!(interaction.author().map(|u| u.id), Some(Snowflake(5)));
        assert_eq!(interaction.channel(), Some(Snowflake(2)));
        let in_dm = json!({
            "id": "7", "application_id": "8", "type": 3, "token": "t", "channel_id": "3",
            "data": {"custom_id": "yes", "component_type": 2},
            "user": {"id": "6", "username": "bob"}, "message": {"id": "11"}
        });
        let interaction: Interaction = serde_json::from_value(in_dm).unwrap();
        assert_eq!(interaction.author().map(|u| u.id), Some(Snowflake(6)));
        assert_eq!(interaction.channel(), Some(Snowflake(3)));
        assert_eq!(interaction.message.map(|m| m.id), Some(Snowflake(11)));
    }
}
