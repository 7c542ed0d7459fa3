//! A strict fake of Discord for one bot: the gateway WebSocket
//! (`/?v=10&encoding=json`), the REST API under `/api/v10`, and a CDN
//! serving attachments under `/attachments/`.
//!
//! The gateway speaks Discord's opcodes: HELLO, IDENTIFY (token and
//! intents checked, closing with 4004 / 4013 / 4014 as Discord does),
//! READY, HEARTBEAT / ACK, RESUME (session id and sequence checked,
//! missed dispatches replayed, then RESUMED) and INVALID SESSION.
//! Intents are applied the way Discord applies them: no
//! `GUILD_MESSAGES`, no server messages; no `MESSAGE_CONTENT`, empty
//! text in server messages that do not mention the bot. One session at a
//! time.
//!
//! A session outlives its connection, as Discord's does: dispatches
//! for it are kept (and replayed on RESUME) while the bot is away, until
//! the client closes with 1000 / 1001 or the test expires it
//! ([`FakeDiscord::expire_session`]); then RESUME gets INVALID SESSION
//! (`d: false`) and what was sent in it is never delivered.
//!
//! REST answers the routes a chat bot uses (messages and channel history,
//! typing, global commands, interaction callbacks and webhooks), requires
//! `Authorization: Bot <token>` where Discord does, validates bodies
//! (content 1-2000 characters, at most 5 action rows of 5 buttons,
//! `custom_id` 1-100 characters and unique) and answers problems in
//! Discord's shapes (`{"message","code","errors"}`), recording each in
//! [`FakeDiscord::violations`]. A message with files comes as
//! `multipart/form-data` ("Uploading Files"): the body is read strictly,
//! `payload_json` must hold the message, each `attachments[].id` must name
//! a `files[n]` part, at most 10 files of at most
//! [`FakeDiscordOptions::upload_limit`] each (else 413, code 40005); the
//! files are served by the CDN, listed on the message as Discord lists
//! attachments, and recorded in [`FakeDiscord::files`]. Interaction callbacks are accepted once,
//! within 3 seconds of the interaction.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ws::{CloseFrame, Message as WsMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, Request, State as AxumState};
use axum::response::Response;
use axum::routing::get;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use crate::server::{self, CapturedRequest, FormPart, Server};

/// The bot token the fake accepts unless told otherwise.
pub const TOKEN: &str = "MTA5ODc2NTQzMjEwOTg3NjU0.GfAkEd.fake-discord-bot-token-0123456789";
/// The bot's user id.
pub const BOT_ID: u64 = 1_098_765_432_109_876_543;
/// The bot's application id (Discord gives bots their user id).
pub const APPLICATION_ID: u64 = BOT_ID;
/// The bot's username.
pub const BOT_NAME: &str = "flynn-test";
/// The one server (guild) the fake knows.
pub const GUILD_ID: u64 = 1_111_111_111_111_111_111;

/// Intent bits (Discord's gateway intents), as a client asks for them
/// in IDENTIFY.
pub mod intents {
    pub const GUILDS: u64 = 1 << 0;
    pub const GUILD_MEMBERS: u64 = 1 << 1;
    pub const GUILD_PRESENCES: u64 = 1 << 8;
    pub const GUILD_MESSAGES: u64 = 1 << 9;
    pub const DIRECT_MESSAGES: u64 = 1 << 12;
    pub const MESSAGE_CONTENT: u64 = 1 << 15;
    /// Every bit Discord defines.
    pub const VALID: u64 = 0b11_0011_0001_1111_1111_1111_1111;
    /// The intents an app must switch on in the Developer Portal.
    pub const PRIVILEGED: u64 = GUILD_MEMBERS | GUILD_PRESENCES | MESSAGE_CONTENT;
}

/// What Discord waits for an interaction's first answer.
const INTERACTION_DEADLINE: Duration = Duration::from_secs(3);
/// Every timestamp the fake writes.
const TIMESTAMP: &str = "2026-01-02T03:04:05.678000+00:00";
/// Discord's default upload limit for bots (10 MiB since 2024).
pub const UPLOAD_LIMIT: u64 = 10 * 1024 * 1024;
/// The most files one message carries.
const MAX_FILES: usize = 10;
/// How long `wait_until` waits before failing the test.
const WAIT: Duration = Duration::from_secs(10);

/// A Discord user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscordUser {
    /// The user's snowflake.
    pub id: u64,
    /// The unique username (`alice`).
    pub username: String,
    /// The display name, when the user set one.
    pub global_name: Option<String>,
    /// Whether the account is a bot.
    pub bot: bool,
}

impl DiscordUser {
    /// A person with a username and a display name.
    pub fn person(id: u64, username: &str, global_name: Option<&str>) -> Self {
        DiscordUser {
            id,
            username: username.to_owned(),
            global_name: global_name.map(str::to_owned),
            bot: false,
        }
    }

    /// Another bot.
    pub fn bot(id: u64, username: &str) -> Self {
        DiscordUser {
            id,
            username: username.to_owned(),
            global_name: None,
            bot: true,
        }
    }

    /// The fake's own bot.
    pub fn this_bot() -> Self {
        DiscordUser::bot(BOT_ID, BOT_NAME)
    }
}

/// A failure to answer the next REST request with.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// 429 with Discord's body and headers; `retry_after` in seconds.
    RateLimited { retry_after: f64, global: bool },
    /// This status with an HTML body, the way Cloudflare answers 5xx.
    Status(u16),
}

/// How a fake starts.
#[derive(Debug, Clone)]
pub struct FakeDiscordOptions {
    /// The bot token IDENTIFY, RESUME and REST must carry.
    pub token: String,
    /// HELLO's `heartbeat_interval`, in milliseconds (Discord: 41250).
    pub heartbeat_interval_ms: u64,
    /// The privileged intents switched on in the "Developer Portal".
    pub privileged_intents: u64,
    /// How long after an interaction its first callback is accepted
    /// (Discord: 3 s).
    pub interaction_deadline: Duration,
    /// The largest file a message may carry (Discord: 10 MiB without
    /// boosts); a larger one is answered 413, code 40005.
    pub upload_limit: u64,
}

impl Default for FakeDiscordOptions {
    fn default() -> Self {
        FakeDiscordOptions {
            token: TOKEN.to_owned(),
            heartbeat_interval_ms: 41_250,
            privileged_intents: intents::MESSAGE_CONTENT,
            interaction_deadline: INTERACTION_DEADLINE,
            upload_limit: UPLOAD_LIMIT,
        }
    }
}

/// A message the bot sent (or an interaction response), as it stands.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    pub id: u64,
    pub channel_id: u64,
    /// The text as it stands after any edits.
    pub content: String,
    /// The action rows, `[]` when none.
    pub components: Value,
    /// The `allowed_mentions` the last request carried.
    pub allowed_mentions: Value,
    /// The interaction it answers (`@original` or a followup).
    pub interaction: Option<u64>,
    /// Flags as they stand (4: no link previews, 64: ephemeral).
    pub flags: u64,
    /// Times it was edited.
    pub edits: u32,
    /// The attachments as Discord returns them (`id`, `filename`, `size`,
    /// `url`, `proxy_url`, `content_type`); `[]` when none.
    pub attachments: Value,
}

/// A file the bot uploaded with a message.
#[derive(Debug, Clone, PartialEq)]
pub struct SentFile {
    /// The message that carries it.
    pub message: u64,
    pub channel: u64,
    /// The attachment's id.
    pub id: u64,
    /// The name from `payload_json`'s `attachments` (what Discord shows).
    pub filename: String,
    /// The file part's `Content-Type`.
    pub content_type: Option<String>,
    pub data: Bytes,
    /// The message's text (the caption).
    pub content: String,
    /// Sent as a voice message (`IS_VOICE_MESSAGE`): its length and
    /// waveform as the attachment declared them.
    pub voice: Option<VoiceMessage>,
}

/// What a voice message's attachment declares.
#[derive(Debug, Clone, PartialEq)]
pub struct VoiceMessage {
    pub duration_secs: f64,
    /// The waveform, decoded: one byte per point, at most 256.
    pub waveform: Vec<u8>,
}

/// An interaction callback the fake accepted or refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Callback {
    /// The interaction's id.
    pub interaction: u64,
    /// The response type (4 message, 5 deferred, 6 deferred update...).
    pub kind: u64,
    /// The response's `data` (`Null` for deferred types).
    pub data: Value,
    /// How long after the interaction was created it came.
    pub after: Duration,
    /// Whether the fake accepted it (refused ones are violations).
    pub accepted: bool,
}

/// A RESUME the fake accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeRecord {
    /// The session the client resumed.
    pub session_id: String,
    /// The last sequence number the client said it had.
    pub seq: u64,
    /// The sequence numbers replayed to the client.
    pub replayed: Vec<u64>,
}

/// A `GET /channels/{id}/messages` the fake answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryRead {
    pub channel: u64,
    /// The `after` snowflake, when given.
    pub after: Option<u64>,
    /// The `limit` asked for (Discord's default: 50).
    pub limit: u64,
    /// The ids answered, in the order sent (newest first, as Discord).
    pub answered: Vec<u64>,
}

/// An interaction the fake dispatched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedInteraction {
    /// The interaction's id.
    pub id: u64,
    /// Its token, which answers it in callback and webhook paths.
    pub token: String,
}

/// What a connection task is told to do.
#[derive(Debug)]
enum Out {
    Text(String),
    Close(u16, &'static str),
    /// End the TCP connection without a close frame.
    Drop,
}

#[derive(Debug, Clone)]
struct Channel {
    /// 0 server text, 1 DM, 11 public thread.
    kind: u8,
    guild: Option<u64>,
    parent: Option<u64>,
    recipient: Option<u64>,
}

#[derive(Debug, Clone)]
struct StoredMessage {
    channel: u64,
    author: u64,
    /// The full message object as Discord would send it.
    json: Value,
    interaction: Option<u64>,
    edits: u32,
    /// The `nonce` it was created with, and when, if `enforce_nonce`
    /// was set: another create with it within [`NONCE_WINDOW`] returns
    /// this message.
    enforced_nonce: Option<(String, Instant)>,
}

/// How long Discord holds an enforced nonce ("the past few minutes").
const NONCE_WINDOW: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone)]
struct InteractionRecord {
    token: String,
    /// 2 application command, 3 message component.
    kind: u8,
    channel: u64,
    created: Instant,
    /// The accepted callback's type.
    answered: Option<u64>,
    /// The message `@original` stands for: the response, or for a
    /// button press the message carrying the button.
    original: Option<u64>,
}

#[derive(Debug)]
struct Session {
    id: String,
    seq: u64,
    intents: u64,
    /// Dispatches sent in this session, for replay: (seq, frame).
    log: Vec<(u64, String)>,
    resumable: bool,
}

#[derive(Debug)]
struct Connection {
    id: u64,
    tx: mpsc::UnboundedSender<Out>,
}

#[derive(Debug)]
struct Inner {
    options: FakeDiscordOptions,
    /// Channels whose permissions leave out SEND_VOICE_MESSAGES.
    no_voice_messages: std::collections::HashSet<u64>,
    requests: Vec<CapturedRequest>,
    violations: Vec<String>,
    client_frames: Vec<Value>,
    ids: u64,
    users: HashMap<u64, DiscordUser>,
    channels: BTreeMap<u64, Channel>,
    messages: BTreeMap<u64, StoredMessage>,
    interactions: HashMap<u64, InteractionRecord>,
    callbacks: Vec<Callback>,
    session: Option<Session>,
    sessions_issued: Vec<String>,
    /// Dispatches pushed before any session: sent after READY.
    before_ready: Vec<(String, Value)>,
    connection: Option<Connection>,
    connections: u64,
    identifies: u32,
    resumes: Vec<ResumeRecord>,
    history_reads: Vec<HistoryRead>,
    failures: VecDeque<Failure>,
    files: HashMap<String, (String, Bytes)>,
    sent_files: Vec<SentFile>,
    commands: Vec<Value>,
    /// Where the fake listens (READY's `resume_gateway_url` points here).
    addr: String,
    /// Heartbeats go unanswered (a connection gone "zombie").
    withhold_acks: bool,
}

#[derive(Debug)]
struct State {
    inner: Mutex<Inner>,
    changed: watch::Sender<u64>,
    held: watch::Sender<bool>,
}

/// A fake Discord on `127.0.0.1`.
#[derive(Debug)]
pub struct FakeDiscord {
    state: Arc<State>,
    server: Server,
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the state and tells waiters something changed.
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        let out = f(&mut self.lock());
        self.changed.send_modify(|n| *n += 1);
        out
    }
}

impl FakeDiscord {
    /// Starts a fake accepting [`TOKEN`], with Message Content Intent
    /// switched on.
    pub async fn start() -> Self {
        Self::start_with(FakeDiscordOptions::default()).await
    }

    pub async fn start_with(options: FakeDiscordOptions) -> Self {
        let mut users = HashMap::new();
        users.insert(BOT_ID, DiscordUser::this_bot());
        let state = Arc::new(State {
            inner: Mutex::new(Inner {
                options,
                no_voice_messages: std::collections::HashSet::new(),
                requests: Vec::new(),
                violations: Vec::new(),
                client_frames: Vec::new(),
                ids: 0,
                users,
                channels: BTreeMap::new(),
                messages: BTreeMap::new(),
                interactions: HashMap::new(),
                callbacks: Vec::new(),
                session: None,
                sessions_issued: Vec::new(),
                before_ready: Vec::new(),
                connection: None,
                connections: 0,
                identifies: 0,
                resumes: Vec::new(),
                history_reads: Vec::new(),
                failures: VecDeque::new(),
                files: HashMap::new(),
                sent_files: Vec::new(),
                commands: Vec::new(),
                addr: String::new(),
                withhold_acks: false,
            }),
            changed: watch::Sender::new(0),
            held: watch::Sender::new(false),
        });
        let router = Router::new()
            .route("/", get(gateway))
            .fallback(rest)
            .with_state(Arc::clone(&state));
        let server = Server::start_router("discord", router);
        state.with(|inner| inner.addr = server.addr().to_string());
        FakeDiscord { state, server }
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The REST origin (`/api/v10` hangs off it), for `api_url`.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The gateway URL, for `gateway_url`.
    pub fn gateway_url(&self) -> String {
        format!("ws://{}", self.server.addr())
    }

    pub fn token(&self) -> String {
        self.state.lock().options.token.clone()
    }

    // ------------------------------------------------------------ setup

    fn next_id(inner: &mut Inner) -> u64 {
        inner.ids += 1;
        // Snowflakes of early 2026, one per 4 ms.
        1_400_000_000_000_000_000 + inner.ids * (1 << 22)
    }

    /// A DM channel between `user` and the bot.
    pub fn dm_channel(&self, user: &DiscordUser) -> u64 {
        self.state.with(|inner| {
            inner.users.insert(user.id, user.clone());
            let id = Self::next_id(inner);
            inner.channels.insert(
                id,
                Channel {
                    kind: 1,
                    guild: None,
                    parent: None,
                    recipient: Some(user.id),
                },
            );
            id
        })
    }

    /// A text channel in the fake's server.
    pub fn guild_channel(&self) -> u64 {
        self.state.with(|inner| {
            let id = Self::next_id(inner);
            inner.channels.insert(
                id,
                Channel {
                    kind: 0,
                    guild: Some(GUILD_ID),
                    parent: None,
                    recipient: None,
                },
            );
            id
        })
    }

    /// A public thread under a server channel.
    /// Takes SEND_VOICE_MESSAGES away in `channel`: a voice message
    /// posted there is refused with code 50173.
    pub fn forbid_voice_messages(&self, channel: u64) {
        self.state.with(|inner| {
            inner.no_voice_messages.insert(channel);
        });
    }

    pub fn thread(&self, parent: u64) -> u64 {
        self.state.with(|inner| {
            let id = Self::next_id(inner);
            inner.channels.insert(
                id,
                Channel {
                    kind: 11,
                    guild: Some(GUILD_ID),
                    parent: Some(parent),
                    recipient: None,
                },
            );
            id
        })
    }

    /// Makes the next REST request (any route under `/api/v10`) fail.
    /// Failures queue up, one per request.
    pub fn fail_next(&self, failure: Failure) {
        self.state.with(|inner| inner.failures.push_back(failure));
    }

    /// Ends the gateway connection without a close frame (a network
    /// drop). The session stays resumable.
    pub fn drop_connection(&self) {
        self.state.with(|inner| {
            if let Some(connection) = inner.connection.take() {
                let _ = connection.tx.send(Out::Drop);
            }
        });
    }

    /// Asks the client to reconnect and resume (op 7 RECONNECT), as
    /// Discord does before moving a session.
    pub fn request_reconnect(&self) {
        self.state.with(|inner| {
            if let Some(connection) = &inner.connection {
                let _ = connection.tx.send(Out::Text(
                    json!({"op": 7, "s": null, "t": null, "d": null}).to_string(),
                ));
            }
        });
    }

    /// Ends the session the way Discord times one out a while after its
    /// connection went: a RESUME of it gets INVALID SESSION (`d: false`),
    /// and the dispatches sent in it meanwhile are never delivered.
    pub fn expire_session(&self) {
        self.state.with(|inner| {
            if let Some(session) = inner.session.as_mut() {
                session.resumable = false;
            }
        });
    }

    /// Asks the client for a heartbeat now (op 1 from the gateway), as
    /// Discord may. A client answers it after reading every payload sent
    /// before it, so its answer marks how far the client has read.
    pub fn request_heartbeat(&self) {
        self.state.with(|inner| {
            if let Some(connection) = &inner.connection {
                let _ = connection.tx.send(Out::Text(
                    json!({"op": 1, "s": null, "t": null, "d": null}).to_string(),
                ));
            }
        });
    }

    /// While set, heartbeats get no ACK, as on a connection that died
    /// without closing; Discord expects the client to drop it and resume.
    pub fn withhold_heartbeat_acks(&self, withhold: bool) {
        self.state.with(|inner| inner.withhold_acks = withhold);
    }

    /// While held, new gateway connections wait before HELLO (so events
    /// can be pushed while the bot is away).
    pub fn hold_connections(&self, hold: bool) {
        self.state.held.send_replace(hold);
    }

    // -------------------------------------------------------- dispatches

    /// Sends a dispatch as it is (`t`, `d`); returns its sequence number,
    /// or 0 while no session exists (it is sent after READY then).
    pub fn push_dispatch(&self, kind: &str, data: Value) -> u64 {
        self.state.with(|inner| dispatch(inner, kind, data))
    }

    /// A message someone writes: `content` may mention users as `<@id>`
    /// (the mentions list follows the content, as Discord's does).
    pub fn post(&self, channel: u64, author: &DiscordUser, content: &str) -> Post<'_> {
        Post {
            fake: self,
            channel,
            author: author.clone(),
            content: content.to_owned(),
            reply_to: None,
            attachments: Vec::new(),
        }
    }

    /// Dispatches an existing message's MESSAGE_CREATE again (Discord
    /// may deliver an event twice).
    pub fn redeliver_message(&self, message: u64) -> u64 {
        self.state.with(|inner| {
            let Some(stored) = inner.messages.get(&message) else {
                panic!("flynn-testkit: no message {message} to redeliver");
            };
            let json = stored.json.clone();
            dispatch(inner, "MESSAGE_CREATE", json)
        })
    }

    /// Someone runs the slash command `/name` in `channel`.
    pub fn slash_command(&self, channel: u64, user: &DiscordUser, name: &str) -> PushedInteraction {
        self.state.with(|inner| {
            let data = json!({"id": APPLICATION_ID.to_string(), "name": name, "type": 1});
            push_interaction(inner, 2, channel, user, data, None)
        })
    }

    /// Someone presses the button `custom_id` under the bot's `message`.
    pub fn press_button(
        &self,
        channel: u64,
        user: &DiscordUser,
        message: u64,
        custom_id: &str,
    ) -> PushedInteraction {
        self.state.with(|inner| {
            let Some(stored) = inner.messages.get(&message) else {
                panic!("flynn-testkit: no message {message} to press a button on");
            };
            let has_button = stored.json["components"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|row| row["components"].as_array().into_iter().flatten())
                .any(|b| b["custom_id"] == custom_id);
            if !has_button {
                panic!("flynn-testkit: message {message} has no button '{custom_id}'");
            }
            let json = stored.json.clone();
            let data = json!({"custom_id": custom_id, "component_type": 2});
            push_interaction(inner, 3, channel, user, data, Some(json))
        })
    }

    // ------------------------------------------------------- inspection

    /// Every REST and CDN request received, in order.
    pub fn requests(&self) -> Vec<CapturedRequest> {
        self.state.lock().requests.clone()
    }

    /// Every protocol violation seen; empty when the client behaved.
    pub fn violations(&self) -> Vec<String> {
        self.state.lock().violations.clone()
    }

    /// Every gateway payload the client sent, in order.
    pub fn gateway_frames(&self) -> Vec<Value> {
        self.state.lock().client_frames.clone()
    }

    /// How many IDENTIFYs were accepted.
    pub fn identifies(&self) -> u32 {
        self.state.lock().identifies
    }

    pub fn resumes(&self) -> Vec<ResumeRecord> {
        self.state.lock().resumes.clone()
    }

    /// Every channel history read (`GET /channels/{id}/messages`).
    pub fn history_reads(&self) -> Vec<HistoryRead> {
        self.state.lock().history_reads.clone()
    }

    /// The current session's last sequence number (0 before READY).
    pub fn sequence(&self) -> u64 {
        self.state.lock().session.as_ref().map_or(0, |s| s.seq)
    }

    /// The current session's id, once READY was sent.
    pub fn session_id(&self) -> Option<String> {
        self.state.lock().session.as_ref().map(|s| s.id.clone())
    }

    /// Whether a gateway connection is identified (or resumed) now.
    pub fn is_connected(&self) -> bool {
        self.state.lock().connection.is_some()
    }

    /// The global commands the bot registered.
    pub fn commands(&self) -> Vec<Value> {
        self.state.lock().commands.clone()
    }

    pub fn callbacks(&self) -> Vec<Callback> {
        self.state.lock().callbacks.clone()
    }

    /// The files the bot uploaded, oldest first.
    pub fn files(&self) -> Vec<SentFile> {
        self.state.lock().sent_files.clone()
    }

    /// The bot's messages in a channel, oldest first.
    pub fn messages_in(&self, channel: u64) -> Vec<SentMessage> {
        let inner = self.state.lock();
        inner
            .messages
            .iter()
            .filter(|(_, m)| m.channel == channel && m.author == BOT_ID)
            .map(|(id, m)| SentMessage {
                id: *id,
                channel_id: m.channel,
                content: m.json["content"].as_str().unwrap_or_default().to_owned(),
                components: m.json["components"].clone(),
                allowed_mentions: m.json["allowed_mentions"].clone(),
                interaction: m.interaction,
                flags: m.json["flags"].as_u64().unwrap_or(0),
                edits: m.edits,
                attachments: m.json["attachments"].clone(),
            })
            .collect()
    }

    /// Waits until `check` finds what it looks for; fails the test after
    /// 10 seconds, naming `what`.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        mut check: impl FnMut(&FakeDiscord) -> Option<T>,
    ) -> T {
        let mut changed = self.state.changed.subscribe();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            changed.borrow_and_update();
            if let Some(found) = check(self) {
                return found;
            }
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                panic!(
                    "flynn-testkit: timed out waiting for {what}; violations: {:?}",
                    self.violations()
                );
            }
        }
    }

    /// Waits for READY (or a RESUME) to have been sent on a connection.
    pub async fn wait_connected(&self) {
        self.wait_until("a gateway session", |f| f.is_connected().then_some(()))
            .await;
    }
}

/// A message being written; [`send`](Post::send) dispatches it.
#[derive(Debug)]
pub struct Post<'a> {
    fake: &'a FakeDiscord,
    channel: u64,
    author: DiscordUser,
    content: String,
    reply_to: Option<u64>,
    attachments: Vec<(String, String, Bytes)>,
}

impl Post<'_> {
    /// Makes it a reply to `message` (which pings its author).
    pub fn reply_to(mut self, message: u64) -> Self {
        self.reply_to = Some(message);
        self
    }

    /// Attaches a file, served by the fake's CDN.
    pub fn attach(mut self, name: &str, content_type: &str, data: impl Into<Bytes>) -> Self {
        self.attachments
            .push((name.to_owned(), content_type.to_owned(), data.into()));
        self
    }

    /// Stores and dispatches the message; returns its id.
    pub fn send(self) -> u64 {
        self.fake.state.with(|inner| {
            let Some(channel) = inner.channels.get(&self.channel).cloned() else {
                panic!(
                    "flynn-testkit: no channel {} (create it first)",
                    self.channel
                );
            };
            inner.users.insert(self.author.id, self.author.clone());
            let id = FakeDiscord::next_id(inner);
            let mut mentions: Vec<Value> = mentioned_ids(&self.content)
                .into_iter()
                .filter_map(|uid| inner.users.get(&uid))
                .map(|u| mention_json(u, channel.guild.is_some()))
                .collect();
            let mut referenced = None;
            if let Some(target) = self.reply_to {
                let Some(stored) = inner.messages.get(&target) else {
                    panic!("flynn-testkit: no message {target} to reply to");
                };
                if let Some(author) = inner.users.get(&stored.author)
                    && !mentions.iter().any(|m| is_id(&m["id"], author.id))
                {
                    mentions.push(mention_json(author, channel.guild.is_some()));
                }
                referenced = Some(stored.json.clone());
            }
            let mut attachments = Vec::new();
            for (name, content_type, data) in self.attachments {
                let file_id = FakeDiscord::next_id(inner);
                let path = format!("/attachments/{}/{file_id}/{name}", self.channel);
                let url = format!(
                    "http://{}{path}?ex=6780a1b2&is=677f5032&hm=0f1e2d3c4b5a6978",
                    inner.addr
                );
                attachments.push(json!({
                    "id": file_id.to_string(), "filename": name, "size": data.len(),
                    "url": url, "proxy_url": url, "content_type": content_type,
                }));
                inner.files.insert(path, (content_type, data));
            }
            let mut message = message_json(
                id,
                self.channel,
                &channel,
                &self.author,
                &self.content,
                Value::Array(Vec::new()),
            );
            message["mentions"] = Value::Array(mentions);
            message["attachments"] = Value::Array(attachments);
            if let (Some(target), Some(referenced)) = (self.reply_to, referenced) {
                message["type"] = json!(19);
                message["message_reference"] = json!({
                    "type": 0, "channel_id": self.channel.to_string(),
                    "message_id": target.to_string(),
                    "guild_id": channel.guild.map(|g| g.to_string()),
                });
                message["referenced_message"] = referenced;
            }
            inner.messages.insert(
                id,
                StoredMessage {
                    channel: self.channel,
                    author: self.author.id,
                    json: message.clone(),
                    interaction: None,
                    edits: 0,
                    enforced_nonce: None,
                },
            );
            dispatch(inner, "MESSAGE_CREATE", message);
            id
        })
    }
}

/// Whether a JSON id (a string, as Discord writes snowflakes) is `id`.
fn is_id(value: &Value, id: u64) -> bool {
    value.as_str().and_then(|s| s.parse::<u64>().ok()) == Some(id)
}

/// The user ids `<@id>` / `<@!id>` in a text, in order, once each.
fn mentioned_ids(content: &str) -> Vec<u64> {
    let mut ids = Vec::new();
    let mut rest = content;
    while let Some(at) = rest.find("<@") {
        rest = &rest[at + 2..];
        let digits = rest.strip_prefix('!').unwrap_or(rest);
        let end = digits.find('>').unwrap_or(0);
        if let Ok(id) = digits[..end].parse::<u64>()
            && !ids.contains(&id)
        {
            ids.push(id);
        }
    }
    ids
}

fn user_json(user: &DiscordUser) -> Value {
    let mut value = json!({
        "id": user.id.to_string(), "username": user.username,
        "global_name": user.global_name, "discriminator": "0",
        "avatar": null, "avatar_decoration_data": null, "banner": null,
        "accent_color": null, "public_flags": 0, "flags": 0,
        "primary_guild": null, "collectibles": null,
    });
    if user.bot {
        value["bot"] = json!(true);
    }
    value
}

fn member_json() -> Value {
    json!({
        "roles": [], "joined_at": TIMESTAMP, "deaf": false, "mute": false,
        "flags": 0, "pending": false, "premium_since": null, "nick": null,
        "avatar": null, "banner": null, "communication_disabled_until": null,
    })
}

fn mention_json(user: &DiscordUser, guild: bool) -> Value {
    let mut value = user_json(user);
    if guild {
        value["member"] = member_json();
    }
    value
}

fn message_json(
    id: u64,
    channel_id: u64,
    channel: &Channel,
    author: &DiscordUser,
    content: &str,
    components: Value,
) -> Value {
    let mut message = json!({
        "id": id.to_string(), "channel_id": channel_id.to_string(),
        "author": user_json(author), "content": content,
        "timestamp": TIMESTAMP, "edited_timestamp": null, "tts": false,
        "mention_everyone": false, "mentions": [], "mention_roles": [],
        "attachments": [], "embeds": [], "pinned": false, "type": 0,
        "flags": 0, "components": components,
    });
    if let Some(guild) = channel.guild {
        message["guild_id"] = json!(guild.to_string());
        message["member"] = member_json();
    }
    message
}

fn channel_json(id: u64, channel: &Channel, users: &HashMap<u64, DiscordUser>) -> Value {
    let mut value = json!({"id": id.to_string(), "type": channel.kind, "flags": 0});
    if let Some(guild) = channel.guild {
        value["guild_id"] = json!(guild.to_string());
        value["name"] = json!(format!("channel-{id}"));
        value["position"] = json!(0);
        value["permissions"] = json!("2248473465835073");
    }
    if let Some(parent) = channel.parent {
        value["parent_id"] = json!(parent.to_string());
    }
    if let Some(recipient) = channel.recipient.and_then(|r| users.get(&r)) {
        value["recipients"] = json!([user_json(recipient)]);
    }
    value
}

/// Assigns the next sequence number and sends a dispatch to the current
/// connection, applying the session's intents the way Discord does.
fn dispatch(inner: &mut Inner, kind: &str, mut data: Value) -> u64 {
    let Some(session) = inner.session.as_mut() else {
        inner.before_ready.push((kind.to_owned(), data));
        return 0;
    };
    if kind == "MESSAGE_CREATE" {
        let guild = data.get("guild_id").is_some();
        let wanted = if guild {
            intents::GUILD_MESSAGES
        } else {
            intents::DIRECT_MESSAGES
        };
        if session.intents & wanted == 0 {
            return 0;
        }
        let mentions_bot = data["mentions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|m| is_id(&m["id"], BOT_ID));
        let author_is_bot = is_id(&data["author"]["id"], BOT_ID);
        if guild
            && session.intents & intents::MESSAGE_CONTENT == 0
            && !mentions_bot
            && !author_is_bot
        {
            data["content"] = json!("");
            data["embeds"] = json!([]);
            data["attachments"] = json!([]);
            data["components"] = json!([]);
        }
    }
    session.seq += 1;
    let seq = session.seq;
    let frame = json!({"op": 0, "s": seq, "t": kind, "d": data}).to_string();
    if kind != "READY" && kind != "RESUMED" {
        session.log.push((seq, frame.clone()));
    }
    if let Some(connection) = &inner.connection {
        let _ = connection.tx.send(Out::Text(frame));
    }
    seq
}

fn push_interaction(
    inner: &mut Inner,
    kind: u8,
    channel_id: u64,
    user: &DiscordUser,
    data: Value,
    message: Option<Value>,
) -> PushedInteraction {
    let Some(channel) = inner.channels.get(&channel_id).cloned() else {
        panic!("flynn-testkit: no channel {channel_id} (create it first)");
    };
    inner.users.insert(user.id, user.clone());
    let id = FakeDiscord::next_id(inner);
    let token = format!("aW50ZXJhY3Rpb246{id}OnRva2VuX2Zvcl90ZXN0cw");
    let mut interaction = json!({
        "id": id.to_string(), "application_id": APPLICATION_ID.to_string(),
        "type": kind, "data": data, "token": token, "version": 1,
        "channel": channel_json(channel_id, &channel, &inner.users),
        "channel_id": channel_id.to_string(),
        "app_permissions": "2248473465835073", "locale": "en-US",
        "entitlements": [], "attachment_size_limit": 10_485_760,
        "context": if channel.guild.is_some() { 0 } else { 1 },
    });
    match channel.guild {
        Some(guild) => {
            interaction["guild_id"] = json!(guild.to_string());
            interaction["guild_locale"] = json!("en-US");
            interaction["guild"] =
                json!({"id": guild.to_string(), "locale": "en-US", "features": []});
            let mut member = member_json();
            member["user"] = user_json(user);
            member["permissions"] = json!("2248473465835073");
            interaction["member"] = member;
            interaction["authorizing_integration_owners"] = json!({"0": guild.to_string()});
        }
        None => {
            interaction["user"] = user_json(user);
            interaction["authorizing_integration_owners"] = json!({"0": "0"});
        }
    }
    // A button press's `@original` is the message carrying the button.
    let original = message
        .as_ref()
        .and_then(|m| m["id"].as_str())
        .and_then(|id| id.parse().ok());
    if let Some(message) = message {
        interaction["message"] = message;
    }
    inner.interactions.insert(
        id,
        InteractionRecord {
            token: token.clone(),
            kind,
            channel: channel_id,
            created: Instant::now(),
            answered: None,
            original,
        },
    );
    dispatch(inner, "INTERACTION_CREATE", interaction);
    PushedInteraction { id, token }
}

// ------------------------------------------------------------- gateway

async fn gateway(
    AxumState(state): AxumState<Arc<State>>,
    Query(query): Query<HashMap<String, String>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    state.with(|inner| {
        if query.get("v").map(String::as_str) != Some("10") {
            inner.violations.push(format!(
                "gateway: connected with v={:?} (expected 10)",
                query.get("v")
            ));
        }
        if query.get("encoding").map(String::as_str) != Some("json") {
            inner.violations.push(format!(
                "gateway: connected with encoding={:?} (the fake speaks json)",
                query.get("encoding")
            ));
        }
        if let Some(compress) = query.get("compress") {
            inner.violations.push(format!(
                "gateway: asked for compress={compress} (the fake sends plain JSON)"
            ));
        }
    });
    upgrade.on_upgrade(move |socket| connection(state, socket))
}

async fn connection(state: Arc<State>, mut socket: WebSocket) {
    let mut held = state.held.subscribe();
    let _ = held.wait_for(|held| !held).await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (id, hello) = state.with(|inner| {
        inner.connections += 1;
        (
            inner.connections,
            json!({"op": 10, "s": null, "t": null, "d": {"heartbeat_interval": inner.options.heartbeat_interval_ms}}),
        )
    });
    if socket
        .send(WsMessage::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    let mut identified = false;
    loop {
        tokio::select! {
            incoming = socket.recv() => match incoming {
                None | Some(Err(_)) => break,
                Some(Ok(WsMessage::Text(text))) => {
                    state.with(|inner| client_frame(inner, id, &tx, text.as_str(), &mut identified));
                }
                Some(Ok(WsMessage::Binary(_))) => {
                    state.with(|inner| {
                        inner.violations.push("gateway: the client sent a binary frame (json encoding sends text)".to_owned());
                    });
                    let _ = tx.send(Out::Close(4002, "Error while decoding payload."));
                }
                Some(Ok(WsMessage::Close(frame))) => {
                    let code = frame.as_ref().map_or(1005, |f| f.code);
                    state.with(|inner| {
                        inner.client_frames.push(json!({"close": code}));
                        // Closing with 1000 or 1001 ends the session.
                        if matches!(code, 1000 | 1001)
                            && identified
                            && let Some(session) = inner.session.as_mut()
                        {
                            session.resumable = false;
                        }
                    });
                    // Reading on sends the echo of the close frame, as
                    // Discord does, and sees the socket out.
                    while let Ok(Some(Ok(_))) = tokio::time::timeout(Duration::from_secs(1), socket.recv()).await {}
                    break;
                }
                Some(Ok(_)) => {}
            },
            out = rx.recv() => match out {
                Some(Out::Text(text)) => {
                    if socket.send(WsMessage::Text(text.into())).await.is_err() {
                        break;
                    }
                }
                Some(Out::Close(code, reason)) => {
                    let _ = socket.send(WsMessage::Close(Some(CloseFrame { code, reason: reason.into() }))).await;
                    // Let the client's close frame arrive before the socket goes.
                    let _ = tokio::time::timeout(Duration::from_secs(1), socket.recv()).await;
                    break;
                }
                Some(Out::Drop) | None => return,
            },
        }
    }
    state.with(|inner| {
        if inner.connection.as_ref().is_some_and(|c| c.id == id) {
            inner.connection = None;
        }
    });
}

/// One payload from the client, answered through `tx` (under the lock,
/// so dispatches pushed meanwhile keep their order).
fn client_frame(
    inner: &mut Inner,
    connection: u64,
    tx: &mpsc::UnboundedSender<Out>,
    text: &str,
    identified: &mut bool,
) {
    let Ok(frame) = serde_json::from_str::<Value>(text) else {
        inner
            .violations
            .push(format!("gateway: a payload is not JSON: {text}"));
        let _ = tx.send(Out::Close(4002, "Error while decoding payload."));
        return;
    };
    inner.client_frames.push(frame.clone());
    let op = frame["op"].as_u64();
    let d = &frame["d"];
    let close = |inner: &mut Inner, code, reason, violation: Option<String>| {
        if let Some(violation) = violation {
            inner.violations.push(violation);
        }
        let _ = tx.send(Out::Close(code, reason));
    };
    match op {
        Some(1) => {
            let current = inner.session.as_ref().map_or(0, |s| s.seq);
            match d.as_u64() {
                Some(seq) if seq > current => inner.violations.push(format!(
                    "gateway: heartbeat with sequence {seq}, but only {current} were sent"
                )),
                Some(_) => {}
                None if d.is_null() => {}
                None => inner.violations.push(format!(
                    "gateway: heartbeat d is {d} (expected the last sequence or null)"
                )),
            }
            if !inner.withhold_acks {
                let _ = tx.send(Out::Text(
                    json!({"op": 11, "s": null, "t": null, "d": null}).to_string(),
                ));
            }
        }
        Some(2) => {
            if *identified {
                return close(
                    inner,
                    4005,
                    "Already authenticated.",
                    Some("gateway: IDENTIFY sent twice on one connection".to_owned()),
                );
            }
            if let Some(problem) = token_problem(&inner.options.token, d["token"].as_str()) {
                return close(inner, 4004, "Authentication failed.", problem);
            }
            let properties = &d["properties"];
            if ["os", "browser", "device"]
                .iter()
                .any(|k| !properties[*k].is_string())
            {
                return close(
                    inner,
                    4002,
                    "Error while decoding payload.",
                    Some(format!(
                        "gateway: IDENTIFY properties must hold os, browser and device: {properties}"
                    )),
                );
            }
            let Some(wanted) = d["intents"].as_u64() else {
                return close(
                    inner,
                    4013,
                    "Invalid intent(s).",
                    Some("gateway: IDENTIFY without intents".to_owned()),
                );
            };
            if wanted & !intents::VALID != 0 {
                return close(
                    inner,
                    4013,
                    "Invalid intent(s).",
                    Some(format!(
                        "gateway: IDENTIFY with undefined intent bits {:#x}",
                        wanted & !intents::VALID
                    )),
                );
            }
            if wanted & intents::PRIVILEGED & !inner.options.privileged_intents != 0 {
                return close(inner, 4014, "Disallowed intent(s).", None);
            }
            if let Some(shard) = d.get("shard")
                && !shard.is_null()
            {
                let ok = shard.as_array().is_some_and(|s| {
                    s.len() == 2
                        && matches!((s[0].as_u64(), s[1].as_u64()), (Some(i), Some(n)) if i < n)
                });
                if !ok {
                    return close(
                        inner,
                        4010,
                        "Invalid shard.",
                        Some(format!(
                            "gateway: IDENTIFY shard {shard} is not [id, count]"
                        )),
                    );
                }
            }
            *identified = true;
            inner.identifies += 1;
            let session_id = format!(
                "{:032x}",
                0x5e55_1000_u128 * 7919 + u128::from(inner.identifies) * 104_729
            );
            inner.sessions_issued.push(session_id.clone());
            inner.session = Some(Session {
                id: session_id.clone(),
                seq: 0,
                intents: wanted,
                log: Vec::new(),
                resumable: true,
            });
            inner.connection = Some(Connection {
                id: connection,
                tx: tx.clone(),
            });
            let ready = json!({
                "v": 10, "user": user_json(&DiscordUser::this_bot()), "guilds": [{"id": GUILD_ID.to_string(), "unavailable": true}],
                "session_id": session_id, "resume_gateway_url": format!("ws://{}", inner.addr),
                "shard": [0, 1], "application": {"id": APPLICATION_ID.to_string(), "flags": 8_953_856},
                "private_channels": [], "presences": [], "relationships": [], "guild_join_requests": [],
                "user_settings": {}, "auth": {}, "session_type": "normal", "geo_ordered_rtc_regions": [],
            });
            dispatch(inner, "READY", ready);
            let waiting = std::mem::take(&mut inner.before_ready);
            for (kind, data) in waiting {
                dispatch(inner, &kind, data);
            }
        }
        Some(6) => {
            if *identified {
                return close(
                    inner,
                    4005,
                    "Already authenticated.",
                    Some("gateway: RESUME on an identified connection".to_owned()),
                );
            }
            if let Some(problem) = token_problem(&inner.options.token, d["token"].as_str()) {
                return close(inner, 4004, "Authentication failed.", problem);
            }
            let session_id = d["session_id"].as_str().unwrap_or_default().to_owned();
            let Some(seq) = d["seq"].as_u64() else {
                return close(
                    inner,
                    4002,
                    "Error while decoding payload.",
                    Some(format!(
                        "gateway: RESUME seq is {} (expected a number)",
                        d["seq"]
                    )),
                );
            };
            let current = inner
                .session
                .as_ref()
                .filter(|s| s.id == session_id && s.resumable);
            let Some(session) = current else {
                if !inner.sessions_issued.contains(&session_id) {
                    inner.violations.push(format!(
                        "gateway: RESUME of session '{session_id}', which was never issued"
                    ));
                }
                let _ = tx.send(Out::Text(
                    json!({"op": 9, "s": null, "t": null, "d": false}).to_string(),
                ));
                return;
            };
            if seq > session.seq {
                return close(
                    inner,
                    4007,
                    "Invalid seq.",
                    Some(format!(
                        "gateway: RESUME from sequence {seq}, but the session is at {}",
                        session.seq
                    )),
                );
            }
            let replay: Vec<(u64, String)> = session
                .log
                .iter()
                .filter(|(s, _)| *s > seq)
                .cloned()
                .collect();
            *identified = true;
            if let Some(old) = inner.connection.take() {
                let _ = old.tx.send(Out::Drop);
            }
            for (_, frame) in &replay {
                let _ = tx.send(Out::Text(frame.clone()));
            }
            inner.resumes.push(ResumeRecord {
                session_id,
                seq,
                replayed: replay.iter().map(|(s, _)| *s).collect(),
            });
            inner.connection = Some(Connection {
                id: connection,
                tx: tx.clone(),
            });
            dispatch(inner, "RESUMED", json!({"_trace": ["[\"fake-discord\"]"]}));
        }
        Some(3 | 4 | 8 | 31) if *identified => {}
        Some(3 | 4 | 8 | 31) => close(
            inner,
            4003,
            "Not authenticated.",
            Some(format!("gateway: op {} before IDENTIFY", op.unwrap_or(0))),
        ),
        _ => close(
            inner,
            4001,
            "Unknown opcode.",
            Some(format!(
                "gateway: unknown or client-forbidden opcode in {frame}"
            )),
        ),
    }
}

/// Whether an IDENTIFY / RESUME token is the bot's (with or without the
/// `Bot ` prefix). `Some(None)`: wrong token (the client's mistake to
/// report, not a protocol violation); `Some(Some(_))`: missing.
fn token_problem(expected: &str, got: Option<&str>) -> Option<Option<String>> {
    match got {
        Some(token) if token == expected || token.strip_prefix("Bot ") == Some(expected) => None,
        Some(_) => Some(None),
        None => Some(Some("gateway: IDENTIFY/RESUME without a token".to_owned())),
    }
}

// ---------------------------------------------------------------- REST

async fn rest(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    let received = server::Received::read(request).await;
    let content_type = received.header("content-type").unwrap_or_default();
    // A multipart body (a message with files): its parts, and the
    // `payload_json` part as the request's body.
    let form = if content_type.starts_with("multipart/form-data") {
        Some(server::form_parts(content_type, received.bytes.clone()).await)
    } else {
        None
    };
    let parsed = match &form {
        Some(Ok(parts)) => Ok(payload_json(parts)),
        Some(Err(problem)) => Err(problem.clone()),
        None => received
            .json()
            .map_err(|e| format!("the body is not JSON ({e})")),
    };
    let request = CapturedRequest {
        method: received.method,
        path: received.path,
        headers: received.headers,
        body: parsed.as_ref().cloned().unwrap_or(Value::Null),
    };
    state.with(|inner| {
        inner.requests.push(request.clone());
        if let Err(problem) = &parsed {
            inner
                .violations
                .push(format!("{} {}: {problem}", request.method, request.path));
            return match form {
                Some(_) => error(400, "Invalid Form Body", 50035),
                None => error(400, "The request body contains invalid JSON.", 50109),
            };
        }
        let parts = form.and_then(Result::ok);
        answer(inner, &request, &received.query, parts.as_deref())
    })
}

/// The `payload_json` part of a form as JSON: `Null` when there is none
/// or it is not JSON (checked when the message is created).
fn payload_json(parts: &[FormPart]) -> Value {
    parts
        .iter()
        .find(|p| p.name == "payload_json")
        .and_then(|p| serde_json::from_slice(&p.data).ok())
        .unwrap_or(Value::Null)
}

/// Discord's error body.
fn error(status: u16, message: &str, code: u64) -> Response {
    server::json(status, &json!({"message": message, "code": code}))
}

/// A refused request: Discord's error, and a violation.
fn refuse(
    inner: &mut Inner,
    request: &CapturedRequest,
    status: u16,
    message: &str,
    code: u64,
) -> Response {
    inner.violations.push(format!(
        "{} {}: {status} {message} ({code})",
        request.method, request.path
    ));
    error(status, message, code)
}

fn answer(
    inner: &mut Inner,
    request: &CapturedRequest,
    query: &str,
    form: Option<&[FormPart]>,
) -> Response {
    if request.path.starts_with("/attachments/") {
        return cdn(inner, request);
    }
    let Some(route) = request.path.strip_prefix("/api/v10/") else {
        return refuse(inner, request, 404, "404: Not Found", 0);
    };
    let route: Vec<String> = route.split('/').map(str::to_owned).collect();
    let route: Vec<&str> = route.iter().map(String::as_str).collect();
    match request.header("user-agent") {
        Some(agent) if agent.starts_with("DiscordBot (") => {}
        other => inner.violations.push(format!(
            "{} {}: User-Agent {other:?} is not 'DiscordBot ($url, $version)'",
            request.method, request.path
        )),
    }
    if matches!(request.method.as_str(), "POST" | "PUT" | "PATCH")
        && request.header("content-length").is_none()
        && request.header("transfer-encoding").is_none()
    {
        return refuse(inner, request, 411, "411: Length Required", 0);
    }
    if form.is_none()
        && !request.body.is_null()
        && !request
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json"))
    {
        inner.violations.push(format!(
            "{} {}: a JSON body with Content-Type {:?}",
            request.method,
            request.path,
            request.header("content-type")
        ));
    }
    if let Some(failure) = inner.failures.pop_front() {
        return injected(failure);
    }
    let method = request.method.as_str();
    if form.is_some()
        && !(method == "POST" && matches!(route.as_slice(), ["channels", _, "messages"]))
    {
        // Discord takes files on webhooks and edits too; the fake does not.
        return refuse(
            inner,
            request,
            400,
            "the fake takes files only on POST /channels/{id}/messages",
            0,
        );
    }
    match route.as_slice() {
        ["applications", app, "commands"] => {
            if method != "PUT" {
                return refuse(inner, request, 405, "405: Method Not Allowed", 0);
            }
            if let Some(refusal) = authorize(inner, request) {
                return refusal;
            }
            if *app != APPLICATION_ID.to_string() {
                return refuse(inner, request, 403, "Missing Access", 50001);
            }
            put_commands(inner, request)
        }
        ["channels", channel, "messages"] => {
            if !matches!(method, "POST" | "GET") {
                return refuse(inner, request, 405, "405: Method Not Allowed", 0);
            }
            if let Some(refusal) = authorize(inner, request) {
                return refusal;
            }
            let Some(channel) = known_channel(inner, channel) else {
                return refuse(inner, request, 404, "Unknown Channel", 10003);
            };
            if method == "GET" {
                return history(inner, request, channel, query);
            }
            if let Some(form) = form {
                return upload_message(inner, request, channel, form);
            }
            if let Some(refusal) = check_message(inner, request, false, false) {
                return refusal;
            }
            if let Some(earlier) = enforced_nonce_message(inner, &request.body) {
                return server::json(200, &earlier);
            }
            let message = create_message(inner, channel, &request.body, None);
            server::json(200, &message)
        }
        ["channels", channel, "messages", message] => {
            if method != "PATCH" {
                return refuse(inner, request, 405, "405: Method Not Allowed", 0);
            }
            if let Some(refusal) = authorize(inner, request) {
                return refusal;
            }
            let Some(channel) = known_channel(inner, channel) else {
                return refuse(inner, request, 404, "Unknown Channel", 10003);
            };
            let message = message.parse::<u64>().ok().filter(|m| {
                inner
                    .messages
                    .get(m)
                    .is_some_and(|stored| stored.channel == channel)
            });
            let Some(message) = message else {
                return refuse(inner, request, 404, "Unknown Message", 10008);
            };
            if inner
                .messages
                .get(&message)
                .is_some_and(|m| m.author != BOT_ID)
            {
                return refuse(
                    inner,
                    request,
                    403,
                    "Cannot edit a message authored by another user",
                    50005,
                );
            }
            if let Some(refusal) = check_message(inner, request, true, false) {
                return refusal;
            }
            server::json(200, &edit_message(inner, message, &request.body))
        }
        ["channels", channel, "typing"] => {
            if method != "POST" {
                return refuse(inner, request, 405, "405: Method Not Allowed", 0);
            }
            if let Some(refusal) = authorize(inner, request) {
                return refusal;
            }
            if known_channel(inner, channel).is_none() {
                return refuse(inner, request, 404, "Unknown Channel", 10003);
            }
            server::respond(204, &[], Body::empty())
        }
        ["interactions", id, token, "callback"] => {
            if method != "POST" {
                return refuse(inner, request, 405, "405: Method Not Allowed", 0);
            }
            interaction_callback(inner, request, id, token)
        }
        ["webhooks", app, token, rest @ ..] => {
            let Some(interaction) = interaction_by_token(inner, app, token) else {
                return refuse(inner, request, 404, "Unknown Webhook", 10015);
            };
            webhook(inner, request, interaction, rest)
        }
        _ => refuse(inner, request, 404, "404: Not Found", 0),
    }
}

fn injected(failure: Failure) -> Response {
    match failure {
        Failure::RateLimited {
            retry_after,
            global,
        } => {
            let header = format!("{}", retry_after.ceil() as u64);
            let reset = format!("{retry_after:.3}");
            let mut headers = vec![
                ("retry-after", header.as_str()),
                ("x-ratelimit-limit", "5"),
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset-after", reset.as_str()),
                ("x-ratelimit-bucket", "80c17d2f203122d936070c88c8d10f33"),
                ("x-ratelimit-scope", if global { "global" } else { "user" }),
                ("content-type", "application/json"),
            ];
            if global {
                headers.push(("x-ratelimit-global", "true"));
            }
            let body = json!({"message": "You are being rate limited.", "retry_after": retry_after, "global": global});
            server::respond(429, &headers, Body::from(body.to_string()))
        }
        Failure::Status(status) => server::respond(
            status,
            &[("content-type", "text/html")],
            Body::from(format!(
                "<html><body><h1>{status}</h1>error code: {status}</body></html>"
            )),
        ),
    }
}

/// `None` when the request carries `Bot <token>`.
fn authorize(inner: &mut Inner, request: &CapturedRequest) -> Option<Response> {
    let expected = format!("Bot {}", inner.options.token);
    match request.header("authorization") {
        Some(value) if value == expected => None,
        Some(value) if value.starts_with("Bot ") => Some(error(401, "401: Unauthorized", 0)),
        other => Some(refuse(
            inner,
            request,
            401,
            &format!(
                "401: Unauthorized (Authorization is {}; expected 'Bot <token>')",
                other.map_or_else(|| "missing".to_owned(), |v| format!("'{v}'"))
            ),
            0,
        )),
    }
}

fn known_channel(inner: &Inner, id: &str) -> Option<u64> {
    id.parse::<u64>()
        .ok()
        .filter(|id| inner.channels.contains_key(id))
}

fn cdn(inner: &mut Inner, request: &CapturedRequest) -> Response {
    if request.header("authorization").is_some() {
        inner.violations.push(format!(
            "GET {}: the bot token was sent to the CDN",
            request.path
        ));
    }
    if request.method != "GET" {
        inner.violations.push(format!(
            "{} {}: the CDN serves GET",
            request.method, request.path
        ));
    }
    match inner.files.get(&request.path) {
        Some((content_type, data)) => server::respond(
            200,
            &[("content-type", content_type.as_str())],
            Body::from(data.clone()),
        ),
        None => {
            inner
                .violations
                .push(format!("GET {}: no such attachment", request.path));
            server::respond(
                404,
                &[("content-type", "text/plain")],
                Body::from("Not Found"),
            )
        }
    }
}

// ---------------------------------------------------------- validation

/// One field problem: its path (`["components", "0", "custom_id"]`),
/// Discord's error code and message.
type Problem = (Vec<String>, &'static str, String);

/// Discord's 50035 body with the problems nested by path.
fn invalid_form(problems: &[Problem]) -> Value {
    let mut errors = json!({});
    for (path, code, message) in problems {
        let mut at = &mut errors;
        for key in path {
            if !at[key.as_str()].is_object() {
                at[key.as_str()] = json!({});
            }
            at = &mut at[key.as_str()];
        }
        if !at["_errors"].is_array() {
            at["_errors"] = json!([]);
        }
        if let Some(list) = at["_errors"].as_array_mut() {
            list.push(json!({"code": code, "message": message}));
        }
    }
    json!({"message": "Invalid Form Body", "code": 50035, "errors": errors})
}

fn path(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|p| (*p).to_owned()).collect()
}

/// Checks a message body. `edit`: every field optional. `interaction`:
/// the ephemeral flag is allowed.
fn check_message(
    inner: &mut Inner,
    request: &CapturedRequest,
    edit: bool,
    interaction: bool,
) -> Option<Response> {
    let body = &request.body;
    if !body.is_object() {
        return Some(refuse(inner, request, 400, "Invalid Form Body", 50035));
    }
    let problems = message_problems(body, interaction);
    if !problems.is_empty() {
        inner.violations.push(format!(
            "{} {}: Invalid Form Body: {problems:?}",
            request.method, request.path
        ));
        return Some(server::json(400, &invalid_form(&problems)));
    }
    let content = body["content"].as_str().unwrap_or_default();
    let has_components = body["components"].as_array().is_some_and(|c| !c.is_empty());
    let has_embeds = body["embeds"].as_array().is_some_and(|c| !c.is_empty());
    if !edit && content.is_empty() && !has_components && !has_embeds {
        return Some(refuse(
            inner,
            request,
            400,
            "Cannot send an empty message",
            50006,
        ));
    }
    None
}

fn message_problems(body: &Value, interaction: bool) -> Vec<Problem> {
    let mut problems = Vec::new();
    match &body["content"] {
        Value::Null => {}
        Value::String(content) => {
            let len = content.chars().count();
            if len > 2000 {
                problems.push((
                    path(&["content"]),
                    "BASE_TYPE_MAX_LENGTH",
                    "Must be 2000 or fewer in length.".to_owned(),
                ));
            }
        }
        _ => problems.push((
            path(&["content"]),
            "BASE_TYPE_STRING",
            "Could not interpret as string.".to_owned(),
        )),
    }
    match &body["allowed_mentions"] {
        Value::Null => {}
        Value::Object(mentions) => {
            for (i, parse) in mentions
                .get("parse")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                if !matches!(parse.as_str(), Some("roles" | "users" | "everyone")) {
                    problems.push((
                        path(&["allowed_mentions", "parse", &i.to_string()]),
                        "BASE_TYPE_CHOICES",
                        "Value must be one of ('roles', 'users', 'everyone').".to_owned(),
                    ));
                }
            }
        }
        _ => problems.push((
            path(&["allowed_mentions"]),
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType".to_owned(),
        )),
    }
    match &body["nonce"] {
        Value::Null => {}
        Value::String(nonce) if nonce.chars().count() > 25 => problems.push((
            path(&["nonce"]),
            "BASE_TYPE_MAX_LENGTH",
            "Must be 25 or fewer in length.".to_owned(),
        )),
        Value::String(_) => {}
        Value::Number(n) if n.is_i64() || n.is_u64() => {}
        _ => problems.push((
            path(&["nonce"]),
            "BASE_TYPE_STRING",
            "Could not interpret as string or integer.".to_owned(),
        )),
    }
    if !matches!(body["enforce_nonce"], Value::Null | Value::Bool(_)) {
        problems.push((
            path(&["enforce_nonce"]),
            "BASE_TYPE_BOOLEAN",
            "Must be either true or false.".to_owned(),
        ));
    }
    if let Some(flags) = body["flags"].as_u64()
        && flags & 64 != 0
        && !interaction
    {
        problems.push((
            path(&["flags"]),
            "MESSAGE_FLAGS_INVALID",
            "Only interaction responses can be ephemeral.".to_owned(),
        ));
    }
    // What a bot may set: SUPPRESS_EMBEDS (4), SUPPRESS_NOTIFICATIONS
    // (4096), and EPHEMERAL (64, checked above).
    match &body["flags"] {
        Value::Null => {}
        Value::Number(n) if n.as_u64().is_some_and(|f| (f & !(4 | 64 | 4096)) == 0) => {}
        Value::Number(_) => problems.push((
            path(&["flags"]),
            "MESSAGE_FLAGS_INVALID",
            "Invalid flags: only SUPPRESS_EMBEDS, SUPPRESS_NOTIFICATIONS and (for interaction responses) EPHEMERAL can be set.".to_owned(),
        )),
        _ => problems.push((
            path(&["flags"]),
            "NUMBER_TYPE_COERCE",
            "Value is not int.".to_owned(),
        )),
    }
    match &body["components"] {
        Value::Null => {}
        Value::Array(rows) => {
            if rows.len() > 5 {
                problems.push((
                    path(&["components"]),
                    "BASE_TYPE_MAX_LENGTH",
                    "Must be 5 or fewer in length.".to_owned(),
                ));
            }
            let mut seen = Vec::new();
            for (r, row) in rows.iter().enumerate() {
                let r = r.to_string();
                if row["type"] != 1 {
                    problems.push((
                        path(&["components", &r, "type"]),
                        "UNION_TYPE_CHOICES",
                        "Value of field \"type\" must be one of (1,).".to_owned(),
                    ));
                    continue;
                }
                let buttons = row["components"].as_array().cloned().unwrap_or_default();
                if buttons.is_empty() || buttons.len() > 5 {
                    problems.push((
                        path(&["components", &r, "components"]),
                        "BASE_TYPE_BAD_LENGTH",
                        "Must be between 1 and 5 in length.".to_owned(),
                    ));
                }
                for (b, button) in buttons.iter().enumerate() {
                    let b = b.to_string();
                    let at = |field: &str| path(&["components", &r, "components", &b, field]);
                    if button["type"] != 2 {
                        problems.push((
                            at("type"),
                            "UNION_TYPE_CHOICES",
                            "Only buttons are checked by the fake.".to_owned(),
                        ));
                        continue;
                    }
                    let style = button["style"].as_u64().unwrap_or(0);
                    if !(1..=5).contains(&style) {
                        problems.push((
                            at("style"),
                            "BASE_TYPE_CHOICES",
                            "Value must be one of {1, 2, 3, 4, 5, 6}.".to_owned(),
                        ));
                    }
                    match button["label"].as_str() {
                        Some(label) if label.chars().count() > 80 => problems.push((
                            at("label"),
                            "BASE_TYPE_MAX_LENGTH",
                            "Must be 80 or fewer in length.".to_owned(),
                        )),
                        Some(_) => {}
                        None if button["emoji"].is_object() => {}
                        None => problems.push((
                            at("label"),
                            "BASE_TYPE_REQUIRED",
                            "This field is required".to_owned(),
                        )),
                    }
                    if style == 5 {
                        if !button["url"].is_string() {
                            problems.push((
                                at("url"),
                                "BASE_TYPE_REQUIRED",
                                "This field is required".to_owned(),
                            ));
                        }
                        continue;
                    }
                    match button["custom_id"].as_str() {
                        Some(id) if id.is_empty() || id.chars().count() > 100 => problems.push((
                            at("custom_id"),
                            "BASE_TYPE_BAD_LENGTH",
                            "Must be between 1 and 100 in length.".to_owned(),
                        )),
                        Some(id) if seen.contains(&id.to_owned()) => problems.push((
                            at("custom_id"),
                            "COMPONENT_CUSTOM_ID_DUPLICATED",
                            "Component custom id cannot be duplicated".to_owned(),
                        )),
                        Some(id) => seen.push(id.to_owned()),
                        None => problems.push((
                            at("custom_id"),
                            "BASE_TYPE_REQUIRED",
                            "This field is required".to_owned(),
                        )),
                    }
                }
            }
        }
        _ => problems.push((
            path(&["components"]),
            "BASE_TYPE_LIST",
            "Could not interpret as list.".to_owned(),
        )),
    }
    problems
}

fn put_commands(inner: &mut Inner, request: &CapturedRequest) -> Response {
    let Some(commands) = request.body.as_array() else {
        inner.violations.push(format!(
            "PUT {}: the body is not a list of commands",
            request.path
        ));
        return server::json(
            400,
            &invalid_form(&[(
                Vec::new(),
                "BASE_TYPE_LIST",
                "Could not interpret as list.".to_owned(),
            )]),
        );
    };
    let mut problems: Vec<Problem> = Vec::new();
    if commands.len() > 100 {
        problems.push((
            Vec::new(),
            "BASE_TYPE_MAX_LENGTH",
            "Must be 100 or fewer in length.".to_owned(),
        ));
    }
    let mut names = Vec::new();
    for (i, command) in commands.iter().enumerate() {
        let i = i.to_string();
        let at = |field: &str| path(&[&i, field]);
        let kind = command["type"].as_u64().unwrap_or(1);
        match command["name"].as_str() {
            Some(name)
                if (1..=32).contains(&name.chars().count())
                    && name
                        .chars()
                        .all(|c| c == '-' || c == '_' || c.is_alphanumeric())
                    && (kind != 1 || name.chars().all(|c| !c.is_uppercase())) =>
            {
                if names.contains(&name) {
                    problems.push((
                        at("name"),
                        "APPLICATION_COMMANDS_DUPLICATE_NAME",
                        format!("Application command names must be unique: {name}"),
                    ));
                }
                names.push(name);
            }
            _ => problems.push((
                at("name"),
                "APPLICATION_COMMAND_INVALID_NAME",
                "Command name is invalid".to_owned(),
            )),
        }
        if !(1..=3).contains(&kind) {
            problems.push((
                at("type"),
                "BASE_TYPE_CHOICES",
                "Value must be one of {1, 2, 3, 4}.".to_owned(),
            ));
        }
        if kind == 1
            && !command["description"]
                .as_str()
                .is_some_and(|d| (1..=100).contains(&d.chars().count()))
        {
            problems.push((
                at("description"),
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 1 and 100 in length.".to_owned(),
            ));
        }
        for (field, max) in [("contexts", 2), ("integration_types", 1)] {
            let values = &command[field];
            let ok = values.is_null()
                || values
                    .as_array()
                    .is_some_and(|v| v.iter().all(|x| x.as_u64().is_some_and(|x| x <= max)));
            if !ok {
                problems.push((
                    at(field),
                    "BASE_TYPE_CHOICES",
                    format!("Value must be a list of 0..={max}."),
                ));
            }
        }
    }
    if !problems.is_empty() {
        inner.violations.push(format!(
            "PUT {}: Invalid Form Body: {problems:?}",
            request.path
        ));
        return server::json(400, &invalid_form(&problems));
    }
    let mut stored = Vec::new();
    for command in commands {
        let id = FakeDiscord::next_id(inner);
        let mut command = command.clone();
        command["id"] = json!(id.to_string());
        command["application_id"] = json!(APPLICATION_ID.to_string());
        command["version"] = json!(id.to_string());
        command["default_member_permissions"] = Value::Null;
        command["type"] = json!(command["type"].as_u64().unwrap_or(1));
        stored.push(command);
    }
    inner.commands = stored.clone();
    server::json(200, &Value::Array(stored))
}

/// Stores a bot message from a request body; returns the message object.
/// `GET /channels/{id}/messages`: at most `limit` (1-100, default 50)
/// messages, newest first; with `after`, the ones right after it, as
/// Discord answers. Message objects from REST carry no `guild_id` and no
/// `member` (those come with gateway events only).
fn history(inner: &mut Inner, request: &CapturedRequest, channel: u64, query: &str) -> Response {
    let mut after = None;
    let mut limit = 50;
    let mut anchors = 0;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let snowflake = || value.parse::<u64>().ok();
        match key {
            "after" | "before" | "around" => {
                anchors += 1;
                let Some(id) = snowflake() else {
                    return refuse_form(
                        inner,
                        request,
                        key,
                        &format!("Value \"{value}\" is not snowflake."),
                    );
                };
                if key != "after" {
                    return refuse(
                        inner,
                        request,
                        400,
                        &format!("the fake answers `after` only, not `{key}`"),
                        0,
                    );
                }
                after = Some(id);
            }
            "limit" => match value.parse::<u64>() {
                Ok(n @ 1..=100) => limit = n,
                _ => {
                    return refuse_form(
                        inner,
                        request,
                        key,
                        "int value should be between 1 and 100.",
                    );
                }
            },
            _ => {
                return refuse(
                    inner,
                    request,
                    400,
                    &format!("unknown query parameter `{key}`"),
                    0,
                );
            }
        }
    }
    if anchors > 1 {
        return refuse(
            inner,
            request,
            400,
            "only one of around, before and after may be given",
            50035,
        );
    }
    let mut page: Vec<Value> = inner
        .messages
        .range(after.map_or(0, |a| a.saturating_add(1))..)
        .filter(|(_, m)| m.channel == channel)
        .take(limit as usize)
        .map(|(_, m)| {
            let mut json = m.json.clone();
            if let Some(object) = json.as_object_mut() {
                object.remove("guild_id");
                object.remove("member");
                object.remove("allowed_mentions");
            }
            if let Some(mentions) = json["mentions"].as_array_mut() {
                for mention in mentions {
                    if let Some(object) = mention.as_object_mut() {
                        object.remove("member");
                    }
                }
            }
            json
        })
        .collect();
    page.reverse();
    inner.history_reads.push(HistoryRead {
        channel,
        after,
        limit,
        answered: page
            .iter()
            .filter_map(|m| m["id"].as_str()?.parse().ok())
            .collect(),
    });
    server::json(200, &Value::Array(page))
}

/// A 400 form error about one query parameter.
fn refuse_form(inner: &mut Inner, request: &CapturedRequest, key: &str, why: &str) -> Response {
    inner.violations.push(format!(
        "{} {}: query {key}: {why}",
        request.method, request.path
    ));
    server::json(
        400,
        &json!({"message": "Invalid Form Body", "code": 50035, "errors": {key: {"_errors": [{"code": "BASE_TYPE_BAD", "message": why}]}}}),
    )
}

/// With `enforce_nonce`, the bot's message created with the same nonce in
/// the last [`NONCE_WINDOW`], which Discord returns instead of creating
/// another.
fn enforced_nonce_message(inner: &Inner, body: &Value) -> Option<Value> {
    if body["enforce_nonce"] != true {
        return None;
    }
    let nonce = nonce_of(body)?;
    inner
        .messages
        .values()
        .find(|stored| {
            stored.author == BOT_ID
                && stored
                    .enforced_nonce
                    .as_ref()
                    .is_some_and(|(n, at)| *n == nonce && at.elapsed() < NONCE_WINDOW)
        })
        .map(|stored| stored.json.clone())
}

/// A create body's `nonce` as a string (Discord takes a string or an
/// integer, and returns it as a string).
fn nonce_of(body: &Value) -> Option<String> {
    match &body["nonce"] {
        Value::String(nonce) => Some(nonce.clone()),
        Value::Number(nonce) => Some(nonce.to_string()),
        _ => None,
    }
}

/// `IS_VOICE_MESSAGE`, which a bot may set on an upload.
const IS_VOICE_MESSAGE: u64 = 1 << 13;

/// A voice message's upload checked as Discord documents it: a single
/// `audio/ogg` attachment with `duration_secs` and a base64 `waveform` of
/// at most 256 points, no text, no other files; the error otherwise.
fn voice_message(
    body: &Value,
    files: &BTreeMap<u64, &FormPart>,
) -> Result<VoiceMessage, (&'static str, u64)> {
    if body["content"].as_str().is_some_and(|c| !c.is_empty())
        || body["embeds"].as_array().is_some_and(|e| !e.is_empty())
        || body["components"].as_array().is_some_and(|c| !c.is_empty())
    {
        return Err(("Voice messages do not support additional content.", 50159));
    }
    let entries = body["attachments"].as_array().map_or(0, Vec::len);
    let audio = files.values().all(|f| {
        f.content_type
            .as_deref()
            .is_some_and(|t| t.starts_with("audio/ogg"))
    });
    if files.len() != 1 || entries != 1 || !audio {
        return Err(("Voice messages must have a single audio attachment.", 50160));
    }
    let entry = &body["attachments"][0];
    let duration_secs = entry["duration_secs"].as_f64().filter(|d| *d >= 0.0);
    let waveform = entry["waveform"].as_str().and_then(|w| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.decode(w).ok()
    });
    match (duration_secs, waveform) {
        (Some(duration_secs), Some(waveform)) if !waveform.is_empty() && waveform.len() <= 256 => {
            Ok(VoiceMessage {
                duration_secs,
                waveform,
            })
        }
        _ => Err(("Voice messages must have supporting metadata.", 50161)),
    }
}

/// `POST /channels/{id}/messages` as `multipart/form-data`, checked as
/// Discord's "Uploading Files" describes it: one `payload_json` part
/// holding the message, files in `files[n]` parts with a file name, each
/// referenced by an `attachments[]` entry whose `id` is its `n`, at most
/// ten, none over the upload limit (413, code 40005).
fn upload_message(
    inner: &mut Inner,
    request: &CapturedRequest,
    channel: u64,
    form: &[FormPart],
) -> Response {
    let at = format!("{} {}", request.method, request.path);
    let payloads = form.iter().filter(|p| p.name == "payload_json").count();
    if payloads != 1 {
        inner.violations.push(format!(
            "{at}: {payloads} payload_json parts (one holds the message)"
        ));
        return error(400, "Invalid Form Body", 50035);
    }
    let body = &request.body;
    if !body.is_object() {
        inner
            .violations
            .push(format!("{at}: payload_json is not a JSON object"));
        return error(400, "The request body contains invalid JSON.", 50109);
    }
    let mut files: BTreeMap<u64, &FormPart> = BTreeMap::new();
    for part in form.iter().filter(|p| p.name != "payload_json") {
        let index = part
            .name
            .strip_prefix("files[")
            .and_then(|rest| rest.strip_suffix(']'))
            .and_then(|n| n.parse::<u64>().ok());
        let Some(index) = index else {
            inner.violations.push(format!(
                "{at}: a part named {:?} (files go in files[n], the message in payload_json)",
                part.name
            ));
            return error(400, "Invalid Form Body", 50035);
        };
        if part.file_name.is_none() {
            inner.violations.push(format!(
                "{at}: {} has no filename in its Content-Disposition",
                part.name
            ));
            return error(400, "Invalid Form Body", 50035);
        }
        if files.insert(index, part).is_some() {
            inner
                .violations
                .push(format!("{at}: two parts named {}", part.name));
            return error(400, "Invalid Form Body", 50035);
        }
    }
    if files.len() > MAX_FILES {
        let problem = (
            path(&["files"]),
            "BASE_TYPE_MAX_LENGTH",
            format!("Must be {MAX_FILES} or fewer in length."),
        );
        inner
            .violations
            .push(format!("{at}: {} files (at most {MAX_FILES})", files.len()));
        return server::json(400, &invalid_form(&[problem]));
    }
    let limit = inner.options.upload_limit;
    if let Some(big) = files.values().find(|f| f.data.len() as u64 > limit) {
        inner.violations.push(format!(
            "{at}: {} has {} bytes, over the {limit}-byte upload limit",
            big.name,
            big.data.len()
        ));
        return error(413, "Request entity too large", 40005);
    }
    // A voice message: one Ogg audio file, its length and waveform, and
    // nothing else (Discord's voice message rules and their codes).
    let voice = body["flags"]
        .as_u64()
        .is_some_and(|flags| flags & IS_VOICE_MESSAGE != 0);
    if voice && inner.no_voice_messages.contains(&channel) {
        // The platform's answer, not the client's mistake: no violation.
        return error(403, "Cannot send voice messages in this channel", 50173);
    }
    let voice = if voice {
        match voice_message(body, &files) {
            Ok(voice) => Some(voice),
            Err((message, code)) => return refuse(inner, request, 400, message, code),
        }
    } else {
        None
    };
    let mut checked = body.clone();
    if let Some(flags) = body["flags"].as_u64() {
        checked["flags"] = json!(flags & !IS_VOICE_MESSAGE);
    }
    // Each attachments[] entry names a file part by its index.
    let mut problems = message_problems(&checked, false);
    let mut named: BTreeMap<u64, String> = BTreeMap::new();
    match &body["attachments"] {
        Value::Null => {}
        Value::Array(entries) => {
            for (i, entry) in entries.iter().enumerate() {
                let id = match &entry["id"] {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => s.parse().ok(),
                    _ => None,
                };
                let here = |field: &str| path(&["attachments", &i.to_string(), field]);
                match id.filter(|id| files.contains_key(id)) {
                    Some(id) => {
                        let filename = match &entry["filename"] {
                            Value::String(name) if !name.is_empty() => name.clone(),
                            Value::Null => files[&id].file_name.clone().unwrap_or_default(),
                            _ => {
                                problems.push((
                                    here("filename"),
                                    "BASE_TYPE_REQUIRED",
                                    "This field is required".to_owned(),
                                ));
                                continue;
                            }
                        };
                        named.insert(id, filename);
                    }
                    None => problems.push((
                        here("id"),
                        "ATTACHMENT_NOT_FOUND",
                        format!("Attachment data not found for id {}", entry["id"]),
                    )),
                }
            }
        }
        _ => problems.push((
            path(&["attachments"]),
            "BASE_TYPE_ARRAY",
            "Must be an array.".to_owned(),
        )),
    }
    if !problems.is_empty() {
        inner
            .violations
            .push(format!("{at}: Invalid Form Body: {problems:?}"));
        return server::json(400, &invalid_form(&problems));
    }
    for (index, part) in &files {
        if !named.contains_key(index) {
            // Discord attaches it anyway under its part's file name; Flynn
            // always names its files in `attachments`.
            inner.violations.push(format!(
                "{at}: {} is not referenced by any attachments[] entry",
                part.name
            ));
            named.insert(*index, part.file_name.clone().unwrap_or_default());
        }
    }
    let content = body["content"].as_str().unwrap_or_default();
    if content.is_empty() && files.is_empty() {
        return refuse(inner, request, 400, "Cannot send an empty message", 50006);
    }
    let mut attachments = Vec::new();
    let mut stored = Vec::new();
    for (index, part) in files {
        let filename = named.remove(&index).unwrap_or_default();
        let file_id = FakeDiscord::next_id(inner);
        let content_type = part
            .content_type
            .clone()
            .unwrap_or_else(|| "application/octet-stream".to_owned());
        let cdn = format!("/attachments/{channel}/{file_id}/{filename}");
        let url = format!(
            "http://{}{cdn}?ex=6780a1b2&is=677f5032&hm=0f1e2d3c4b5a6978",
            inner.addr
        );
        let mut attachment = json!({
            "id": file_id.to_string(), "filename": filename, "size": part.data.len(),
            "url": url, "proxy_url": url, "content_type": content_type,
        });
        if let Some(voice) = &voice {
            attachment["duration_secs"] = json!(voice.duration_secs);
            attachment["waveform"] = body["attachments"][0]["waveform"].clone();
        }
        attachments.push(attachment);
        inner
            .files
            .insert(cdn, (content_type.clone(), part.data.clone()));
        stored.push((file_id, filename, part));
    }
    let message = create_message_with(inner, channel, body, None, Value::Array(attachments));
    let Some(id) = message["id"].as_str().and_then(|id| id.parse::<u64>().ok()) else {
        return refuse(inner, request, 404, "Unknown Channel", 10003);
    };
    for (file_id, filename, part) in stored {
        inner.sent_files.push(SentFile {
            message: id,
            channel,
            id: file_id,
            filename,
            content_type: part.content_type.clone(),
            data: part.data.clone(),
            content: content.to_owned(),
            voice: voice.clone(),
        });
    }
    server::json(200, &message)
}

fn create_message(
    inner: &mut Inner,
    channel_id: u64,
    body: &Value,
    interaction: Option<u64>,
) -> Value {
    create_message_with(inner, channel_id, body, interaction, json!([]))
}

/// Creates the bot's message carrying `attachments` (Discord's
/// attachment objects) and tells the bot about it.
fn create_message_with(
    inner: &mut Inner,
    channel_id: u64,
    body: &Value,
    interaction: Option<u64>,
    attachments: Value,
) -> Value {
    let Some(channel) = inner.channels.get(&channel_id).cloned() else {
        return Value::Null;
    };
    let id = FakeDiscord::next_id(inner);
    let components = if body["components"].is_array() {
        body["components"].clone()
    } else {
        json!([])
    };
    let mut message = message_json(
        id,
        channel_id,
        &channel,
        &DiscordUser::this_bot(),
        body["content"].as_str().unwrap_or_default(),
        components,
    );
    message["allowed_mentions"] = body["allowed_mentions"].clone();
    message["attachments"] = attachments;
    // The nonce comes back in the message, as a string.
    let nonce = nonce_of(body);
    if let Some(nonce) = &nonce {
        message["nonce"] = json!(nonce);
    }
    let enforced_nonce = nonce
        .filter(|_| body["enforce_nonce"] == true)
        .map(|nonce| (nonce, Instant::now()));
    if let Some(flags) = body["flags"].as_u64() {
        message["flags"] = json!(flags);
    }
    if let Some(interaction) = interaction {
        message["webhook_id"] = json!(APPLICATION_ID.to_string());
        message["application_id"] = json!(APPLICATION_ID.to_string());
        message["type"] = json!(20);
        message["interaction_metadata"] = json!({"id": interaction.to_string(), "type": 2});
    }
    inner.messages.insert(
        id,
        StoredMessage {
            channel: channel_id,
            author: BOT_ID,
            json: message.clone(),
            interaction,
            edits: 0,
            enforced_nonce,
        },
    );
    // Discord tells the bot about its own messages too.
    dispatch(inner, "MESSAGE_CREATE", message.clone());
    message
}

fn edit_message(inner: &mut Inner, id: u64, body: &Value) -> Value {
    let Some(stored) = inner.messages.get_mut(&id) else {
        return Value::Null;
    };
    for field in ["content", "components", "allowed_mentions", "flags"] {
        if !body[field].is_null() {
            stored.json[field] = body[field].clone();
        }
    }
    stored.json["edited_timestamp"] = json!(TIMESTAMP);
    stored.edits += 1;
    stored.json.clone()
}

fn interaction_by_token(inner: &Inner, app: &str, token: &str) -> Option<u64> {
    if *app != APPLICATION_ID.to_string() {
        return None;
    }
    inner
        .interactions
        .iter()
        .find(|(_, i)| i.token == token)
        .map(|(id, _)| *id)
}

fn interaction_callback(
    inner: &mut Inner,
    request: &CapturedRequest,
    id: &str,
    token: &str,
) -> Response {
    let deadline = inner.options.interaction_deadline;
    let record = id
        .parse::<u64>()
        .ok()
        .and_then(|id| inner.interactions.get(&id).map(|r| (id, r.clone())))
        .filter(|(_, r)| r.token == token);
    let Some((id, record)) = record else {
        return refuse(inner, request, 404, "Unknown interaction", 10062);
    };
    let kind = request.body["type"].as_u64().unwrap_or(0);
    let data = request.body["data"].clone();
    let after = record.created.elapsed();
    let log = |inner: &mut Inner, accepted| {
        inner.callbacks.push(Callback {
            interaction: id,
            kind,
            data: data.clone(),
            after,
            accepted,
        });
    };
    if record.answered.is_some() {
        log(inner, false);
        return refuse(
            inner,
            request,
            400,
            "Interaction has already been acknowledged.",
            40060,
        );
    }
    if after > deadline {
        log(inner, false);
        return refuse(inner, request, 404, "Unknown interaction", 10062);
    }
    let allowed = match kind {
        4 | 5 => true,
        6 | 7 => record.kind == 3,
        _ => false,
    };
    if !allowed {
        log(inner, false);
        inner.violations.push(format!(
            "POST {}: callback type {kind} does not answer an interaction of type {}",
            request.path, record.kind
        ));
        return server::json(
            400,
            &invalid_form(&[(
                path(&["type"]),
                "BASE_TYPE_CHOICES",
                "Value must be one of {1, 4, 5, 6, 7, 8, 9, 10, 12}.".to_owned(),
            )]),
        );
    }
    if kind == 4 {
        let problems = message_problems(&data, true);
        let empty = data["content"].as_str().is_none_or(str::is_empty);
        if !problems.is_empty() || empty {
            log(inner, false);
            inner.violations.push(format!(
                "POST {}: the message is invalid: {problems:?}",
                request.path
            ));
            return server::json(400, &invalid_form(&problems));
        }
    }
    log(inner, true);
    let original = (kind == 4).then(|| create_message(inner, record.channel, &data, Some(id)));
    if let Some(stored) = inner.interactions.get_mut(&id) {
        stored.answered = Some(kind);
        if let Some(original) = original.and_then(|m| m["id"].as_str().and_then(|s| s.parse().ok()))
        {
            stored.original = Some(original);
        }
    }
    server::respond(204, &[], Body::empty())
}

fn webhook(
    inner: &mut Inner,
    request: &CapturedRequest,
    interaction: u64,
    rest: &[&str],
) -> Response {
    let Some(record) = inner.interactions.get(&interaction).cloned() else {
        return refuse(inner, request, 404, "Unknown Webhook", 10015);
    };
    if record.answered.is_none() {
        return refuse(inner, request, 404, "Unknown Webhook", 10015);
    }
    match (request.method.as_str(), rest) {
        ("PATCH", ["messages", "@original"]) => {
            if let Some(refusal) = check_message(inner, request, true, true) {
                return refusal;
            }
            match record.original {
                Some(message) => server::json(200, &edit_message(inner, message, &request.body)),
                None => {
                    if let Some(refusal) = check_message(inner, request, false, true) {
                        return refusal;
                    }
                    let message =
                        create_message(inner, record.channel, &request.body, Some(interaction));
                    let id = message["id"].as_str().and_then(|s| s.parse().ok());
                    if let Some(stored) = inner.interactions.get_mut(&interaction) {
                        stored.original = id;
                    }
                    server::json(200, &message)
                }
            }
        }
        ("PATCH", ["messages", message]) => {
            let message = message.parse::<u64>().ok().filter(|m| {
                inner
                    .messages
                    .get(m)
                    .is_some_and(|stored| stored.interaction == Some(interaction))
                    || record.original == Some(*m)
            });
            let Some(message) = message else {
                return refuse(inner, request, 404, "Unknown Message", 10008);
            };
            if let Some(refusal) = check_message(inner, request, true, true) {
                return refusal;
            }
            server::json(200, &edit_message(inner, message, &request.body))
        }
        ("POST", []) => {
            if let Some(refusal) = check_message(inner, request, false, true) {
                return refusal;
            }
            server::json(
                200,
                &create_message(inner, record.channel, &request.body, Some(interaction)),
            )
        }
        _ => refuse(inner, request, 405, "405: Method Not Allowed", 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_follow_the_content() {
        assert_eq!(
            mentioned_ids("hi <@12> and <@!34>, <@12> <@x>"),
            vec![12, 34]
        );
        assert_eq!(mentioned_ids("no mentions"), Vec::<u64>::new());
    }

    #[test]
    fn form_errors_nest_by_path() {
        let body = invalid_form(&[
            (
                path(&["content"]),
                "BASE_TYPE_MAX_LENGTH",
                "Must be 2000 or fewer in length.".to_owned(),
            ),
            (
                path(&["components", "0", "components", "1", "custom_id"]),
                "X",
                "bad".to_owned(),
            ),
        ]);
        assert_eq!(body["code"], 50035);
        assert_eq!(
            body["errors"]["content"]["_errors"][0]["code"],
            "BASE_TYPE_MAX_LENGTH"
        );
        assert_eq!(
            body["errors"]["components"]["0"]["components"]["1"]["custom_id"]["_errors"][0]["message"],
            "bad"
        );
    }

    #[test]
    fn messages_are_checked_like_discord_checks_them() {
        let button = |id: &str| json!({"type": 2, "style": 1, "label": "Approve", "custom_id": id});
        let ok = json!({"content": "hi", "components": [{"type": 1, "components": [button("y:1"), button("n:1")]}]});
        assert!(message_problems(&ok, false).is_empty());
        let long = json!({"content": "x".repeat(2001)});
        assert_eq!(message_problems(&long, false).len(), 1);
        let six: Vec<Value> = (0..6).map(|i| button(&format!("b{i}"))).collect();
        let crowded = json!({"content": "hi", "components": [{"type": 1, "components": six}]});
        assert_eq!(message_problems(&crowded, false).len(), 1);
        let duplicate =
            json!({"components": [{"type": 1, "components": [button("a"), button("a")]}]});
        assert_eq!(
            message_problems(&duplicate, false)[0].1,
            "COMPONENT_CUSTOM_ID_DUPLICATED"
        );
        let long_id =
            json!({"components": [{"type": 1, "components": [button(&"i".repeat(101))]}]});
        assert_eq!(message_problems(&long_id, false).len(), 1);
        assert_eq!(
            message_problems(&json!({"content": "x", "flags": 64}), false).len(),
            1
        );
        assert!(message_problems(&json!({"content": "x", "flags": 64}), true).is_empty());
        assert!(message_problems(&json!({"content": "x", "flags": 68}), true).is_empty());
        assert!(message_problems(&json!({"content": "x", "flags": 4}), false).is_empty());
        assert_eq!(
            message_problems(&json!({"content": "x", "flags": 2}), false).len(),
            1
        );
        assert_eq!(
            message_problems(&json!({"content": "x", "flags": "4"}), false).len(),
            1
        );
    }
}
