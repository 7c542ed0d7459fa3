//! The contract every platform implements, and the plain data that
//! crosses it.
//!
//! An adapter knows one platform's wire format and nothing about agents:
//! it turns what the platform delivers into [`InboundEvent`]s for an
//! [`Inbound`](crate::Inbound) sink, and sends, edits and decorates
//! messages when asked. Chunking, markdown conversion, retries and the
//! streaming of answers are shared (see [`crate::outbound`]); access
//! control and routing happen above, in the daemon.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use flynn_protocol::SessionKey;
use tokio_util::sync::CancellationToken;

use crate::Measure;
use crate::inbound::Inbound;

/// Direct message or group conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChatKind {
    /// One person and the bot.
    Direct,
    /// A group, channel or server channel with several people.
    Group,
}

/// Where a message came from and where its answer goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Conversation {
    /// The platform's chat id: Telegram chat id, Discord channel id,
    /// Slack channel id, WhatsApp sender number.
    pub chat: String,
    /// A thread inside the chat (Slack `thread_ts`, Telegram forum topic,
    /// Discord thread); its own session.
    pub thread: Option<String>,
    pub kind: ChatKind,
}

impl Conversation {
    pub fn direct(chat: impl Into<String>) -> Self {
        Conversation {
            chat: chat.into(),
            thread: None,
            kind: ChatKind::Direct,
        }
    }

    pub fn group(chat: impl Into<String>) -> Self {
        Conversation {
            chat: chat.into(),
            thread: None,
            kind: ChatKind::Group,
        }
    }

    /// The peer part of the session key: `chat`, or `chat:thread`.
    pub fn peer(&self) -> String {
        match &self.thread {
            Some(thread) => format!("{}:{thread}", self.chat),
            None => self.chat.clone(),
        }
    }
}

/// Who sent a message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sender {
    /// The platform's stable user id (never a display name): what
    /// `allow_from` and pairing match.
    pub id: String,
    /// A name to show the owner: a username the platform verified
    /// (`@alice`), or a display name made safe with
    /// [`Sender::display_name`] ("Alice Smith").
    pub name: Option<String>,
}

/// Characters of a display name kept.
const NAME_MAX_CHARS: usize = 64;

impl Sender {
    /// A name the platform does not verify (a Telegram first and last
    /// name, a WhatsApp profile name), made safe to show the owner next
    /// to the sender's id: control and invisible formatting characters
    /// (bidi overrides, zero-width joiners) are dropped, spaces collapsed,
    /// and it is cut at 64 characters. One that looks like a handle
    /// (`@alice`, also with a full-width `＠`) is quoted and marked,
    /// `"@alice" (display name, no username)`, so that it cannot pass for
    /// a verified username in `flynn pairing list` or on the dashboard.
    /// `None` when nothing visible is left.
    pub fn display_name(name: &str) -> Option<String> {
        let visible: String = name
            .chars()
            .filter(|c| !c.is_control() && !is_invisible(*c))
            .collect();
        let mut clean = visible.split_whitespace().collect::<Vec<_>>().join(" ");
        if let Some((cut, _)) = clean.char_indices().nth(NAME_MAX_CHARS) {
            clean.truncate(cut);
            clean.push('…');
        }
        if clean.is_empty() {
            return None;
        }
        if clean.starts_with(['@', '＠', '﹫']) {
            return Some(format!("\"{clean}\" (display name, no username)"));
        }
        Some(clean)
    }
}

/// Formatting characters that change how text shows without showing
/// themselves: bidi controls, zero-width characters, the BOM, tags.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{17B4}'
            | '\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{E0000}'..='\u{E007F}'
    )
}

/// What kind of file came with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachmentKind {
    /// A photo: goes to the model as an image.
    Image,
    /// Any other file: saved for the model's file tools.
    File,
    /// A voice note or an audio file: its words go to the model when
    /// something transcribes speech (`voice.stt`); otherwise it is saved
    /// as a file.
    Voice,
}

/// A file that came with a message: what it is and where the adapter
/// that received it can fetch it, but not its bytes. Nothing is
/// downloaded when a message arrives; the daemon asks
/// [`ChannelAdapter::download`] only once the sender passed every access
/// check (group, mention, rate limit, allowlist or pairing), so a
/// stranger cannot make it fetch anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub kind: AttachmentKind,
    /// The file name the sender gave, if any.
    pub name: Option<String>,
    /// MIME type (`image/jpeg`, `application/pdf`).
    pub media_type: String,
    /// The size in bytes the platform announced, if it did. Limits are
    /// checked against it before downloading (and again while
    /// downloading, since it is the sender's claim).
    pub size: Option<u64>,
    /// What the adapter needs to fetch the file: Telegram's `file_id`,
    /// Slack's `url_private_download`, WhatsApp's media id, Discord's CDN
    /// URL. Opaque to everyone else: hand it back to the adapter that
    /// produced it.
    pub source: String,
}

impl Attachment {
    /// How to name the file to people and the model: its name, or what
    /// kind of file it is.
    pub fn label(&self) -> &str {
        match (&self.name, self.kind) {
            (Some(name), _) => name,
            (None, AttachmentKind::Image) => "image",
            (None, AttachmentKind::File) => "file",
            (None, AttachmentKind::Voice) => "voice note",
        }
    }
}

/// How a file the bot sends is shown in the chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A picture shown inline (Telegram photo, WhatsApp image); a
    /// platform that would shrink or refuse it sends it as a document.
    Image,
    /// A file to download, shown with its name.
    Document,
    /// A music or sound file with a player.
    Audio,
    /// A voice note (Ogg with Opus where the platform has voice notes;
    /// elsewhere it is sent as [`FileKind::Audio`]).
    Voice,
}

impl FileKind {
    /// Its name in config, events and messages: `image`, `document`,
    /// `audio`, `voice`.
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::Image => "image",
            FileKind::Document => "document",
            FileKind::Audio => "audio",
            FileKind::Voice => "voice",
        }
    }
}

/// A file the bot sends: its bytes, how to show it, and a caption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingFile {
    pub kind: FileKind,
    /// The file name shown to people (`chart.png`).
    pub name: String,
    /// MIME type (`image/png`, `audio/ogg`).
    pub media_type: String,
    pub data: Bytes,
    /// Plain text shown with the file, at most
    /// [`OutgoingFile::CAPTION_MAX`] characters (the router sends a longer
    /// one as a message of its own).
    pub caption: Option<String>,
}

impl OutgoingFile {
    /// Characters of a caption every platform takes (Telegram and
    /// WhatsApp stop at 1,024).
    pub const CAPTION_MAX: usize = 1000;

    /// Refuses, before anything is sent, a file over `limit` bytes or an
    /// empty one, which no platform takes; `channel` names the platform.
    pub fn check_size(&self, channel: &str, limit: u64) -> Result<(), ChannelError> {
        let size = self.data.len() as u64;
        if size > limit {
            return Err(ChannelError::too_large(channel, size, limit));
        }
        if self.data.is_empty() {
            return Err(ChannelError::Rejected {
                channel: channel.to_owned(),
                detail: format!("'{}' is empty, and an empty file cannot be sent", self.name),
            });
        }
        Ok(())
    }
}

/// A message someone sent the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundMessage {
    /// The platform's id of this delivery (Telegram `update_id`, Discord
    /// message id, Slack `event_id`, WhatsApp `wamid`): a message
    /// delivered twice carries the same id and is answered once.
    pub id: String,
    pub conversation: Conversation,
    pub sender: Sender,
    /// Whether the message mentions the bot or replies to one of its
    /// messages (always true in a direct chat).
    pub mentioned: bool,
    /// The text, with the bot's own mention taken out.
    pub text: String,
    pub attachments: Vec<Attachment>,
    /// Platform context an answer must carry (a Discord interaction
    /// token for a slash command); passed back in [`Target::reply`].
    pub reply: Option<String>,
}

/// A button someone pressed (a confirmation's Approve or Deny).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// The platform's id of this press (for duplicate deliveries and for
    /// answering it: Telegram `callback_query.id`, Discord interaction
    /// id).
    pub id: String,
    pub conversation: Conversation,
    pub sender: Sender,
    /// The [`Button::data`] of the pressed button.
    pub data: String,
    /// The message that carried the button.
    pub message: Option<MessageId>,
    /// Platform context needed to answer the press (a Discord
    /// interaction token, a Slack `response_url`).
    pub reply: Option<String>,
}

/// Something an adapter received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboundEvent {
    Message(InboundMessage),
    Action(Action),
}

/// A button under a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Button {
    pub label: String,
    /// Handed back in [`Action::data`] when pressed; at most 64 bytes
    /// (Telegram's `callback_data` limit).
    pub data: String,
    pub style: ButtonStyle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ButtonStyle {
    Primary,
    Danger,
}

/// Where an outgoing message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub conversation: Conversation,
    /// The inbound message's [`InboundMessage::reply`] context.
    pub reply: Option<String>,
}

impl Target {
    /// Where the messages of session `<channel>:<peer>` go: the peer's
    /// chat, and its thread after a second `:` (the inverse of
    /// [`Conversation::peer`], which names a chat's session). Not a reply
    /// to anything.
    pub fn session(key: &SessionKey) -> Target {
        let conversation = match key.peer().split_once(':') {
            Some((chat, thread)) => Conversation {
                chat: chat.to_owned(),
                thread: Some(thread.to_owned()),
                kind: ChatKind::Group,
            },
            None => Conversation::direct(key.peer()),
        };
        Target {
            conversation,
            reply: None,
        }
    }
}

/// A message the platform accepted, as the platform names it (Telegram
/// `message_id`, Discord message id, Slack `ts`, WhatsApp `wamid`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MessageId(pub String);

/// What a platform can do, and the size of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Largest message, in the platform's measure, after formatting.
    pub max_len: usize,
    pub measure: Measure,
    /// Whether sent messages can be edited (streaming shows the answer
    /// growing in one message; otherwise it is sent when done).
    pub edit: bool,
    /// Whether messages can carry buttons.
    pub buttons: bool,
    /// Whether the platform shows a typing indicator.
    pub typing: bool,
    /// Shortest gap between two edits of one message the platform
    /// tolerates without rate limiting.
    pub edit_interval: Duration,
}

/// An HTTP request the gateway received for a channel (webhook
/// deliveries, verification handshakes), under `/channels/<name>/…`.
#[derive(Debug, Clone)]
pub struct WebhookRequest {
    pub method: http::Method,
    /// The path after `/channels/<name>`, e.g. `/webhook`.
    pub path: String,
    /// The raw query string, without `?`.
    pub query: String,
    pub headers: http::HeaderMap,
    /// The raw body: signatures are computed over these bytes.
    pub body: Bytes,
}

/// The answer to a [`WebhookRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookResponse {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Bytes,
}

impl WebhookResponse {
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        WebhookResponse {
            status,
            content_type: "text/plain; charset=utf-8",
            body: Bytes::from(body.into()),
        }
    }

    pub fn json(status: u16, body: &serde_json::Value) -> Self {
        WebhookResponse {
            status,
            content_type: "application/json",
            body: Bytes::from(body.to_string()),
        }
    }

    pub fn not_found() -> Self {
        WebhookResponse::text(404, "no such endpoint on this channel")
    }
}

/// Why a platform call failed, in the terms the retry logic needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// The platform asked us to slow down (HTTP 429 or its equivalent);
    /// `retry_after` is its hint when it gave one.
    #[error("{channel} is rate limiting us{}", retry_after.map(|d| format!(" (retry after {:.1}s)", d.as_secs_f64())).unwrap_or_default())]
    RateLimited {
        channel: String,
        retry_after: Option<Duration>,
    },
    /// The platform or the network failed in a way that may pass (5xx,
    /// timeouts, a dropped connection).
    #[error("{channel} is unavailable: {detail}")]
    Unavailable { channel: String, detail: String },
    /// The token or secret was refused (401/403): retrying will not help
    /// until the config changes.
    #[error("{channel} refused the credentials: {detail}")]
    Unauthorized { channel: String, detail: String },
    /// The platform refused this request (400, an unknown chat, a message
    /// it cannot take).
    #[error("{channel} refused the request: {detail}")]
    Rejected { channel: String, detail: String },
    /// The platform cannot do this (editing on a platform without edits).
    #[error("{channel} cannot {what}")]
    Unsupported { channel: String, what: &'static str },
}

impl ChannelError {
    /// A file of `size` bytes refused for being over `limit`.
    pub fn too_large(channel: &str, size: u64, limit: u64) -> Self {
        ChannelError::Rejected {
            channel: channel.to_owned(),
            detail: format!(
                "the file has {:.1} MB, over the {:.0} MB limit",
                size as f64 / 1_048_576.0,
                limit as f64 / 1_048_576.0
            ),
        }
    }

    /// Whether trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ChannelError::RateLimited { .. } | ChannelError::Unavailable { .. }
        )
    }
}

/// One chat platform.
///
/// `connect` runs the receiving side until `stop` is cancelled (return
/// `Ok`) or the connection is lost (return the error; the registry
/// reconnects with backoff). Everything received goes to the sink, and
/// is acknowledged to the platform only after [`Inbound::deliver`]
/// returned [`Disposition::acknowledge`](crate::Disposition::acknowledge)
/// true: a message the daemon could not store is redelivered by the
/// platform instead of lost. Adapters that receive by webhook do the same
/// in [`webhook`](Self::webhook).
///
/// The sending methods take text already in the platform's format and
/// within [`Capabilities::max_len`]; use [`crate::outbound`] to get there
/// from markdown.
#[async_trait]
pub trait ChannelAdapter: Send + Sync + 'static {
    /// The channel's name in config, session keys and status: `telegram`.
    fn name(&self) -> &str;

    fn capabilities(&self) -> Capabilities;

    /// Converts the model's markdown to the platform's format.
    fn format(&self, markdown: &str) -> String;

    /// Connects and receives until `stop` is cancelled. Call
    /// [`Inbound::connected`] once the platform accepted the credentials.
    async fn connect(&self, sink: Inbound, stop: CancellationToken) -> Result<(), ChannelError>;

    /// Leaves cleanly after `connect` returned (a gateway close frame, a
    /// webhook deregistration). The default does nothing.
    async fn disconnect(&self) {}

    /// Sends one message (formatted, within the size limit).
    async fn send(
        &self,
        to: &Target,
        text: &str,
        buttons: &[Button],
    ) -> Result<MessageId, ChannelError>;

    /// Sends like [`send`](Self::send), once per `key` where the platform
    /// can see to it: a message sent again with the same key (the outbox
    /// sending what a killed process sent but had not marked) returns the
    /// message already there instead of posting a second one. `key` is
    /// the same for every attempt at one message and different for any
    /// other. Discord keeps such keys for a few minutes (a message
    /// `nonce` with `enforce_nonce`); the default, for platforms with
    /// nothing of the kind, sends.
    async fn send_once(
        &self,
        to: &Target,
        text: &str,
        buttons: &[Button],
        key: &str,
    ) -> Result<MessageId, ChannelError> {
        let _ = key;
        self.send(to, text, buttons).await
    }

    /// Replaces a sent message's text (and its buttons: an empty list
    /// removes them).
    async fn edit(
        &self,
        to: &Target,
        message: &MessageId,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError> {
        let _ = (to, message, text, buttons);
        Err(ChannelError::Unsupported {
            channel: self.name().to_owned(),
            what: "edit messages",
        })
    }

    /// Shows "typing…" for a few seconds. The default does nothing.
    async fn typing(&self, to: &Target) -> Result<(), ChannelError> {
        let _ = to;
        Ok(())
    }

    /// Answers a button press so the platform stops waiting on it
    /// (Telegram `answerCallbackQuery`, a Discord interaction response);
    /// `note` is a short text some platforms show. The default does
    /// nothing.
    async fn answer_action(&self, action: &Action, note: &str) -> Result<(), ChannelError> {
        let _ = (action, note);
        Ok(())
    }

    /// Marks an inbound message read (WhatsApp read receipts). The
    /// default does nothing.
    async fn mark_read(&self, message: &InboundMessage) -> Result<(), ChannelError> {
        let _ = message;
        Ok(())
    }

    /// Whether a message may be sent to `to` now. WhatsApp answers
    /// freely only within 24 hours of the person's last message; the
    /// default is always.
    fn can_send(&self, to: &Target) -> Result<(), ChannelError> {
        let _ = to;
        Ok(())
    }

    /// Fetches an [`Attachment`] this adapter delivered, refusing more
    /// than `limit` bytes (and more than the platform hands out). Called
    /// by the daemon only after the message passed the access checks.
    /// Errors: [`ChannelError::Rejected`] for a file that cannot be had
    /// (too large, gone, on a host the credentials must not go to), a
    /// transient one when trying again may work. The default cannot
    /// download.
    async fn download(&self, attachment: &Attachment, limit: u64) -> Result<Bytes, ChannelError> {
        let _ = (attachment, limit);
        Err(ChannelError::Unsupported {
            channel: self.name().to_owned(),
            what: "download files",
        })
    }

    /// The largest file of `kind` this platform takes from a bot, in
    /// bytes (as [`send_file`](Self::send_file) sends it, a fallback to a
    /// document included); 0 when the adapter cannot send files, which is
    /// the default.
    fn upload_limit(&self, kind: FileKind) -> u64 {
        let _ = kind;
        0
    }

    /// Sends a file natively (a photo, a document, an audio file, a voice
    /// note) of at most [`upload_limit`](Self::upload_limit) bytes.
    /// Errors: [`ChannelError::Rejected`] for a file the platform refuses
    /// (too large, a type it does not take), a transient one when trying
    /// again may work. The default cannot send files.
    async fn send_file(&self, to: &Target, file: &OutgoingFile) -> Result<MessageId, ChannelError> {
        let _ = (to, file);
        Err(ChannelError::Unsupported {
            channel: self.name().to_owned(),
            what: "send files",
        })
    }

    /// Handles a request to `/channels/<name>/…` on the gateway (webhook
    /// deliveries, verification handshakes). Deliveries go to `sink`
    /// like those `connect` receives, before the answer acknowledges
    /// them. The default answers 404.
    async fn webhook(&self, request: WebhookRequest, sink: &Inbound) -> WebhookResponse {
        let _ = (request, sink);
        WebhookResponse::not_found()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_file_over_the_limit_or_empty_is_refused_by_name() {
        let file = |data: &'static [u8]| OutgoingFile {
            kind: FileKind::Document,
            name: "report.pdf".to_owned(),
            media_type: "application/pdf".to_owned(),
            data: Bytes::from_static(data),
            caption: None,
        };
        assert!(file(b"%PDF").check_size("slack", 4).is_ok());
        assert_eq!(
            file(b"%PDF-")
                .check_size("slack", 4)
                .unwrap_err()
                .to_string(),
            "slack refused the request: the file has 0.0 MB, over the 0 MB limit"
        );
        assert_eq!(
            file(b"").check_size("slack", 4).unwrap_err().to_string(),
            "slack refused the request: 'report.pdf' is empty, and an empty file cannot be sent"
        );
    }

    #[test]
    fn a_display_name_cannot_pass_for_a_username() {
        assert_eq!(
            Sender::display_name("@alice"),
            Some("\"@alice\" (display name, no username)".to_owned())
        );
        // Hidden characters before the `@`, or a full-width one.
        assert_eq!(
            Sender::display_name("\u{200B}\u{202E}@alice"),
            Some("\"@alice\" (display name, no username)".to_owned())
        );
        assert_eq!(
            Sender::display_name("＠alice"),
            Some("\"＠alice\" (display name, no username)".to_owned())
        );
        assert_eq!(
            Sender::display_name("  Alice \n Smith "),
            Some("Alice Smith".to_owned())
        );
        assert_eq!(Sender::display_name("\u{200B}\u{3164}"), None);
        assert_eq!(
            Sender::display_name(&"a".repeat(80)),
            Some(format!("{}…", "a".repeat(64)))
        );
    }

    #[test]
    fn a_session_key_names_the_chat_and_thread_its_conversation_came_from() {
        for conversation in [
            Conversation::direct("42"),
            Conversation {
                chat: "C1".to_owned(),
                thread: Some("1700000000.000100".to_owned()),
                kind: ChatKind::Group,
            },
        ] {
            let key: SessionKey = format!("slack:{}", conversation.peer()).parse().unwrap();
            let target = Target::session(&key);
            assert_eq!(target.conversation, conversation);
            assert_eq!(target.reply, None);
        }
    }
}
