//! Telegram's `Message` and `CallbackQuery` read as Flynn's inbound
//! events: where a message came from, who sent it, whether it addresses
//! the bot, and its text with the bot's own mention taken out. Files are
//! only named here (by `file_id`); the adapter downloads them when the
//! daemon asks, after its access checks.

use super::api::{CallbackQuery, Chat, ChatType, EntityKind, Message, MessageEntity, User};

use crate::adapter::{
    Action, Attachment, AttachmentKind, ChatKind, Conversation, InboundMessage, MessageId, Sender,
};

/// The bot itself, as `getMe` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Me {
    pub id: u64,
    /// Without `@`.
    pub username: String,
}

/// A message for the daemon, its files named but not downloaded; `None`
/// for what Flynn does not answer: messages from bots, service messages
/// (members joining, pins, title changes) and media it cannot use
/// (stickers).
///
/// Its id is `<chat id>:<message id>`, which names one message for good;
/// an `update_id` does not (after a week without updates Telegram starts
/// them again from a random number, and a stored one could repeat).
pub(super) fn message(message: &Message, me: &Me) -> Option<InboundMessage> {
    let from = message.from.as_ref()?;
    if from.is_bot {
        return None;
    }
    let files = files(message);
    let (text, entities) = match (&message.text, &message.caption) {
        (Some(text), _) => (text.as_str(), message.entities.as_deref()),
        (None, Some(caption)) => (caption.as_str(), message.caption_entities.as_deref()),
        (None, None) => ("", None),
    };
    if text.is_empty() && files.is_empty() {
        return None;
    }
    let conversation = conversation(&message.chat, topic(message));
    let (named, text) = strip_mentions(text, entities.unwrap_or_default(), me);
    let replied_to_bot = message
        .reply_to_message
        .as_ref()
        .and_then(|original| original.from.as_ref())
        .is_some_and(|author| author.id == me.id);
    let mentioned = conversation.kind == ChatKind::Direct || named || replied_to_bot;
    let inbound = InboundMessage {
        id: format!("{}:{}", message.chat.id, message.message_id),
        conversation,
        sender: sender(from),
        mentioned,
        text,
        attachments: files,
        reply: None,
    };
    Some(inbound)
}

/// A button press; `None` when it carries no data (a game) or no message
/// (a button under an inline-mode message, which Flynn never sends). A
/// message too old for the bot to see arrives as a chat and an id only,
/// so outside any forum topic.
pub(super) fn action(query: &CallbackQuery) -> Option<Action> {
    let data = query.data.clone()?;
    let message = query.message.as_ref()?;
    Some(Action {
        id: query.id.clone(),
        conversation: conversation(&message.chat, topic(message)),
        sender: sender(&query.from),
        data,
        message: Some(MessageId(message.message_id.to_string())),
        reply: None,
    })
}

/// The forum topic a message belongs to. Outside forums
/// `message_thread_id` names a reply thread, which is no session of its
/// own.
fn topic(message: &Message) -> Option<i32> {
    if message.is_topic_message == Some(true) {
        message.message_thread_id
    } else {
        None
    }
}

fn conversation(chat: &Chat, thread: Option<i32>) -> Conversation {
    Conversation {
        chat: chat.id.to_string(),
        thread: thread.map(|t| t.to_string()),
        kind: if chat.kind == ChatType::Private {
            ChatKind::Direct
        } else {
            ChatKind::Group
        },
    }
}

/// The sender: the id, and `@username` when Telegram verified one, else
/// the first and last name as a [`Sender::display_name`] (which anyone
/// can set to `@alice`).
fn sender(user: &User) -> Sender {
    let name = match &user.username {
        Some(username) => Some(format!("@{username}")),
        None => Sender::display_name(&match &user.last_name {
            Some(last) => format!("{} {last}", user.first_name),
            None => user.first_name.clone(),
        }),
    };
    Sender {
        id: user.id.to_string(),
        name,
    }
}

/// The photo at its largest size, the document, the voice note and the
/// audio file, if any.
fn files(message: &Message) -> Vec<Attachment> {
    let mut files = Vec::new();
    let largest = message.photo.as_deref().and_then(|sizes| {
        sizes.iter().max_by_key(|size| {
            (
                u64::from(size.width) * u64::from(size.height),
                size.file_size.unwrap_or(0),
            )
        })
    });
    if let Some(photo) = largest {
        files.push(Attachment {
            kind: AttachmentKind::Image,
            name: None,
            // Telegram re-encodes every photo as JPEG.
            media_type: "image/jpeg".to_owned(),
            size: photo.file_size,
            source: photo.file_id.clone(),
        });
    }
    if let Some(document) = &message.document {
        files.push(Attachment {
            kind: AttachmentKind::File,
            name: document.file_name.clone(),
            media_type: document
                .mime_type
                .clone()
                .unwrap_or_else(|| "application/octet-stream".to_owned()),
            size: document.file_size,
            source: document.file_id.clone(),
        });
    }
    if let Some(voice) = &message.voice {
        files.push(Attachment {
            kind: AttachmentKind::Voice,
            name: Some("voice.ogg".to_owned()),
            media_type: voice
                .mime_type
                .clone()
                .unwrap_or_else(|| "audio/ogg".to_owned()),
            size: voice.file_size,
            source: voice.file_id.clone(),
        });
    }
    if let Some(audio) = &message.audio {
        files.push(Attachment {
            kind: AttachmentKind::Voice,
            name: Some(
                audio
                    .file_name
                    .clone()
                    .unwrap_or_else(|| "audio.mp3".to_owned()),
            ),
            media_type: audio
                .mime_type
                .clone()
                .unwrap_or_else(|| "audio/mpeg".to_owned()),
            size: audio.file_size,
            source: audio.file_id.clone(),
        });
    }
    files
}

/// What a cut removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// `@bot` or a text mention of the bot: a word, with the punctuation
    /// and space after it.
    Mention,
    /// The `@bot` of `/command@bot`.
    CommandSuffix,
}

/// Whether the entities address the bot (`@username` in any case, a text
/// mention of its id, `/command@username`), and the text without those
/// mentions and command suffixes.
pub(super) fn strip_mentions(text: &str, entities: &[MessageEntity], me: &Me) -> (bool, String) {
    let mut addressed = false;
    let mut cuts: Vec<(usize, usize, Cut)> = Vec::new();
    for entity in entities {
        let Some((start, end)) = byte_range(text, entity.offset, entity.length) else {
            continue;
        };
        let slice = &text[start..end];
        let cut = match entity.kind {
            EntityKind::Mention
                if slice
                    .strip_prefix('@')
                    .is_some_and(|name| name.eq_ignore_ascii_case(&me.username)) =>
            {
                Some((start, end, Cut::Mention))
            }
            EntityKind::TextMention
                if entity.user.as_ref().is_some_and(|user| user.id == me.id) =>
            {
                Some((start, end, Cut::Mention))
            }
            EntityKind::BotCommand => slice
                .find('@')
                .filter(|at| slice[at + 1..].eq_ignore_ascii_case(&me.username))
                .map(|at| (start + at, end, Cut::CommandSuffix)),
            _ => None,
        };
        if let Some(cut) = cut {
            addressed = true;
            cuts.push(cut);
        }
    }
    if cuts.is_empty() {
        return (addressed, text.trim().to_owned());
    }
    cuts.sort_unstable_by_key(|(start, _, _)| *start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end, cut) in cuts {
        if start < at {
            continue;
        }
        out.push_str(&text[at..start]);
        at = end;
        if cut == Cut::Mention {
            // "@flynn_bot, what's up" reads "what's up".
            if let Some(punct) = text[at..].chars().next().filter(|c| matches!(c, ',' | ':')) {
                at += punct.len_utf8();
            }
            if out.is_empty() || out.ends_with(char::is_whitespace) {
                let rest = &text[at..];
                at += rest.len() - rest.trim_start().len();
            }
        }
    }
    out.push_str(&text[at..]);
    (addressed, out.trim().to_owned())
}

/// The byte range of an entity given in UTF-16 code units; `None` when it
/// does not fall on character boundaries of `text`.
fn byte_range(text: &str, offset: u16, length: u16) -> Option<(usize, usize)> {
    let first = usize::from(offset);
    let last = first + usize::from(length);
    let mut start = None;
    let mut units = 0;
    for (i, c) in text.char_indices() {
        if units == first {
            start = Some(i);
        }
        if units == last {
            return start.map(|s| (s, i));
        }
        units += c.len_utf16();
    }
    if units == first && start.is_none() {
        start = Some(text.len());
    }
    if units == last {
        return start.map(|s| (s, text.len()));
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn me() -> Me {
        Me {
            id: 42,
            username: "flynn_bot".to_owned(),
        }
    }

    fn entity(kind: EntityKind, text: &str, needle: &str) -> MessageEntity {
        let at = text.find(needle).unwrap();
        let offset = text[..at].encode_utf16().count();
        let length = needle.encode_utf16().count();
        MessageEntity {
            kind,
            offset: u16::try_from(offset).unwrap(),
            length: u16::try_from(length).unwrap(),
            user: None,
        }
    }

    #[test]
    fn the_bots_mention_is_cut_with_its_punctuation() {
        let text = "@Flynn_Bot, what is 2+2?";
        let entities = [entity(EntityKind::Mention, text, "@Flynn_Bot")];
        assert_eq!(
            strip_mentions(text, &entities, &me()),
            (true, "what is 2+2?".to_owned())
        );

        let text = "so 😀 @flynn_bot what now";
        let entities = [entity(EntityKind::Mention, text, "@flynn_bot")];
        assert_eq!(
            strip_mentions(text, &entities, &me()),
            (true, "so 😀 what now".to_owned())
        );
    }

    #[test]
    fn other_mentions_stay_and_do_not_address_the_bot() {
        let text = "ask @alice_smith about it";
        let entities = [entity(EntityKind::Mention, text, "@alice_smith")];
        assert_eq!(
            strip_mentions(text, &entities, &me()),
            (false, text.to_owned())
        );
    }

    #[test]
    fn commands_lose_the_bots_name_only() {
        let text = "/reset@flynn_bot now";
        let entities = [entity(EntityKind::BotCommand, text, "/reset@flynn_bot")];
        assert_eq!(
            strip_mentions(text, &entities, &me()),
            (true, "/reset now".to_owned())
        );

        let text = "/reset@other_bot";
        let entities = [entity(EntityKind::BotCommand, text, "/reset@other_bot")];
        assert_eq!(
            strip_mentions(text, &entities, &me()),
            (false, text.to_owned())
        );

        let text = "/help";
        let entities = [entity(EntityKind::BotCommand, text, "/help")];
        assert_eq!(
            strip_mentions(text, &entities, &me()),
            (false, "/help".to_owned())
        );
    }

    #[test]
    fn a_text_mention_of_the_bot_addresses_it() {
        let text = "hey Flynn look";
        let mut mention = entity(EntityKind::TextMention, text, "Flynn");
        mention.user = Some(User {
            id: 42,
            is_bot: true,
            first_name: "Flynn".to_owned(),
            last_name: None,
            username: None,
        });
        assert_eq!(
            strip_mentions(text, &[mention], &me()),
            (true, "hey look".to_owned())
        );
    }

    #[test]
    fn entities_off_character_boundaries_are_ignored() {
        // Offset 1 falls inside the surrogate pair of 😀.
        let broken = MessageEntity {
            kind: EntityKind::Mention,
            offset: 1,
            length: 10,
            user: None,
        };
        assert_eq!(
            strip_mentions("😀@flynn_bot", &[broken], &me()),
            (false, "😀@flynn_bot".to_owned())
        );
        assert_eq!(byte_range("ab", 2, 0), Some((2, 2)));
        assert_eq!(byte_range("ab", 1, 5), None);
    }

    #[test]
    fn a_message_is_known_by_its_chat_and_message_id_not_its_update_id() {
        let text = |chat: i64, id: i64| -> Message {
            serde_json::from_value(serde_json::json!({
                "message_id": id, "date": 0, "text": "hi",
                "chat": {"id": chat, "type": "private", "first_name": "A"},
                "from": {"id": chat, "is_bot": false, "first_name": "A"}
            }))
            .unwrap()
        };
        let ids: Vec<String> = [text(5, 7), text(5, 8), text(6, 7)]
            .iter()
            .map(|m| message(m, &me()).unwrap().id)
            .collect();
        assert_eq!(ids, ["5:7", "5:8", "6:7"]);
    }

    #[test]
    fn service_messages_and_bots_are_not_answered() {
        let chat = serde_json::json!({"id": 5, "type": "private", "first_name": "A"});
        let joined: Message = serde_json::from_value(serde_json::json!({
            "message_id": 1, "date": 0, "chat": chat,
            "from": {"id": 5, "is_bot": false, "first_name": "A"},
            "new_chat_members": [{"id": 6, "is_bot": false, "first_name": "B"}]
        }))
        .unwrap();
        assert_eq!(message(&joined, &me()), None);

        let from_bot: Message = serde_json::from_value(serde_json::json!({
            "message_id": 2, "date": 0, "chat": chat, "text": "beep",
            "from": {"id": 7, "is_bot": true, "first_name": "Other"}
        }))
        .unwrap();
        assert_eq!(message(&from_bot, &me()), None);
    }

    #[test]
    fn a_first_name_dressed_as_a_username_is_marked() {
        let chat = serde_json::json!({"id": 5, "type": "private", "first_name": "x"});
        let from = |user: serde_json::Value| -> Message {
            serde_json::from_value(serde_json::json!({
                "message_id": 1, "date": 0, "chat": chat, "text": "hi", "from": user
            }))
            .unwrap()
        };
        let spoof = from(serde_json::json!({"id": 5, "is_bot": false, "first_name": "@alice"}));
        let real = from(serde_json::json!({
            "id": 6, "is_bot": false, "first_name": "Alice", "username": "alice"
        }));
        let names: Vec<_> = [spoof, real]
            .iter()
            .map(|m| {
                let sender = message(m, &me()).unwrap().sender;
                (sender.id, sender.name)
            })
            .collect();
        assert_eq!(
            names,
            vec![
                (
                    "5".to_owned(),
                    Some("\"@alice\" (display name, no username)".to_owned())
                ),
                ("6".to_owned(), Some("@alice".to_owned())),
            ]
        );
    }
}
