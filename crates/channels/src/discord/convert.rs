//! Gateway dispatches turned into Flynn's inbound types: who wrote, in
//! which conversation, whether the bot was addressed, and what text
//! remains once its mention is taken out.

use serde::Deserialize;

use super::interaction::{Context, Kind};
use super::model::{self, Interaction, Message, User};
use crate::adapter::{Action, ChatKind, Conversation, InboundMessage, MessageId, Sender};

/// The bot as READY introduced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Identity {
    pub bot: u64,
    pub application: u64,
    /// `Name#1234`, or the username alone for accounts without a
    /// discriminator.
    pub name: String,
}

/// The part of READY the adapter reads (the shard keeps the session id
/// and resume URL itself).
#[derive(Debug, Deserialize)]
struct Ready {
    user: ReadyUser,
    application: ReadyApplication,
}

#[derive(Debug, Deserialize)]
struct ReadyUser {
    id: String,
    username: String,
    #[serde(default)]
    discriminator: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ReadyApplication {
    id: String,
}

impl Identity {
    /// From READY's `d`; `None` when it lacks the user or application.
    pub fn from_ready(data: &serde_json::Value) -> Option<Identity> {
        let ready = Ready::deserialize(data).ok()?;
        let bot = ready.user.id.parse().ok()?;
        let application = ready.application.id.parse().ok()?;
        let name = match ready.user.discriminator.as_deref() {
            Some(d) if !d.is_empty() && d != "0" => format!("{}#{d}", ready.user.username),
            _ => ready.user.username,
        };
        Some(Identity {
            bot,
            application,
            name,
        })
    }
}

/// A file a message carries, still to be downloaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FileRef {
    pub url: String,
    pub name: String,
    pub media_type: Option<String>,
    pub size: u64,
}

/// Why a message is not handed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Skip {
    /// The bot's own message.
    Own,
    /// Another bot's or a webhook's message.
    Bot,
    /// A system message (joins, pins, thread starts...).
    System,
}

/// The sender: the id, and the display name made safe
/// ([`Sender::display_name`]: anyone can call themselves `@alice`), else
/// the unique username.
fn sender(user: &User) -> Sender {
    Sender {
        id: user.id.to_string(),
        name: Some(
            user.global_name
                .as_deref()
                .and_then(Sender::display_name)
                .unwrap_or_else(|| user.username.clone()),
        ),
    }
}

fn conversation(channel: String, guild: bool) -> Conversation {
    // A thread has its own channel id, so it is its own chat.
    Conversation {
        chat: channel,
        thread: None,
        kind: if guild {
            ChatKind::Group
        } else {
            ChatKind::Direct
        },
    }
}

/// A MESSAGE_CREATE as an inbound message, with the files to download.
pub(super) fn message(
    identity: &Identity,
    message: &Message,
) -> Result<(InboundMessage, Vec<FileRef>), Skip> {
    if message.author.id.get() == identity.bot {
        return Err(Skip::Own);
    }
    if message.author.bot || message.webhook_id.is_some() {
        return Err(Skip::Bot);
    }
    if !matches!(message.kind, model::REGULAR | model::REPLY) {
        return Err(Skip::System);
    }
    let conversation = conversation(message.channel_id.to_string(), message.guild_id.is_some());
    let mentions_bot = message.mentions.iter().any(|m| m.id.get() == identity.bot);
    let replies_to_bot = message
        .referenced_message
        .as_ref()
        .is_some_and(|m| m.author.id.get() == identity.bot);
    let mentioned = conversation.kind == ChatKind::Direct || mentions_bot || replies_to_bot;
    let files = message
        .attachments
        .iter()
        .map(|a| FileRef {
            url: a.url.clone(),
            name: a.filename.clone(),
            media_type: a.content_type.clone(),
            size: a.size,
        })
        .collect();
    Ok((
        InboundMessage {
            id: message.id.to_string(),
            conversation,
            sender: sender(&message.author),
            mentioned,
            text: strip_mention(&message.content, identity.bot),
            attachments: Vec::new(),
            reply: None,
        },
        files,
    ))
}

/// The text without `<@bot>` / `<@!bot>` (and the space after each).
pub(super) fn strip_mention(text: &str, bot: u64) -> String {
    let mut out = text.to_owned();
    for mention in [format!("<@{bot}>"), format!("<@!{bot}>")] {
        while let Some(at) = out.find(&mention) {
            let mut end = at + mention.len();
            if out[end..].starts_with(' ') {
                end += 1;
            }
            out.replace_range(at..end, "");
        }
    }
    out.trim().to_owned()
}

/// What an INTERACTION_CREATE stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Interacted {
    /// A slash command, as a message whose text is `/name`.
    Command(InboundMessage, Context),
    /// A button press.
    Press(Action, Context),
}

/// An INTERACTION_CREATE as an inbound event; `None` for kinds Flynn
/// does not use (autocomplete, modals, pings).
pub(super) fn interaction(interaction: &Interaction) -> Option<Interacted> {
    let user = interaction.author()?;
    let channel = interaction.channel()?;
    let conversation = conversation(channel.to_string(), interaction.guild_id.is_some());
    let context = |kind| Context {
        kind,
        application: interaction.application_id.to_string(),
        interaction: interaction.id.to_string(),
        token: interaction.token.clone(),
    };
    let data = interaction.data.as_ref()?;
    match (interaction.kind, &data.name, &data.custom_id) {
        (model::APPLICATION_COMMAND, Some(name), _) => {
            let context = context(Kind::Command);
            Some(Interacted::Command(
                InboundMessage {
                    id: interaction.id.to_string(),
                    conversation,
                    sender: sender(user),
                    mentioned: true,
                    text: format!("/{name}"),
                    attachments: Vec::new(),
                    reply: Some(context.encode()),
                },
                context,
            ))
        }
        (model::MESSAGE_COMPONENT, _, Some(custom_id)) => {
            let context = context(Kind::Component);
            Some(Interacted::Press(
                Action {
                    id: interaction.id.to_string(),
                    conversation,
                    sender: sender(user),
                    data: custom_id.clone(),
                    message: interaction
                        .message
                        .as_ref()
                        .map(|m| MessageId(m.id.to_string())),
                    reply: Some(context.encode()),
                },
                context,
            ))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bots_mention_is_taken_out_with_its_space() {
        assert_eq!(strip_mention("<@42> hello", 42), "hello");
        assert_eq!(strip_mention("hey <@!42> there <@42>", 42), "hey there");
        assert_eq!(strip_mention("ask <@7> and <@42>", 42), "ask <@7> and");
        assert_eq!(strip_mention("line\n<@42> code", 42), "line\ncode");
    }

    #[test]
    fn a_display_name_dressed_as_a_username_is_marked() {
        let name = |global: &str| -> Result<Option<String>, String> {
            let user: User = serde_json::from_value(serde_json::json!({
                "id": "5", "username": "mallory", "discriminator": "0",
                "avatar": null, "global_name": global
            }))
            .map_err(|e| e.to_string())?;
            Ok(sender(&user).name)
        };
        let names: Result<Vec<Option<String>>, String> = ["@alice", "Mallory", "\u{200B}"]
            .iter()
            .map(|global| name(global))
            .collect();
        assert_eq!(
            names,
            Ok(vec![
                Some("\"@alice\" (display name, no username)".to_owned()),
                Some("Mallory".to_owned()),
                Some("mallory".to_owned()),
            ])
        );
    }

    #[test]
    fn ready_names_the_bot() {
        let ready = serde_json::json!({
            "v": 10, "session_id": "s", "resume_gateway_url": "wss://x",
            "user": {"id": "42", "username": "flynn", "discriminator": "0", "bot": true},
            "application": {"id": "43", "flags": 0}, "guilds": []
        });
        assert_eq!(
            Identity::from_ready(&ready),
            Some(Identity {
                bot: 42,
                application: 43,
                name: "flynn".into()
            })
        );
        let old = serde_json::json!({
            "user": {"id": "42", "username": "flynn", "discriminator": "0420"},
            "application": {"id": "43"}
        });
        assert_eq!(
            Identity::from_ready(&old).map(|i| i.name),
            Some("flynn#0420".into())
        );
        assert_eq!(Identity::from_ready(&serde_json::json!({"user": {}})), None);
    }
}
