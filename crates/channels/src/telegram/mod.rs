//! Telegram, through the Bot API: the few methods and fields the adapter
//! uses, by hand on reqwest ([`api`]).
//!
//! Receiving: `getUpdates` long polling (the default; needs no public
//! address) or a webhook Telegram posts to the gateway's
//! `/channels/telegram/webhook`, checked against the secret token. Either
//! way an update is acknowledged only once the daemon stored it: polling
//! advances its offset past an update only then, and the webhook answers
//! 503 otherwise so that Telegram posts it again. Photos and documents
//! arrive as `file_id`s and are downloaded only when the daemon asks
//! ([`ChannelAdapter::download`], after its access checks), up to the Bot
//! API's 20 MB.
//!
//! Sending: HTML (`parse_mode: "HTML"`), link previews off, one row of
//! inline keyboard buttons for confirmations, `editMessageText` to grow a
//! streamed answer, `sendChatAction` for typing.

mod api;
#[doc(hidden)]
pub mod fuzzing;
mod parse;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use flynn_protocol::config::{TelegramConfig, TelegramMode};
use serde::de::IgnoredAny;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use self::api::{Bot, InlineButton, InlineKeyboard, Refusal, Update};
use self::parse::Me;
use crate::adapter::{
    Action, Attachment, Button, ButtonStyle, Capabilities, ChannelAdapter, ChannelError,
    Conversation, FileKind, InboundEvent, MessageId, OutgoingFile, Target, WebhookRequest,
    WebhookResponse,
};
use crate::inbound::Inbound;
use crate::outbound::retrying;
use crate::signature::{hmac_sha256_hex, verify_hmac_sha256};

/// The channel's name.
const NAME: &str = "telegram";
/// How long one `getUpdates` waits for updates, in seconds.
const POLL_TIMEOUT_SECS: u32 = 25;
/// Limit of one ordinary API call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Limit of one long poll or one file download.
const SLOW_TIMEOUT: Duration = Duration::from_secs(120);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Limit of one file upload (50 MB over a slow uplink).
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(600);
/// The largest file the Bot API hands out to bots (`getFile`).
pub const MAX_DOWNLOAD: u64 = 20 * 1024 * 1024;
/// The largest file a bot may upload.
pub const MAX_UPLOAD: u64 = 50 * 1024 * 1024;
/// The largest photo a bot may upload; a larger picture goes as a
/// document.
pub const MAX_PHOTO: u64 = 10 * 1024 * 1024;
/// Failed polls in a row (5xx, network) before `connect` gives up and
/// lets the registry reconnect with its backoff.
const POLL_ATTEMPTS: u32 = 3;
/// The first wait after a failed poll; doubled each time.
const POLL_BACKOFF: Duration = Duration::from_millis(500);
/// The longest rate-limit hint a poll waits out before giving up.
const MAX_POLL_WAIT: Duration = Duration::from_secs(60);
/// The pause before asking again for an update the daemon could not take;
/// doubled each time the daemon refuses it again, up to
/// [`MAX_RETRY_PAUSE`] (a full disk or a read-only database refuses every
/// update until someone steps in).
const RETRY_PAUSE: Duration = Duration::from_millis(500);
/// The longest pause between two asks for an update the daemon refuses.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(30);
/// The longest `answerCallbackQuery` text.
const MAX_NOTE_CHARS: usize = 200;
/// The header Telegram sends the webhook secret in.
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// The update kinds Flynn asks for.
const ALLOWED_UPDATES: &[&str] = &["message", "callback_query"];

/// A Telegram bot.
pub struct TelegramAdapter {
    mode: TelegramMode,
    webhook_url: Option<String>,
    webhook_secret: Option<String>,
    /// `<api_url>/file/bot<token>`: where files are downloaded from.
    file_base: String,
    /// Ordinary calls.
    bot: Bot,
    /// Long polls (a longer timeout).
    poller: Bot,
    /// File uploads (the longer timeout too).
    uploader: Bot,
    /// File downloads.
    http: reqwest::Client,
    /// Set by `connect` (`getMe`); mentions and replies are matched
    /// against it.
    me: RwLock<Option<Arc<Me>>>,
    /// The next `update_id` to ask for: one past the last update the
    /// daemon acknowledged (0 before any).
    offset: AtomicI64,
    /// The offset the last successful `getUpdates` carried, i.e. what
    /// Telegram knows is confirmed.
    confirmed: AtomicI64,
}

impl std::fmt::Debug for TelegramAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token: it is in the bots' and the file URLs.
        f.debug_struct("TelegramAdapter")
            .field("mode", &self.mode)
            .field("webhook_url", &self.webhook_url)
            .field("offset", &self.offset.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn rejected(detail: impl Into<String>) -> ChannelError {
    ChannelError::Rejected {
        channel: NAME.to_owned(),
        detail: detail.into(),
    }
}

fn unavailable(detail: impl Into<String>) -> ChannelError {
    ChannelError::Unavailable {
        channel: NAME.to_owned(),
        detail: detail.into(),
    }
}

fn unauthorized(detail: impl Into<String>) -> ChannelError {
    ChannelError::Unauthorized {
        channel: NAME.to_owned(),
        detail: detail.into(),
    }
}

/// A Bot API error in the terms the retry logic needs.
fn from_response(response: &Refusal) -> ChannelError {
    match response.code {
        429 => ChannelError::RateLimited {
            channel: NAME.to_owned(),
            retry_after: response.retry_after,
        },
        // 404 is what the Bot API answers for a token it does not know.
        401 | 404 => unauthorized(format!(
            "{} ({}): check channels.telegram.bot_token",
            response.description, response.code
        )),
        500.. => unavailable(format!("{} ({})", response.description, response.code)),
        _ => rejected(response.description.clone()),
    }
}

fn api_error(error: api::Error) -> ChannelError {
    match error {
        api::Error::Api(response) => from_response(&response),
        // Without the URL (and with it the token); the causes say what
        // failed (refused, timed out, DNS).
        api::Error::Http(e) => unavailable(with_causes(&e)),
        // A proxy's HTML error page, or an answer cut short.
        api::Error::Decode { source, input } => unavailable(format!(
            "unreadable answer ({source}): {}",
            input.chars().take(200).collect::<String>()
        )),
    }
}

/// An error and its causes, one after the other (reqwest's own message
/// is only "error sending request").
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let more = inner.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = inner.source();
    }
    text
}

/// Whether `given` is `secret`, in time independent of where they differ:
/// both are HMACed under the secret and the tags compared in constant
/// time.
fn secret_matches(secret: &str, given: &[u8]) -> bool {
    let expected = hmac_sha256_hex(secret.as_bytes(), secret.as_bytes());
    verify_hmac_sha256(secret.as_bytes(), given, &expected)
}

fn chat_id(conversation: &Conversation) -> Result<i64, ChannelError> {
    conversation
        .chat
        .parse()
        .map_err(|_| rejected(format!("'{}' is not a Telegram chat id", conversation.chat)))
}

fn thread_id(conversation: &Conversation) -> Result<Option<i32>, ChannelError> {
    conversation
        .thread
        .as_deref()
        .map(|thread| {
            thread
                .parse()
                .map_err(|_| rejected(format!("'{thread}' is not a Telegram forum topic id")))
        })
        .transpose()
}

/// One row of callback buttons.
fn keyboard(buttons: &[Button]) -> InlineKeyboard<'_> {
    let row: Vec<InlineButton<'_>> = buttons
        .iter()
        .map(|button| InlineButton {
            text: &button.label,
            callback_data: &button.data,
            style: match button.style {
                ButtonStyle::Primary => "primary",
                ButtonStyle::Danger => "danger",
            },
        })
        .collect();
    InlineKeyboard {
        inline_keyboard: if row.is_empty() {
            Vec::new()
        } else {
            vec![row]
        },
    }
}

/// What became of one update.
enum Step {
    /// Handled or deliberately skipped: confirm it.
    Done,
    /// Not taken now: ask for it again.
    Again(String),
    /// `stop` was cancelled while it was being delivered.
    Stopped,
}

impl TelegramAdapter {
    /// An adapter for this config. Checks what can be checked offline:
    /// the token's shape, the API URL, and in webhook mode the URL and
    /// secret Telegram needs.
    pub fn new(config: &TelegramConfig) -> Result<Self, ChannelError> {
        let token = config.bot_token.trim();
        let token_chars = token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '_' | '-'));
        let looks_right = token.split_once(':').is_some_and(|(id, secret)| {
            !id.is_empty() && id.chars().all(|c| c.is_ascii_digit()) && !secret.is_empty()
        });
        if !token_chars || !looks_right {
            return Err(unauthorized(
                "channels.telegram.bot_token does not look like a bot token (@BotFather gives '<digits>:<letters>')",
            ));
        }
        let api_url = config.api_url.trim().trim_end_matches('/');
        if !(api_url.starts_with("https://") || api_url.starts_with("http://")) {
            return Err(rejected(format!(
                "channels.telegram.api_url '{api_url}' is not an http(s) URL"
            )));
        }
        if config.mode == TelegramMode::Webhook {
            let url_ok = config
                .webhook_url
                .as_deref()
                .is_some_and(|url| url.starts_with("https://"));
            if !url_ok {
                return Err(rejected(
                    "channels.telegram.webhook_url must be set to a public https:// URL in webhook mode",
                ));
            }
            let secret_ok = config.webhook_secret.as_deref().is_some_and(|secret| {
                (1..=256).contains(&secret.len())
                    && secret
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            });
            if !secret_ok {
                return Err(rejected(
                    "channels.telegram.webhook_secret must be set in webhook mode: 1-256 characters of A-Z a-z 0-9 _ -",
                ));
            }
        }
        let client = |timeout: Duration| {
            reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .timeout(timeout)
                .build()
                .map_err(|e| unavailable(format!("cannot set up the HTTP client: {e}")))
        };
        let bot_url = format!("{api_url}/bot{token}");
        let bot = Bot::new(client(CALL_TIMEOUT)?, bot_url.clone());
        let slow = client(SLOW_TIMEOUT)?;
        let poller = Bot::new(slow.clone(), bot_url.clone());
        let uploader = Bot::new(client(UPLOAD_TIMEOUT)?, bot_url);
        Ok(TelegramAdapter {
            mode: config.mode,
            webhook_url: config.webhook_url.clone(),
            webhook_secret: config.webhook_secret.clone(),
            file_base: format!("{api_url}/file/bot{token}"),
            bot,
            poller,
            uploader,
            http: slow,
            me: RwLock::new(None),
            offset: AtomicI64::new(0),
            confirmed: AtomicI64::new(0),
        })
    }

    fn me(&self) -> Option<Arc<Me>> {
        self.me
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// `getMe`: the bot's id and username.
    async fn identify(&self) -> Result<Arc<Me>, ChannelError> {
        let user: api::User = self
            .bot
            .call("getMe", &api::NoParams {})
            .await
            .map_err(api_error)?;
        let username = user
            .username
            .ok_or_else(|| rejected("getMe returned a bot without a username"))?;
        let me = Arc::new(Me {
            id: user.id,
            username,
        });
        *self.me.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&me));
        Ok(me)
    }

    /// Long polls until `stop`, delivering updates one by one.
    async fn poll(
        &self,
        sink: &Inbound,
        stop: &CancellationToken,
        me: &Me,
    ) -> Result<(), ChannelError> {
        let mut failures = 0;
        // Refusals of the update asked for again, in a row.
        let mut refusals: u32 = 0;
        loop {
            let offset = self.offset.load(Ordering::SeqCst);
            let params = api::GetUpdates {
                offset: (offset > 0).then_some(offset),
                limit: None,
                timeout: POLL_TIMEOUT_SECS,
                allowed_updates: ALLOWED_UPDATES,
            };
            // Each update stays JSON until it is read on its own: one
            // Flynn cannot read is skipped, not the whole batch.
            let call = self.poller.call::<Vec<Value>>("getUpdates", &params);
            let Some(answer) = stop.run_until_cancelled(call).await else {
                return Ok(());
            };
            let batch = match answer.map_err(api_error) {
                Ok(batch) => {
                    failures = 0;
                    self.confirmed.fetch_max(offset, Ordering::SeqCst);
                    batch
                }
                Err(e) if e.is_transient() && failures + 1 < POLL_ATTEMPTS => {
                    let wait = match &e {
                        ChannelError::RateLimited {
                            retry_after: Some(hint),
                            ..
                        } => (*hint).min(MAX_POLL_WAIT),
                        _ => POLL_BACKOFF * 2u32.pow(failures),
                    };
                    failures += 1;
                    tracing::warn!(channel = NAME, error = %e, wait_ms = wait.as_millis() as u64, "getUpdates failed; polling again");
                    if stop
                        .run_until_cancelled(tokio::time::sleep(wait))
                        .await
                        .is_none()
                    {
                        return Ok(());
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            for raw in batch {
                let Some(update_id) = raw.get("update_id").and_then(Value::as_i64) else {
                    tracing::warn!(channel = NAME, "skipping an update without update_id");
                    continue;
                };
                if update_id < offset {
                    continue;
                }
                // The next offset is one past this id; an id with no
                // successor (only a server that is not Telegram sends one)
                // could never be confirmed, so polling stops with the
                // reason instead of asking for it again forever.
                let Some(next) = update_id.checked_add(1) else {
                    return Err(ChannelError::Rejected {
                        channel: NAME.to_owned(),
                        detail: format!(
                            "getUpdates returned update_id {update_id}, which has no successor to confirm it with; check channels.telegram.api_url"
                        ),
                    });
                };
                match self.process(raw, update_id, sink, stop, me).await {
                    Step::Done => {
                        refusals = 0;
                        self.offset.fetch_max(next, Ordering::SeqCst);
                    }
                    Step::Again(reason) => {
                        let pause = RETRY_PAUSE
                            .saturating_mul(2u32.saturating_pow(refusals))
                            .min(MAX_RETRY_PAUSE);
                        refusals = refusals.saturating_add(1);
                        tracing::debug!(channel = NAME, update_id, reason = %reason, pause_ms = pause.as_millis() as u64, "update not taken; asking for it again");
                        if stop
                            .run_until_cancelled(tokio::time::sleep(pause))
                            .await
                            .is_none()
                        {
                            return Ok(());
                        }
                        break;
                    }
                    Step::Stopped => return Ok(()),
                }
            }
        }
    }

    /// Reads and delivers one polled update.
    async fn process(
        &self,
        raw: Value,
        update_id: i64,
        sink: &Inbound,
        stop: &CancellationToken,
        me: &Me,
    ) -> Step {
        let event = match self.event(raw, update_id, me).await {
            Ok(Some(event)) => event,
            Ok(None) => return Step::Done,
            Err(e) => return Step::Again(e.to_string()),
        };
        match stop.run_until_cancelled(sink.deliver(event)).await {
            None => Step::Stopped,
            Some(disposition) if disposition.acknowledge() => Step::Done,
            Some(disposition) => Step::Again(format!("{disposition:?}")),
        }
    }

    /// The event an update carries (files named, not downloaded); `None`
    /// for updates Flynn does not answer. An error means: try this update
    /// again later.
    async fn event(
        &self,
        raw: Value,
        update_id: i64,
        me: &Me,
    ) -> Result<Option<InboundEvent>, ChannelError> {
        let update: Update = match serde_json::from_value(raw) {
            Ok(update) => update,
            Err(e) => {
                tracing::warn!(channel = NAME, update_id, error = %e, "skipping an update Flynn cannot read");
                return Ok(None);
            }
        };
        let update_id = update.update_id;
        if let Some(message) = update.message {
            let Some(inbound) = parse::message(&message, me) else {
                tracing::debug!(
                    channel = NAME,
                    update_id,
                    "ignoring a message from a bot, a service message or unsupported media"
                );
                return Ok(None);
            };
            return Ok(Some(InboundEvent::Message(inbound)));
        }
        // Neither: a kind Flynn did not ask for.
        let Some(query) = update.callback_query else {
            return Ok(None);
        };
        let action = parse::action(&query);
        if action.is_none() {
            tracing::debug!(
                channel = NAME,
                update_id,
                "ignoring a button press without data or message"
            );
        }
        Ok(action.map(InboundEvent::Action))
    }

    /// Fetches one file named by its `file_id`: `getFile` for its path,
    /// then the download, at most `limit` bytes (and the Bot API's 20 MB).
    /// Errors never carry the file URL: it holds the token.
    async fn fetch(&self, attachment: &Attachment, limit: u64) -> Result<Bytes, ChannelError> {
        let limit = limit.min(MAX_DOWNLOAD);
        if let Some(size) = attachment.size.filter(|size| *size > limit) {
            return Err(ChannelError::too_large(NAME, size, limit));
        }
        let params = api::GetFile {
            file_id: &attachment.source,
        };
        let info = self.bot.call::<api::File>("getFile", &params).await;
        let info = match info.map_err(api_error) {
            Ok(info) => info,
            Err(e) if e.is_transient() => return Err(e),
            Err(e) => return Err(rejected(format!("Telegram would not hand it out ({e})"))),
        };
        if let Some(size) = info.file_size.filter(|size| *size > limit) {
            return Err(ChannelError::too_large(NAME, size, limit));
        }
        let Some(path) = info.file_path else {
            return Err(rejected("Telegram gave no file path for it"));
        };
        let url = format!("{}/{}", self.file_base, path.trim_start_matches('/'));
        let failed = |e: reqwest::Error| {
            // Without the URL: it holds the token.
            unavailable(format!(
                "file download failed: {}",
                with_causes(&e.without_url())
            ))
        };
        let mut response = self.http.get(&url).send().await.map_err(failed)?;
        let status = response.status();
        if status.is_server_error() || status.as_u16() == 429 {
            return Err(unavailable(format!("file download answered {status}")));
        }
        if !status.is_success() {
            return Err(rejected(format!("the download answered {status}")));
        }
        if let Some(size) = response.content_length().filter(|l| *l > limit) {
            return Err(ChannelError::too_large(NAME, size, limit));
        }
        let mut data = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            let size = (data.len() + chunk.len()) as u64;
            if size > limit {
                return Err(ChannelError::too_large(NAME, size, limit));
            }
            data.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(data))
    }
}

#[async_trait]
impl ChannelAdapter for TelegramAdapter {
    fn name(&self) -> &str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        let (max_len, measure) = crate::limits::TELEGRAM;
        Capabilities {
            max_len,
            measure,
            edit: true,
            buttons: true,
            typing: true,
            edit_interval: Duration::from_secs(1),
        }
    }

    fn format(&self, markdown: &str) -> String {
        crate::format::telegram_html(markdown)
    }

    async fn connect(&self, sink: Inbound, stop: CancellationToken) -> Result<(), ChannelError> {
        let Some(me) = stop.run_until_cancelled(self.identify()).await else {
            return Ok(());
        };
        let me = me?;
        match self.mode {
            TelegramMode::Webhook => {
                let params = api::SetWebhook {
                    url: self.webhook_url.as_deref().unwrap_or_default(),
                    secret_token: self.webhook_secret.as_deref(),
                    allowed_updates: ALLOWED_UPDATES,
                };
                let set = self.bot.call::<IgnoredAny>("setWebhook", &params);
                let Some(set) = stop.run_until_cancelled(set).await else {
                    return Ok(());
                };
                set.map_err(api_error)?;
                sink.connected(format!("@{}", me.username));
                stop.cancelled().await;
                Ok(())
            }
            TelegramMode::Polling => {
                // getUpdates answers 409 while a webhook is set.
                let deleted = self
                    .bot
                    .call::<IgnoredAny>("deleteWebhook", &api::NoParams {});
                let Some(deleted) = stop.run_until_cancelled(deleted).await else {
                    return Ok(());
                };
                deleted.map_err(api_error)?;
                sink.connected(format!("@{}", me.username));
                self.poll(&sink, &stop, &me).await
            }
        }
    }

    /// Confirms the updates acknowledged since the last poll, so that a
    /// restart does not receive them again.
    async fn disconnect(&self) {
        if self.mode != TelegramMode::Polling {
            return;
        }
        let offset = self.offset.load(Ordering::SeqCst);
        if offset <= self.confirmed.load(Ordering::SeqCst) {
            return;
        }
        let params = api::GetUpdates {
            offset: Some(offset),
            limit: Some(1),
            timeout: 0,
            allowed_updates: ALLOWED_UPDATES,
        };
        let call = self.bot.call::<IgnoredAny>("getUpdates", &params);
        match tokio::time::timeout(Duration::from_secs(5), call).await {
            Ok(Ok(_)) => {
                self.confirmed.fetch_max(offset, Ordering::SeqCst);
            }
            Ok(Err(e)) => {
                tracing::debug!(channel = NAME, error = %api_error(e), "could not confirm the last updates; they will come again");
            }
            Err(_) => {
                tracing::debug!(
                    channel = NAME,
                    "confirming the last updates timed out; they will come again"
                );
            }
        }
    }

    async fn send(
        &self,
        to: &Target,
        text: &str,
        buttons: &[Button],
    ) -> Result<MessageId, ChannelError> {
        let params = api::SendMessage {
            chat_id: chat_id(&to.conversation)?,
            message_thread_id: thread_id(&to.conversation)?,
            text,
            parse_mode: api::HTML,
            link_preview_options: api::NO_PREVIEW,
            reply_markup: (!buttons.is_empty()).then(|| keyboard(buttons)),
        };
        let sent: api::Sent = self
            .bot
            .call("sendMessage", &params)
            .await
            .map_err(api_error)?;
        Ok(MessageId(sent.message_id.to_string()))
    }

    fn upload_limit(&self, kind: FileKind) -> u64 {
        // A photo over 10 MB goes as a document, which may have 50.
        let _ = kind;
        MAX_UPLOAD
    }

    async fn send_file(&self, to: &Target, file: &OutgoingFile) -> Result<MessageId, ChannelError> {
        let size = file.data.len() as u64;
        if size > MAX_UPLOAD {
            return Err(ChannelError::too_large(NAME, size, MAX_UPLOAD));
        }
        let chat = chat_id(&to.conversation)?;
        let thread = thread_id(&to.conversation)?;
        let photo = file.kind == FileKind::Image
            && size <= MAX_PHOTO
            && matches!(
                file.media_type.as_str(),
                "image/jpeg" | "image/png" | "image/webp"
            );
        // Telegram plays Ogg/Opus, MP3 and M4A as voice notes; anything
        // else goes as an audio file.
        let voice = file.kind == FileKind::Voice
            && matches!(
                file.media_type.as_str(),
                "audio/ogg" | "audio/opus" | "audio/mpeg" | "audio/mp4" | "audio/x-m4a"
            );
        let (method, field) = if photo {
            ("sendPhoto", "photo")
        } else if voice {
            ("sendVoice", "voice")
        } else if matches!(file.kind, FileKind::Audio | FileKind::Voice) {
            ("sendAudio", "audio")
        } else {
            ("sendDocument", "document")
        };
        let form = |field: &'static str| -> Result<reqwest::multipart::Form, ChannelError> {
            let part = reqwest::multipart::Part::stream(file.data.clone())
                .file_name(file.name.clone())
                .mime_str(&file.media_type)
                .map_err(|_| rejected(format!("'{}' is not a MIME type", file.media_type)))?;
            let mut form = reqwest::multipart::Form::new()
                .text("chat_id", chat.to_string())
                .part(field, part);
            if let Some(thread) = thread {
                form = form.text("message_thread_id", thread.to_string());
            }
            if let Some(caption) = file.caption.as_deref().filter(|c| !c.trim().is_empty()) {
                form = form.text("caption", caption.to_owned());
            }
            Ok(form)
        };
        let upload = |method: &'static str, field: &'static str| async move {
            let sent: api::Sent = self
                .uploader
                .upload(method, form(field)?)
                .await
                .map_err(api_error)?;
            Ok::<_, ChannelError>(MessageId(sent.message_id.to_string()))
        };
        match retrying(|| upload(method, field)).await {
            // A picture Telegram will not show as a photo (its sides, its
            // encoding) still arrives, as a file.
            Err(ChannelError::Rejected { detail, .. }) if photo => {
                tracing::debug!(%detail, "a photo was refused; sending it as a document");
                retrying(|| upload("sendDocument", "document")).await
            }
            other => other,
        }
    }

    async fn edit(
        &self,
        to: &Target,
        message: &MessageId,
        text: &str,
        buttons: &[Button],
    ) -> Result<(), ChannelError> {
        let message_id: i32 = message
            .0
            .parse()
            .map_err(|_| rejected(format!("'{}' is not a Telegram message id", message.0)))?;
        let params = api::EditMessageText {
            chat_id: chat_id(&to.conversation)?,
            message_id,
            text,
            parse_mode: api::HTML,
            link_preview_options: api::NO_PREVIEW,
            // An empty keyboard removes the buttons.
            reply_markup: keyboard(buttons),
        };
        match self
            .bot
            .call::<IgnoredAny>("editMessageText", &params)
            .await
        {
            Ok(_) => Ok(()),
            // The message already shows this: the edit's goal is met.
            Err(api::Error::Api(response))
                if response.code == 400
                    && response.description.contains("message is not modified") =>
            {
                Ok(())
            }
            Err(e) => Err(api_error(e)),
        }
    }

    async fn typing(&self, to: &Target) -> Result<(), ChannelError> {
        let params = api::SendChatAction {
            chat_id: chat_id(&to.conversation)?,
            message_thread_id: thread_id(&to.conversation)?,
            action: "typing",
        };
        self.bot
            .call::<IgnoredAny>("sendChatAction", &params)
            .await
            .map_err(api_error)?;
        Ok(())
    }

    async fn answer_action(&self, action: &Action, note: &str) -> Result<(), ChannelError> {
        let note: String = note.chars().take(MAX_NOTE_CHARS).collect();
        let params = api::AnswerCallbackQuery {
            callback_query_id: &action.id,
            text: (!note.is_empty()).then_some(note.as_str()),
        };
        self.bot
            .call::<IgnoredAny>("answerCallbackQuery", &params)
            .await
            .map_err(api_error)?;
        Ok(())
    }

    async fn download(&self, attachment: &Attachment, limit: u64) -> Result<Bytes, ChannelError> {
        self.fetch(attachment, limit).await
    }

    async fn webhook(&self, request: WebhookRequest, sink: &Inbound) -> WebhookResponse {
        if self.mode != TelegramMode::Webhook || request.path != "/webhook" {
            return WebhookResponse::not_found();
        }
        if request.method != http::Method::POST {
            return WebhookResponse::text(405, "Telegram posts updates with POST");
        }
        let Some(secret) = &self.webhook_secret else {
            return WebhookResponse::not_found();
        };
        let given = request
            .headers
            .get(SECRET_HEADER)
            .map(http::HeaderValue::as_bytes)
            .unwrap_or_default();
        if !secret_matches(secret, given) {
            tracing::warn!(
                channel = NAME,
                "refused a webhook request without the right secret token"
            );
            return WebhookResponse::text(401, "wrong or missing X-Telegram-Bot-Api-Secret-Token");
        }
        let raw: Value = match serde_json::from_slice(&request.body) {
            Ok(raw) => raw,
            Err(e) => return WebhookResponse::text(400, format!("the body is not JSON: {e}")),
        };
        let Some(update_id) = raw.get("update_id").and_then(Value::as_i64) else {
            return WebhookResponse::text(400, "the body is not a Telegram update");
        };
        let Some(me) = self.me() else {
            // Telegram posts it again later, once connect has run getMe.
            return WebhookResponse::text(503, "not connected to Telegram yet");
        };
        let event = match self.event(raw, update_id, &me).await {
            Ok(Some(event)) => event,
            Ok(None) => return WebhookResponse::text(200, "ignored"),
            Err(e) => return WebhookResponse::text(503, e.to_string()),
        };
        let disposition = sink.deliver(event).await;
        if disposition.acknowledge() {
            WebhookResponse::text(200, "ok")
        } else {
            WebhookResponse::text(503, format!("not stored: {disposition:?}"))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn error(code: u64, description: &str, retry_after: Option<u64>) -> Refusal {
        Refusal {
            code,
            description: description.to_owned(),
            retry_after: retry_after.map(Duration::from_secs),
        }
    }

    #[test]
    fn bot_api_errors_say_what_to_do_next() {
        assert_eq!(
            from_response(&error(429, "Too Many Requests: retry after 7", Some(7))),
            ChannelError::RateLimited {
                channel: NAME.to_owned(),
                retry_after: Some(Duration::from_secs(7))
            }
        );
        assert!(matches!(
            from_response(&error(401, "Unauthorized", None)),
            ChannelError::Unauthorized { .. }
        ));
        assert!(matches!(
            from_response(&error(404, "Not Found", None)),
            ChannelError::Unauthorized { .. }
        ));
        assert!(matches!(
            from_response(&error(502, "Bad Gateway", None)),
            ChannelError::Unavailable { .. }
        ));
        assert_eq!(
            from_response(&error(403, "Forbidden: bot was blocked by the user", None)),
            rejected("Forbidden: bot was blocked by the user")
        );
    }

    #[test]
    fn the_secret_must_match_exactly() {
        assert!(secret_matches("s3cret-Token_1", b"s3cret-Token_1"));
        assert!(!secret_matches("s3cret-Token_1", b"s3cret-Token_2"));
        assert!(!secret_matches("s3cret-Token_1", b"s3cret-Token_1 "));
        assert!(!secret_matches("s3cret-Token_1", b""));
    }

    fn config(yaml: serde_json::Value) -> TelegramConfig {
        serde_json::from_value(yaml).unwrap()
    }

    #[test]
    fn config_mistakes_are_caught_before_connecting() {
        let bad_token = config(serde_json::json!({"bot_token": "not a token"}));
        assert!(matches!(
            TelegramAdapter::new(&bad_token),
            Err(ChannelError::Unauthorized { .. })
        ));
        let no_secret = config(serde_json::json!({
            "bot_token": "1:abc", "mode": "webhook", "webhook_url": "https://x.example/channels/telegram/webhook"
        }));
        assert!(matches!(
            TelegramAdapter::new(&no_secret),
            Err(ChannelError::Rejected { .. })
        ));
        let plain_http = config(serde_json::json!({
            "bot_token": "1:abc", "mode": "webhook", "webhook_url": "http://x.example/hook", "webhook_secret": "abc"
        }));
        assert!(TelegramAdapter::new(&plain_http).is_err());
        let fine = config(serde_json::json!({"bot_token": "123:ABC-def_9"}));
        let adapter = TelegramAdapter::new(&fine).unwrap();
        assert!(!format!("{adapter:?}").contains("ABC-def_9"));
    }

    #[test]
    fn buttons_become_one_row_and_none_removes_the_keyboard() {
        let buttons = [
            Button {
                label: "Approve".into(),
                data: "y:1".into(),
                style: ButtonStyle::Primary,
            },
            Button {
                label: "Deny".into(),
                data: "n:1".into(),
                style: ButtonStyle::Danger,
            },
        ];
        let json = serde_json::to_value(keyboard(&buttons)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"inline_keyboard": [[
                {"text": "Approve", "callback_data": "y:1", "style": "primary"},
                {"text": "Deny", "callback_data": "n:1", "style": "danger"},
            ]]})
        );
        assert_eq!(
            serde_json::to_value(keyboard(&[])).unwrap(),
            serde_json::json!({"inline_keyboard": []})
        );
    }
}
