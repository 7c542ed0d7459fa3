//! Slack's inbound shapes (Events API callbacks, which Socket Mode wraps
//! in envelopes; `block_actions` interactivity; slash commands), read
//! leniently and turned into Flynn's inbound types. Nothing here does
//! I/O: files are listed for the adapter to download.

use serde::Deserialize;
use serde_json::Value;

use crate::adapter::{Action, ChatKind, Conversation, InboundMessage, MessageId, Sender};

/// The bot as `auth.test` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Identity {
    /// The bot's user id (`U…`): what `<@U…>` mentions name.
    pub user_id: String,
    /// The bot's user name (`flynn`).
    pub user: String,
    /// The workspace's name.
    pub team: String,
}

impl Identity {
    /// What the channel's status shows: `@flynn in Acme`.
    pub fn detail(&self) -> String {
        format!("@{} in {}", self.user, self.team)
    }
}

/// A message parsed from an event, before its files are downloaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Draft {
    pub message: InboundMessage,
    pub files: Vec<FileRef>,
}

/// A file shared with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FileRef {
    pub name: Option<String>,
    pub media_type: String,
    /// `url_private_download`, else `url_private`.
    pub url: String,
    /// The size Slack reports, if it does.
    pub size: Option<u64>,
}

/// Message subtypes that are still someone writing to the bot: a message
/// with files, and a thread reply also sent to the channel. Every other
/// subtype (edits, deletions, joins, bot messages...) is skipped.
const KEPT_SUBTYPES: &[&str] = &["file_share", "thread_broadcast"];

/// The chat commands a slash command may name (see the guide): the
/// daemon's own commands.
const COMMANDS: &[&str] = &[
    "help", "status", "reset", "cancel", "stop", "model", "agent", "compact", "trust", "voice",
];

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct MessageEvent {
    #[serde(rename = "type")]
    kind: String,
    subtype: Option<String>,
    hidden: Option<bool>,
    channel: Option<String>,
    channel_type: Option<String>,
    user: Option<String>,
    bot_id: Option<String>,
    text: Option<String>,
    ts: Option<String>,
    thread_ts: Option<String>,
    parent_user_id: Option<String>,
    user_profile: Option<Profile>,
    files: Option<Vec<Value>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Profile {
    display_name: Option<String>,
    real_name: Option<String>,
    name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct File {
    name: Option<String>,
    mimetype: Option<String>,
    size: Option<u64>,
    url_private: Option<String>,
    url_private_download: Option<String>,
}

/// The inner `event` of an `event_callback`, when it is a message for
/// the bot: a `message` (kept subtypes only, never a bot's) or an
/// `app_mention`. Both carry the id `channel:ts`, so the message and
/// the mention Slack sends for one post are answered once.
pub(super) fn message_event(event: &Value, bot: &Identity) -> Option<Draft> {
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind != "message" && kind != "app_mention" {
        tracing::debug!(kind, "slack event skipped");
        return None;
    }
    let event = match MessageEvent::deserialize(event) {
        Ok(event) => event,
        Err(error) => {
            tracing::warn!(%error, kind, "slack sent a message event Flynn cannot read; skipped");
            return None;
        }
    };
    if let Some(subtype) = event.subtype.as_deref()
        && !KEPT_SUBTYPES.contains(&subtype)
    {
        tracing::debug!(subtype, "slack message subtype skipped");
        return None;
    }
    if event.hidden == Some(true) || event.bot_id.is_some() {
        return None;
    }
    let (Some(channel), Some(user), Some(ts)) = (event.channel, event.user, event.ts) else {
        tracing::warn!(
            kind = event.kind,
            "slack message without channel, user or ts; skipped"
        );
        return None;
    };
    if user == bot.user_id {
        return None;
    }
    let kind = match event.channel_type.as_deref() {
        Some("im") => ChatKind::Direct,
        Some(_) => ChatKind::Group,
        None => kind_of_channel(&channel),
    };
    let thread = match (event.thread_ts, kind) {
        (Some(thread), _) => Some(thread),
        // A top-level channel message starts its own thread (and session).
        (None, ChatKind::Group) => Some(ts.clone()),
        (None, ChatKind::Direct) => None,
    };
    let (text, named) = without_mention(event.text.as_deref().unwrap_or_default(), &bot.user_id);
    // A reply in a thread the bot started also counts; so does one in a
    // thread it answered in, which the adapter knows (see `Threads`).
    let mentioned = kind == ChatKind::Direct
        || named
        || event.kind == "app_mention"
        || event.parent_user_id.as_deref() == Some(bot.user_id.as_str());
    let name = event.user_profile.and_then(|p| {
        [p.display_name, p.real_name, p.name]
            .into_iter()
            .flatten()
            .find(|n| !n.is_empty())
    });
    let files = event
        .files
        .unwrap_or_default()
        .iter()
        .filter_map(file_ref)
        .collect();
    Some(Draft {
        message: InboundMessage {
            id: format!("{channel}:{ts}"),
            conversation: Conversation {
                chat: channel,
                thread,
                kind,
            },
            sender: Sender { id: user, name },
            mentioned,
            text,
            attachments: Vec::new(),
            reply: None,
        },
        files,
    })
}

fn file_ref(file: &Value) -> Option<FileRef> {
    let file = File::deserialize(file).ok()?;
    // Files over the workspace's storage limit, deleted or external ones
    // come without a private URL.
    let url = file.url_private_download.or(file.url_private)?;
    Some(FileRef {
        name: file.name,
        media_type: file
            .mimetype
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "application/octet-stream".to_owned()),
        url,
        size: file.size,
    })
}

/// Direct messages live in `D…` channels; public, private and
/// multi-person DM channels start with `C` or `G`.
fn kind_of_channel(channel: &str) -> ChatKind {
    if channel.starts_with('D') {
        ChatKind::Direct
    } else {
        ChatKind::Group
    }
}

/// The text with the bot's mention (`<@U…>` or `<@U…|name>`) taken out,
/// Slack's three escapes undone, and whether the mention was there.
pub(super) fn without_mention(text: &str, bot_user_id: &str) -> (String, bool) {
    let open = format!("<@{bot_user_id}");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut named = false;
    while let Some(at) = rest.find(&open) {
        let after = &rest[at + open.len()..];
        let end = match after.chars().next() {
            Some('>') => Some(0),
            Some('|') => after.find('>'),
            _ => None,
        };
        let Some(end) = end else {
            // `<@U123X>` where the bot is `U123`: someone else.
            out.push_str(&rest[..at + open.len()]);
            rest = after;
            continue;
        };
        named = true;
        out.push_str(&rest[..at]);
        rest = &after[end + 1..];
        // One space between the words the mention stood between.
        if out.ends_with(char::is_whitespace) || out.is_empty() {
            rest = rest.strip_prefix(' ').unwrap_or(rest);
        }
    }
    out.push_str(rest);
    let text = out
        .trim()
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    (text, named)
}

/// A `block_actions` payload (a button press) as an [`Action`]; `None`
/// for other interactions (shortcuts, modals) and presses without a
/// value.
pub(super) fn block_actions(payload: &Value) -> Option<Action> {
    let kind = payload.get("type").and_then(Value::as_str);
    if kind != Some("block_actions") {
        tracing::debug!(kind, "slack interaction skipped");
        return None;
    }
    let text = |value: Option<&Value>| value.and_then(Value::as_str).map(str::to_owned);
    let action = payload.get("actions")?.as_array()?.first()?;
    let Some(data) = text(action.get("value")) else {
        tracing::debug!("slack button press without a value skipped");
        return None;
    };
    let container = payload.get("container");
    let message = payload.get("message");
    let channel = text(payload.pointer("/channel/id"))
        .or_else(|| text(container.and_then(|c| c.get("channel_id"))))?;
    let message_ts = text(container.and_then(|c| c.get("message_ts")))
        .or_else(|| text(message.and_then(|m| m.get("ts"))));
    let thread = text(message.and_then(|m| m.get("thread_ts")))
        .or_else(|| text(container.and_then(|c| c.get("thread_ts"))));
    let user = text(payload.pointer("/user/id"))?;
    let name = text(payload.pointer("/user/username"))
        .or_else(|| text(payload.pointer("/user/name")))
        .filter(|n| !n.is_empty());
    let id = match text(payload.get("trigger_id")) {
        Some(trigger) => trigger,
        None => {
            let action_ts = text(action.get("action_ts"))?;
            format!("{}:{action_ts}", message_ts.clone()?)
        }
    };
    let kind = kind_of_channel(&channel);
    let thread = match kind {
        ChatKind::Group => thread.or_else(|| message_ts.clone()),
        ChatKind::Direct => thread,
    };
    Some(Action {
        id,
        conversation: Conversation {
            chat: channel,
            thread,
            kind,
        },
        sender: Sender { id: user, name },
        data,
        message: message_ts.map(MessageId),
        reply: text(payload.get("response_url")),
    })
}

/// A slash command (Socket Mode's payload object, or the form fields of
/// an HTTP post as an object) as a message.
///
/// `/flynn reset` (any command whose text starts with one of the chat
/// commands) becomes `/reset`; `/flynn` alone becomes `/help`;
/// `/flynn what is up` becomes the plain message `what is up`; a command
/// registered under a chat command's own name (`/reset`) is passed as it
/// is.
pub(super) fn slash_command(payload: &Value) -> Option<InboundMessage> {
    let field = |name: &str| payload.get(name).and_then(Value::as_str).map(str::to_owned);
    let (Some(command), Some(user), Some(channel), Some(trigger)) = (
        field("command"),
        field("user_id"),
        field("channel_id"),
        field("trigger_id"),
    ) else {
        tracing::warn!(
            "slack slash command without command, user_id, channel_id or trigger_id; skipped"
        );
        return None;
    };
    let text = command_text(&command, field("text").as_deref().unwrap_or_default());
    let kind = if field("channel_name").as_deref() == Some("directmessage") {
        ChatKind::Direct
    } else {
        kind_of_channel(&channel)
    };
    Some(InboundMessage {
        id: trigger,
        conversation: Conversation {
            chat: channel,
            thread: None,
            kind,
        },
        sender: Sender {
            id: user,
            name: field("user_name").filter(|n| !n.is_empty()),
        },
        mentioned: true,
        text,
        attachments: Vec::new(),
        reply: field("response_url"),
    })
}

/// What a slash command says, as a chat message (see [`slash_command`]).
fn command_text(command: &str, text: &str) -> String {
    let name = command.trim().trim_start_matches('/');
    // `/flynn-reset`, `/flynn-status` (the design notes' names): the
    // command after the prefix.
    let name = name
        .strip_prefix("flynn-")
        .filter(|rest| COMMANDS.contains(rest))
        .unwrap_or(name);
    let text = text.trim();
    if COMMANDS.contains(&name) {
        return if text.is_empty() {
            format!("/{name}")
        } else {
            format!("/{name} {text}")
        };
    }
    let body = text.trim_start_matches('/');
    let first = body.split_whitespace().next().unwrap_or_default();
    if body.is_empty() {
        "/help".to_owned()
    } else if COMMANDS.contains(&first) {
        format!("/{body}")
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bot() -> Identity {
        Identity {
            user_id: "UBOT".into(),
            user: "flynn".into(),
            team: "Acme".into(),
        }
    }

    #[test]
    fn the_bots_mention_is_taken_out_and_others_stay() {
        assert_eq!(
            without_mention("<@UBOT> hello", "UBOT"),
            ("hello".into(), true)
        );
        assert_eq!(
            without_mention("hey <@UBOT|flynn> look at <@UBOTX>", "UBOT"),
            ("hey look at <@UBOTX>".into(), true)
        );
        assert_eq!(
            without_mention("a &lt;b&gt; &amp;amp;", "UBOT"),
            ("a <b> &amp;".into(), false)
        );
        assert_eq!(without_mention("<@UBOT", "UBOT"), ("<@UBOT".into(), false));
    }

    #[test]
    fn a_message_and_its_app_mention_read_the_same() {
        let message = json!({"type": "message", "channel": "C1", "channel_type": "channel",
            "user": "U1", "text": "<@UBOT> hi", "ts": "1.000100"});
        let mention = json!({"type": "app_mention", "channel": "C1",
            "user": "U1", "text": "<@UBOT> hi", "ts": "1.000100"});
        let a = message_event(&message, &bot()).unwrap();
        let b = message_event(&mention, &bot()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.message.id, "C1:1.000100");
        assert_eq!(a.message.conversation.thread.as_deref(), Some("1.000100"));
        assert!(a.message.mentioned);
        let in_bots_thread = json!({"type": "message", "channel": "C1", "channel_type": "channel",
            "user": "U1", "text": "more", "ts": "2.1", "thread_ts": "1.1", "parent_user_id": "UBOT"});
        assert!(
            message_event(&in_bots_thread, &bot())
                .unwrap()
                .message
                .mentioned
        );
    }

    #[test]
    fn bots_own_edits_and_malformed_messages_are_skipped() {
        for event in [
            json!({"type": "message", "channel": "C1", "user": "UBOT", "text": "x", "ts": "1.1"}),
            json!({"type": "message", "channel": "C1", "bot_id": "B1", "user": "U2", "text": "x", "ts": "1.1"}),
            json!({"type": "message", "subtype": "message_changed", "channel": "C1", "ts": "1.1"}),
            json!({"type": "message", "channel": "C1", "text": "x"}),
            json!({"type": "message", "channel": 5, "user": "U1", "ts": "1.1"}),
            json!({"type": "reaction_added", "user": "U1"}),
            json!("not an object"),
        ] {
            assert_eq!(message_event(&event, &bot()), None, "{event}");
        }
    }

    #[test]
    fn slash_commands_map_to_chat_commands() {
        assert_eq!(command_text("/flynn", "reset"), "/reset");
        assert_eq!(command_text("/flynn", " /model fast "), "/model fast");
        assert_eq!(command_text("/flynn", ""), "/help");
        assert_eq!(command_text("/flynn", "what is up"), "what is up");
        assert_eq!(command_text("/status", ""), "/status");
        assert_eq!(command_text("/model", "fast"), "/model fast");
        assert_eq!(command_text("/flynn", "voice on"), "/voice on");
        assert_eq!(command_text("/voice", "auto"), "/voice auto");
        // The design notes' own commands.
        assert_eq!(command_text("/flynn-reset", ""), "/reset");
        assert_eq!(command_text("/flynn-status", ""), "/status");
        assert_eq!(command_text("/flynn-model", "fast"), "/model fast");
        assert_eq!(command_text("/flynn-weather", ""), "/help");
    }

    #[test]
    fn a_press_without_a_trigger_id_is_named_by_message_and_action_ts() {
        let payload = json!({"type": "block_actions", "user": {"id": "U1", "username": "ann"},
            "container": {"type": "message", "message_ts": "5.5", "channel_id": "D1"},
            "actions": [{"value": "y:1", "action_ts": "6.6"}]});
        let action = block_actions(&payload).unwrap();
        assert_eq!(action.id, "5.5:6.6");
        assert_eq!(action.conversation, Conversation::direct("D1"));
        assert_eq!(action.message, Some(MessageId("5.5".into())));
        assert_eq!(block_actions(&json!({"type": "view_submission"})), None);
    }
}
