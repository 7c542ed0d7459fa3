//! Slack: a Slack app's bot, over the Web API (reqwest) for sending and
//! either Socket Mode (a WebSocket Slack opens for the app; no public
//! address) or the Events API (Slack posts to the gateway) for receiving.
//! Written by hand rather than on slack-morphism, whose Socket Mode
//! listener awaits each callback on its reading task (a slow store stalls
//! pings and every later envelope), gates acknowledgements through its
//! error handler's status code, and retries connections forever without
//! reporting refused tokens; see docs/ARCHITECTURE.md.
//!
//! - `connect` checks the bot token with `auth.test`, then in Socket Mode
//!   runs connections until stopped, acknowledging each envelope only
//!   after the daemon settled what it carries; in Events mode it waits,
//!   and [`webhook`](ChannelAdapter::webhook) verifies and delivers.
//! - Messages are `message` and `app_mention` events, both named
//!   `channel:ts` so the two Slack sends for one post are answered once.
//!   In channels every top-level message opens a thread (its own
//!   session) that the answer goes to; direct messages stay unthreaded.
//!   A reply in a channel thread the bot answered in counts as a mention.
//! - Buttons are Block Kit `actions`; presses come back as
//!   `block_actions` and are answered through their `response_url`.
//! - Slash commands become chat commands (`/flynn reset` → `/reset`).

mod api;
mod blocks;
mod events;
#[doc(hidden)]
pub mod fuzzing;
mod socket;
mod wire;

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::config::{SlackConfig, SlackMode};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::adapter::{
    Action, Attachment, AttachmentKind, Button, Capabilities, ChannelAdapter, ChannelError,
    ChatKind, FileKind, InboundEvent, MessageId, OutgoingFile, Target, WebhookRequest,
    WebhookResponse,
};
use crate::inbound::Inbound;
use crate::limits;
use api::{Api, CHANNEL};
use wire::Identity;

pub use blocks::{ACTIONS_MAX, LABEL_MAX, SECTION_MAX, VALUE_MAX};
pub use events::MAX_SKEW_SECS;

/// The largest file downloaded from a message; larger ones are named in
/// the text instead.
pub const MAX_FILE_BYTES: u64 = 20 * 1024 * 1024;

/// The largest file the adapter uploads. Slack takes up to 1 GB; a file
/// is held in memory while it is sent, so the adapter stops at 100 MiB.
pub const UPLOAD_LIMIT: u64 = 100 * 1024 * 1024;
/// The shortest gap between two edits of one message.
pub const EDIT_INTERVAL: Duration = Duration::from_secs(1);
/// Channel threads the bot answered in that it remembers (replies there
/// count as addressed to it without a new mention).
pub const THREADS_REMEMBERED: usize = 4096;

/// The channel threads the bot answered in, newest last (in memory: after
/// a restart a reply needs a mention again).
#[derive(Debug, Default)]
struct Threads {
    order: VecDeque<String>,
    known: HashSet<String>,
}

impl Threads {
    fn remember(&mut self, peer: String) {
        if self.known.insert(peer.clone()) {
            self.order.push_back(peer);
            if self.order.len() > THREADS_REMEMBERED
                && let Some(oldest) = self.order.pop_front()
            {
                self.known.remove(&oldest);
            }
        }
    }
}

/// A Slack app's bot.
pub struct SlackAdapter {
    api: Api,
    mode: SlackMode,
    bot_token: String,
    app_token: Option<String>,
    signing_secret: Option<String>,
    /// The bot as the last `auth.test` named it.
    bot: Mutex<Option<Arc<Identity>>>,
    threads: Mutex<Threads>,
}

impl std::fmt::Debug for SlackAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackAdapter")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

fn missing(detail: &str) -> ChannelError {
    ChannelError::Unauthorized {
        channel: CHANNEL.to_owned(),
        detail: detail.to_owned(),
    }
}

impl SlackAdapter {
    /// An adapter for `config`: checks that the mode's credentials are
    /// there (Socket Mode needs an `xapp-` app token, the Events API a
    /// signing secret); nothing is sent until `connect`.
    pub fn new(config: &SlackConfig) -> Result<Self, ChannelError> {
        let present = |value: &Option<String>| value.clone().filter(|v| !v.trim().is_empty());
        if config.bot_token.trim().is_empty() {
            return Err(missing(
                "channels.slack.bot_token is empty (the Bot User OAuth Token, xoxb-…)",
            ));
        }
        let app_token = present(&config.app_token);
        let signing_secret = present(&config.signing_secret);
        match config.mode {
            SlackMode::Socket => match &app_token {
                None => {
                    return Err(missing(
                        "channels.slack.app_token is missing: Socket Mode needs an app-level token (xapp-…) with connections:write",
                    ));
                }
                Some(token) if !token.starts_with("xapp-") => {
                    return Err(missing(
                        "channels.slack.app_token must be the app-level token (xapp-…), not the bot token",
                    ));
                }
                Some(_) => {}
            },
            SlackMode::Events if signing_secret.is_none() => {
                return Err(missing(
                    "channels.slack.signing_secret is missing: the Events API needs it to check Slack's signatures",
                ));
            }
            SlackMode::Events => {}
        }
        Ok(SlackAdapter {
            api: Api::new(&config.api_url)?,
            mode: config.mode,
            bot_token: config.bot_token.trim().to_owned(),
            app_token: app_token.map(|t| t.trim().to_owned()),
            signing_secret,
            bot: Mutex::new(None),
            threads: Mutex::new(Threads::default()),
        })
    }

    /// `auth.test`: who the bot is. Remembered for reading events.
    async fn auth_test(&self) -> Result<Arc<Identity>, ChannelError> {
        let answer = self
            .api
            .call("auth.test", &self.bot_token, &json!({}))
            .await?;
        let field = |name: &str| {
            answer
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let user_id = field("user_id");
        if user_id.is_empty() {
            return Err(api::unavailable("auth.test answered without a user_id"));
        }
        let identity = Arc::new(Identity {
            user_id,
            user: field("user"),
            team: field("team"),
        });
        *self.bot.lock().unwrap_or_else(PoisonError::into_inner) = Some(identity.clone());
        Ok(identity)
    }

    /// The bot, asking Slack when it is not known yet.
    async fn bot(&self) -> Result<Arc<Identity>, ChannelError> {
        let known = self
            .bot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match known {
            Some(bot) => Ok(bot),
            None => self.auth_test().await,
        }
    }

    /// An `event_callback` as a message, its files named.
    async fn read_callback(&self, callback: &Value, bot: &Identity) -> Option<InboundEvent> {
        if callback.get("type").and_then(Value::as_str) != Some("event_callback") {
            return None;
        }
        let draft = wire::message_event(callback.get("event")?, bot)?;
        let mut message = draft.message;
        if !message.mentioned && message.conversation.thread.is_some() {
            let peer = message.conversation.peer();
            message.mentioned = self
                .threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .known
                .contains(&peer);
        }
        // Named, not downloaded: the daemon asks for them (`download`)
        // once the sender passed its access checks.
        message.attachments = draft
            .files
            .into_iter()
            .map(|file| Attachment {
                kind: if file.media_type.starts_with("image/") {
                    AttachmentKind::Image
                } else {
                    AttachmentKind::File
                },
                name: file.name,
                media_type: file.media_type,
                size: file.size,
                source: file.url,
            })
            .collect();
        Some(InboundEvent::Message(message))
    }
}

/// An interactivity payload as an action (button presses only).
fn from_interaction(payload: &Value) -> Option<InboundEvent> {
    wire::block_actions(payload).map(InboundEvent::Action)
}

/// A slash command's payload as a message.
fn from_command(payload: &Value) -> Option<InboundEvent> {
    wire::slash_command(payload).map(InboundEvent::Message)
}

/// The posting fields every message shares.
/// A caption as Slack shows it: plain text with `&`, `<` and `>` escaped
/// as Slack asks (so nothing turns into a link or a mention).
fn caption_text(caption: &str) -> String {
    caption
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The file's name without a path or control characters; `file` when
/// nothing is left.
fn file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let clean: String = base.chars().filter(|c| !c.is_control()).collect();
    let clean = clean.trim();
    if clean.is_empty() || clean == "." || clean == ".." {
        "file".to_owned()
    } else {
        clean.to_owned()
    }
}

impl SlackAdapter {
    /// Steps 1 and 2 of an upload: a URL for `length` bytes and a file id
    /// from `files.getUploadURLExternal`, then the bytes to that URL. The
    /// file's id.
    async fn upload(&self, name: &str, file: &OutgoingFile) -> Result<String, ChannelError> {
        let length = file.data.len().to_string();
        let method = "files.getUploadURLExternal";
        let answer = self
            .api
            .call_form(
                method,
                &self.bot_token,
                &[("filename", name), ("length", &length)],
            )
            .await?;
        let field = |key: &str| {
            answer
                .get(key)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| api::unavailable(format!("{method} answered without {key}")))
        };
        let (url, id) = (field("upload_url")?, field("file_id")?);
        self.api
            .upload(url, &file.media_type, file.data.clone())
            .await?;
        Ok(id.to_owned())
    }
}

fn message_body(to: &Target, text: &str, buttons: &[Button]) -> Value {
    let mut body = json!({
        "channel": to.conversation.chat,
        "text": text,
        "unfurl_links": false,
        "unfurl_media": false,
    });
    if let Some(thread) = &to.conversation.thread {
        body["thread_ts"] = json!(thread);
    }
    if !buttons.is_empty() {
        body["blocks"] = blocks::message_blocks(text, buttons);
    }
    body
}

#[async_trait]
impl ChannelAdapter for SlackAdapter {
    fn name(&self) -> &str {
        CHANNEL
    }

    fn capabilities(&self) -> Capabilities {
        let (max_len, measure) = limits::SLACK;
        Capabilities {
            max_len,
            measure,
            edit: true,
            buttons: true,
            typing: false,
            edit_interval: EDIT_INTERVAL,
        }
    }

    fn format(&self, markdown: &str) -> String {
        crate::format::slack_mrkdwn(markdown)
    }

    async fn connect(&self, sink: Inbound, stop: CancellationToken) -> Result<(), ChannelError> {
        let bot = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            bot = self.auth_test() => bot?,
        };
        match (self.mode, &self.app_token) {
            (SlackMode::Socket, Some(app_token)) => {
                self.run_socket(app_token, &bot, &sink, &stop).await
            }
            (SlackMode::Socket, None) => Err(missing("channels.slack.app_token is missing")),
            (SlackMode::Events, _) => {
                sink.connected(bot.detail());
                stop.cancelled().await;
                Ok(())
            }
        }
    }

    async fn send(
        &self,
        to: &Target,
        text: &str,
        buttons: &[Button],
    ) -> Result<MessageId, ChannelError> {
        let answer = self
            .api
            .call(
                "chat.postMessage",
                &self.bot_token,
                &message_body(to, text, buttons),
            )
            .await?;
        if to.conversation.thread.is_some() && to.conversation.kind == ChatKind::Group {
            self.threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remember(to.conversation.peer());
        }
        answer
            .get("ts")
            .and_then(Value::as_str)
            .map(|ts| MessageId(ts.to_owned()))
            .ok_or_else(|| api::unavailable("chat.postMessage answered without a ts"))
    }

    /// Every kind up to [`UPLOAD_LIMIT`]; Slack previews images and plays
    /// audio, and a voice note is an audio file.
    fn upload_limit(&self, kind: FileKind) -> u64 {
        let _ = kind;
        UPLOAD_LIMIT
    }

    /// Uploads the file the way Slack's current API does (an upload URL
    /// from `files.getUploadURLExternal`, the bytes to it, then
    /// `files.completeUploadExternal` to share it in the channel, in the
    /// thread when there is one, with the caption as its comment). Each
    /// step is retried on a rate limit or an outage; a failed upload asks
    /// for a new URL, as each takes one upload. Slack shares files
    /// asynchronously and names no message, so the id returned is the
    /// file's (`F…`).
    async fn send_file(&self, to: &Target, file: &OutgoingFile) -> Result<MessageId, ChannelError> {
        file.check_size(CHANNEL, UPLOAD_LIMIT)?;
        let name = file_name(&file.name);
        let id = crate::outbound::retrying(|| self.upload(&name, file)).await?;
        let mut body = json!({
            "files": [{"id": id, "title": name}],
            "channel_id": to.conversation.chat,
        });
        if let Some(thread) = &to.conversation.thread {
            body["thread_ts"] = json!(thread);
        }
        if let Some(caption) = file.caption.as_deref().filter(|c| !c.trim().is_empty()) {
            body["initial_comment"] = json!(caption_text(caption));
        }
        crate::outbound::retrying(|| {
            self.api
                .call("files.completeUploadExternal", &self.bot_token, &body)
        })
        .await?;
        if to.conversation.thread.is_some() && to.conversation.kind == ChatKind::Group {
            self.threads
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remember(to.conversation.peer());
        }
        Ok(MessageId(id))
    }

    async fn edit(
        &self,
        to: &Target,
        message: &MessageId,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError> {
        let body = json!({
            "channel": to.conversation.chat,
            "ts": message.0,
            "text": text,
            "blocks": blocks::message_blocks(text, buttons),
        });
        self.api
            .call("chat.update", &self.bot_token, &body)
            .await
            .map(drop)
    }

    /// Posts `note` to the person who pressed, visible only to them
    /// (through the press's `response_url`); nothing for an empty note.
    async fn answer_action(&self, action: &Action, note: &str) -> Result<(), ChannelError> {
        let (Some(response_url), false) = (&action.reply, note.trim().is_empty()) else {
            return Ok(());
        };
        let body = json!({
            "response_type": "ephemeral",
            "replace_original": false,
            "text": note,
        });
        self.api.respond(response_url, &body).await
    }

    /// Reads a private file with the bot token, which goes only to
    /// Slack's own hosts (and the configured API host).
    async fn download(
        &self,
        attachment: &Attachment,
        limit: u64,
    ) -> Result<bytes::Bytes, ChannelError> {
        let limit = limit.min(MAX_FILE_BYTES);
        if let Some(size) = attachment.size.filter(|size| *size > limit) {
            return Err(ChannelError::too_large(CHANNEL, size, limit));
        }
        self.api
            .download(&attachment.source, &self.bot_token, limit)
            .await
            .map_err(|detail| ChannelError::Rejected {
                channel: CHANNEL.to_owned(),
                detail,
            })
    }

    async fn webhook(&self, request: WebhookRequest, sink: &Inbound) -> WebhookResponse {
        match (self.mode, &self.signing_secret) {
            (SlackMode::Events, Some(secret)) => self.events_webhook(secret, request, sink).await,
            _ => WebhookResponse::not_found(),
        }
    }
}
