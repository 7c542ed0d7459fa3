//! A strict fake of Slack for a bot: the Web API methods the adapter
//! calls, a Socket Mode server, private file downloads, interaction
//! `response_url`s, and helpers that build signed Events API posts.
//!
//! - Web API: `POST /api/<method>` with `Authorization: Bearer <token>`
//!   and a JSON (or form) body; answered HTTP 200 with `{"ok": true, …}`
//!   or `{"ok": false, "error": "<code>"}` as Slack does. Served:
//!   `auth.test`, `apps.connections.open` (app token only; returns
//!   `ws://127.0.0.1:<port>/link/?ticket=…`), `chat.postMessage`,
//!   `chat.update`. Checked as Slack checks them: the token (`not_authed`,
//!   `invalid_auth`, `not_allowed_token_type`), the channel
//!   (`channel_not_found`), text or blocks present (`no_text`), text at
//!   most 40,000 characters (`msg_too_long`), Block Kit (`invalid_blocks`:
//!   section text at most 3000, at most 25 elements per `actions`, button
//!   text at most 75 and value at most 2000 characters, `action_id`s
//!   unique in a message, style `primary` or `danger`), an update of an
//!   unknown `ts` (`message_not_found`). Beyond what Slack refuses, a
//!   `<` in mrkdwn that opens no link or mention (Slack wants `&lt;`) and
//!   a malformed `thread_ts` are violations.
//! - File uploads as Slack documents them: `files.getUploadURLExternal`
//!   (`filename` and `length` as form fields or query arguments, not
//!   JSON) answers an upload URL on the fake and a file id; the URL takes
//!   one POST of exactly `length` bytes (raw, or a multipart file part);
//!   `files.completeUploadExternal` shares uploaded files (`files` of
//!   `{"id", "title"}`) into `channel_id`, `thread_ts` and with
//!   `initial_comment`, refusing ids never announced or never uploaded
//!   (`file_not_found`) and malformed arguments (`invalid_arguments`).
//!   [`FakeSlack::shared_files`] lists what was shared.
//! - Socket Mode: each ticket opens one connection; the fake says
//!   `hello`, pushes envelopes with an `envelope_id`, records the
//!   acknowledgements, and sends an `events_api` envelope left
//!   unacknowledged again (`retry_attempt` + 1, `retry_reason: timeout`)
//!   after [`FakeSlack::set_redelivery_after`] (3 s by default; at most 3
//!   retries). An `interactive` or `slash_commands` envelope not
//!   acknowledged within 3 s is a violation (Slack shows the user an
//!   error). It can send `disconnect` and drop the socket.
//! - Failure injection: [`FakeSlack::fail_next`] answers the next call of
//!   a method with 429 + `Retry-After`, an HTTP status, or an `ok: false`
//!   code.
//! - Events API: [`events_post`], [`interactive_post`] and
//!   [`command_post`] build posts signed with [`SIGNING_SECRET`] (or
//!   forged, or with a stale timestamp) for the adapter's webhook.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, Request, State as AxumState};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::server::{self, CapturedRequest, Server};

/// The bot token the fake accepts.
pub const BOT_TOKEN: &str = "xoxb-17-2001-fakebottoken";
/// The app-level token the fake accepts for `apps.connections.open`.
pub const APP_TOKEN: &str = "xapp-1-A0FLYNN-3001-fakeapptoken";
/// The signing secret of the Events API helpers (Slack's documented
/// example secret).
pub const SIGNING_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
/// The bot's user id.
pub const BOT_USER_ID: &str = "U0FLYNNBOT";
/// The bot's bot id (on its own messages).
pub const BOT_ID: &str = "B0FLYNNBOT";
/// The bot's user name.
pub const BOT_NAME: &str = "flynn";
/// The workspace's name.
pub const TEAM: &str = "Flynn Test";
/// The workspace's id.
pub const TEAM_ID: &str = "T0FLYNN";
/// The app's id.
pub const APP_ID: &str = "A0FLYNN";
/// A direct message channel between [`OWNER`] and the bot.
pub const DM: &str = "D0OWNER";
/// A public channel the bot is in.
pub const GENERAL: &str = "C0GENERAL";
/// The person talking to the bot.
pub const OWNER: &str = "U0OWNER";
/// Someone else in [`GENERAL`].
pub const OTHER: &str = "U0OTHER";

/// The longest message text Slack takes.
pub const TEXT_MAX: usize = 40_000;
/// The longest `section` text.
pub const SECTION_MAX: usize = 3000;
/// The most elements in an `actions` block.
pub const ACTIONS_MAX: usize = 25;
/// The longest button text.
pub const BUTTON_TEXT_MAX: usize = 75;
/// The longest button value.
pub const BUTTON_VALUE_MAX: usize = 2000;
/// What [`FakeSlack::fail_next`] calls the upload URLs.
pub const UPLOAD: &str = "upload";
/// The largest file Slack takes (1 GB).
pub const FILE_MAX: usize = 1_000_000_000;
/// How long Slack waits for an interaction's acknowledgement.
const INTERACTIVE_ACK: Duration = Duration::from_secs(3);
/// How many times Slack retries an event.
const MAX_RETRIES: u32 = 3;

/// What the next call of a method gets instead of its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// HTTP 429 with `Retry-After: <secs>` and `{"ok":false,"error":"ratelimited"}`.
    RateLimited { retry_after_secs: u64 },
    /// This HTTP status with an HTML body (a 502 from the edge).
    Status(u16),
    /// HTTP 200 with `{"ok": false, "error": <code>}`.
    Error(String),
}

/// A message the bot posted.
#[derive(Debug, Clone, PartialEq)]
pub struct Posted {
    pub channel: String,
    pub ts: String,
    pub thread_ts: Option<String>,
    pub text: String,
    /// The blocks; `None` when it has none (or an update removed them).
    pub blocks: Option<Value>,
    /// `unfurl_links` as sent.
    pub unfurl_links: Option<bool>,
    /// Times `chat.update` changed it.
    pub edits: u32,
}

/// A file the bot shared with `files.completeUploadExternal`.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedFile {
    /// Its id (`F…`), from `files.getUploadURLExternal`.
    pub id: String,
    /// The `filename` announced for it.
    pub filename: String,
    /// The `title` given when it was shared (the file name when none).
    pub title: String,
    /// The bytes uploaded.
    pub data: Vec<u8>,
    /// The `Content-Type` of the upload.
    pub content_type: Option<String>,
    /// Where it was shared (`channel_id`).
    pub channel: String,
    /// The thread it was shared in.
    pub thread_ts: Option<String>,
    /// The message introducing it.
    pub initial_comment: Option<String>,
}

/// A file announced with `files.getUploadURLExternal`.
#[derive(Debug, Clone)]
struct Upload {
    id: String,
    filename: String,
    length: usize,
    /// The path of its upload URL.
    path: String,
    /// The bytes and their `Content-Type`, once uploaded.
    uploaded: Option<(Vec<u8>, Option<String>)>,
    shared: bool,
}

#[derive(Debug)]
struct Envelope {
    id: String,
    kind: String,
    payload: Value,
    /// Times sent so far.
    sent: u32,
    last_sent: Option<Instant>,
    acked: bool,
    late_reported: bool,
}

#[derive(Debug, Clone)]
enum Control {
    Frame(Value),
    Drop,
}

#[derive(Debug)]
struct Inner {
    requests: Vec<CapturedRequest>,
    violations: Vec<String>,
    failures: VecDeque<(String, Failure)>,
    channels: BTreeSet<String>,
    messages: Vec<Posted>,
    counter: u64,
    tickets: HashMap<String, bool>,
    connections_opened: u64,
    /// Sockets that got `hello`; the last is the current one.
    sockets: u64,
    envelopes: Vec<Envelope>,
    acks: Vec<String>,
    control: Vec<(u64, Control)>,
    redeliver_after: Duration,
    responses: Vec<Value>,
    response_urls: HashSet<String>,
    files: HashMap<String, (String, Vec<u8>)>,
    uploads: Vec<Upload>,
    shared: Vec<SharedFile>,
}

#[derive(Debug)]
struct State {
    inner: Mutex<Inner>,
    version: watch::Sender<u64>,
    addr: OnceLock<SocketAddr>,
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the state and wakes everyone waiting on it.
    fn change<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let out = f(&mut self.lock());
        self.version.send_modify(|v| *v += 1);
        out
    }

    fn violation(&self, message: String) {
        self.change(|inner| inner.violations.push(message));
    }

    fn base(&self) -> String {
        match self.addr.get() {
            Some(addr) => format!("http://{addr}"),
            None => "http://127.0.0.1:0".to_owned(),
        }
    }
}

/// A fake Slack workspace on `127.0.0.1`.
#[derive(Debug)]
pub struct FakeSlack {
    state: Arc<State>,
    server: Server,
}

impl FakeSlack {
    /// Starts a fake workspace with the channels [`DM`] and [`GENERAL`].
    pub async fn start() -> Self {
        let (version, _) = watch::channel(0);
        let state = Arc::new(State {
            inner: Mutex::new(Inner {
                requests: Vec::new(),
                violations: Vec::new(),
                failures: VecDeque::new(),
                channels: [DM, GENERAL].into_iter().map(str::to_owned).collect(),
                messages: Vec::new(),
                counter: 0,
                tickets: HashMap::new(),
                connections_opened: 0,
                sockets: 0,
                envelopes: Vec::new(),
                acks: Vec::new(),
                control: Vec::new(),
                redeliver_after: Duration::from_secs(3),
                responses: Vec::new(),
                response_urls: HashSet::new(),
                files: HashMap::new(),
                uploads: Vec::new(),
                shared: Vec::new(),
            }),
            version,
            addr: OnceLock::new(),
        });
        let router = Router::new()
            .route("/link", get(link))
            .route("/link/", get(link))
            .fallback(http)
            .with_state(Arc::clone(&state));
        let server = Server::start_router("slack", router);
        let _ = state.addr.set(server.addr());
        FakeSlack { state, server }
    }

    /// The address the fake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The Web API base to configure as `api_url`: `http://…/api`.
    pub fn api_url(&self) -> String {
        format!("http://{}/api", self.server.addr())
    }

    /// Every HTTP request received (Web API, files, response URLs), in
    /// order; form bodies appear as JSON objects of strings.
    pub fn requests(&self) -> Vec<CapturedRequest> {
        self.state.lock().requests.clone()
    }

    /// The Web API calls received, by method name, in order.
    pub fn calls(&self, method: &str) -> Vec<CapturedRequest> {
        let path = format!("/api/{method}");
        self.requests()
            .into_iter()
            .filter(|r| r.path == path)
            .collect()
    }

    /// Every protocol violation seen; empty when the client behaved.
    pub fn violations(&self) -> Vec<String> {
        self.state.lock().violations.clone()
    }

    /// Makes a channel known (the bot is a member).
    pub fn add_channel(&self, id: &str) {
        self.state
            .change(|inner| inner.channels.insert(id.to_owned()));
    }

    /// Answers the next call of `method` (`chat.postMessage`, or
    /// [`UPLOAD`] for the next upload URL) with `failure`.
    pub fn fail_next(&self, method: &str, failure: Failure) {
        self.state
            .change(|inner| inner.failures.push_back((method.to_owned(), failure)));
    }

    /// The files the bot shared into channels and threads, in order.
    pub fn shared_files(&self) -> Vec<SharedFile> {
        self.state.lock().shared.clone()
    }

    /// The messages the bot posted, as they are now.
    pub fn messages(&self) -> Vec<Posted> {
        self.state.lock().messages.clone()
    }

    /// Waits until the bot posted at least `n` messages.
    pub async fn wait_messages(&self, n: usize, timeout: Duration) -> bool {
        self.wait(timeout, |inner| inner.messages.len() >= n).await
    }

    /// A fresh message timestamp (`1700000000.000123`).
    pub fn next_ts(&self) -> String {
        let n = self.state.change(|inner| {
            inner.counter += 1;
            inner.counter
        });
        format!("{}.{:06}", 1_700_000_000 + n, n * 100)
    }

    /// Serves a private file at a `url_private` that needs the bot token;
    /// returns the file object a message's `files` carries.
    pub fn add_file(&self, name: &str, mimetype: &str, data: &[u8]) -> Value {
        let n = self.next_ts().replace('.', "");
        let path = format!("/files-pri/{TEAM_ID}-F{n}/{name}");
        self.state.change(|inner| {
            inner
                .files
                .insert(path.clone(), (mimetype.to_owned(), data.to_vec()))
        });
        let url = format!("{}{path}", self.state.base());
        json!({
            "id": format!("F{n}"), "created": 1_700_000_000, "timestamp": 1_700_000_000,
            "name": name, "title": name, "mimetype": mimetype,
            "filetype": name.rsplit('.').next().unwrap_or("bin"),
            "user": OWNER, "mode": "hosted", "editable": false, "is_external": false,
            "size": data.len(), "url_private": url,
            "url_private_download": format!("{url}?download=1"),
        })
    }

    // ---------------------------------------------------------- Socket Mode

    /// How long an unacknowledged `events_api` envelope waits before it is
    /// sent again.
    pub fn set_redelivery_after(&self, wait: Duration) {
        self.state.change(|inner| inner.redeliver_after = wait);
    }

    /// Calls of `apps.connections.open` answered with a URL.
    pub fn connections_opened(&self) -> u64 {
        self.state.lock().connections_opened
    }

    /// WebSocket connections that got `hello`.
    pub fn sockets(&self) -> u64 {
        self.state.lock().sockets
    }

    /// Waits until `n` WebSocket connections got `hello`.
    pub async fn wait_sockets(&self, n: u64, timeout: Duration) -> bool {
        self.wait(timeout, |inner| inner.sockets >= n).await
    }

    /// Pushes an envelope (`events_api`, `interactive`, `slash_commands`)
    /// to the current connection (or the next one); returns its
    /// `envelope_id`.
    pub fn push_envelope(&self, kind: &str, payload: Value) -> String {
        let id = format!(
            "{:08x}-fake-envelope",
            self.state.lock().envelopes.len() + 1
        );
        self.state.change(|inner| {
            inner.envelopes.push(Envelope {
                id: id.clone(),
                kind: kind.to_owned(),
                payload,
                sent: 0,
                last_sent: None,
                acked: false,
                late_reported: false,
            })
        });
        id
    }

    /// Pushes `event` as an `events_api` envelope wrapping an
    /// `event_callback` with this `event_id`.
    pub fn push_event(&self, event: Value, event_id: &str) -> String {
        self.push_envelope("events_api", event_callback(event, event_id))
    }

    /// The `envelope_id`s acknowledged, in order.
    pub fn acks(&self) -> Vec<String> {
        self.state.lock().acks.clone()
    }

    /// Waits until `envelope_id` is acknowledged.
    pub async fn wait_acked(&self, envelope_id: &str, timeout: Duration) -> bool {
        self.wait(timeout, |inner| inner.acks.iter().any(|a| a == envelope_id))
            .await
    }

    /// Times an envelope was sent (1, then 2 after a redelivery...).
    pub fn times_sent(&self, envelope_id: &str) -> u32 {
        self.state
            .lock()
            .envelopes
            .iter()
            .find(|e| e.id == envelope_id)
            .map_or(0, |e| e.sent)
    }

    /// Sends `{"type":"disconnect","reason":<reason>}` on the current
    /// connection (`refresh_requested`, `warning`, `link_disabled`).
    pub fn send_disconnect(&self, reason: &str) {
        let frame = json!({"type": "disconnect", "reason": reason,
            "debug_info": {"host": "applink-fake-1"}});
        self.state.change(|inner| {
            let current = inner.sockets;
            inner.control.push((current, Control::Frame(frame)));
        });
    }

    /// Drops the current connection without a close frame.
    pub fn drop_socket(&self) {
        self.state.change(|inner| {
            let current = inner.sockets;
            inner.control.push((current, Control::Drop));
        });
    }

    /// A message event from `user` in `channel` (channel type from its
    /// id: `D…` is `im`).
    pub fn message_event(&self, channel: &str, user: &str, text: &str) -> Value {
        let ts = self.next_ts();
        let channel_type = if channel.starts_with('D') {
            "im"
        } else {
            "channel"
        };
        json!({
            "type": "message", "channel": channel, "user": user, "text": text,
            "ts": ts, "event_ts": ts, "channel_type": channel_type, "team": TEAM_ID,
            "client_msg_id": format!("{}-client", ts.replace('.', "")),
        })
    }

    /// The `app_mention` Slack sends beside a `message` event that names
    /// the bot.
    pub fn app_mention_for(&self, message: &Value) -> Value {
        let mut mention = message.clone();
        mention["type"] = json!("app_mention");
        if let Some(object) = mention.as_object_mut() {
            object.remove("channel_type");
        }
        mention
    }

    /// The `block_actions` payload Slack sends when `user` presses the
    /// button with `value` under the bot's message `ts`.
    ///
    /// # Panics
    /// When the bot posted no such message or button (a test bug).
    pub fn button_press(&self, user: &str, ts: &str, value: &str) -> Value {
        let Some(message) = self.messages().into_iter().find(|m| m.ts == ts) else {
            panic!("FakeSlack: the bot posted no message with ts {ts}");
        };
        let buttons: Vec<Value> = message
            .blocks
            .iter()
            .flat_map(|b| b.as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == "actions")
            .flat_map(|b| b["elements"].as_array().cloned().unwrap_or_default())
            .collect();
        let Some(button) = buttons.iter().find(|b| b["value"] == value) else {
            panic!("FakeSlack: message {ts} has no button with value {value}");
        };
        let n = self.next_ts();
        let response_url = format!(
            "{}/actions/{TEAM_ID}/{}/fake{}",
            self.state.base(),
            n.replace('.', ""),
            n.len()
        );
        self.state
            .change(|inner| inner.response_urls.insert(response_url.clone()));
        let mut container = json!({"type": "message", "message_ts": ts,
            "channel_id": message.channel, "is_ephemeral": false});
        let mut posted = json!({"type": "message", "user": BOT_USER_ID, "bot_id": BOT_ID,
            "text": message.text, "ts": ts, "blocks": message.blocks});
        if let Some(thread) = &message.thread_ts {
            container["thread_ts"] = json!(thread);
            posted["thread_ts"] = json!(thread);
        }
        json!({
            "type": "block_actions",
            "user": {"id": user, "username": "owner", "name": "owner", "team_id": TEAM_ID},
            "api_app_id": APP_ID, "token": "verification-token-unused",
            "container": container,
            "trigger_id": format!("{}.{}.fake{}", n.replace('.', ""), 2001, n.len()),
            "team": {"id": TEAM_ID, "domain": "flynn-test"},
            "enterprise": null, "is_enterprise_install": false,
            "channel": {"id": message.channel, "name": channel_name(&message.channel)},
            "message": posted,
            "state": {"values": {}},
            "response_url": response_url,
            "actions": [{
                "action_id": button["action_id"], "block_id": "fake-block",
                "text": button["text"], "value": value, "style": button.get("style"),
                "type": "button", "action_ts": n,
            }],
        })
    }

    /// Pushes a press of the button with `value` under message `ts`.
    pub fn press_button(&self, user: &str, ts: &str, value: &str) -> String {
        let payload = self.button_press(user, ts, value);
        self.push_envelope("interactive", payload)
    }

    /// The payload of `/<command> <text>` typed by `user` in `channel`.
    pub fn slash_command(&self, user: &str, channel: &str, command: &str, text: &str) -> Value {
        let n = self.next_ts().replace('.', "");
        json!({
            "token": "verification-token-unused", "team_id": TEAM_ID, "team_domain": "flynn-test",
            "channel_id": channel, "channel_name": channel_name(channel),
            "user_id": user, "user_name": "owner", "command": command, "text": text,
            "api_app_id": APP_ID, "is_enterprise_install": "false",
            "response_url": format!("{}/commands/{TEAM_ID}/{n}/fake", self.state.base()),
            "trigger_id": format!("{n}.2001.fakecommand"),
        })
    }

    /// The bodies posted to interaction `response_url`s, in order.
    pub fn action_responses(&self) -> Vec<Value> {
        self.state.lock().responses.clone()
    }

    async fn wait(&self, timeout: Duration, done: impl Fn(&Inner) -> bool) -> bool {
        let mut version = self.state.version.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if done(&self.state.lock()) {
                return true;
            }
            match tokio::time::timeout_at(deadline, version.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return done(&self.state.lock()),
            }
        }
    }
}

fn channel_name(channel: &str) -> &'static str {
    if channel.starts_with('D') {
        "directmessage"
    } else {
        "general"
    }
}

/// An `event_callback` body as Slack posts it (and as Socket Mode wraps
/// it).
pub fn event_callback(event: Value, event_id: &str) -> Value {
    json!({
        "token": "verification-token-unused",
        "team_id": TEAM_ID,
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": 1_700_000_000,
        "authorizations": [{"enterprise_id": null, "team_id": TEAM_ID, "user_id": BOT_USER_ID,
            "is_bot": true, "is_enterprise_install": false}],
        "is_ext_shared_channel": false,
        "event_context": format!("4-fake-{event_id}"),
    })
}

// ---------------------------------------------------------------- Events API

/// How a helper-built post is signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signing {
    /// With [`SIGNING_SECRET`] and the current time.
    Valid,
    /// With another secret.
    Forged,
    /// With [`SIGNING_SECRET`] and a timestamp 10 minutes old.
    Stale,
}

/// A post Slack would send to the app's Request URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedPost {
    /// `/events`, `/interactive` or `/commands`.
    pub path: String,
    /// Lower-case names: `content-type`, `x-slack-request-timestamp`,
    /// `x-slack-signature` (and the retry headers after [`retry`](Self::retry)).
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl SignedPost {
    /// The same post as Slack's `n`th retry (`X-Slack-Retry-Num`).
    pub fn retry(mut self, n: u32) -> Self {
        self.headers
            .push(("x-slack-retry-num".to_owned(), n.to_string()));
        self.headers
            .push(("x-slack-retry-reason".to_owned(), "http_error".to_owned()));
        self
    }
}

/// `/events` with this JSON body.
pub fn events_post(body: &Value, signing: Signing) -> SignedPost {
    signed_post(
        "/events",
        "application/json",
        body.to_string().into_bytes(),
        signing,
    )
}

/// `/interactive` with `payload=<json>`, form-encoded.
pub fn interactive_post(payload: &Value, signing: Signing) -> SignedPost {
    let body = form_encode(&[("payload", &payload.to_string())]);
    signed_post(
        "/interactive",
        "application/x-www-form-urlencoded",
        body.into_bytes(),
        signing,
    )
}

/// `/commands` with a slash command's fields (see
/// [`FakeSlack::slash_command`]), form-encoded.
pub fn command_post(fields: &Value, signing: Signing) -> SignedPost {
    let pairs: Vec<(String, String)> = fields
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let refs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let body = form_encode(&refs);
    signed_post(
        "/commands",
        "application/x-www-form-urlencoded",
        body.into_bytes(),
        signing,
    )
}

fn signed_post(path: &str, content_type: &str, body: Vec<u8>, signing: Signing) -> SignedPost {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (secret, timestamp) = match signing {
        Signing::Valid => (SIGNING_SECRET, now),
        Signing::Forged => ("not-the-signing-secret", now),
        Signing::Stale => (SIGNING_SECRET, now.saturating_sub(600)),
    };
    let mut base = format!("v0:{timestamp}:").into_bytes();
    base.extend_from_slice(&body);
    let signature = format!("v0={}", hmac_hex(secret.as_bytes(), &base));
    SignedPost {
        path: path.to_owned(),
        headers: vec![
            ("content-type".to_owned(), content_type.to_owned()),
            (
                "x-slack-request-timestamp".to_owned(),
                timestamp.to_string(),
            ),
            ("x-slack-signature".to_owned(), signature),
        ],
        body,
    }
}

fn hmac_hex(secret: &[u8], message: &[u8]) -> String {
    use hmac::{KeyInit, Mac};
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(message);
    hex::encode(mac.finalize().into_bytes())
}

/// `application/x-www-form-urlencoded`.
fn form_encode(pairs: &[(&str, &str)]) -> String {
    fn encode(text: &str, out: &mut String) {
        for byte in text.bytes() {
            match byte {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                    out.push(char::from(byte));
                }
                b' ' => out.push('+'),
                _ => out.push_str(&format!("%{byte:02X}")),
            }
        }
    }
    let mut out = String::new();
    for (i, (key, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        encode(key, &mut out);
        out.push('=');
        encode(value, &mut out);
    }
    out
}

/// A form body's fields.
fn form_decode(body: &[u8]) -> Map<String, Value> {
    fn hex(byte: u8) -> Option<u8> {
        char::from(byte)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    }
    fn decode(text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let escaped = match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
                (b'%', Some(&high), Some(&low)) => hex(high).zip(hex(low)),
                _ => None,
            };
            match (escaped, bytes[i]) {
                (Some((high, low)), _) => {
                    out.push(high * 16 + low);
                    i += 3;
                    continue;
                }
                (None, b'+') => out.push(b' '),
                (None, byte) => out.push(byte),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(key), Value::String(decode(value)))
        })
        .collect()
}

// ------------------------------------------------------------------ HTTP

/// Every HTTP request but the WebSocket: captured, then answered.
async fn http(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    let received = server::Received::read(request).await;
    if received.path.starts_with("/upload/") {
        return upload(&state, received).await;
    }
    let query = received.query.clone();
    let content_type = received
        .header("content-type")
        .unwrap_or_default()
        .to_owned();
    let bytes = received.bytes.clone();
    let (method, path, headers) = (received.method, received.path, received.headers);
    let (body, unreadable) = if bytes.is_empty() {
        (Value::Null, None)
    } else if content_type.starts_with("application/x-www-form-urlencoded") {
        (Value::Object(form_decode(&bytes)), None)
    } else if content_type.starts_with("application/json") {
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(value) => (value, None),
            Err(error) => (Value::Null, Some(format!("the body is not JSON ({error})"))),
        }
    } else {
        (
            Value::Null,
            Some(format!(
                "a body with content type '{content_type}' (Slack reads JSON or form bodies)"
            )),
        )
    };
    let captured = CapturedRequest {
        method,
        path,
        headers,
        body,
    };
    state.change(|inner| inner.requests.push(captured.clone()));
    if let Some(problem) = unreadable {
        state.violation(format!("{} {}: {problem}", captured.method, captured.path));
        return ok_false("invalid_json");
    }
    if let Some(method) = captured.path.strip_prefix("/api/") {
        return api(&state, method, &captured, &query);
    }
    if captured.path.starts_with("/files-pri/") {
        return file(&state, &captured);
    }
    if captured.path.starts_with("/actions/") || captured.path.starts_with("/commands/") {
        return response_url(&state, &captured);
    }
    state.violation(format!(
        "unexpected request {} {}",
        captured.method, captured.path
    ));
    server::respond(
        404,
        &[("content-type", "text/plain")],
        Body::from("Not Found"),
    )
}

fn ok_false(code: &str) -> Response {
    server::json(200, &json!({"ok": false, "error": code}))
}

fn bearer(request: &CapturedRequest) -> Option<&str> {
    request.header("authorization")?.strip_prefix("Bearer ")
}

fn api(state: &State, method: &str, request: &CapturedRequest, query: &str) -> Response {
    const METHODS: &[&str] = &[
        "auth.test",
        "apps.connections.open",
        "chat.postMessage",
        "chat.update",
        "files.getUploadURLExternal",
        "files.completeUploadExternal",
    ];
    if !METHODS.contains(&method) {
        state.violation(format!("unknown Web API method {method}"));
        return server::json(404, &json!({"ok": false, "error": "unknown_method"}));
    }
    if request.method != "POST" {
        state.violation(format!("{method}: {} instead of POST", request.method));
        return ok_false("invalid_arguments");
    }
    let failure = state.change(|inner| {
        let at = inner.failures.iter().position(|(m, _)| m == method)?;
        inner.failures.remove(at).map(|(_, f)| f)
    });
    match failure {
        Some(Failure::RateLimited { retry_after_secs }) => {
            return server::respond(
                429,
                &[
                    ("content-type", "application/json; charset=utf-8"),
                    ("retry-after", &retry_after_secs.to_string()),
                ],
                Body::from(json!({"ok": false, "error": "ratelimited"}).to_string()),
            );
        }
        Some(Failure::Status(status)) => {
            return server::respond(
                status,
                &[("content-type", "text/html")],
                Body::from("<html><body>Bad Gateway</body></html>"),
            );
        }
        Some(Failure::Error(code)) => return ok_false(&code),
        None => {}
    }
    let wanted = if method == "apps.connections.open" {
        APP_TOKEN
    } else {
        BOT_TOKEN
    };
    match bearer(request) {
        None => {
            state.violation(format!(
                "{method}: no 'Authorization: Bearer <token>' header"
            ));
            return ok_false("not_authed");
        }
        Some(token) if token == wanted => {}
        Some(token) if token.starts_with("xapp-") != wanted.starts_with("xapp-") => {
            state.violation(format!(
                "{method}: called with the {} token",
                if token.starts_with("xapp-") {
                    "app-level"
                } else {
                    "bot"
                }
            ));
            return ok_false("not_allowed_token_type");
        }
        Some(_) => return ok_false("invalid_auth"),
    }
    let body = &request.body;
    match method {
        "auth.test" => server::json(
            200,
            &json!({"ok": true, "url": "https://flynn-test.slack.com/", "team": TEAM,
                "user": BOT_NAME, "team_id": TEAM_ID, "user_id": BOT_USER_ID, "bot_id": BOT_ID,
                "is_enterprise_install": false}),
        ),
        "apps.connections.open" => {
            let ticket = format!("fake-ticket-{}", state.lock().tickets.len() + 1);
            state.change(|inner| {
                inner.tickets.insert(ticket.clone(), false);
                inner.connections_opened += 1;
            });
            let addr = state.base().replace("http://", "ws://");
            server::json(
                200,
                &json!({"ok": true, "url": format!("{addr}/link/?ticket={ticket}&app_id={APP_ID}")}),
            )
        }
        "chat.postMessage" => post_message(state, body),
        "files.getUploadURLExternal" => upload_url(state, request, query),
        "files.completeUploadExternal" => complete_upload(state, body),
        _ => update_message(state, body),
    }
}

/// `files.getUploadURLExternal`: `filename` and `length` (bytes), as form
/// fields or query arguments (Slack reads no JSON body here). Answers an
/// upload URL for exactly that many bytes and the file's id.
fn upload_url(state: &State, request: &CapturedRequest, query: &str) -> Response {
    let method = "files.getUploadURLExternal";
    let from_query = form_decode(query.as_bytes());
    if request
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json"))
    {
        state.violation(format!(
            "{method}: a JSON body (this method takes form fields or query arguments)"
        ));
        return ok_false("invalid_arguments");
    }
    let arg = |name: &str| {
        text_field(&request.body, name)
            .or_else(|| from_query.get(name).and_then(Value::as_str))
            .map(str::to_owned)
    };
    let Some(filename) = arg("filename").filter(|f| !f.trim().is_empty()) else {
        state.violation(format!("{method}: no filename"));
        return ok_false("invalid_arguments");
    };
    let length = arg("length").and_then(|l| l.parse::<usize>().ok());
    let Some(length) = length.filter(|l| (1..=FILE_MAX).contains(l)) else {
        state.violation(format!(
            "{method}: length {:?} is not a size in bytes from 1 to {FILE_MAX}",
            arg("length")
        ));
        return ok_false("invalid_arguments");
    };
    let n = state.change(|inner| {
        inner.counter += 1;
        inner.counter
    });
    let id = format!("F0UPLOAD{n:04}");
    let path = format!("/upload/v1/fake-{n:04}-{}", hex_token(n));
    let url = format!("{}{path}", state.base());
    state.change(|inner| {
        inner.uploads.push(Upload {
            id: id.clone(),
            filename,
            length,
            path,
            uploaded: None,
            shared: false,
        })
    });
    server::json(200, &json!({"ok": true, "upload_url": url, "file_id": id}))
}

/// An opaque part for an upload URL.
fn hex_token(n: u64) -> String {
    hex::encode(Sha256::digest(format!("upload-{n}").as_bytes()))[..24].to_owned()
}

/// A POST to an upload URL: the bytes raw, or multipart with the file in
/// a part (Slack takes both). The URL takes one upload of exactly the
/// announced length; Slack answers `OK - <length>`.
async fn upload(state: &State, received: server::Received) -> Response {
    let at = format!("{} {}", received.method, received.path);
    let text = |status: u16, body: String| {
        server::respond(
            status,
            &[("content-type", "text/plain; charset=utf-8")],
            Body::from(body),
        )
    };
    state.change(|inner| {
        inner.requests.push(CapturedRequest {
            method: received.method.clone(),
            path: received.path.clone(),
            headers: received.headers.clone(),
            body: Value::Null,
        })
    });
    if received.method != "POST" {
        state.violation(format!("{at}: upload URLs take POST"));
        return text(405, "method_not_allowed".to_owned());
    }
    let failure = state.change(|inner| {
        let at = inner.failures.iter().position(|(m, _)| m == UPLOAD)?;
        inner.failures.remove(at).map(|(_, f)| f)
    });
    match failure {
        Some(Failure::RateLimited { retry_after_secs }) => {
            return server::respond(
                429,
                &[("retry-after", &retry_after_secs.to_string())],
                Body::from("ratelimited"),
            );
        }
        Some(Failure::Status(status)) => return text(status, "upstream error".to_owned()),
        Some(Failure::Error(code)) => return text(400, code),
        None => {}
    }
    let found = state
        .lock()
        .uploads
        .iter()
        .find(|u| u.path == received.path)
        .cloned();
    let Some(announced) = found else {
        state.violation(format!("{at}: no such upload URL"));
        return text(404, "invalid_upload_url".to_owned());
    };
    if announced.uploaded.is_some() {
        state.violation(format!(
            "{at}: the URL was used already (it takes one upload)"
        ));
        return text(404, "invalid_upload_url".to_owned());
    }
    let content_type = received.header("content-type").map(str::to_owned);
    let data = match content_type.as_deref() {
        Some(t) if t.starts_with("multipart/form-data") => {
            match server::form_parts(t, received.bytes.clone()).await {
                Ok(parts) => match parts.into_iter().find(|p| p.file_name.is_some()) {
                    Some(part) => part.data.to_vec(),
                    None => {
                        state.violation(format!("{at}: a multipart upload without a file part"));
                        return text(400, "no_file_data".to_owned());
                    }
                },
                Err(problem) => {
                    state.violation(format!("{at}: {problem}"));
                    return text(400, "invalid_multipart".to_owned());
                }
            }
        }
        _ => received.bytes.to_vec(),
    };
    if data.len() != announced.length {
        state.violation(format!(
            "{at}: {} bytes uploaded, {} announced",
            data.len(),
            announced.length
        ));
        return text(400, "length_mismatch".to_owned());
    }
    let length = data.len();
    state.change(|inner| {
        if let Some(upload) = inner.uploads.iter_mut().find(|u| u.path == received.path) {
            upload.uploaded = Some((data, content_type));
        }
    });
    text(200, format!("OK - {length}"))
}

/// `files.completeUploadExternal`: `files` (a JSON array, or its text in
/// a form) of `{"id", "title"?}` naming uploaded files, shared in
/// `channel_id` (and `thread_ts`) with `initial_comment`.
fn complete_upload(state: &State, body: &Value) -> Response {
    let method = "files.completeUploadExternal";
    let files = match body.get("files") {
        Some(Value::String(text)) => serde_json::from_str::<Value>(text).ok(),
        Some(value) => Some(value.clone()),
        None => None,
    };
    let entries: Option<Vec<(String, Option<String>)>> = files
        .as_ref()
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty())
        .and_then(|entries| {
            entries
                .iter()
                .map(|e| {
                    let id = e.get("id")?.as_str()?.to_owned();
                    let title = match e.get("title") {
                        None | Some(Value::Null) => None,
                        Some(Value::String(t)) => Some(t.clone()),
                        Some(_) => return None,
                    };
                    Some((id, title))
                })
                .collect()
        });
    let Some(entries) = entries else {
        state.violation(format!(
            "{method}: files is {:?}, not a list of {{\"id\", \"title\"}}",
            body.get("files")
        ));
        return ok_false("invalid_arguments");
    };
    let channel = match body.get("channel_id").or_else(|| body.get("channels")) {
        Some(Value::String(channel)) => channel.clone(),
        _ => {
            // Without a channel Slack keeps the file private: a bot that
            // meant to send it sent nothing.
            state.violation(format!("{method}: no channel_id (the file stays private)"));
            return ok_false("invalid_arguments");
        }
    };
    if !state.lock().channels.contains(&channel) {
        state.violation(format!("{method}: unknown channel {channel}"));
        return ok_false("channel_not_found");
    }
    let thread_ts = match body.get("thread_ts") {
        None | Some(Value::Null) => None,
        Some(Value::String(ts)) if is_ts(ts) => Some(ts.clone()),
        Some(other) => {
            state.violation(format!(
                "{method}: thread_ts {other} is not a message timestamp"
            ));
            return ok_false("invalid_thread_ts");
        }
    };
    let initial_comment = text_field(body, "initial_comment").map(str::to_owned);
    if let Some(problem) = initial_comment.as_deref().and_then(unescaped_angle) {
        state.violation(format!("{method}: initial_comment: {problem}"));
    }
    let mut shared = Vec::new();
    for (id, title) in &entries {
        let upload = state.lock().uploads.iter().find(|u| u.id == *id).cloned();
        let problem = match &upload {
            None => Some(format!(
                "{id} was never announced with files.getUploadURLExternal"
            )),
            Some(u) if u.uploaded.is_none() => {
                Some(format!("{id} was announced but never uploaded"))
            }
            Some(u) if u.shared => Some(format!("{id} was completed already")),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            state.violation(format!("{method}: {problem}"));
            return ok_false("file_not_found");
        }
        let Some(Upload {
            filename,
            uploaded: Some((data, content_type)),
            ..
        }) = upload
        else {
            return ok_false("file_not_found");
        };
        shared.push(SharedFile {
            id: id.clone(),
            title: title.clone().unwrap_or_else(|| filename.clone()),
            filename,
            data,
            content_type,
            channel: channel.clone(),
            thread_ts: thread_ts.clone(),
            initial_comment: initial_comment.clone(),
        });
    }
    let answer: Vec<Value> = shared
        .iter()
        .map(|f| json!({"id": f.id, "title": f.title, "name": f.filename, "size": f.data.len()}))
        .collect();
    state.change(|inner| {
        for file in &shared {
            if let Some(upload) = inner.uploads.iter_mut().find(|u| u.id == file.id) {
                upload.shared = true;
            }
        }
        inner.shared.extend(shared);
    });
    server::json(200, &json!({"ok": true, "files": answer}))
}

fn text_field<'a>(body: &'a Value, name: &str) -> Option<&'a str> {
    body.get(name).and_then(Value::as_str)
}

/// `blocks` as sent: a JSON array, or (in a form body) its JSON text.
fn blocks_field(body: &Value) -> Result<Option<Value>, String> {
    match body.get("blocks") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => serde_json::from_str(text)
            .map(Some)
            .map_err(|e| format!("blocks is not JSON ({e})")),
        Some(value) => Ok(Some(value.clone())),
    }
}

/// The checks chat.postMessage and chat.update share: the answer when
/// they fail.
fn check_content(
    state: &State,
    method: &str,
    body: &Value,
) -> Result<(String, Option<Value>), Box<Response>> {
    let text = text_field(body, "text").unwrap_or_default().to_owned();
    let blocks = match blocks_field(body) {
        Ok(blocks) => blocks,
        Err(problem) => {
            state.violation(format!("{method}: {problem}"));
            return Err(Box::new(ok_false("invalid_blocks_format")));
        }
    };
    let has_blocks = blocks
        .as_ref()
        .and_then(Value::as_array)
        .is_some_and(|b| !b.is_empty());
    if text.trim().is_empty() && !has_blocks {
        state.violation(format!("{method}: neither text nor blocks"));
        return Err(Box::new(ok_false("no_text")));
    }
    if text.chars().count() > TEXT_MAX {
        state.violation(format!(
            "{method}: text of {} characters (at most {TEXT_MAX})",
            text.chars().count()
        ));
        return Err(Box::new(ok_false("msg_too_long")));
    }
    if let Some(problem) = unescaped_angle(&text) {
        state.violation(format!("{method}: text: {problem}"));
    }
    if let Some(blocks) = &blocks {
        let problems = block_problems(blocks);
        if !problems.is_empty() {
            state.violation(format!("{method}: invalid blocks: {}", problems.join("; ")));
            return Err(Box::new(server::json(
                200,
                &json!({"ok": false, "error": "invalid_blocks", "errors": problems,
                    "response_metadata": {"messages": problems.iter().map(|p| format!("[ERROR] {p}")).collect::<Vec<_>>()}}),
            )));
        }
    }
    let blocks = blocks.filter(|b| b.as_array().is_some_and(|a| !a.is_empty()));
    Ok((text, blocks))
}

fn known_channel(state: &State, method: &str, body: &Value) -> Result<String, Box<Response>> {
    match text_field(body, "channel") {
        Some(channel) if state.lock().channels.contains(channel) => Ok(channel.to_owned()),
        Some(channel) => {
            state.violation(format!("{method}: unknown channel {channel}"));
            Err(Box::new(ok_false("channel_not_found")))
        }
        None => {
            state.violation(format!("{method}: no channel"));
            Err(Box::new(ok_false("channel_not_found")))
        }
    }
}

fn is_ts(text: &str) -> bool {
    text.split_once('.').is_some_and(|(secs, micros)| {
        !secs.is_empty()
            && !micros.is_empty()
            && secs.bytes().all(|b| b.is_ascii_digit())
            && micros.bytes().all(|b| b.is_ascii_digit())
    })
}

fn post_message(state: &State, body: &Value) -> Response {
    let method = "chat.postMessage";
    let channel = match known_channel(state, method, body) {
        Ok(channel) => channel,
        Err(answer) => return *answer,
    };
    let (text, blocks) = match check_content(state, method, body) {
        Ok(content) => content,
        Err(answer) => return *answer,
    };
    let thread_ts = match body.get("thread_ts") {
        None | Some(Value::Null) => None,
        Some(Value::String(ts)) if is_ts(ts) => Some(ts.clone()),
        Some(other) => {
            state.violation(format!(
                "{method}: thread_ts {other} is not a message timestamp"
            ));
            None
        }
    };
    let ts = {
        let n = state.change(|inner| {
            inner.counter += 1;
            inner.counter
        });
        format!("{}.{:06}", 1_700_000_000 + n, n * 100)
    };
    let posted = Posted {
        channel: channel.clone(),
        ts: ts.clone(),
        thread_ts: thread_ts.clone(),
        text: text.clone(),
        blocks: blocks.clone(),
        unfurl_links: body.get("unfurl_links").and_then(Value::as_bool),
        edits: 0,
    };
    state.change(|inner| inner.messages.push(posted));
    let mut message = json!({"type": "message", "subtype": "bot_message", "text": text,
        "user": BOT_USER_ID, "bot_id": BOT_ID, "ts": ts, "team": TEAM_ID});
    if let Some(thread) = thread_ts {
        message["thread_ts"] = json!(thread);
    }
    if let Some(blocks) = blocks {
        message["blocks"] = blocks;
    }
    server::json(
        200,
        &json!({"ok": true, "channel": channel, "ts": ts, "message": message}),
    )
}

fn update_message(state: &State, body: &Value) -> Response {
    let method = "chat.update";
    let channel = match known_channel(state, method, body) {
        Ok(channel) => channel,
        Err(answer) => return *answer,
    };
    let Some(ts) = text_field(body, "ts").map(str::to_owned) else {
        state.violation(format!("{method}: no ts"));
        return ok_false("message_not_found");
    };
    let (text, blocks) = match check_content(state, method, body) {
        Ok(content) => content,
        Err(answer) => return *answer,
    };
    let removes_blocks = body.get("blocks").is_some();
    let updated = state.change(|inner| {
        let message = inner
            .messages
            .iter_mut()
            .find(|m| m.channel == channel && m.ts == ts)?;
        message.text = text.clone();
        if blocks.is_some() || removes_blocks {
            message.blocks = blocks.clone();
        }
        message.edits += 1;
        Some(message.clone())
    });
    let Some(updated) = updated else {
        state.violation(format!("{method}: no message {ts} in {channel}"));
        return ok_false("message_not_found");
    };
    server::json(
        200,
        &json!({"ok": true, "channel": channel, "ts": ts, "text": updated.text,
            "message": {"type": "message", "text": updated.text, "user": BOT_USER_ID,
                "bot_id": BOT_ID, "blocks": updated.blocks}}),
    )
}

/// A `<` that opens no link (`<http…>`, `<mailto:…>`), mention (`<@…>`,
/// `<#…>`) or special mention (`<!…>`): Slack wants `&lt;`.
fn unescaped_angle(text: &str) -> Option<String> {
    let mut rest = text;
    while let Some(at) = rest.find('<') {
        let after = &rest[at + 1..];
        let opens = ["http://", "https://", "mailto:", "@", "#", "!"]
            .iter()
            .any(|p| after.starts_with(p));
        if !opens || !after.contains('>') {
            let shown: String = rest[at..].chars().take(20).collect();
            return Some(format!("unescaped '<' at '{shown}' (mrkdwn needs &lt;)"));
        }
        rest = after;
    }
    None
}

/// What Slack's Block Kit validation would say about `blocks`.
fn block_problems(blocks: &Value) -> Vec<String> {
    let Some(blocks) = blocks.as_array() else {
        return vec!["blocks must be an array".to_owned()];
    };
    let mut problems = Vec::new();
    if blocks.len() > 50 {
        problems.push(format!("{} blocks (at most 50)", blocks.len()));
    }
    let mut action_ids = HashSet::new();
    for (i, block) in blocks.iter().enumerate() {
        let at = format!("/blocks/{i}");
        match block.get("type").and_then(Value::as_str) {
            Some("section") => match block.pointer("/text/text").and_then(Value::as_str) {
                Some(text) => {
                    let n = text.chars().count();
                    if n == 0 || n > SECTION_MAX {
                        problems.push(format!(
                            "{at}/text/text: {n} characters (1 to {SECTION_MAX})"
                        ));
                    }
                    if !matches!(
                        block.pointer("/text/type").and_then(Value::as_str),
                        Some("mrkdwn" | "plain_text")
                    ) {
                        problems.push(format!("{at}/text/type must be mrkdwn or plain_text"));
                    }
                    if let Some(problem) = unescaped_angle(text) {
                        problems.push(format!("{at}/text/text: {problem}"));
                    }
                }
                None => problems.push(format!("{at}: a section needs text")),
            },
            Some("actions") => {
                let elements = block.get("elements").and_then(Value::as_array);
                let Some(elements) = elements.filter(|e| !e.is_empty()) else {
                    problems.push(format!("{at}/elements: 1 to {ACTIONS_MAX} elements"));
                    continue;
                };
                if elements.len() > ACTIONS_MAX {
                    problems.push(format!(
                        "{at}/elements: {} elements (at most {ACTIONS_MAX})",
                        elements.len()
                    ));
                }
                for (j, element) in elements.iter().enumerate() {
                    let at = format!("{at}/elements/{j}");
                    if element.get("type").and_then(Value::as_str) != Some("button") {
                        problems.push(format!("{at}: only buttons are expected"));
                        continue;
                    }
                    if element.pointer("/text/type").and_then(Value::as_str) != Some("plain_text") {
                        problems.push(format!("{at}/text/type must be plain_text"));
                    }
                    let label = element
                        .pointer("/text/text")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let n = label.chars().count();
                    if n == 0 || n > BUTTON_TEXT_MAX {
                        problems.push(format!(
                            "{at}/text/text: {n} characters (1 to {BUTTON_TEXT_MAX})"
                        ));
                    }
                    if let Some(value) = element.get("value") {
                        let n = value.as_str().map_or(usize::MAX, |v| v.chars().count());
                        if n > BUTTON_VALUE_MAX {
                            problems.push(format!(
                                "{at}/value: longer than {BUTTON_VALUE_MAX} characters"
                            ));
                        }
                    }
                    match element.get("action_id").and_then(Value::as_str) {
                        Some(id) if id.len() > 255 => {
                            problems.push(format!("{at}/action_id: longer than 255 characters"));
                        }
                        Some(id) if !action_ids.insert(id.to_owned()) => {
                            problems.push(format!(
                                "{at}/action_id: '{id}' is used twice in this message"
                            ));
                        }
                        Some(_) | None => {}
                    }
                    match element.get("style") {
                        None => {}
                        Some(style) if style == "primary" || style == "danger" => {}
                        Some(style) => {
                            problems.push(format!("{at}/style: {style} (primary or danger)"))
                        }
                    }
                }
            }
            Some("divider" | "context" | "header" | "rich_text" | "image") => {}
            other => problems.push(format!("{at}/type: unknown block type {other:?}")),
        }
    }
    problems
}

fn file(state: &State, request: &CapturedRequest) -> Response {
    let login = || {
        server::respond(
            200,
            &[("content-type", "text/html; charset=utf-8")],
            Body::from("<!DOCTYPE html><html><body>Sign in to Slack</body></html>"),
        )
    };
    match bearer(request) {
        None => {
            state.violation(format!(
                "GET {}: no bot token (Slack answers its login page)",
                request.path
            ));
            return login();
        }
        Some(token) if token != BOT_TOKEN => return login(),
        Some(_) => {}
    }
    let found = state.lock().files.get(&request.path).cloned();
    match found {
        Some((mimetype, data)) => {
            server::respond(200, &[("content-type", &mimetype)], Body::from(data))
        }
        None => {
            state.violation(format!("GET {}: no such file", request.path));
            server::respond(
                404,
                &[("content-type", "text/plain")],
                Body::from("file_not_found"),
            )
        }
    }
}

fn response_url(state: &State, request: &CapturedRequest) -> Response {
    let url = format!("{}{}", state.base(), request.path);
    if request.method != "POST" {
        state.violation(format!("{} {url}: response URLs take POST", request.method));
        return server::respond(405, &[], Body::from("method_not_allowed"));
    }
    if !state.lock().response_urls.contains(&url) && !request.path.starts_with("/commands/") {
        state.violation(format!("POST to an unknown response URL {url}"));
        return server::respond(404, &[], Body::from("no_response_url"));
    }
    let body = &request.body;
    if text_field(body, "text").is_none_or(|t| t.trim().is_empty()) && body.get("blocks").is_none()
    {
        state.violation(format!("POST {url}: neither text nor blocks"));
        return server::respond(400, &[], Body::from("no_text"));
    }
    if let Some(kind) = body.get("response_type")
        && kind != "ephemeral"
        && kind != "in_channel"
    {
        state.violation(format!("POST {url}: response_type {kind}"));
        return server::respond(400, &[], Body::from("invalid_response_type"));
    }
    state.change(|inner| inner.responses.push(body.clone()));
    server::json(200, &json!({"ok": true}))
}

// ------------------------------------------------------------ Socket Mode

async fn link(
    ws: WebSocketUpgrade,
    Query(query): Query<HashMap<String, String>>,
    AxumState(state): AxumState<Arc<State>>,
) -> Response {
    let ticket = query.get("ticket").cloned().unwrap_or_default();
    let fresh = state.change(|inner| match inner.tickets.get_mut(&ticket) {
        Some(used) if !*used => {
            *used = true;
            true
        }
        _ => false,
    });
    if !fresh {
        state.violation(format!(
            "WebSocket opened with a ticket that is unknown or used already ('{ticket}'): call apps.connections.open for each connection"
        ));
        return server::respond(401, &[], Body::from("invalid ticket"));
    }
    ws.on_upgrade(move |socket| serve_socket(state, socket))
}

/// What the connection loop does next.
enum Next {
    Send(String),
    Drop,
}

async fn serve_socket(state: Arc<State>, mut socket: WebSocket) {
    let hello = json!({"type": "hello", "num_connections": 1,
        "debug_info": {"host": "applink-fake-1", "build_number": 1, "approximate_connection_time": 18060},
        "connection_info": {"app_id": APP_ID}});
    if socket
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    let mut version = state.version.subscribe();
    let me = state.change(|inner| {
        inner.sockets += 1;
        inner.sockets
    });
    loop {
        let (next, wake_in) = due(&state, me);
        for step in next {
            match step {
                Next::Send(frame) => {
                    if socket.send(Message::Text(frame.into())).await.is_err() {
                        return;
                    }
                }
                Next::Drop => return,
            }
        }
        tokio::select! {
            frame = socket.recv() => match frame {
                Some(Ok(Message::Text(text))) => acknowledge(&state, text.as_str()),
                Some(Ok(Message::Binary(_))) => state.violation("Socket Mode: a binary frame (Slack expects JSON text)".to_owned()),
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => {}
            },
            _ = version.changed() => {}
            () = tokio::time::sleep(wake_in) => {}
        }
    }
}

/// The frames due on connection `me`, and when to look again.
fn due(state: &State, me: u64) -> (Vec<Next>, Duration) {
    let mut inner = state.lock();
    let mut next = Vec::new();
    let current = inner.sockets == me;
    let control = std::mem::take(&mut inner.control);
    for (socket, step) in control {
        if socket == me {
            next.push(match step {
                Control::Frame(frame) => Next::Send(frame.to_string()),
                Control::Drop => Next::Drop,
            });
        } else {
            inner.control.push((socket, step));
        }
    }
    let now = Instant::now();
    let redeliver_after = inner.redeliver_after;
    let mut wake_in = Duration::from_secs(1);
    let mut late = Vec::new();
    for envelope in inner.envelopes.iter_mut().filter(|e| !e.acked) {
        let events = envelope.kind == "events_api";
        match envelope.last_sent {
            Some(sent) if !events => {
                if now.duration_since(sent) > INTERACTIVE_ACK && !envelope.late_reported {
                    envelope.late_reported = true;
                    late.push(format!(
                        "{} envelope {} not acknowledged within 3 s (Slack shows the user an error)",
                        envelope.kind, envelope.id
                    ));
                }
                continue;
            }
            Some(_) if envelope.sent > MAX_RETRIES => continue,
            Some(sent) if now.duration_since(sent) < redeliver_after => {
                wake_in = wake_in.min(redeliver_after - now.duration_since(sent));
                continue;
            }
            _ => {}
        }
        if !current {
            continue;
        }
        let mut frame = json!({"envelope_id": envelope.id, "payload": envelope.payload,
            "type": envelope.kind, "accepts_response_payload": !events});
        if events {
            frame["retry_attempt"] = json!(envelope.sent);
            frame["retry_reason"] = json!(if envelope.sent == 0 { "" } else { "timeout" });
        }
        envelope.sent += 1;
        envelope.last_sent = Some(now);
        wake_in = wake_in.min(redeliver_after);
        next.push(Next::Send(frame.to_string()));
    }
    inner.violations.extend(late);
    (next, wake_in)
}

fn acknowledge(state: &State, text: &str) {
    let Ok(frame) = serde_json::from_str::<Value>(text) else {
        state.violation(format!("Socket Mode: a frame that is not JSON: {text}"));
        return;
    };
    let Some(id) = frame.get("envelope_id").and_then(Value::as_str) else {
        state.violation(format!("Socket Mode: a frame without envelope_id: {text}"));
        return;
    };
    let known = state.change(|inner| {
        let envelope = inner.envelopes.iter_mut().find(|e| e.id == id)?;
        envelope.acked = true;
        inner.acks.push(id.to_owned());
        Some(())
    });
    if known.is_none() {
        state.violation(format!(
            "Socket Mode: acknowledged an unknown envelope {id}"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_encode_and_decode_back() {
        let body = form_encode(&[("payload", "{\"a\": \"b&c=d+é\"}"), ("x", "")]);
        let fields = form_decode(body.as_bytes());
        assert_eq!(fields["payload"], "{\"a\": \"b&c=d+é\"}");
        assert_eq!(fields["x"], "");
    }

    #[test]
    fn block_kit_limits_are_checked() {
        let ok = json!([{"type": "section", "text": {"type": "mrkdwn", "text": "hi"}},
            {"type": "actions", "elements": [
                {"type": "button", "action_id": "a", "text": {"type": "plain_text", "text": "Yes"}, "value": "y", "style": "primary"}]}]);
        assert_eq!(block_problems(&ok), Vec::<String>::new());
        let bad = json!([{"type": "section", "text": {"type": "mrkdwn", "text": "x".repeat(3001)}},
            {"type": "actions", "elements": [
                {"type": "button", "action_id": "a", "text": {"type": "plain_text", "text": "Y".repeat(76)}, "style": "green"},
                {"type": "button", "action_id": "a", "text": {"type": "plain_text", "text": "N"}}]}]);
        assert_eq!(block_problems(&bad).len(), 4);
    }

    #[test]
    fn a_bare_angle_bracket_is_flagged_and_links_are_not() {
        assert_eq!(unescaped_angle("see <https://x.y|x> and <@U1> &lt;3"), None);
        assert!(unescaped_angle("a < b").is_some());
    }
}
