//! A strict fake of the WhatsApp Cloud API (Meta's Graph API for one
//! business number), and the other side of its webhooks.
//!
//! Served, under the configured version only (`/v23.0`):
//! - `GET /{version}/{phone_number_id}?fields=…`: the number's
//!   `display_phone_number` and `verified_name`;
//! - `POST /{version}/{phone_number_id}/media`: uploads, multipart with
//!   `messaging_product=whatsapp`, `type` (one of the MIME types Meta
//!   lists, [`MEDIA_TYPES`]) and the `file` (16 MB for audio and video,
//!   100 MB otherwise), answered with a media id;
//! - `POST /{version}/{phone_number_id}/messages`: `text`, interactive
//!   reply `button`, `image` (uploaded JPEG or PNG within 5 MB, a
//!   caption), `document` (any uploaded media, a caption and a
//!   `filename`) and `audio` (uploaded audio, `voice`, no caption)
//!   messages, and read receipts (`"status": "read"`);
//! - `GET /{version}/{media_id}`: a media object's URL, type, size, hash;
//! - `GET /whatsapp_business/attachments/?mid=…`: its bytes (what
//!   `lookaside.fbsbx.com` serves), with the bearer token.
//!
//! Strict as the real API: the bearer token, `messaging_product`, the
//! documented limits (text 1–4096 characters; interactive body ≤ 1024,
//! 1–3 buttons, titles 1–20 characters and ids ≤ 256, both unique), a
//! recipient who wrote within 24 hours (else error 131047), read receipts
//! only for messages the person sent. A refused request gets the Graph
//! error shape (`{"error":{"message","type","code","error_data",
//! "fbtrace_id"}}`) and is listed in [`FakeWhatsApp::violations`]; a wrong
//! token and injected failures are answered the same way but are not
//! violations.
//!
//! The webhook side builds the documented notification payloads (text,
//! image, document, interactive `button_reply`, status updates), signs
//! them with the app secret in `X-Hub-Signature-256` (or forges or omits
//! the signature) and posts them over HTTP; [`WebhookEndpoint`] serves the
//! code under test at a local URL the way the gateway would.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::response::Response;
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::server::{self, FormPart, Server};

/// The access token the fake accepts.
pub const ACCESS_TOKEN: &str = "EAAFakeWhatsAppAccessToken";
/// The business number's Phone number ID.
pub const PHONE_NUMBER_ID: &str = "106540352242922";
/// The WhatsApp Business Account the number belongs to.
pub const BUSINESS_ACCOUNT_ID: &str = "102290129340398";
/// The number as the Graph API displays it.
pub const DISPLAY_PHONE_NUMBER: &str = "15550783881";
/// The number's verified business name.
pub const VERIFIED_NAME: &str = "Flynn Test";
/// The app secret notifications are signed with.
pub const APP_SECRET: &str = "fake-whatsapp-app-secret";
/// The verify token of the webhook subscription.
pub const VERIFY_TOKEN: &str = "fake-whatsapp-verify-token";
/// The one Graph API version the fake serves.
pub const API_VERSION: &str = "v23.0";
/// How long after a person's last message the business may answer.
pub const SERVICE_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The largest image sent as an `image` message.
pub const IMAGE_MAX: usize = 5 * 1024 * 1024;
/// The largest audio (and video) file.
pub const AUDIO_MAX: usize = 16 * 1024 * 1024;
/// The largest document, and so the largest upload.
pub const DOCUMENT_MAX: usize = 100 * 1024 * 1024;

/// The MIME types the media endpoint takes, as Meta lists them: audio,
/// documents, images, stickers, video.
pub const MEDIA_TYPES: &[&str] = &[
    "audio/aac",
    "audio/amr",
    "audio/mpeg",
    "audio/mp4",
    "audio/ogg",
    "text/plain",
    "application/pdf",
    "application/msword",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.ms-excel",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.ms-powerpoint",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "image/jpeg",
    "image/png",
    "image/webp",
    "video/mp4",
    "video/3gpp",
];

/// A file the business uploaded to the media endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct UploadedMedia {
    /// The media id it was given.
    pub id: String,
    /// The `type` field.
    pub mime_type: String,
    /// The file part's file name.
    pub file_name: Option<String>,
    /// The file part's `Content-Type`.
    pub content_type: Option<String>,
    pub data: Bytes,
}

/// One request the fake received.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphRequest {
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The raw query string, without `?`.
    pub query: String,
    /// Every header, names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; `Value::Null` when empty or not JSON.
    pub body: Value,
}

impl GraphRequest {
    /// The first value of a header (`name` in lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// A message the fake accepted.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    /// The `wamid` it was given.
    pub id: String,
    /// The recipient's number.
    pub to: String,
    /// The whole request body.
    pub body: Value,
}

impl SentMessage {
    /// `text.body` or `interactive.body.text`.
    pub fn text(&self) -> &str {
        self.body["text"]["body"]
            .as_str()
            .or_else(|| self.body["interactive"]["body"]["text"].as_str())
            .unwrap_or_default()
    }

    /// The message's `type` (`text`, `interactive`, `image`, `document`,
    /// `audio`).
    pub fn kind(&self) -> &str {
        self.body["type"].as_str().unwrap_or("text")
    }

    /// The media object of an `image`, `document` or `audio` message
    /// (`{"id", "caption"?, "filename"?, "voice"?}`); `Null` otherwise.
    pub fn media(&self) -> &Value {
        match self.kind() {
            kind @ ("image" | "document" | "audio") => &self.body[kind],
            _ => &Value::Null,
        }
    }

    /// The reply buttons as `(id, title)`.
    pub fn buttons(&self) -> Vec<(String, String)> {
        self.body["interactive"]["action"]["buttons"]
            .as_array()
            .map(|buttons| {
                buttons
                    .iter()
                    .map(|b| {
                        (
                            b["reply"]["id"].as_str().unwrap_or_default().to_owned(),
                            b["reply"]["title"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The routes a failure can be injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /{version}/{phone_number_id}`.
    PhoneNumber,
    /// `POST /{version}/{phone_number_id}/messages` (sends and receipts).
    Messages,
    /// `GET /{version}/{media_id}`.
    Media,
    /// The media download URL.
    Download,
    /// `POST /{version}/{phone_number_id}/media` (uploads).
    Upload,
}

/// An answer injected in place of the next request's on a route.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub status: u16,
    pub body: String,
}

impl Failure {
    /// A Graph error with this HTTP status, code and message.
    pub fn graph(status: u16, code: i64, message: &str) -> Self {
        Failure {
            status,
            body: graph_error_body(code, message, None, "AFakeInjectedTrace").to_string(),
        }
    }

    /// Cloud API throughput reached: HTTP 400, code 130429 (no hint of
    /// when to retry, as Meta sends none).
    pub fn throughput() -> Self {
        Failure::graph(400, 130429, "(#130429) Rate limit hit")
    }

    /// The app's call rate limit: HTTP 429, code 4.
    pub fn too_many_calls() -> Self {
        Failure::graph(429, 4, "(#4) Application request limit reached")
    }

    /// A temporary outage: this status (500, 503), code 2.
    pub fn service(status: u16) -> Self {
        Failure::graph(status, 2, "Service temporarily unavailable")
    }

    /// A proxy's error page: this status and a non-JSON body.
    pub fn raw(status: u16, body: &str) -> Self {
        Failure {
            status,
            body: body.to_owned(),
        }
    }
}

/// A stored media object.
#[derive(Debug, Clone)]
struct MediaFile {
    mime_type: String,
    data: Bytes,
}

#[derive(Debug, Default)]
struct State {
    requests: Vec<GraphRequest>,
    violations: Vec<String>,
    /// Injected failures: the route, how many of its requests pass
    /// first, the answer.
    failures: VecDeque<(Route, usize, Failure)>,
    /// Added to the real time: the fake's clock.
    clock_offset: Duration,
    /// When each number last wrote (by the fake's clock).
    windows: HashMap<String, SystemTime>,
    /// The wamids of messages people sent.
    inbound: HashSet<String>,
    /// The wamids of interactive messages the business sent.
    interactive: HashSet<String>,
    sent: Vec<SentMessage>,
    read: Vec<String>,
    media: HashMap<String, MediaFile>,
    uploaded: Vec<UploadedMedia>,
    counter: u64,
    /// `http://127.0.0.1:PORT`, for the media URLs (the fake's own
    /// unless [`FakeWhatsApp::serve_media_from`] says otherwise).
    base: String,
}

impl State {
    fn now(&self) -> SystemTime {
        SystemTime::now() + self.clock_offset
    }

    fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    fn wamid(&mut self) -> String {
        let n = self.next();
        format!("wamid.HBgLMTU1NTAxMjM0NTYVAgASGBQz{n:016X}AA==")
    }

    /// The failure to answer this request on `route` with, if one is
    /// due; counts down the ones waiting for later requests.
    fn failure(&mut self, route: Route) -> Option<Failure> {
        let at = self.failures.iter().position(|(r, _, _)| *r == route)?;
        let due = self.failures.get_mut(at).is_some_and(|(_, after, _)| {
            if *after == 0 {
                true
            } else {
                *after -= 1;
                false
            }
        });
        if due {
            self.failures.remove(at).map(|(_, _, failure)| failure)
        } else {
            None
        }
    }
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A fake WhatsApp Cloud API on `127.0.0.1`.
#[derive(Debug)]
pub struct FakeWhatsApp {
    shared: Arc<Shared>,
    server: Server,
}

impl FakeWhatsApp {
    /// Starts the fake: token [`ACCESS_TOKEN`], number [`PHONE_NUMBER_ID`],
    /// version [`API_VERSION`].
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let for_router = Arc::clone(&shared);
        let router = Router::new().fallback(move |request: Request| {
            let shared = Arc::clone(&for_router);
            async move { capture_and_answer(&shared, request).await }
        });
        let server = Server::start_router("whatsapp", router);
        shared.lock().base = format!("http://{}", server.addr());
        FakeWhatsApp { shared, server }
    }

    /// The `api_url` to configure (the Graph API root, without version).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The address the fake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<GraphRequest> {
        self.shared.lock().requests.clone()
    }

    /// Every protocol violation seen; empty when the client behaved.
    pub fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }

    /// Every message accepted for delivery, in order.
    pub fn sent(&self) -> Vec<SentMessage> {
        self.shared.lock().sent.clone()
    }

    /// The wamids marked read, in order.
    pub fn read_receipts(&self) -> Vec<String> {
        self.shared.lock().read.clone()
    }

    /// Answers the next request on `route` with `failure` instead.
    pub fn fail_next(&self, route: Route, failure: Failure) {
        self.fail_later(route, 0, failure);
    }

    /// Lets `after` requests on `route` pass, then answers the next one
    /// with `failure` (failures on one route queue in order).
    pub fn fail_later(&self, route: Route, after: usize, failure: Failure) {
        self.shared
            .lock()
            .failures
            .push_back((route, after, failure));
    }

    /// Moves the fake's clock forward (to age the 24-hour windows).
    pub fn advance_clock(&self, by: Duration) {
        self.shared.lock().clock_offset += by;
    }

    /// The fake's clock.
    pub fn now(&self) -> SystemTime {
        self.shared.lock().now()
    }

    /// Notes that `number` wrote now, opening its 24-hour window, without
    /// a notification.
    pub fn customer_wrote(&self, number: &str) {
        let mut state = self.shared.lock();
        let now = state.now();
        state.windows.insert(number.to_owned(), now);
    }

    /// Makes the media URLs the fake hands out point at `base` (an
    /// origin such as `http://127.0.0.1:4000`) instead of the fake itself:
    /// a Graph API answer naming a host that is not Meta's.
    pub fn serve_media_from(&self, base: &str) {
        self.shared.lock().base = base.trim_end_matches('/').to_owned();
    }

    /// Stores a media object people can send; returns its id.
    pub fn add_media(&self, mime_type: &str, data: impl Into<Bytes>) -> String {
        let mut state = self.shared.lock();
        let id = format!("{}", 1_000_000_000_000_000 + state.next());
        state.media.insert(
            id.clone(),
            MediaFile {
                mime_type: mime_type.to_owned(),
                data: data.into(),
            },
        );
        id
    }

    /// The files the business uploaded, in order.
    pub fn uploaded(&self) -> Vec<UploadedMedia> {
        self.shared.lock().uploaded.clone()
    }

    /// A text message from `from` (E.164 digits) named `name`.
    pub fn text_message(&self, from: &str, name: &str, body: &str) -> Notification {
        self.message(from, name, "text", json!({"body": body}), None)
    }

    /// A photo from `from`: media `media_id` (see [`Self::add_media`]).
    pub fn image_message(
        &self,
        from: &str,
        name: &str,
        media_id: &str,
        caption: Option<&str>,
    ) -> Notification {
        let mut image = self.media_object(media_id);
        if let Some(caption) = caption {
            image["caption"] = json!(caption);
        }
        self.message(from, name, "image", image, None)
    }

    /// A voice note from `from` (what WhatsApp's microphone button
    /// records): media `media_id`, `audio/ogg; codecs=opus` as Meta
    /// documents it.
    pub fn voice_message(&self, from: &str, name: &str, media_id: &str) -> Notification {
        let mut audio = self.media_object(media_id);
        audio["voice"] = json!(true);
        self.message(from, name, "audio", audio, None)
    }

    /// A document from `from`.
    pub fn document_message(
        &self,
        from: &str,
        name: &str,
        media_id: &str,
        filename: &str,
        caption: Option<&str>,
    ) -> Notification {
        let mut document = self.media_object(media_id);
        document["filename"] = json!(filename);
        if let Some(caption) = caption {
            document["caption"] = json!(caption);
        }
        self.message(from, name, "document", document, None)
    }

    /// A press of reply button `id` (titled `title`) under the
    /// interactive message `context` the business sent.
    pub fn button_reply(
        &self,
        from: &str,
        name: &str,
        context: &str,
        id: &str,
        title: &str,
    ) -> Notification {
        {
            let mut state = self.shared.lock();
            if !state.interactive.contains(context) {
                state.violations.push(format!(
                    "a button press was built for {context}, which is not an interactive message the fake sent"
                ));
            }
        }
        let interactive = json!({
            "type": "button_reply",
            "button_reply": {"id": id, "title": title},
        });
        self.message(
            from,
            name,
            "interactive",
            interactive,
            Some(json!({"from": DISPLAY_PHONE_NUMBER, "id": context})),
        )
    }

    /// A delivery receipt: `status` is `sent`, `delivered`, `read` or
    /// `failed` for the sent message `wamid`.
    pub fn status_update(&self, wamid: &str, recipient: &str, status: &str) -> Notification {
        let timestamp = unix(self.now()).to_string();
        let mut update = json!({
            "id": wamid,
            "status": status,
            "timestamp": timestamp,
            "recipient_id": recipient,
        });
        if status == "failed" {
            update["errors"] = json!([{
                "code": 131047,
                "title": "Re-engagement message",
                "message": "Re-engagement message",
                "error_data": {"details": "Message failed to send because more than 24 hours have passed since the customer last replied to this number."},
            }]);
        } else {
            update["conversation"] = json!({
                "id": "CONVERSATION_ID",
                "origin": {"type": "service"},
            });
            update["pricing"] = json!({
                "billable": true,
                "pricing_model": "PMP",
                "category": "service",
            });
        }
        Notification::new(json!({"statuses": [update]}), None)
    }

    fn media_object(&self, media_id: &str) -> Value {
        let state = self.shared.lock();
        match state.media.get(media_id) {
            Some(file) => json!({
                "id": media_id,
                "mime_type": file.mime_type,
                "sha256": hex::encode(Sha256::digest(&file.data)),
            }),
            None => json!({"id": media_id, "mime_type": "application/octet-stream", "sha256": ""}),
        }
    }

    fn message(
        &self,
        from: &str,
        name: &str,
        kind: &str,
        object: Value,
        context: Option<Value>,
    ) -> Notification {
        let (wamid, timestamp) = {
            let mut state = self.shared.lock();
            let wamid = state.wamid();
            let now = state.now();
            state.inbound.insert(wamid.clone());
            state.windows.insert(from.to_owned(), now);
            (wamid, unix(now).to_string())
        };
        let mut message = json!({
            "from": from,
            "id": wamid,
            "timestamp": timestamp,
            "type": kind,
        });
        message[kind] = object;
        if let Some(context) = context {
            message["context"] = context;
        }
        let value = json!({
            "contacts": [{"profile": {"name": name}, "wa_id": from}],
            "messages": [message],
        });
        Notification::new(value, Some(wamid))
    }

    /// Posts `notification` to `url` as Meta does, signed as `signing`
    /// says; returns the answer.
    pub async fn post(
        &self,
        url: &str,
        notification: &Notification,
        signing: Signing,
    ) -> HookAnswer {
        let body = notification.bytes();
        let mut headers = vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("User-Agent".to_owned(), "facebookexternalua".to_owned()),
        ];
        let signature = match signing {
            Signing::AppSecret => Some(sign(APP_SECRET, &body)),
            Signing::Secret(secret) => Some(sign(&secret, &body)),
            Signing::Forged => Some(sign("not-the-app-secret", &body)),
            Signing::Missing => None,
        };
        if let Some(signature) = signature {
            headers.push(("X-Hub-Signature-256".to_owned(), signature));
        }
        http_request("POST", url, &headers, &body).await
    }

    /// Posts raw bytes signed with the app secret (malformed payloads).
    pub async fn post_raw(&self, url: &str, body: &[u8]) -> HookAnswer {
        let headers = vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            ("X-Hub-Signature-256".to_owned(), sign(APP_SECRET, body)),
        ];
        http_request("POST", url, &headers, body).await
    }

    /// The verification handshake Meta makes when the webhook is saved:
    /// `GET url?hub.mode=subscribe&hub.challenge=…&hub.verify_token=…`.
    pub async fn verify(&self, url: &str, verify_token: &str, challenge: &str) -> HookAnswer {
        let query = format!(
            "hub.mode=subscribe&hub.challenge={}&hub.verify_token={}",
            form_encode(challenge),
            form_encode(verify_token)
        );
        let separator = if url.contains('?') { '&' } else { '?' };
        http_request("GET", &format!("{url}{separator}{query}"), &[], &[]).await
    }
}

/// How a posted notification is signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signing {
    /// With [`APP_SECRET`].
    AppSecret,
    /// With another secret.
    Secret(String),
    /// With a secret that is not the app's.
    Forged,
    /// No `X-Hub-Signature-256` header.
    Missing,
}

/// A webhook notification: `{"object":"whatsapp_business_account",
/// "entry":[{"id","changes":[{"value","field":"messages"}]}]}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    /// The payload.
    pub body: Value,
    /// The wamid of the message it carries (none for status updates).
    pub wamid: Option<String>,
}

impl Notification {
    fn new(mut value: Value, wamid: Option<String>) -> Self {
        value["messaging_product"] = json!("whatsapp");
        value["metadata"] = json!({
            "display_phone_number": DISPLAY_PHONE_NUMBER,
            "phone_number_id": PHONE_NUMBER_ID,
        });
        let body = json!({
            "object": "whatsapp_business_account",
            "entry": [{
                "id": BUSINESS_ACCOUNT_ID,
                "changes": [{"value": value, "field": "messages"}],
            }],
        });
        Notification { body, wamid }
    }

    /// One notification carrying this one's changes and then `other`'s
    /// (Meta batches several messages in one post).
    #[must_use]
    pub fn and(mut self, other: Notification) -> Self {
        let more = other.body["entry"][0]["changes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(changes) = self.body["entry"][0]["changes"].as_array_mut() {
            changes.extend(more);
        }
        self
    }

    /// The payload as posted.
    pub fn bytes(&self) -> Vec<u8> {
        self.body.to_string().into_bytes()
    }
}

/// `sha256=<hex>` of `body` under `secret`, as in `X-Hub-Signature-256`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = match hmac::Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(error) => panic!("flynn-testkit: HMAC refused the key: {error}"),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// What the webhook answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookAnswer {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: String,
}

fn unix(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn form_encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(byte));
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

// ------------------------------------------------------------ the API

async fn capture_and_answer(shared: &Shared, request: Request) -> Response {
    let received = server::Received::read(request).await;
    let content_type = received.header("content-type").unwrap_or_default();
    if content_type.starts_with("multipart/form-data") {
        let form = server::form_parts(content_type, received.bytes.clone()).await;
        return upload(shared, &received, form);
    }
    let parsed = received.json();
    let captured = GraphRequest {
        method: received.method,
        path: received.path,
        query: received.query,
        headers: received.headers,
        body: parsed.as_ref().map_or(Value::Null, Clone::clone),
    };
    let mut state = shared.lock();
    state.requests.push(captured.clone());
    if let Err(error) = parsed {
        let message = format!(
            "{} {}: the body is not JSON ({error})",
            captured.method, captured.path
        );
        state.violations.push(message.clone());
        return graph_error(
            &mut state,
            400,
            100,
            "(#100) Invalid parameter",
            Some(&message),
        );
    }
    answer(&mut state, &captured)
}

/// A multipart request: only the media endpoint takes one. Checked as
/// Meta documents it: `messaging_product=whatsapp`, a `type` Meta lists,
/// a `file` part with a file name, within the size limit of its type.
fn upload(
    shared: &Shared,
    received: &server::Received,
    form: Result<Vec<FormPart>, String>,
) -> Response {
    // The request as recorded: the text fields, and the file described.
    let mut fields = serde_json::Map::new();
    for part in form.iter().flatten() {
        let value = match &part.file_name {
            Some(name) => json!({
                "filename": name,
                "content_type": part.content_type,
                "size": part.data.len(),
            }),
            None => json!(String::from_utf8_lossy(&part.data)),
        };
        fields.insert(part.name.clone(), value);
    }
    let request = GraphRequest {
        method: received.method.clone(),
        path: received.path.clone(),
        query: received.query.clone(),
        headers: received.headers.clone(),
        body: Value::Object(fields),
    };
    let mut state = shared.lock();
    state.requests.push(request.clone());
    let at = format!("{} {}", request.method, request.path);
    let media_path = format!("/{API_VERSION}/{PHONE_NUMBER_ID}/media");
    if request.method != "POST" || request.path.trim_end_matches('/') != media_path {
        let problem = format!("{at}: a multipart body (only POST {media_path} takes one)");
        return refuse(&mut state, 400, 100, INVALID_PARAMETER, problem);
    }
    if let Some(refusal) = check_token(&mut state, &request) {
        return refusal;
    }
    if let Some(failure) = state.failure(Route::Upload) {
        return injected(failure);
    }
    let parts = match form {
        Ok(parts) => parts,
        Err(problem) => {
            let problem = format!("{at}: {problem}");
            return refuse(&mut state, 400, 100, INVALID_PARAMETER, problem);
        }
    };
    let text = |name: &str| {
        parts
            .iter()
            .find(|p| p.name == name && p.file_name.is_none())
            .map(|p| String::from_utf8_lossy(&p.data).into_owned())
    };
    if text("messaging_product").as_deref() != Some("whatsapp") {
        let problem = format!("{at}: messaging_product must be \"whatsapp\"");
        return refuse(
            &mut state,
            400,
            100,
            "(#100) The parameter messaging_product is required.",
            problem,
        );
    }
    if let Some(other) = parts
        .iter()
        .find(|p| !["messaging_product", "type", "file"].contains(&p.name.as_str()))
    {
        let problem = format!("{at}: unknown parameter '{}'", other.name);
        return refuse(&mut state, 400, 100, INVALID_PARAMETER, problem);
    }
    let Some(file) = parts
        .iter()
        .find(|p| p.name == "file" && p.file_name.is_some())
    else {
        let problem = format!("{at}: no `file` part with a file name");
        return refuse(
            &mut state,
            400,
            100,
            "(#100) The parameter file is required.",
            problem,
        );
    };
    let Some(mime_type) = text("type").map(|t| t.trim().to_ascii_lowercase()) else {
        let problem = format!("{at}: no `type` (the file's MIME type)");
        return refuse(
            &mut state,
            400,
            100,
            "(#100) The parameter type is required.",
            problem,
        );
    };
    if !MEDIA_TYPES.contains(&mime_type.as_str()) {
        let message = format!(
            "(#100) Param file must be a file with one of the following types: {}. Received file of type '{mime_type}'.",
            MEDIA_TYPES.join(", ")
        );
        let problem = format!("{at}: type '{mime_type}' is not one Meta takes");
        return refuse(&mut state, 400, 100, &message, problem);
    }
    if let Some(part_type) = &file.content_type
        && part_type.split(';').next().map(str::trim) != Some(mime_type.as_str())
    {
        let problem = format!("{at}: the file part is {part_type} but type says {mime_type}");
        state.violations.push(problem);
    }
    let limit = match mime_type.split('/').next() {
        Some("audio" | "video") => AUDIO_MAX,
        _ => DOCUMENT_MAX,
    };
    if file.data.is_empty() || file.data.len() > limit {
        let problem = format!(
            "{at}: a {mime_type} file of {} bytes (1 to {limit})",
            file.data.len()
        );
        return refuse(
            &mut state,
            400,
            131053,
            "(#131053) Media upload error",
            problem,
        );
    }
    let id = format!("{}", 2_000_000_000_000_000 + state.next());
    state.media.insert(
        id.clone(),
        MediaFile {
            mime_type: mime_type.clone(),
            data: file.data.clone(),
        },
    );
    state.uploaded.push(UploadedMedia {
        id: id.clone(),
        mime_type,
        file_name: file.file_name.clone(),
        content_type: file.content_type.clone(),
        data: file.data.clone(),
    });
    server::json(200, &json!({"id": id}))
}

fn graph_error_body(code: i64, message: &str, details: Option<&str>, trace: &str) -> Value {
    let mut error = json!({
        "message": message,
        "type": "OAuthException",
        "code": code,
        "fbtrace_id": trace,
    });
    if let Some(details) = details {
        error["error_data"] = json!({"messaging_product": "whatsapp", "details": details});
    }
    json!({"error": error})
}

fn graph_error(
    state: &mut State,
    status: u16,
    code: i64,
    message: &str,
    details: Option<&str>,
) -> Response {
    let trace = format!("AFake{:08}", state.next());
    server::json(status, &graph_error_body(code, message, details, &trace))
}

/// A refusal that is also a violation.
fn refuse(state: &mut State, status: u16, code: i64, message: &str, problem: String) -> Response {
    state.violations.push(problem.clone());
    graph_error(state, status, code, message, Some(&problem))
}

fn injected(failure: Failure) -> Response {
    let kind = if serde_json::from_str::<Value>(&failure.body).is_ok() {
        "application/json"
    } else {
        "text/html; charset=utf-8"
    };
    server::respond(
        failure.status,
        &[("content-type", kind)],
        Body::from(failure.body),
    )
}

/// `None` when the bearer token is right.
fn check_token(state: &mut State, request: &GraphRequest) -> Option<Response> {
    match request.header("authorization") {
        Some(value) if value == format!("Bearer {ACCESS_TOKEN}") => None,
        Some(value) if value.starts_with("Bearer ") => Some(graph_error(
            state,
            401,
            190,
            "Invalid OAuth access token - Cannot parse access token",
            None,
        )),
        other => {
            let problem = format!(
                "{} {}: the Authorization header is {} (expected 'Bearer <access token>')",
                request.method,
                request.path,
                other.map_or_else(|| "missing".to_owned(), |v| format!("malformed: '{v}'"))
            );
            Some(refuse(
                state,
                401,
                190,
                "An active access token must be used to query information about the current user.",
                problem,
            ))
        }
    }
}

fn answer(state: &mut State, request: &GraphRequest) -> Response {
    if request.path == "/whatsapp_business/attachments/" {
        return download(state, request);
    }
    let unknown_path = |state: &mut State| {
        let problem = format!(
            "unexpected request {} {}?{} (served: GET /{API_VERSION}/{PHONE_NUMBER_ID}, POST /{API_VERSION}/{PHONE_NUMBER_ID}/messages, GET /{API_VERSION}/<media id>)",
            request.method, request.path, request.query
        );
        refuse(
            state,
            400,
            2500,
            &format!("Unknown path components: {}", request.path),
            problem,
        )
    };
    let Some(rest) = request.path.strip_prefix(&format!("/{API_VERSION}/")) else {
        return unknown_path(state);
    };
    let segments: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    if let Some(refusal) = check_token(state, request) {
        return refusal;
    }
    match (request.method.as_str(), segments.as_slice()) {
        ("GET", [id]) if *id == PHONE_NUMBER_ID => {
            if let Some(failure) = state.failure(Route::PhoneNumber) {
                return injected(failure);
            }
            phone_number(state, request)
        }
        ("GET", [id]) if state.media.contains_key(*id) => {
            if let Some(failure) = state.failure(Route::Media) {
                return injected(failure);
            }
            media(state, id)
        }
        ("GET", [id]) => {
            let problem = format!("GET {}: no object with id '{id}'", request.path);
            refuse(
                state,
                400,
                100,
                &format!(
                    "Unsupported get request. Object with ID '{id}' does not exist, cannot be loaded due to missing permissions, or does not support this operation."
                ),
                problem,
            )
        }
        ("POST", [id, "messages"]) if *id == PHONE_NUMBER_ID => {
            if let Some(failure) = state.failure(Route::Messages) {
                return injected(failure);
            }
            messages(state, request)
        }
        ("POST", [id, "messages"]) => {
            let problem = format!(
                "POST {}: '{id}' is not the business's Phone number ID",
                request.path
            );
            refuse(
                state,
                400,
                100,
                &format!(
                    "Unsupported post request. Object with ID '{id}' does not exist, cannot be loaded due to missing permissions, or does not support this operation."
                ),
                problem,
            )
        }
        _ => unknown_path(state),
    }
}

fn phone_number(state: &mut State, request: &GraphRequest) -> Response {
    const FIELDS: &[&str] = &[
        "id",
        "display_phone_number",
        "verified_name",
        "quality_rating",
        "code_verification_status",
        "platform_type",
        "throughput",
    ];
    let mut answer = json!({"id": PHONE_NUMBER_ID});
    let requested: Vec<String> = request
        .query
        .split('&')
        .filter_map(|pair| pair.strip_prefix("fields="))
        .flat_map(|list| {
            list.split("%2C")
                .flat_map(|f| f.split(','))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let requested = if requested.is_empty() {
        vec![
            "display_phone_number".to_owned(),
            "verified_name".to_owned(),
            "quality_rating".to_owned(),
        ]
    } else {
        requested
    };
    for field in &requested {
        let value = match field.as_str() {
            "id" => json!(PHONE_NUMBER_ID),
            "display_phone_number" => json!(DISPLAY_PHONE_NUMBER),
            "verified_name" => json!(VERIFIED_NAME),
            "quality_rating" => json!("GREEN"),
            "code_verification_status" => json!("VERIFIED"),
            "platform_type" => json!("CLOUD_API"),
            "throughput" => json!({"level": "STANDARD"}),
            other => {
                let problem = format!(
                    "GET {}: unknown field '{other}' (known: {})",
                    request.path,
                    FIELDS.join(", ")
                );
                return refuse(
                    state,
                    400,
                    100,
                    &format!(
                        "(#100) Tried accessing nonexisting field ({other}) on node type (WhatsAppBusinessPhoneNumber)"
                    ),
                    problem,
                );
            }
        };
        answer[field.as_str()] = value;
    }
    server::json(200, &answer)
}

fn media(state: &mut State, id: &str) -> Response {
    let Some(file) = state.media.get(id).cloned() else {
        return graph_error(state, 404, 100, "media not found", None);
    };
    let url = format!(
        "{}/whatsapp_business/attachments/?mid={id}&ext=1700000000&hash=ATfake",
        state.base
    );
    server::json(
        200,
        &json!({
            "messaging_product": "whatsapp",
            "url": url,
            "mime_type": file.mime_type,
            "sha256": hex::encode(Sha256::digest(&file.data)),
            "file_size": file.data.len().to_string(),
            "id": id,
        }),
    )
}

fn download(state: &mut State, request: &GraphRequest) -> Response {
    if request.method != "GET" {
        let problem = format!(
            "{} {}: media is downloaded with GET",
            request.method, request.path
        );
        return refuse(state, 405, 100, "(#100) Invalid method", problem);
    }
    if let Some(refusal) = check_token(state, request) {
        return refusal;
    }
    if let Some(failure) = state.failure(Route::Download) {
        return injected(failure);
    }
    let mid = request
        .query
        .split('&')
        .find_map(|pair| pair.strip_prefix("mid="))
        .unwrap_or_default()
        .to_owned();
    match state.media.get(&mid).cloned() {
        Some(file) => server::respond(
            200,
            &[("content-type", file.mime_type.as_str())],
            Body::from(file.data),
        ),
        None => {
            let problem = format!("GET {}?{}: no media '{mid}'", request.path, request.query);
            refuse(state, 404, 100, "media not found", problem)
        }
    }
}

const INVALID_PARAMETER: &str = "(#100) Invalid parameter";
const NOT_VALID: &str = "(#131009) Parameter value is not valid";

fn messages(state: &mut State, request: &GraphRequest) -> Response {
    let at = format!("POST {}", request.path);
    if !request
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json"))
    {
        let problem = format!("{at}: Content-Type must be application/json");
        return refuse(state, 400, 100, INVALID_PARAMETER, problem);
    }
    let body = &request.body;
    if !body.is_object() {
        let problem = format!("{at}: the body must be a JSON object");
        return refuse(state, 400, 100, INVALID_PARAMETER, problem);
    }
    if body["messaging_product"] != "whatsapp" {
        let problem = format!(
            "{at}: messaging_product must be \"whatsapp\" (got {})",
            body["messaging_product"]
        );
        return refuse(state, 400, 100, INVALID_PARAMETER, problem);
    }
    if body.get("status").is_some() {
        return read_receipt(state, &at, body);
    }
    const KEYS: &[&str] = &[
        "messaging_product",
        "recipient_type",
        "to",
        "type",
        "text",
        "interactive",
        "image",
        "document",
        "audio",
        "context",
        "biz_opaque_callback_data",
    ];
    if let Some(key) = body
        .as_object()
        .and_then(|o| o.keys().find(|k| !KEYS.contains(&k.as_str())))
    {
        let problem = format!("{at}: unknown parameter '{key}'");
        return refuse(state, 400, 100, INVALID_PARAMETER, problem);
    }
    if !matches!(body.get("recipient_type"), None | Some(Value::String(_)))
        || body
            .get("recipient_type")
            .is_some_and(|t| t != "individual")
    {
        let problem = format!("{at}: recipient_type must be \"individual\"");
        return refuse(state, 400, 100, INVALID_PARAMETER, problem);
    }
    let to = match body["to"].as_str() {
        Some(to)
            if !to.is_empty()
                && to
                    .trim_start_matches('+')
                    .bytes()
                    .all(|b| b.is_ascii_digit()) =>
        {
            to.trim_start_matches('+').to_owned()
        }
        _ => {
            let problem = format!("{at}: 'to' must be a phone number (got {})", body["to"]);
            return refuse(state, 400, 100, INVALID_PARAMETER, problem);
        }
    };
    let kind = body["type"].as_str().unwrap_or("text");
    let problem = match kind {
        "text" => check_text(&body["text"]),
        "interactive" => check_interactive(&body["interactive"]),
        "image" | "document" | "audio" => check_media(&state.media, kind, &body[kind]),
        other => Some((
            100,
            format!(
                "the fake serves text, interactive, image, document and audio messages, not '{other}'"
            ),
        )),
    };
    if let Some((code, problem)) = problem {
        let message = if code == 131009 {
            NOT_VALID
        } else {
            INVALID_PARAMETER
        };
        return refuse(state, 400, code, message, format!("{at}: {problem}"));
    }
    let now = state.now();
    let open = state.windows.get(&to).is_some_and(|last| {
        now.duration_since(*last)
            .map_or(true, |age| age <= SERVICE_WINDOW)
    });
    if !open {
        let problem =
            format!("{at}: {to} has not written within 24 hours; only templates may be sent");
        state.violations.push(problem);
        return graph_error(
            state,
            400,
            131047,
            "(#131047) Re-engagement message",
            Some(
                "Message failed to send because more than 24 hours have passed since the customer last replied to this number.",
            ),
        );
    }
    let wamid = state.wamid();
    if kind == "interactive" {
        state.interactive.insert(wamid.clone());
    }
    state.sent.push(SentMessage {
        id: wamid.clone(),
        to: to.clone(),
        body: body.clone(),
    });
    server::json(
        200,
        &json!({
            "messaging_product": "whatsapp",
            "contacts": [{"input": body["to"], "wa_id": to}],
            "messages": [{"id": wamid}],
        }),
    )
}

fn read_receipt(state: &mut State, at: &str, body: &Value) -> Response {
    if body["status"] != "read" {
        let problem = format!("{at}: status must be \"read\" (got {})", body["status"]);
        return refuse(state, 400, 100, INVALID_PARAMETER, problem);
    }
    if let Some(key) = body.as_object().and_then(|o| {
        o.keys().find(|k| {
            ![
                "messaging_product",
                "status",
                "message_id",
                "typing_indicator",
            ]
            .contains(&k.as_str())
        })
    }) {
        let problem = format!("{at}: unknown parameter '{key}' in a read receipt");
        return refuse(state, 400, 100, INVALID_PARAMETER, problem);
    }
    let Some(id) = body["message_id"].as_str() else {
        let problem = format!("{at}: a read receipt needs message_id");
        return refuse(state, 400, 100, INVALID_PARAMETER, problem);
    };
    if !state.inbound.contains(id) {
        let problem = format!("{at}: {id} is not a message someone sent the business");
        return refuse(state, 400, 100, INVALID_PARAMETER, problem);
    }
    state.read.push(id.to_owned());
    server::json(200, &json!({"success": true}))
}

fn check_text(text: &Value) -> Option<(i64, String)> {
    let Some(object) = text.as_object() else {
        return Some((100, "type text needs a 'text' object".to_owned()));
    };
    if let Some(key) = object
        .keys()
        .find(|k| !["body", "preview_url"].contains(&k.as_str()))
    {
        return Some((100, format!("unknown parameter text.{key}")));
    }
    if object.get("preview_url").is_some_and(|p| !p.is_boolean()) {
        return Some((100, "text.preview_url must be a boolean".to_owned()));
    }
    match text["body"].as_str() {
        None => Some((100, "text.body is required".to_owned())),
        Some(body) => {
            let n = body.chars().count();
            (n == 0 || n > 4096).then(|| (100, format!("text.body has {n} characters (1-4096)")))
        }
    }
}

/// An `image`, `document` or `audio` object: an uploaded media `id`
/// (the fake serves no `link`s), the fields Meta documents for the type
/// (a caption of at most 1024 characters on images and documents, a
/// `filename` on documents, `voice` on audio), and media the type takes
/// (images JPEG or PNG within 5 MB, audio of an audio type within 16 MB).
fn check_media(
    media: &HashMap<String, MediaFile>,
    kind: &str,
    object: &Value,
) -> Option<(i64, String)> {
    let Some(fields) = object.as_object() else {
        return Some((100, format!("type {kind} needs an '{kind}' object")));
    };
    let allowed: &[&str] = match kind {
        "image" => &["id", "link", "caption"],
        "document" => &["id", "link", "caption", "filename"],
        _ => &["id", "link", "voice"],
    };
    if let Some(key) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Some((100, format!("unknown parameter {kind}.{key}")));
    }
    if fields.contains_key("link") {
        return Some((
            100,
            format!("{kind}.link: the fake serves uploaded media by id only"),
        ));
    }
    let Some(id) = object["id"].as_str() else {
        return Some((100, format!("{kind}.id is required")));
    };
    let Some(file) = media.get(id) else {
        return Some((131009, format!("{kind}.id '{id}' is no uploaded media")));
    };
    if let Some(caption) = fields.get("caption") {
        let n = caption.as_str().map(|c| c.chars().count());
        if !n.is_some_and(|n| (1..=1024).contains(&n)) {
            return Some((131009, format!("{kind}.caption must be 1-1024 characters")));
        }
    }
    if fields.get("filename").is_some_and(|f| !f.is_string()) {
        return Some((100, format!("{kind}.filename must be a string")));
    }
    if fields.get("voice").is_some_and(|v| !v.is_boolean()) {
        return Some((100, format!("{kind}.voice must be a boolean")));
    }
    let size = file.data.len();
    let fits = match kind {
        "image" => {
            ["image/jpeg", "image/png"].contains(&file.mime_type.as_str()) && size <= IMAGE_MAX
        }
        "audio" => file.mime_type.starts_with("audio/") && size <= AUDIO_MAX,
        _ => size <= DOCUMENT_MAX,
    };
    if !fits {
        return Some((
            131053,
            format!(
                "media {id} ({}, {size} bytes) cannot be sent as {kind} (images: JPEG or PNG up to {IMAGE_MAX} bytes; audio: up to {AUDIO_MAX} bytes)",
                file.mime_type
            ),
        ));
    }
    None
}

fn check_interactive(interactive: &Value) -> Option<(i64, String)> {
    if interactive["type"] != "button" {
        return Some((
            131009,
            format!(
                "the fake serves interactive type \"button\", not {}",
                interactive["type"]
            ),
        ));
    }
    let body = interactive["body"]["text"].as_str().unwrap_or_default();
    let n = body.chars().count();
    if n == 0 || n > 1024 {
        return Some((
            131009,
            format!("interactive.body.text has {n} characters (1-1024)"),
        ));
    }
    let Some(buttons) = interactive["action"]["buttons"].as_array() else {
        return Some((131009, "interactive.action.buttons is required".to_owned()));
    };
    if buttons.is_empty() || buttons.len() > 3 {
        return Some((131009, format!("{} buttons (1-3)", buttons.len())));
    }
    let mut ids = HashSet::new();
    let mut titles = HashSet::new();
    for (i, button) in buttons.iter().enumerate() {
        if button["type"] != "reply" {
            return Some((131009, format!("buttons[{i}].type must be \"reply\"")));
        }
        let id = button["reply"]["id"].as_str().unwrap_or_default();
        let title = button["reply"]["title"].as_str().unwrap_or_default();
        if id.trim().is_empty() || id.chars().count() > 256 || id.trim() != id {
            return Some((
                131009,
                format!("buttons[{i}].reply.id '{id}' (1-256 characters, no outer spaces)"),
            ));
        }
        let t = title.chars().count();
        if t == 0 || t > 20 {
            return Some((
                131009,
                format!("buttons[{i}].reply.title '{title}' has {t} characters (1-20)"),
            ));
        }
        if !ids.insert(id) || !titles.insert(title) {
            return Some((
                131009,
                format!("buttons[{i}]: ids and titles must be unique"),
            ));
        }
    }
    None
}

// ------------------------------------------------- the webhook side

/// One request the code under test received at a [`WebhookEndpoint`].
#[derive(Debug, Clone)]
pub struct HookRequest {
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// The raw query string, without `?`.
    pub query: String,
    /// Every header, names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

/// What the code under test answers.
#[derive(Debug, Clone)]
pub struct HookResponse {
    pub status: u16,
    pub content_type: String,
    pub body: Bytes,
}

/// An HTTP server on `127.0.0.1:0` in the test's own runtime, handing
/// every request to a handler: the code under test's webhook, served the
/// way the gateway serves `/channels/<name>/…`. Stopped when dropped.
#[derive(Debug)]
pub struct WebhookEndpoint {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl WebhookEndpoint {
    /// Serves `handler` until dropped.
    pub async fn serve<F, Fut>(handler: F) -> Self
    where
        F: Fn(HookRequest) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = HookResponse> + Send + 'static,
    {
        let router = Router::new().fallback(move |request: Request| {
            let handler = handler.clone();
            async move {
                let (parts, body) = request.into_parts();
                let body = axum::body::to_bytes(body, 16 * 1024 * 1024)
                    .await
                    .unwrap_or_default();
                let hook = HookRequest {
                    method: parts.method.as_str().to_owned(),
                    path: parts.uri.path().to_owned(),
                    query: parts.uri.query().unwrap_or_default().to_owned(),
                    headers: parts
                        .headers
                        .iter()
                        .map(|(n, v)| {
                            (
                                n.as_str().to_owned(),
                                String::from_utf8_lossy(v.as_bytes()).into_owned(),
                            )
                        })
                        .collect(),
                    body,
                };
                let answer = handler(hook).await;
                server::respond(
                    answer.status,
                    &[("content-type", answer.content_type.as_str())],
                    Body::from(answer.body),
                )
            }
        });
        let listener = match tokio::net::TcpListener::bind("127.0.0.1:0").await {
            Ok(listener) => listener,
            Err(error) => panic!("flynn-testkit: cannot bind 127.0.0.1:0: {error}"),
        };
        let addr = match listener.local_addr() {
            Ok(addr) => addr,
            Err(error) => panic!("flynn-testkit: cannot read the bound address: {error}"),
        };
        let task = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                panic!("flynn-testkit: the webhook endpoint failed: {error}");
            }
        });
        WebhookEndpoint { addr, task }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for WebhookEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One HTTP/1.1 request over a fresh connection (`Connection: close`);
/// the status, content type and body of the answer. Only `http://` URLs.
async fn http_request(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> HookAnswer {
    let Some(rest) = url.strip_prefix("http://") else {
        panic!("flynn-testkit: only http:// webhook URLs are supported, not {url}");
    };
    let (host, target) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(host).await?;
        let mut head = format!(
            "{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = match tokio::time::timeout(Duration::from_secs(30), exchange).await {
        Ok(Ok(raw)) => raw,
        Ok(Err(error)) => panic!("flynn-testkit: {method} {url} failed: {error}"),
        Err(_) => panic!("flynn-testkit: {method} {url} got no answer within 30 s"),
    };
    parse_response(&raw).unwrap_or_else(|| {
        panic!(
            "flynn-testkit: {method} {url}: not an HTTP response: {}",
            String::from_utf8_lossy(&raw)
        )
    })
}

fn parse_response(raw: &[u8]) -> Option<HookAnswer> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut payload = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let mut content_type = None;
    let mut chunked = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    if chunked {
        payload = dechunk(&payload)?;
    }
    Some(HookAnswer {
        status,
        content_type,
        body: String::from_utf8_lossy(&payload).into_owned(),
    })
}

fn dechunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = raw.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&raw[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(raw.get(..size)?);
        raw = raw.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_read_plain_and_chunked() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok";
        assert_eq!(
            parse_response(plain),
            Some(HookAnswer {
                status: 200,
                content_type: Some("text/plain".to_owned()),
                body: "ok".to_owned()
            })
        );
        let chunked = b"HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding: chunked\r\n\r\n3\r\nnot\r\n4\r\n yet\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap().body, "not yet");
    }

    #[test]
    fn interactive_limits_follow_the_documentation() {
        let ok = json!({"type": "button", "body": {"text": "Run it?"}, "action": {"buttons": [
            {"type": "reply", "reply": {"id": "y:1", "title": "Approve"}},
            {"type": "reply", "reply": {"id": "n:1", "title": "Deny"}},
        ]}});
        assert_eq!(check_interactive(&ok), None);
        let mut long_title = ok.clone();
        long_title["action"]["buttons"][0]["reply"]["title"] = json!("a".repeat(21));
        assert_eq!(check_interactive(&long_title).map(|p| p.0), Some(131009));
        let mut same = ok.clone();
        same["action"]["buttons"][1]["reply"]["id"] = json!("y:1");
        assert_eq!(check_interactive(&same).map(|p| p.0), Some(131009));
        let mut long_body = ok;
        long_body["body"]["text"] = json!("é".repeat(1025));
        assert_eq!(check_interactive(&long_body).map(|p| p.0), Some(131009));
        assert_eq!(
            check_text(&json!({"body": "x".repeat(4097)})).map(|p| p.0),
            Some(100)
        );
        assert_eq!(
            check_text(&json!({"body": "hi", "preview_url": false})),
            None
        );
    }

    #[test]
    fn signatures_are_meta_s() {
        // HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog").
        assert_eq!(
            sign("key", b"The quick brown fox jumps over the lazy dog"),
            "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
    }
}
