//! Discord: a bot on the gateway WebSocket (a shard of Flynn's own on
//! tokio-tungstenite) for what arrives, the REST API (reqwest) for what
//! leaves.
//!
//! - Receiving: one shard with the intents `GUILD_MESSAGES`,
//!   `DIRECT_MESSAGES` and `MESSAGE_CONTENT`. The shard heartbeats, and
//!   reconnects and RESUMEs after a dropped connection; Discord then
//!   replays what was missed. The gateway has no per-event
//!   acknowledgement: the adapter keeps the sequence number of the last
//!   dispatch the daemon accepted, and when a delivery comes back
//!   [`Disposition::Retry`](crate::Disposition::Retry) it closes the
//!   connection and RESUMEs from that number, so Discord sends the event
//!   again (with the same message or interaction id).
//! - Slash commands `/reset`, `/status` and `/cancel` are registered
//!   (bulk overwrite of the global commands) once per
//!   [`connect`](ChannelAdapter::connect). A command arrives as a message
//!   whose text is `/name` and whose [`InboundMessage::reply`] holds the
//!   interaction's context; it is acknowledged with a deferred response
//!   once the daemon settled it, and answers sent with that context edit
//!   the deferred response, then follow up.
//! - Across restarts (with [`DiscordAdapter::with_state_file`]): the
//!   session is kept in a file and RESUMEd on the next start, so Discord
//!   replays what was sent meanwhile; stopping closes with 4000, which
//!   leaves it resumable. When it can no longer be resumed, the messages
//!   missed in the channels the bot heard from are read back over REST.
//! - Buttons are message components; a press arrives as an
//!   [`Action`] and is answered with a deferred update (or an ephemeral
//!   note) by [`answer_action`](ChannelAdapter::answer_action).

mod convert;
#[doc(hidden)]
pub mod fuzzing;
mod gateway;
mod interaction;
mod model;
mod rest;
mod saved;
mod shard;
mod voice;

pub use gateway::MAX_QUEUED;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::config::DiscordConfig;
use reqwest::Method;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::adapter::{
    Action, Attachment, Button, ButtonStyle, Capabilities, ChannelAdapter, ChannelError, FileKind,
    MessageId, OutgoingFile, Target,
};
use crate::inbound::Inbound;
use convert::Identity;
use flynn_protocol::sync::lock;
use interaction::{Ack, Context, Interactions, Kind};
use rest::Rest;
use saved::{Saved, SavedSession};

/// The channel's name in config, session keys and errors.
pub(crate) const CHANNEL: &str = "discord";

/// The largest attachment downloaded.
pub const MAX_ATTACHMENT: u64 = 20 * 1024 * 1024;

/// The largest file a bot uploads: Discord's default limit (10 MiB since
/// 2024) for a server without boosts and for direct messages.
pub const UPLOAD_LIMIT: u64 = 10 * 1024 * 1024;

/// Where Discord's REST API lives (`/api/v10` is appended).
pub const DEFAULT_API: &str = "https://discord.com";
/// Discord's gateway.
pub const DEFAULT_GATEWAY: &str = "wss://gateway.discord.gg";

/// The slash commands registered for the bot: name and description.
pub const COMMANDS: [(&str, &str); 3] = [
    ("reset", "Start a new conversation with Flynn"),
    ("status", "Show Flynn's model, session and usage"),
    ("cancel", "Stop what Flynn is doing"),
];

/// How long an answer to a slash command waits for the command's
/// deferred response to be accepted before it goes to the channel as a
/// plain message.
const ACK_WAIT: Duration = Duration::from_secs(5);

/// A Discord bot.
#[derive(Debug)]
pub struct DiscordAdapter {
    token: String,
    /// A gateway URL from config; Discord's when absent.
    gateway_url: Option<String>,
    rest: Arc<Rest>,
    identity: Mutex<Option<Identity>>,
    interactions: Arc<Interactions>,
    /// Answers to button presses the daemon did not answer in time.
    tasks: TaskTracker,
    /// Where the gateway session is kept across restarts.
    state_file: Option<PathBuf>,
    saved: Mutex<Saved>,
    /// `allowed_guild_ids`: the servers answered in; empty: any.
    guilds: Vec<u64>,
}

impl DiscordAdapter {
    /// An adapter for `config`; nothing is contacted until `connect`.
    /// Refuses an empty token or URLs that are not `http(s)://` (REST) /
    /// `ws(s)://` (gateway).
    pub fn new(config: &DiscordConfig) -> Result<Self, ChannelError> {
        let token = config.bot_token.trim();
        let token = token.strip_prefix("Bot ").unwrap_or(token).trim();
        if token.is_empty() {
            return Err(ChannelError::Unauthorized {
                channel: CHANNEL.to_owned(),
                detail: "channels.discord.bot_token is empty: copy the token from the Developer Portal (your application → Bot → Reset Token)".to_owned(),
            });
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ChannelError::Unauthorized {
                channel: CHANNEL.to_owned(),
                detail: "channels.discord.bot_token contains spaces or characters a Discord token never has".to_owned(),
            });
        }
        let origin = api_origin(config.api_url.as_deref().unwrap_or(DEFAULT_API))?;
        let gateway_url = config
            .gateway_url
            .as_deref()
            .map(gateway_base)
            .transpose()?;
        let guilds = config
            .allowed_guild_ids
            .iter()
            .map(|id| {
                id.trim().parse::<u64>().map_err(|_| ChannelError::Unauthorized {
                    channel: CHANNEL.to_owned(),
                    detail: format!(
                        "channels.discord.allowed_guild_ids: '{id}' is not a server id (a number: right-click the server with Developer Mode on → Copy Server ID)"
                    ),
                })
            })
            .collect::<Result<Vec<u64>, _>>()?;
        Ok(DiscordAdapter {
            guilds,
            token: token.to_owned(),
            gateway_url,
            rest: Arc::new(Rest::new(&origin, token)?),
            identity: Mutex::new(None),
            interactions: Arc::new(Interactions::default()),
            tasks: TaskTracker::new(),
            state_file: None,
            saved: Mutex::new(Saved::empty(token)),
        })
    }

    /// Whether a message or command from `guild` (none: a direct message)
    /// is answered.
    fn guild_allowed(&self, guild: Option<u64>) -> bool {
        match guild {
            Some(guild) => self.guilds.is_empty() || self.guilds.contains(&guild),
            None => true,
        }
    }

    /// Keeps the gateway session, the bot's identity and the last message
    /// taken per channel in `path` (read now, written as they change), so
    /// that a restart RESUMEs the session or, failing that, reads back
    /// the missed messages. A file that cannot be read is reported and
    /// started afresh.
    pub fn with_state_file(mut self, path: PathBuf) -> Self {
        let saved = Saved::load(&path, &self.token);
        if let Some(identity) = saved.identity() {
            *lock(&self.identity) = Some(identity);
        }
        self.saved = Mutex::new(saved);
        self.state_file = Some(path);
        self
    }

    fn saved(&self) -> MutexGuard<'_, Saved> {
        lock(&self.saved)
    }

    /// The kept session to resume, if any.
    fn saved_resume(&self) -> Option<gateway::Resume> {
        let saved = self.saved().session.clone()?;
        Some(gateway::Resume {
            session: shard::Session::new(saved.seq, saved.id),
            url: saved.resume_url,
        })
    }

    fn remember_session(&self, id: &str, seq: u64, resume_url: Option<&str>) {
        self.saved().session = Some(SavedSession {
            id: id.to_owned(),
            seq,
            resume_url: resume_url.map(str::to_owned),
        });
    }

    fn forget_session(&self) {
        self.saved().session = None;
    }

    fn forget_resume_url(&self) {
        if let Some(session) = self.saved().session.as_mut() {
            session.resume_url = None;
        }
    }

    fn mark(&self, channel: u64, message: u64, guild: Option<u64>) {
        self.saved().mark(channel, message, guild);
    }

    /// Writes the kept state to the state file (when there is one).
    async fn save(&self) {
        let Some(path) = self.state_file.clone() else {
            return;
        };
        let saved = self.saved().clone();
        let shown = path.display().to_string();
        let stored = tokio::task::spawn_blocking(move || saved.store(&path)).await;
        let error = match stored {
            Ok(Ok(())) => return,
            Ok(Err(error)) => error.to_string(),
            Err(error) => error.to_string(),
        };
        tracing::warn!(channel = CHANNEL, path = %shown, %error, "cannot save the Discord gateway session; a restart starts a new one and reads back only as far as the file last written says");
    }

    fn identity(&self) -> Option<Identity> {
        lock(&self.identity).clone()
    }

    fn set_identity(&self, identity: Identity) {
        self.saved().set_identity(&identity);
        *lock(&self.identity) = Some(identity);
    }

    /// Sends to the interaction a slash command's answer belongs to:
    /// `@original` first, followups after. `None` when the interaction
    /// cannot take it (never acknowledged, token about to expire): the
    /// caller sends to the channel instead.
    async fn send_to_interaction(
        &self,
        context: &Context,
        body: &Value,
    ) -> Result<Option<MessageId>, ChannelError> {
        let Some(state) = self.interactions.get(&context.interaction) else {
            return Ok(None);
        };
        if state.settled(ACK_WAIT).await != Ack::Done || !state.token_usable() {
            return Ok(None);
        }
        let webhook = format!("/webhooks/{}/{}", context.application, context.token);
        if state.original().is_none() {
            let id = self
                .rest
                .message(
                    Method::PATCH,
                    &format!("{webhook}/messages/@original"),
                    body,
                    false,
                )
                .await?;
            state.set_original(&id);
            return Ok(Some(MessageId(id)));
        }
        let id = self
            .rest
            .message(Method::POST, &webhook, body, false)
            .await?;
        state.sent_through_webhook(&id);
        Ok(Some(MessageId(id)))
    }
}

/// The origin the REST API hangs off: `https://discord.com` from that,
/// or from `…/api` and `…/api/v10`.
fn api_origin(url: &str) -> Result<String, ChannelError> {
    let url = url.trim().trim_end_matches('/');
    let url = url
        .strip_suffix("/api/v10")
        .or_else(|| url.strip_suffix("/api"))
        .unwrap_or(url);
    if !(url.starts_with("https://") || url.starts_with("http://")) || url.contains('?') {
        return Err(ChannelError::Rejected {
            channel: CHANNEL.to_owned(),
            detail: format!(
                "channels.discord.api_url '{url}' is not an http(s):// URL (leave it out to use {DEFAULT_API})"
            ),
        });
    }
    Ok(url.to_owned())
}

/// The gateway URL the shard appends `/?v=10&encoding=json` to.
fn gateway_base(url: &str) -> Result<String, ChannelError> {
    let url = url.trim();
    let url = url.split('?').next().unwrap_or(url).trim_end_matches('/');
    if !(url.starts_with("wss://") || url.starts_with("ws://")) {
        return Err(ChannelError::Rejected {
            channel: CHANNEL.to_owned(),
            detail: format!(
                "channels.discord.gateway_url '{url}' is not a ws(s):// URL (leave it out to use {DEFAULT_GATEWAY})"
            ),
        });
    }
    Ok(url.to_owned())
}

/// A snowflake from a conversation or message id, refusing anything
/// else before it reaches a URL path.
fn snowflake<'a>(what: &str, id: &'a str) -> Result<&'a str, ChannelError> {
    if !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit()) {
        Ok(id)
    } else {
        Err(ChannelError::Rejected {
            channel: CHANNEL.to_owned(),
            detail: format!("'{id}' is not a Discord {what} id"),
        })
    }
}

/// A snowflake as Discord writes it (a string of digits).
fn snowflake_of(value: &Value) -> Option<u64> {
    value.as_str()?.parse().ok()
}

/// Buttons as action rows of at most five.
fn components(buttons: &[Button]) -> Value {
    let rows: Vec<Value> = buttons
        .chunks(5)
        .map(|row| {
            let buttons: Vec<Value> = row
                .iter()
                .map(|b| {
                    json!({
                        "type": 2,
                        "style": match b.style { ButtonStyle::Primary => 1, ButtonStyle::Danger => 4 },
                        "label": b.label.chars().take(80).collect::<String>(),
                        "custom_id": b.data,
                    })
                })
                .collect();
            json!({"type": 1, "components": buttons})
        })
        .collect();
    Value::Array(rows)
}

/// `SUPPRESS_EMBEDS`: no link previews. Discord's crawler would otherwise
/// fetch every URL in an answer, so a link an injected model writes
/// (with a secret in its query) would leak with nobody clicking it.
const SUPPRESS_EMBEDS: u64 = 1 << 2;
/// `EPHEMERAL`: only the person who pressed or typed sees it.
const EPHEMERAL: u64 = 1 << 6;
/// `IS_VOICE_MESSAGE`: shown with a player and waveform, like a voice
/// note recorded in Discord.
const IS_VOICE_MESSAGE: u64 = 1 << 13;
/// "Cannot send voice messages in this channel".
const NO_VOICE_MESSAGES: u64 = 50173;

/// A message body: the text, mentions that ping nobody, no link
/// previews (on edits too, streaming ones included), the buttons (always
/// present on edits, where an empty list removes them).
fn message_body(text: &str, buttons: &[Button], edit: bool) -> Value {
    let mut body = json!({
        "content": text,
        "allowed_mentions": {"parse": []},
        "flags": SUPPRESS_EMBEDS,
    });
    if edit || !buttons.is_empty() {
        body["components"] = components(buttons);
    }
    body
}

impl DiscordAdapter {
    /// Posts `file` as `name` with the message `payload` (multipart),
    /// retried as messages are.
    async fn upload(
        &self,
        path: &str,
        payload: &Value,
        name: &str,
        file: &OutgoingFile,
    ) -> Result<MessageId, ChannelError> {
        let id = crate::outbound::retrying(|| {
            let upload = rest::Upload {
                name,
                media_type: &file.media_type,
                data: file.data.clone(),
            };
            self.rest.upload(path, payload, upload)
        })
        .await?;
        Ok(MessageId(id))
    }

    /// Creates a message with `body`: in answer to a slash command
    /// through its interaction while that can be used, else in the
    /// target's channel.
    async fn create(&self, to: &Target, body: Value) -> Result<MessageId, ChannelError> {
        Ok(self.create_and_text(to, body).await?.0)
    }

    /// Like [`create`](Self::create), with the text of the message Discord
    /// returned when it came from the channel (`None` through an
    /// interaction).
    async fn create_and_text(
        &self,
        to: &Target,
        body: Value,
    ) -> Result<(MessageId, Option<String>), ChannelError> {
        if let Some(context) = to.reply.as_deref().and_then(Context::decode)
            && context.kind == Kind::Command
        {
            // A follow-up through the interaction's webhook takes no nonce.
            let mut plain = body.clone();
            if let Some(fields) = plain.as_object_mut() {
                fields.remove("nonce");
                fields.remove("enforce_nonce");
            }
            if let Some(id) = self.send_to_interaction(&context, &plain).await? {
                return Ok((id, None));
            }
        }
        let channel = snowflake("channel", &to.conversation.chat)?;
        let (id, text) = self
            .rest
            .message_and_text(
                Method::POST,
                &format!("/channels/{channel}/messages"),
                &body,
                true,
            )
            .await?;
        Ok((MessageId(id), text))
    }
}

/// A caption as Discord shows it: plain text, so markdown characters are
/// escaped with a backslash (a line starting `#`, `>` or `-` stays a line
/// of text), mentions are defused as in answers, and it is cut at
/// Discord's 2000 characters.
fn caption_text(caption: &str) -> String {
    let mut out = String::with_capacity(caption.len() + 16);
    for (i, line) in caption.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        if line.starts_with(['#', '>', '-']) {
            out.push('\\');
        }
        for c in line.chars() {
            if matches!(c, '\\' | '*' | '_' | '~' | '`' | '|' | '[' | ']') {
                out.push('\\');
            }
            out.push(c);
        }
    }
    crate::format::discord(&out).chars().take(2000).collect()
}

/// A file name Discord takes: no path, no control characters, at most
/// 100 characters (the extension kept); `file` when nothing is left.
fn file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let clean: String = base
        .chars()
        .filter(|c| !c.is_control())
        .collect::<String>()
        .trim()
        .to_owned();
    if clean.is_empty() || clean == "." || clean == ".." {
        return "file".to_owned();
    }
    if clean.chars().count() <= 100 {
        return clean;
    }
    let extension = clean
        .rsplit_once('.')
        .map(|(_, e)| e)
        .filter(|e| e.chars().count() <= 10)
        .unwrap_or("");
    let keep = 100 - extension.chars().count() - usize::from(!extension.is_empty());
    let mut cut: String = clean.chars().take(keep).collect();
    if !extension.is_empty() {
        cut.push('.');
        cut.push_str(extension);
    }
    cut
}

/// The longest `nonce` Discord takes.
const NONCE_LEN: usize = 25;

/// A message nonce for `key`: the first [`NONCE_LEN`] hex digits of its
/// SHA-256, so any key fits and equal keys give equal nonces.
fn nonce(key: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut nonce = hex::encode(Sha256::digest(key.as_bytes()));
    nonce.truncate(NONCE_LEN);
    nonce
}

#[async_trait]
impl ChannelAdapter for DiscordAdapter {
    fn name(&self) -> &str {
        CHANNEL
    }

    /// Fetches an attachment from Discord's CDN (signed URLs; the bot
    /// token is never sent there).
    async fn download(
        &self,
        attachment: &Attachment,
        limit: u64,
    ) -> Result<bytes::Bytes, ChannelError> {
        let limit = limit.min(MAX_ATTACHMENT);
        if let Some(size) = attachment.size.filter(|size| *size > limit) {
            return Err(ChannelError::too_large(CHANNEL, size, limit));
        }
        self.rest.download(&attachment.source, limit).await
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_len: crate::limits::DISCORD.0,
            measure: crate::limits::DISCORD.1,
            edit: true,
            buttons: true,
            typing: true,
            // Discord allows five edits of a channel's messages per five
            // seconds.
            edit_interval: Duration::from_secs(1),
        }
    }

    fn format(&self, markdown: &str) -> String {
        crate::format::discord(markdown)
    }

    async fn connect(&self, sink: Inbound, stop: CancellationToken) -> Result<(), ChannelError> {
        gateway::run(self, sink, stop).await
    }

    async fn disconnect(&self) {
        // Presses answered on the daemon's behalf finish within seconds.
        self.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.tasks.wait()).await;
        self.tasks.reopen();
    }

    async fn send(
        &self,
        to: &Target,
        text: &str,
        buttons: &[Button],
    ) -> Result<MessageId, ChannelError> {
        self.create(to, message_body(text, buttons, false)).await
    }

    /// Sends with a `nonce` made from `key` and `enforce_nonce`: Discord
    /// returns the message already created with that nonce in the last
    /// few minutes instead of creating another, which is then edited to
    /// `text` if it says something else (an answer streamed into it
    /// before a crash). (Interaction follow-ups have no nonce; they are
    /// sent as usual.)
    async fn send_once(
        &self,
        to: &Target,
        text: &str,
        buttons: &[Button],
        key: &str,
    ) -> Result<MessageId, ChannelError> {
        let mut body = message_body(text, buttons, false);
        body["nonce"] = Value::String(nonce(key));
        body["enforce_nonce"] = Value::Bool(true);
        let (id, shown) = self.create_and_text(to, body).await?;
        if shown.is_some_and(|shown| shown != text) {
            self.edit(to, &id, text, buttons).await?;
        }
        Ok(id)
    }

    async fn edit(
        &self,
        to: &Target,
        message: &MessageId,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError> {
        let body = message_body(text, buttons, true);
        let id = snowflake("message", &message.0)?;
        if let Some(context) = to.reply.as_deref().and_then(Context::decode)
            && let Some(state) = self.interactions.get(&context.interaction)
            && state.is_webhook_message(id)
            && state.token_usable()
        {
            let path = format!(
                "/webhooks/{}/{}/messages/{id}",
                context.application, context.token
            );
            self.rest
                .call(Method::PATCH, &path, Some(&body), false)
                .await?;
            return Ok(());
        }
        let channel = snowflake("channel", &to.conversation.chat)?;
        self.rest
            .call(
                Method::PATCH,
                &format!("/channels/{channel}/messages/{id}"),
                Some(&body),
                true,
            )
            .await?;
        Ok(())
    }

    /// Every kind up to [`UPLOAD_LIMIT`]: Discord shows images inline and
    /// plays audio in the message; a voice note is an audio attachment.
    fn upload_limit(&self, kind: FileKind) -> u64 {
        let _ = kind;
        UPLOAD_LIMIT
    }

    /// Posts the file as an attachment of a new message in the target's
    /// channel (a thread is a channel of its own), the caption as its
    /// text, mentioning nobody. It goes to the channel also in answer to a
    /// slash command: Flynn's commands never send files, so the
    /// interaction's webhook is left to the text answer. Rate limits and
    /// outages are retried here, as the upload is sent whole each time.
    async fn send_file(&self, to: &Target, file: &OutgoingFile) -> Result<MessageId, ChannelError> {
        file.check_size(CHANNEL, UPLOAD_LIMIT)?;
        let channel = snowflake("channel", &to.conversation.chat)?;
        let path = format!("/channels/{channel}/messages");
        let caption = file
            .caption
            .as_deref()
            .map(caption_text)
            .unwrap_or_default();
        // A voice note without a caption (a voice message carries nothing
        // else) goes as Discord's own voice message when it is Ogg Opus;
        // anything else, or where the channel allows no voice messages,
        // as an audio file.
        let voice = (file.kind == FileKind::Voice && caption.is_empty())
            .then(|| voice::voice_note(&file.data))
            .flatten();
        if let Some(note) = voice {
            let name = "voice-message.ogg";
            let payload = json!({
                "flags": IS_VOICE_MESSAGE,
                "attachments": [{
                    "id": 0,
                    "filename": name,
                    "duration_secs": note.duration_secs,
                    "waveform": note.waveform,
                }],
            });
            match self.upload(&path, &payload, name, file).await {
                Err(ChannelError::Rejected { detail, .. })
                    if detail.contains(&format!("(code {NO_VOICE_MESSAGES})")) =>
                {
                    tracing::info!(%channel, "voice messages are not allowed here; sending the voice note as an audio file");
                }
                sent => return sent,
            }
        }
        let name = file_name(&file.name);
        let payload = json!({
            "content": caption,
            "allowed_mentions": {"parse": []},
            "flags": SUPPRESS_EMBEDS,
            "attachments": [{"id": 0, "filename": name}],
        });
        self.upload(&path, &payload, &name, file).await
    }

    async fn typing(&self, to: &Target) -> Result<(), ChannelError> {
        let channel = snowflake("channel", &to.conversation.chat)?;
        self.rest
            .call(
                Method::POST,
                &format!("/channels/{channel}/typing"),
                None,
                true,
            )
            .await?;
        Ok(())
    }

    async fn answer_action(&self, action: &Action, note: &str) -> Result<(), ChannelError> {
        let Some(context) = action.reply.as_deref().and_then(Context::decode) else {
            return Err(ChannelError::Rejected {
                channel: CHANNEL.to_owned(),
                detail: "this button press carries no Discord interaction to answer".to_owned(),
            });
        };
        let state = self.interactions.open(&context.interaction);
        let note = crate::format::discord(note);
        if state.claim() {
            let body = if note.is_empty() {
                json!({"type": 6})
            } else {
                json!({"type": 4, "data": {
                    "content": note.chars().take(2000).collect::<String>(),
                    "flags": EPHEMERAL | SUPPRESS_EMBEDS,
                    "allowed_mentions": {"parse": []},
                }})
            };
            return gateway::callback(&self.rest, &state, &context, &body).await;
        }
        // Answered already (by the adapter, when the daemon took longer
        // than Discord waits): the note becomes an ephemeral followup.
        if note.is_empty() || state.settled(ACK_WAIT).await != Ack::Done || !state.token_usable() {
            return Ok(());
        }
        let body = json!({
            "content": note.chars().take(2000).collect::<String>(),
            "flags": EPHEMERAL | SUPPRESS_EMBEDS,
            "allowed_mentions": {"parse": []},
        });
        self.rest
            .call(
                Method::POST,
                &format!("/webhooks/{}/{}", context.application, context.token),
                Some(&body),
                false,
            )
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_normalised_and_checked() {
        assert_eq!(
            api_origin("https://discord.com/").ok(),
            Some("https://discord.com".into())
        );
        assert_eq!(
            api_origin("http://127.0.0.1:9/api/v10").ok(),
            Some("http://127.0.0.1:9".into())
        );
        assert!(api_origin("discord.com").is_err());
        assert_eq!(
            gateway_base("ws://127.0.0.1:9/?v=10&encoding=json").ok(),
            Some("ws://127.0.0.1:9".into())
        );
        assert!(gateway_base("https://gateway.discord.gg").is_err());
        assert!(snowflake("channel", "123").is_ok());
        assert!(snowflake("channel", "12/../3").is_err());
    }

    #[test]
    fn captions_show_as_typed_and_file_names_lose_their_path() {
        assert_eq!(
            caption_text("# Sales\n*up* 5% | [q3]\n- note"),
            "\\# Sales\n\\*up\\* 5% \\| \\[q3\\]\n\\- note"
        );
        assert_eq!(caption_text("hi @here"), "hi @\u{200b}here");
        assert_eq!(caption_text(&"*".repeat(1500)).chars().count(), 2000);
        assert_eq!(file_name("../reports/q3.pdf"), "q3.pdf");
        assert_eq!(file_name("C:\\tmp\\a\nb.png"), "ab.png");
        assert_eq!(file_name(" / "), "file");
        let long = format!("{}.png", "x".repeat(150));
        let cut = file_name(&long);
        assert_eq!(cut.chars().count(), 100);
        assert!(cut.ends_with("x.png"), "{cut}");
    }

    #[test]
    fn buttons_become_rows_of_five_and_edits_always_say_which() {
        let button = |i: usize| Button {
            label: format!("B{i}"),
            data: format!("d{i}"),
            style: if i.is_multiple_of(2) {
                ButtonStyle::Primary
            } else {
                ButtonStyle::Danger
            },
        };
        let buttons: Vec<Button> = (0..7).map(button).collect();
        let body = message_body("hi", &buttons, false);
        assert_eq!(body["components"].as_array().map(Vec::len), Some(2));
        assert_eq!(
            body["components"][0]["components"].as_array().map(Vec::len),
            Some(5)
        );
        assert_eq!(
            body["components"][1]["components"][0],
            json!({"type": 2, "style": 4, "label": "B5", "custom_id": "d5"})
        );
        assert_eq!(
            message_body("hi", &[], false),
            json!({"content": "hi", "allowed_mentions": {"parse": []}, "flags": 4})
        );
        assert_eq!(message_body("hi", &[], true)["components"], json!([]));
    }
}
