//! WhatsApp through Meta's Cloud API: plain Graph API calls over reqwest
//! for sending, and webhooks for receiving (no SDK: the API is a handful
//! of JSON calls, and the unofficial WhatsApp-Web crates risk the number).
//!
//! - `connect` checks the token and the number, then waits: everything
//!   arrives at the gateway's `/channels/whatsapp/webhook`, which Meta
//!   verifies with a handshake and signs with the app secret.
//! - Every chat is one person and the business number, so messages are
//!   direct and mention the bot.
//! - WhatsApp lets a business answer freely only within 24 hours of the
//!   person's last message; the adapter remembers when each person last
//!   wrote and refuses earlier than the API would.
//! - Messages cannot be edited: answers are sent whole. Buttons are
//!   interactive reply buttons (at most 3, 20-character titles, under a
//!   body of at most 1024 characters).

#[doc(hidden)]
pub mod fuzzing;
mod graph;
mod webhook;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use flynn_protocol::config::WhatsAppConfig;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::adapter::{
    Action, Attachment, AttachmentKind, Button, Capabilities, ChannelAdapter, ChannelError,
    Conversation, FileKind, InboundEvent, InboundMessage, MessageId, OutgoingFile, Sender, Target,
    WebhookRequest, WebhookResponse,
};
use crate::inbound::Inbound;
use crate::limits;
use graph::{CHANNEL, Graph, OUTSIDE_WINDOW};
use webhook::{Handshake, Incoming, IncomingKind};

/// How long after a person's last message a business may answer freely.
pub const SERVICE_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest body of an interactive message.
pub const INTERACTIVE_BODY_MAX: usize = 1024;
/// The most reply buttons one message carries.
pub const MAX_BUTTONS: usize = 3;
/// The longest reply button title.
pub const BUTTON_TITLE_MAX: usize = 20;
/// The body of the interactive message that carries the buttons when the
/// text itself was too long to carry them.
pub const BUTTONS_PROMPT: &str = "Choose an answer:";

/// The largest image WhatsApp shows inline (JPEG or PNG); a larger one
/// goes as a document.
pub const IMAGE_LIMIT: u64 = 5 * 1024 * 1024;
/// The largest audio file or voice note.
pub const AUDIO_LIMIT: u64 = 16 * 1024 * 1024;
/// The largest document.
pub const DOCUMENT_LIMIT: u64 = 100 * 1024 * 1024;

/// The longest caption of an image or a document.
const CAPTION_MAX: usize = 1024;

/// The image types WhatsApp shows inline.
const IMAGE_TYPES: &[&str] = &["image/jpeg", "image/png"];
/// The audio types WhatsApp plays (Ogg with the Opus codec only).
const AUDIO_TYPES: &[&str] = &[
    "audio/aac",
    "audio/amr",
    "audio/mpeg",
    "audio/mp4",
    "audio/ogg",
];
/// What else the media endpoint takes, sent as documents: Meta's
/// document types, WebP (a sticker type) and its video types.
const DOCUMENT_TYPES: &[&str] = &[
    "text/plain",
    "application/pdf",
    "application/msword",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.ms-excel",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.ms-powerpoint",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "image/webp",
    "video/mp4",
    "video/3gpp",
];

/// How a file goes out on WhatsApp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MediaMessage {
    /// An `image` message with a caption.
    Image,
    /// A `document` message with a file name and a caption.
    Document,
    /// An `audio` message; `voice` marks a voice note (Ogg Opus). Audio
    /// takes no caption: it follows as a text message.
    Audio { voice: bool },
}

impl MediaMessage {
    fn kind(self) -> &'static str {
        match self {
            MediaMessage::Image => "image",
            MediaMessage::Document => "document",
            MediaMessage::Audio { .. } => "audio",
        }
    }
}

/// A MIME type without its parameters, in lower case
/// (`audio/ogg; codecs=opus` → `audio/ogg`).
fn essence(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// How `file` (of type `essence`) is sent: an inline image when WhatsApp
/// shows it (JPEG or PNG within 5 MB), audio for the audio types, else a
/// document of a type Meta takes; an error naming what it takes when
/// nothing fits.
fn media_message(file: &OutgoingFile, essence: &str) -> Result<MediaMessage, ChannelError> {
    let size = file.data.len() as u64;
    let is = |types: &[&str]| types.contains(&essence);
    match file.kind {
        FileKind::Image if is(IMAGE_TYPES) && size <= IMAGE_LIMIT => Ok(MediaMessage::Image),
        // Audio plays in the chat whatever kind it was called.
        kind if is(AUDIO_TYPES) => {
            if size > AUDIO_LIMIT {
                return Err(ChannelError::too_large(CHANNEL, size, AUDIO_LIMIT));
            }
            Ok(MediaMessage::Audio {
                voice: kind == FileKind::Voice && essence == "audio/ogg",
            })
        }
        _ if is(IMAGE_TYPES) || is(DOCUMENT_TYPES) => {
            if size > DOCUMENT_LIMIT {
                return Err(ChannelError::too_large(CHANNEL, size, DOCUMENT_LIMIT));
            }
            Ok(MediaMessage::Document)
        }
        _ => Err(rejected(format!(
            "WhatsApp does not take {essence} files ('{}'): it takes images as JPEG or PNG (WebP as a document), audio as AAC, AMR, MP3, MP4 audio or Ogg Opus, and documents as PDF, plain text or Microsoft Office files",
            file.name
        ))),
    }
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

/// The time the adapter lives by (injectable for tests).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// A WhatsApp Business number on the Cloud API.
pub struct WhatsAppAdapter {
    graph: Graph,
    phone_number_id: String,
    app_secret: String,
    verify_token: String,
    clock: Clock,
    /// When each person (by number) last wrote.
    last_inbound: Mutex<HashMap<String, SystemTime>>,
    /// The text part of a split confirmation already sent (recipient,
    /// text): a retry of the same send skips it instead of repeating it.
    split_sent: Mutex<Option<(String, String)>>,
}

impl std::fmt::Debug for WhatsAppAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppAdapter")
            .field("phone_number_id", &self.phone_number_id)
            .finish_non_exhaustive()
    }
}

impl WhatsAppAdapter {
    /// An adapter for the number in `config`. Fails on settings that can
    /// never work (an empty token, a phone number where its id belongs,
    /// an unparsable `api_url`).
    pub fn new(config: &WhatsAppConfig) -> Result<Self, ChannelError> {
        let graph = Graph::new(
            &config.api_url,
            &config.api_version,
            &config.access_token,
            &config.phone_number_id,
        )?;
        let missing = |key: &str| ChannelError::Rejected {
            channel: CHANNEL.to_owned(),
            detail: format!("channels.whatsapp.{key} is empty"),
        };
        if config.app_secret.trim().is_empty() {
            return Err(missing("app_secret"));
        }
        if config.verify_token.trim().is_empty() {
            return Err(missing("verify_token"));
        }
        Ok(WhatsAppAdapter {
            graph,
            phone_number_id: config.phone_number_id.trim().to_owned(),
            app_secret: config.app_secret.trim().to_owned(),
            verify_token: config.verify_token.trim().to_owned(),
            clock: Arc::new(SystemTime::now),
            last_inbound: Mutex::new(HashMap::new()),
            split_sent: Mutex::new(None),
        })
    }

    /// Replaces the clock (tests move it past the 24-hour window).
    #[must_use]
    pub fn with_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    fn now(&self) -> SystemTime {
        (self.clock)()
    }

    fn windows(&self) -> MutexGuard<'_, HashMap<String, SystemTime>> {
        self.last_inbound
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that `from` wrote at `sent` (Unix seconds, when Meta gave
    /// it; never later than now, so a clock ahead of ours cannot stretch
    /// the window).
    fn opened_window(&self, from: &str, sent: Option<u64>) {
        let now = self.now();
        let at = sent_at(now, sent);
        let mut windows = self.windows();
        let entry = windows.entry(from.to_owned()).or_insert(at);
        if *entry < at {
            *entry = at;
        }
        if windows.len() > 4096 {
            windows.retain(|_, last| within_window(now, *last));
        }
    }

    fn split_sent(&self) -> MutexGuard<'_, Option<(String, String)>> {
        self.split_sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    async fn post_text(&self, to: &str, text: &str) -> Result<MessageId, ChannelError> {
        let body = json!({
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": to,
            "type": "text",
            "text": {"body": text, "preview_url": false},
        });
        message_id(&self.graph.post_message(&body).await?)
    }

    async fn post_buttons(
        &self,
        to: &str,
        text: &str,
        buttons: &[Button],
    ) -> Result<MessageId, ChannelError> {
        let buttons: Vec<Value> = buttons
            .iter()
            .map(|b| json!({"type": "reply", "reply": {"id": b.data, "title": title(&b.label)}}))
            .collect();
        let body = json!({
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": to,
            "type": "interactive",
            "interactive": {
                "type": "button",
                "body": {"text": text},
                "action": {"buttons": buttons},
            },
        });
        message_id(&self.graph.post_message(&body).await?)
    }

    async fn read_receipt(&self, wamid: &str) -> Result<(), ChannelError> {
        let body = json!({
            "messaging_product": "whatsapp",
            "status": "read",
            "message_id": wamid,
        });
        self.graph.post_message(&body).await.map(drop)
    }

    /// One webhook message as an event (its media named, not fetched);
    /// `None` for kinds Flynn does not take.
    fn event(incoming: Incoming) -> Option<InboundEvent> {
        let conversation = Conversation::direct(incoming.from.clone());
        let sender = Sender {
            id: incoming.from.clone(),
            name: incoming.name.clone(),
        };
        let message = |text: String, attachments: Vec<Attachment>| {
            InboundEvent::Message(InboundMessage {
                id: incoming.id.clone(),
                conversation: conversation.clone(),
                sender: sender.clone(),
                mentioned: true,
                text,
                attachments,
                reply: None,
            })
        };
        let event = match &incoming.kind {
            IncomingKind::Text(text) => message(text.clone(), Vec::new()),
            IncomingKind::Media {
                image,
                media_id,
                mime_type,
                filename,
                caption,
            } => {
                // Named, not downloaded: the daemon asks for it
                // (`download`) once the sender passed its access checks.
                let attachment = Attachment {
                    kind: if *image {
                        AttachmentKind::Image
                    } else {
                        AttachmentKind::File
                    },
                    name: filename.clone(),
                    media_type: mime_type
                        .clone()
                        .unwrap_or_else(|| "application/octet-stream".to_owned()),
                    // The webhook does not say; the download checks.
                    size: None,
                    source: media_id.clone(),
                };
                message(caption.clone(), vec![attachment])
            }
            IncomingKind::Press { data, message } => InboundEvent::Action(Action {
                id: incoming.id.clone(),
                conversation,
                sender,
                data: data.clone(),
                message: message.clone().map(MessageId),
                reply: None,
            }),
            IncomingKind::Unsupported(kind) => {
                tracing::info!(kind = %kind, message = %incoming.id, "whatsapp: message type not supported; ignored");
                return None;
            }
        };
        Some(event)
    }

    async fn notification(&self, request: &WebhookRequest, sink: &Inbound) -> WebhookResponse {
        let signature = request
            .headers
            .get("x-hub-signature-256")
            .and_then(|v| v.to_str().ok());
        if !webhook::signed(&self.app_secret, &request.body, signature) {
            tracing::warn!(
                present = signature.is_some(),
                "whatsapp webhook: X-Hub-Signature-256 missing or wrong; refused (is app_secret the app's secret?)"
            );
            return WebhookResponse::text(401, "invalid signature");
        }
        let incoming = match webhook::parse(&request.body, &self.phone_number_id) {
            Ok(incoming) => incoming,
            Err(e) => {
                tracing::warn!(error = %e, "whatsapp webhook: refused");
                return WebhookResponse::text(400, e);
            }
        };
        let mut retry = None;
        for item in incoming {
            self.opened_window(&item.from, item.timestamp);
            let id = item.id.clone();
            let Some(event) = Self::event(item) else {
                continue;
            };
            let disposition = sink.deliver(event).await;
            if !disposition.acknowledge() {
                tracing::debug!(message = %id, ?disposition, "whatsapp: not stored; Meta will deliver it again");
                retry = Some(format!("{disposition:?}"));
            }
        }
        match retry {
            // Meta redelivers what was not answered 200.
            Some(why) => WebhookResponse::text(503, format!("not stored yet: {why}")),
            None => WebhookResponse::text(200, "ok"),
        }
    }
}

/// Whether a message at `last` still allows free answers at `now`.
/// When a message was sent: Meta's timestamp when it is a time before
/// `now` (a timestamp past what `SystemTime` holds is no time), else now.
fn sent_at(now: SystemTime, sent: Option<u64>) -> SystemTime {
    sent.and_then(|secs| UNIX_EPOCH.checked_add(Duration::from_secs(secs)))
        .filter(|at| *at <= now)
        .unwrap_or(now)
}

fn within_window(now: SystemTime, last: SystemTime) -> bool {
    now.duration_since(last)
        .map_or(true, |age| age <= SERVICE_WINDOW)
}

/// A button label cut to WhatsApp's 20 characters.
fn title(label: &str) -> String {
    let label = label.trim();
    if label.chars().count() <= BUTTON_TITLE_MAX {
        label.to_owned()
    } else {
        let mut cut: String = label.chars().take(BUTTON_TITLE_MAX - 1).collect();
        cut.push('…');
        cut
    }
}

/// `messages[0].id` of a send's answer.
fn message_id(answer: &Value) -> Result<MessageId, ChannelError> {
    answer["messages"][0]["id"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(|id| MessageId(id.to_owned()))
        .ok_or_else(|| ChannelError::Unavailable {
            channel: CHANNEL.to_owned(),
            detail: format!("the send was answered without messages[0].id: {answer}"),
        })
}

fn rejected(detail: impl Into<String>) -> ChannelError {
    ChannelError::Rejected {
        channel: CHANNEL.to_owned(),
        detail: detail.into(),
    }
}

#[async_trait]
impl ChannelAdapter for WhatsAppAdapter {
    fn name(&self) -> &str {
        CHANNEL
    }

    fn capabilities(&self) -> Capabilities {
        let (max_len, measure) = limits::WHATSAPP;
        Capabilities {
            max_len,
            measure,
            edit: false,
            buttons: true,
            typing: false,
            edit_interval: Duration::from_secs(1),
        }
    }

    fn format(&self, markdown: &str) -> String {
        crate::format::whatsapp(markdown)
    }

    async fn connect(&self, sink: Inbound, stop: CancellationToken) -> Result<(), ChannelError> {
        let number = tokio::select! {
            number = self.graph.phone_number() => number?,
            () = stop.cancelled() => return Ok(()),
        };
        let mut shown = number.display_phone_number.trim().to_owned();
        if shown.starts_with(|c: char| c.is_ascii_digit()) {
            shown.insert(0, '+');
        }
        if !number.verified_name.trim().is_empty() {
            shown = format!("{shown} ({})", number.verified_name.trim());
        }
        tracing::info!(number = %shown, "whatsapp: connected; messages arrive by webhook");
        sink.connected(shown);
        stop.cancelled().await;
        Ok(())
    }

    async fn send(
        &self,
        to: &Target,
        text: &str,
        buttons: &[Button],
    ) -> Result<MessageId, ChannelError> {
        self.can_send(to)?;
        let number = to.conversation.chat.as_str();
        if buttons.is_empty() {
            if text.trim().is_empty() {
                return Err(rejected("WhatsApp cannot send an empty message"));
            }
            return self.post_text(number, text).await;
        }
        if buttons.len() > MAX_BUTTONS {
            return Err(rejected(format!(
                "WhatsApp messages carry at most {MAX_BUTTONS} reply buttons, not {}",
                buttons.len()
            )));
        }
        if !text.trim().is_empty() && text.chars().count() <= INTERACTIVE_BODY_MAX {
            return self.post_buttons(number, text, buttons).await;
        }
        // Too long for an interactive body: the text on its own, then the
        // buttons under a short prompt.
        if !text.trim().is_empty() {
            let key = (number.to_owned(), text.to_owned());
            let already = self.split_sent().as_ref() == Some(&key);
            if !already {
                self.post_text(number, text).await?;
                *self.split_sent() = Some(key);
            }
        }
        let id = self.post_buttons(number, BUTTONS_PROMPT, buttons).await?;
        *self.split_sent() = None;
        Ok(id)
    }

    /// Images (JPEG, PNG) up to 5 MB show inline and larger ones go as
    /// documents, so an image may have up to the document limit; audio
    /// and voice notes up to 16 MB; documents up to 100 MB.
    fn upload_limit(&self, kind: FileKind) -> u64 {
        match kind {
            FileKind::Image | FileKind::Document => DOCUMENT_LIMIT,
            FileKind::Audio | FileKind::Voice => AUDIO_LIMIT,
        }
    }

    /// Uploads the file to the media endpoint, then sends a message
    /// naming its id: an `image` (JPEG or PNG within 5 MB), an `audio`
    /// (`"voice": true` for a voice note in Ogg Opus), or a `document`
    /// with its file name for everything else Meta takes (a WebP picture,
    /// a JPEG or PNG over 5 MB, a PDF). A type Meta does not take (GIF,
    /// WAV, ZIP) is refused before anything is sent. Captions go with images and documents;
    /// audio has none, so its caption follows as a text message. Within
    /// the 24-hour window only, like text. Each step is retried on a rate
    /// limit or an outage.
    async fn send_file(&self, to: &Target, file: &OutgoingFile) -> Result<MessageId, ChannelError> {
        self.can_send(to)?;
        file.check_size(CHANNEL, self.upload_limit(file.kind))?;
        let essence = essence(&file.media_type);
        let message = media_message(file, &essence)?;
        let name = file_name(&file.name);
        let media = crate::outbound::retrying(|| {
            self.graph.upload_media(&essence, &name, file.data.clone())
        })
        .await?;
        // Meta takes captions of up to 1024 characters.
        let caption: Option<String> = file
            .caption
            .as_deref()
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| c.chars().take(CAPTION_MAX).collect());
        let caption = caption.as_deref();
        let mut object = json!({"id": media});
        match message {
            MediaMessage::Image => {
                if let Some(caption) = caption {
                    object["caption"] = json!(caption);
                }
            }
            MediaMessage::Document => {
                object["filename"] = json!(name);
                if let Some(caption) = caption {
                    object["caption"] = json!(caption);
                }
            }
            MediaMessage::Audio { voice } => {
                if voice {
                    object["voice"] = json!(true);
                }
            }
        }
        let number = to.conversation.chat.as_str();
        let kind = message.kind();
        let mut body = json!({
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": number,
            "type": kind,
        });
        body[kind] = object;
        let answer = crate::outbound::retrying(|| self.graph.post_message(&body)).await?;
        let id = message_id(&answer)?;
        if let (MediaMessage::Audio { .. }, Some(caption)) = (message, caption) {
            // The file is there: a lost caption is reported, not an error
            // that would have the file sent again.
            if let Err(error) = crate::outbound::retrying(|| self.post_text(number, caption)).await
            {
                tracing::warn!(%error, "whatsapp: the audio was sent, its caption was not");
            }
        }
        Ok(id)
    }

    /// A press is answered by marking it read (WhatsApp has nothing like
    /// a callback answer; the person sees blue ticks).
    async fn answer_action(&self, action: &Action, note: &str) -> Result<(), ChannelError> {
        let _ = note;
        self.read_receipt(&action.id).await
    }

    async fn mark_read(&self, message: &InboundMessage) -> Result<(), ChannelError> {
        self.read_receipt(&message.id).await
    }

    fn can_send(&self, to: &Target) -> Result<(), ChannelError> {
        let last = self.windows().get(&to.conversation.chat).copied();
        match last {
            Some(last) if !within_window(self.now(), last) => Err(rejected(OUTSIDE_WINDOW)),
            _ => Ok(()),
        }
    }

    async fn download(
        &self,
        attachment: &Attachment,
        limit: u64,
    ) -> Result<bytes::Bytes, ChannelError> {
        self.graph.download(&attachment.source, limit).await
    }

    async fn webhook(&self, request: WebhookRequest, sink: &Inbound) -> WebhookResponse {
        if request.path.trim_end_matches('/') != "/webhook" {
            return WebhookResponse::not_found();
        }
        match request.method {
            http::Method::GET => match webhook::handshake(&request.query, &self.verify_token) {
                Handshake::Accept(challenge) => {
                    tracing::info!("whatsapp webhook: verified by Meta");
                    WebhookResponse::text(200, challenge)
                }
                Handshake::Refuse => {
                    tracing::warn!(
                        "whatsapp webhook: verification refused (hub.verify_token differs from verify_token)"
                    );
                    WebhookResponse::text(403, "verification failed")
                }
                Handshake::NoChallenge => WebhookResponse::text(400, "hub.challenge is missing"),
            },
            http::Method::POST => self.notification(&request, sink).await,
            _ => WebhookResponse::text(405, "use GET (verification) or POST (notifications)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(kind: FileKind, media_type: &str, size: usize) -> OutgoingFile {
        OutgoingFile {
            kind,
            name: "f".to_owned(),
            media_type: media_type.to_owned(),
            data: bytes::Bytes::from(vec![0u8; size]),
            caption: None,
        }
    }

    #[test]
    fn each_file_goes_as_the_message_whatsapp_shows_it_in() {
        let route = |kind, media_type: &str, size| {
            let file = file(kind, media_type, size);
            media_message(&file, &essence(&file.media_type))
        };
        let small = 1024;
        let over_image = IMAGE_LIMIT as usize + 1;
        assert_eq!(
            route(FileKind::Image, "image/png", small),
            Ok(MediaMessage::Image)
        );
        assert_eq!(
            route(FileKind::Image, "IMAGE/JPEG", small),
            Ok(MediaMessage::Image)
        );
        assert_eq!(
            route(FileKind::Image, "image/png", over_image),
            Ok(MediaMessage::Document)
        );
        assert_eq!(
            route(FileKind::Image, "image/webp", small),
            Ok(MediaMessage::Document)
        );
        assert_eq!(
            route(FileKind::Document, "image/png", small),
            Ok(MediaMessage::Document)
        );
        assert_eq!(
            route(FileKind::Voice, "audio/ogg; codecs=opus", small),
            Ok(MediaMessage::Audio { voice: true })
        );
        // A voice note in another format is plain audio.
        assert_eq!(
            route(FileKind::Voice, "audio/mpeg", small),
            Ok(MediaMessage::Audio { voice: false })
        );
        assert_eq!(
            route(FileKind::Document, "audio/mpeg", small),
            Ok(MediaMessage::Audio { voice: false })
        );
        for refused in ["image/gif", "audio/wav", "application/zip", ""] {
            assert!(
                matches!(
                    route(FileKind::Document, refused, small),
                    Err(ChannelError::Rejected { .. })
                ),
                "{refused}"
            );
        }
        assert_eq!(
            route(FileKind::Audio, "audio/mpeg", AUDIO_LIMIT as usize + 1),
            Err(ChannelError::too_large(
                CHANNEL,
                AUDIO_LIMIT + 1,
                AUDIO_LIMIT
            ))
        );
    }

    #[test]
    fn titles_fit_twenty_characters() {
        assert_eq!(title(" Approve "), "Approve");
        assert_eq!(title("Approve and remember this"), "Approve and remembe…");
        assert_eq!(title("Approve and remember this").chars().count(), 20);
    }

    #[test]
    fn a_timestamp_past_what_a_clock_holds_reads_as_now() {
        let now = UNIX_EPOCH + Duration::from_secs(2_000_000_000);
        assert_eq!(sent_at(now, Some(u64::MAX)), now);
        assert_eq!(sent_at(now, Some(i64::MAX as u64 + 1)), now);
        assert_eq!(sent_at(now, None), now);
        assert_eq!(
            sent_at(now, Some(1_999_999_000)),
            now - Duration::from_secs(1000)
        );
    }

    #[test]
    fn the_window_is_twenty_four_hours() {
        let last = UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert!(within_window(last + SERVICE_WINDOW, last));
        assert!(!within_window(
            last + SERVICE_WINDOW + Duration::from_secs(1),
            last
        ));
        // A message stamped after our now (clocks differ) is inside.
        assert!(within_window(last - Duration::from_secs(5), last));
    }
}
