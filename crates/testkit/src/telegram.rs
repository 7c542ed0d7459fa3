//! A strict fake of the Telegram Bot API.
//!
//! Every method is served as `POST /bot<token>/<method>` with a JSON body
//! and answered in the documented envelope: `{"ok":true,"result":…}` or
//! `{"ok":false,"error_code":…,"description":…}` (plus
//! `"parameters":{"retry_after":N}` on a 429). Files are downloaded with
//! `GET /file/bot<token>/<file_path>`. Served methods: `getMe`,
//! `deleteWebhook`, `setWebhook`, `getWebhookInfo`, `getUpdates` (a real
//! long poll: it waits up to `timeout` seconds for an update, confirms
//! every update below `offset` and returns unconfirmed ones again, answers
//! 409 while a webhook is set), `sendMessage`, `editMessageText`,
//! `answerCallbackQuery`, `sendChatAction` and `getFile`.
//!
//! Strict: a wrong token, an unknown method or chat, a text that is empty,
//! longer than 4096 UTF-16 units once parsed, or whose HTML Telegram would
//! refuse, a bad inline keyboard (`callback_data` outside 1–64 bytes), an
//! edit of a message the bot did not send, an unknown callback query or
//! file gets Telegram's error and is listed in
//! [`violations`](FakeTelegram::violations). Two refusals are not
//! violations because a correct client meets them in normal operation: the
//! 400 "message is not modified" for an edit that changes nothing, and the
//! 409 that ends a long poll superseded by a newer one.
//!
//! A flaky network is [`FakeTelegram::cut_polls_after`]: a long poll still
//! waiting after that long has its connection closed without an answer.
//!
//! Inbound traffic is built with [`Incoming`] (text, captions, photos,
//! documents, forum topics, replies to the bot) and
//! [`FakeTelegram::callback`], in the documented `Update` JSON, with
//! `mention` and `bot_command` entities computed the way Telegram does.
//! In webhook mode, [`FakeTelegram::webhook_post`] builds the POST
//! Telegram would send to the registered URL.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::server::{self, CapturedRequest, FormPart, Server};

/// The bot token the fake accepts unless started with another.
pub const TOKEN: &str = "123456789:AAH-fake_Telegram_token_for_tests_0";
/// The bot's user id (Telegram's tokens start with it).
pub const BOT_ID: i64 = 123456789;
/// The bot's username, without `@`.
pub const BOT_USERNAME: &str = "flynn_bot";
/// The bot's display name.
pub const BOT_NAME: &str = "Flynn";
/// The largest file `getFile` hands out (the Bot API's 20 MB).
pub const FILE_LIMIT: u64 = 20 * 1024 * 1024;
/// The longest message text, in UTF-16 code units after entity parsing.
pub const MAX_TEXT: usize = 4096;
/// The longest `answerCallbackQuery` text, in characters.
const MAX_CALLBACK_TEXT: usize = 200;
/// The header Telegram carries the webhook secret in.
pub const SECRET_HEADER: &str = "X-Telegram-Bot-Api-Secret-Token";
/// The first `update_id` the fake hands out.
const FIRST_UPDATE_ID: i64 = 870_000_001;

/// A Telegram user, as the `User` object shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TgUser {
    pub id: i64,
    pub first_name: String,
    pub last_name: Option<String>,
    pub username: Option<String>,
    pub is_bot: bool,
}

impl TgUser {
    /// A person with this id and first name, no username.
    pub fn new(id: i64, first_name: &str) -> Self {
        TgUser {
            id,
            first_name: first_name.to_owned(),
            last_name: None,
            username: None,
            is_bot: false,
        }
    }

    /// With a username (without `@`).
    pub fn username(mut self, username: &str) -> Self {
        self.username = Some(username.to_owned());
        self
    }

    /// With a last name.
    pub fn last_name(mut self, last_name: &str) -> Self {
        self.last_name = Some(last_name.to_owned());
        self
    }

    /// Marked as a bot (`is_bot: true`).
    pub fn bot(mut self) -> Self {
        self.is_bot = true;
        self
    }

    fn json(&self) -> Value {
        let mut user = json!({"id": self.id, "is_bot": self.is_bot, "first_name": self.first_name});
        if let Some(last) = &self.last_name {
            user["last_name"] = json!(last);
        }
        if let Some(username) = &self.username {
            user["username"] = json!(username);
        }
        user
    }
}

#[derive(Debug, Clone)]
enum ChatSpec {
    Private,
    Group { id: i64, title: String },
}

#[derive(Debug, Clone)]
enum Media {
    Photo(Vec<u8>),
    Voice(Vec<u8>),
    Document {
        name: String,
        mime: String,
        data: Vec<u8>,
    },
}

/// A message a person sends the bot, to push with [`FakeTelegram::push`]
/// or turn into an `Update` with [`FakeTelegram::update`].
#[derive(Debug, Clone)]
pub struct Incoming {
    chat: ChatSpec,
    from: TgUser,
    text: String,
    thread: Option<i64>,
    reply_to: Option<i64>,
    media: Option<Media>,
    declared_size: Option<u64>,
    fields: Vec<(String, Value)>,
}

impl Incoming {
    /// A message in the private chat between `from` and the bot. An empty
    /// `text` sends no `text` field.
    pub fn private(from: &TgUser, text: &str) -> Self {
        Incoming {
            chat: ChatSpec::Private,
            from: from.clone(),
            text: text.to_owned(),
            thread: None,
            reply_to: None,
            media: None,
            declared_size: None,
            fields: Vec::new(),
        }
    }

    /// A message in the supergroup `chat_id` (negative, `-100…`).
    pub fn group(chat_id: i64, title: &str, from: &TgUser, text: &str) -> Self {
        Incoming {
            chat: ChatSpec::Group {
                id: chat_id,
                title: title.to_owned(),
            },
            ..Incoming::private(from, text)
        }
    }

    /// Sent in a forum topic: the chat becomes a forum, the message
    /// carries `message_thread_id` and `is_topic_message`.
    pub fn in_topic(mut self, thread_id: i64) -> Self {
        self.thread = Some(thread_id);
        self
    }

    /// A reply to a message the bot sent (`reply_to_message` carries it).
    pub fn replying_to(mut self, message_id: i64) -> Self {
        self.reply_to = Some(message_id);
        self
    }

    /// With a photo (the text becomes its caption). Telegram sends two
    /// sizes: a small thumbnail and this image at full size.
    pub fn photo(mut self, data: Vec<u8>) -> Self {
        self.media = Some(Media::Photo(data));
        self
    }

    /// With a voice note (Opus in Ogg, as Telegram's apps record them;
    /// the text, if any, becomes its caption).
    pub fn voice(mut self, data: Vec<u8>) -> Self {
        self.media = Some(Media::Voice(data));
        self
    }

    /// With a document (the text becomes its caption).
    pub fn document(mut self, name: &str, mime: &str, data: Vec<u8>) -> Self {
        self.media = Some(Media::Document {
            name: name.to_owned(),
            mime: mime.to_owned(),
            data,
        });
        self
    }

    /// The `file_size` the document claims (to test the 20 MB limit
    /// without 20 MB of data).
    pub fn declared_size(mut self, size: u64) -> Self {
        self.declared_size = Some(size);
        self
    }

    /// An extra field in the `Message` object (service messages:
    /// `new_chat_members`, `pinned_message`…).
    pub fn field(mut self, key: &str, value: Value) -> Self {
        self.fields.push((key.to_owned(), value));
        self
    }
}

/// A message the bot sent, as the fake holds it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentMessage {
    pub chat_id: i64,
    pub message_id: i64,
    pub thread_id: Option<i64>,
    /// The text as sent (HTML when `parse_mode` was `HTML`).
    pub text: String,
    /// What the user reads: tags removed, entities decoded.
    pub plain: String,
    pub parse_mode: Option<String>,
    /// Whether `link_preview_options.is_disabled` was true.
    pub preview_disabled: bool,
    /// The inline keyboard, row by row.
    pub keyboard: Vec<Vec<SentButton>>,
    /// Times it was edited.
    pub edits: u32,
}

/// A file the bot uploaded: `sendPhoto`, `sendDocument`, `sendAudio` or
/// `sendVoice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentFile {
    pub chat_id: i64,
    pub message_id: i64,
    pub thread_id: Option<i64>,
    /// The method, as Telegram spells it (`sendPhoto`).
    pub method: String,
    /// The name and type the upload part carried.
    pub file_name: String,
    pub content_type: Option<String>,
    pub data: Vec<u8>,
    pub caption: Option<String>,
}

/// One inline keyboard button.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentButton {
    pub text: String,
    pub callback_data: Option<String>,
    pub url: Option<String>,
    pub style: Option<String>,
}

/// A `sendChatAction` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatActionSent {
    pub chat_id: i64,
    pub action: String,
    pub thread_id: Option<i64>,
}

/// An `answerCallbackQuery` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackAnswer {
    pub callback_query_id: String,
    pub text: Option<String>,
    pub show_alert: bool,
}

/// The webhook registered with `setWebhook`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookInfo {
    pub url: String,
    pub secret_token: Option<String>,
    pub allowed_updates: Option<Vec<String>>,
}

/// The HTTP request Telegram sends to a webhook for one update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookPost {
    /// The registered URL.
    pub url: String,
    /// The URL's path (`/channels/telegram/webhook`).
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// An answer to inject instead of serving a method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// 429 `Too Many Requests: retry after N` with
    /// `parameters.retry_after`.
    RateLimited { retry_after: u64 },
    /// This status with its usual description (`502 Bad Gateway`).
    Status(u16),
    /// This error code and description.
    Error { code: u16, description: String },
}

#[derive(Debug, Clone)]
struct ChatRecord {
    json: Value,
    forum: bool,
    topics: HashSet<i64>,
}

#[derive(Debug, Clone)]
struct FileRecord {
    unique_id: String,
    path: String,
    data: Vec<u8>,
    size: u64,
}

#[derive(Debug, Default)]
struct State {
    requests: Vec<CapturedRequest>,
    violations: Vec<String>,
    chats: HashMap<i64, ChatRecord>,
    /// Unconfirmed updates, by ascending `update_id`.
    updates: Vec<Value>,
    next_update_id: i64,
    next_message_id: i64,
    next_callback: u64,
    next_file: u64,
    /// The highest `offset` a `getUpdates` gave.
    confirmed: i64,
    allowed_updates: Option<Vec<String>>,
    poll_generation: u64,
    webhook: Option<WebhookInfo>,
    sent: Vec<SentMessage>,
    uploads: Vec<SentFile>,
    actions: Vec<ChatActionSent>,
    callbacks: HashMap<String, bool>,
    answers: Vec<CallbackAnswer>,
    files: HashMap<String, FileRecord>,
    failures: HashMap<String, VecDeque<Failure>>,
    /// Long polls still waiting after this long lose their connection.
    cut_polls_after: Option<Duration>,
    /// Long polls cut so far.
    cut_polls: u64,
    /// Long polls ended by a newer one (two bot instances polling).
    superseded: u64,
}

#[derive(Debug)]
struct Inner {
    token: String,
    state: Mutex<State>,
    /// Bumped on every request and every change a test makes.
    changed: watch::Sender<u64>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

/// A fake Telegram Bot API server on `127.0.0.1`.
#[derive(Debug)]
pub struct FakeTelegram {
    inner: Arc<Inner>,
    server: Server,
}

impl FakeTelegram {
    /// Starts a fake that accepts [`TOKEN`].
    pub async fn start() -> Self {
        Self::start_with_token(TOKEN)
    }

    /// Starts a fake that accepts `token`.
    pub fn start_with_token(token: &str) -> Self {
        let (changed, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            token: token.to_owned(),
            state: Mutex::new(State {
                next_update_id: FIRST_UPDATE_ID,
                next_message_id: 1,
                ..State::default()
            }),
            changed,
        });
        let for_router = Arc::clone(&inner);
        let router = Router::new().fallback(move |request: Request| {
            let inner = Arc::clone(&for_router);
            async move { handle(inner, request).await }
        });
        let server = Server::start_router("telegram", router);
        FakeTelegram { inner, server }
    }

    /// The Bot API base to configure as `api_url` (`http://127.0.0.1:PORT`).
    pub fn api_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The token the fake accepts.
    pub fn token(&self) -> &str {
        &self.inner.token
    }

    /// Every request received, in order (bodies as JSON).
    pub fn requests(&self) -> Vec<CapturedRequest> {
        self.inner.lock().requests.clone()
    }

    /// The bodies of every call to `method` (`sendMessage`), in order.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        self.inner
            .lock()
            .requests
            .iter()
            .filter(|r| method_of(&r.path).is_some_and(|m| m.eq_ignore_ascii_case(method)))
            .map(|r| r.body.clone())
            .collect()
    }

    /// Every protocol violation seen; empty when the client behaved.
    pub fn violations(&self) -> Vec<String> {
        self.inner.lock().violations.clone()
    }

    /// Answers the next call to `method` with `failure` instead of
    /// serving it; several queue up in order.
    pub fn fail_next(&self, method: &str, failure: Failure) {
        self.inner
            .lock()
            .failures
            .entry(method.to_ascii_lowercase())
            .or_default()
            .push_back(failure);
    }

    /// From now on a `getUpdates` long poll that is still waiting for an
    /// update after `after` ends with its connection closed, no answer
    /// sent (a flaky network, or a proxy cutting idle connections); a poll
    /// that has updates is answered at once as before. `None` stops it.
    pub fn cut_polls_after(&self, after: Option<Duration>) {
        self.inner.lock().cut_polls_after = after;
        self.inner.bump();
    }

    /// How many long polls [`cut_polls_after`](Self::cut_polls_after) cut.
    pub fn cut_polls(&self) -> u64 {
        self.inner.lock().cut_polls
    }

    /// How many long polls ended with Telegram's 409 because another
    /// `getUpdates` came meanwhile: more than one process polling the bot.
    pub fn superseded_polls(&self) -> u64 {
        self.inner.lock().superseded
    }

    /// Every message the bot sent, as it stands now (after edits).
    pub fn sent(&self) -> Vec<SentMessage> {
        self.inner.lock().sent.clone()
    }

    /// Every file the bot uploaded, in order.
    pub fn files_sent(&self) -> Vec<SentFile> {
        self.inner.lock().uploads.clone()
    }

    /// One sent message by id.
    pub fn message(&self, message_id: i64) -> Option<SentMessage> {
        self.inner
            .lock()
            .sent
            .iter()
            .find(|m| m.message_id == message_id)
            .cloned()
    }

    /// Every `sendChatAction`.
    pub fn chat_actions(&self) -> Vec<ChatActionSent> {
        self.inner.lock().actions.clone()
    }

    /// Every `answerCallbackQuery`.
    pub fn callback_answers(&self) -> Vec<CallbackAnswer> {
        self.inner.lock().answers.clone()
    }

    /// The `update_id`s still waiting to be confirmed.
    pub fn pending_updates(&self) -> Vec<i64> {
        self.inner
            .lock()
            .updates
            .iter()
            .filter_map(|u| u["update_id"].as_i64())
            .collect()
    }

    /// The highest `offset` a `getUpdates` confirmed (0 before any).
    pub fn confirmed_offset(&self) -> i64 {
        self.inner.lock().confirmed
    }

    /// The registered webhook, if one is set.
    pub fn webhook(&self) -> Option<WebhookInfo> {
        self.inner.lock().webhook.clone()
    }

    /// Sets a webhook as `setWebhook` would (a bot left in webhook mode
    /// by an earlier deployment).
    pub fn set_webhook(&self, url: &str, secret_token: Option<&str>) {
        self.inner.lock().webhook = Some(WebhookInfo {
            url: url.to_owned(),
            secret_token: secret_token.map(str::to_owned),
            allowed_updates: None,
        });
        self.inner.bump();
    }

    /// Builds the `Update` for a message (registering its chat and files)
    /// without queueing it: for [`webhook_post`](Self::webhook_post).
    pub fn update(&self, incoming: Incoming) -> Value {
        let update = self.inner.lock().message_update(incoming);
        self.inner.bump();
        update
    }

    /// Queues a message for `getUpdates`; returns its `update_id`.
    pub fn push(&self, incoming: Incoming) -> i64 {
        let update = self.update(incoming);
        self.push_update(update)
    }

    /// Queues any `Update` JSON (it must carry an `update_id`); returns
    /// the id. Pushing an update again redelivers it.
    pub fn push_update(&self, update: Value) -> i64 {
        let Some(id) = update["update_id"].as_i64() else {
            panic!("FakeTelegram::push_update: the update has no update_id: {update}");
        };
        {
            let mut state = self.inner.lock();
            state.next_update_id = state.next_update_id.max(id + 1);
            let at = state
                .updates
                .iter()
                .position(|u| u["update_id"].as_i64().is_some_and(|other| other > id))
                .unwrap_or(state.updates.len());
            state.updates.insert(at, update);
        }
        self.inner.bump();
        id
    }

    /// Builds the `Update` for a press of the button carrying `data` under
    /// the bot's message `message_id`, by `from`. Panics when the message
    /// has no such button: a person can only press what is there.
    pub fn callback(&self, from: &TgUser, message_id: i64, data: &str) -> Value {
        let update = {
            let mut state = self.inner.lock();
            let Some(message) = state
                .sent
                .iter()
                .find(|m| m.message_id == message_id)
                .cloned()
            else {
                panic!("FakeTelegram::callback: the bot sent no message {message_id}");
            };
            let pressable = message
                .keyboard
                .iter()
                .flatten()
                .any(|b| b.callback_data.as_deref() == Some(data));
            if !pressable {
                panic!(
                    "FakeTelegram::callback: message {message_id} has no button with callback_data '{data}'"
                );
            }
            state.next_callback += 1;
            let id = format!("{}", 4_382_000_000_000_000_000u64 + state.next_callback);
            state.callbacks.insert(id.clone(), false);
            let update_id = state.take_update_id();
            json!({
                "update_id": update_id,
                "callback_query": {
                    "id": id,
                    "from": from.json(),
                    "message": state.bot_message_json(&message),
                    "chat_instance": format!("{}", message.chat_id.wrapping_mul(-7919)),
                    "data": data,
                }
            })
        };
        self.inner.bump();
        update
    }

    /// Queues a button press (see [`callback`](Self::callback)); returns
    /// the callback query's id.
    pub fn push_callback(&self, from: &TgUser, message_id: i64, data: &str) -> String {
        let update = self.callback(from, message_id, data);
        let id = update["callback_query"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.push_update(update);
        id
    }

    /// The request Telegram would POST to the registered webhook for
    /// `update`, carrying `secret` in `X-Telegram-Bot-Api-Secret-Token`
    /// (`None`: no header). Panics when no webhook is set.
    pub fn webhook_post(&self, update: &Value, secret: Option<&str>) -> WebhookPost {
        let Some(webhook) = self.webhook() else {
            panic!("FakeTelegram::webhook_post: no webhook is set");
        };
        let after_scheme = webhook
            .url
            .split_once("://")
            .map_or(webhook.url.as_str(), |(_, rest)| rest);
        let path = after_scheme
            .find('/')
            .map_or_else(|| "/".to_owned(), |at| after_scheme[at..].to_owned());
        let mut headers = vec![("content-type".to_owned(), "application/json".to_owned())];
        if let Some(secret) = secret {
            headers.push((SECRET_HEADER.to_owned(), secret.to_owned()));
        }
        WebhookPost {
            url: webhook.url,
            path,
            headers,
            body: update.to_string().into_bytes(),
        }
    }

    /// Waits until `check` holds (checked after every request the fake
    /// receives and every change a test makes), at most `timeout`.
    /// Returns whether it held.
    pub async fn wait(&self, timeout: Duration, check: impl Fn(&FakeTelegram) -> bool) -> bool {
        let mut changes = self.inner.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            changes.borrow_and_update();
            if check(self) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return check(self),
            }
        }
    }

    /// Waits until `method` was called at least `count` times.
    pub async fn wait_for_calls(&self, method: &str, count: usize, timeout: Duration) -> bool {
        self.wait(timeout, |fake| fake.calls(method).len() >= count)
            .await
    }
}

impl State {
    fn take_update_id(&mut self) -> i64 {
        let id = self.next_update_id;
        self.next_update_id += 1;
        id
    }

    fn take_message_id(&mut self) -> i64 {
        let id = self.next_message_id;
        self.next_message_id += 1;
        id
    }

    fn add_file(&mut self, folder: &str, extension: &str, data: Vec<u8>, size: u64) -> Value {
        self.next_file += 1;
        let n = self.next_file;
        let file_id = format!("BQACAgIAAxkBAAIB{n:06}");
        let unique_id = format!("AgAD{n:04}");
        let path = format!("{folder}/file_{n}.{extension}");
        self.files.insert(
            file_id.clone(),
            FileRecord {
                unique_id: unique_id.clone(),
                path,
                data,
                size,
            },
        );
        json!({"file_id": file_id, "file_unique_id": unique_id, "file_size": size})
    }

    fn chat_json(&self, chat_id: i64) -> Value {
        self.chats.get(&chat_id).map_or_else(
            || json!({"id": chat_id, "type": "private"}),
            |c| c.json.clone(),
        )
    }

    fn bot_message_json(&self, message: &SentMessage) -> Value {
        let mut json = json!({
            "message_id": message.message_id,
            "from": bot_user(),
            "chat": self.chat_json(message.chat_id),
            "date": now(),
            "text": message.plain,
        });
        if let Some(thread) = message.thread_id {
            json["message_thread_id"] = json!(thread);
            json["is_topic_message"] = json!(true);
        }
        if !message.keyboard.is_empty() {
            json["reply_markup"] = json!({"inline_keyboard": message
                .keyboard
                .iter()
                .map(|row| row.iter().map(button_json).collect::<Vec<_>>())
                .collect::<Vec<_>>()});
        }
        json
    }

    fn message_update(&mut self, incoming: Incoming) -> Value {
        let chat_id = match &incoming.chat {
            ChatSpec::Private => incoming.from.id,
            ChatSpec::Group { id, .. } => *id,
        };
        let chat_json = match &incoming.chat {
            ChatSpec::Private => {
                let mut chat = json!({"id": chat_id, "type": "private", "first_name": incoming.from.first_name});
                if let Some(last) = &incoming.from.last_name {
                    chat["last_name"] = json!(last);
                }
                if let Some(username) = &incoming.from.username {
                    chat["username"] = json!(username);
                }
                chat
            }
            ChatSpec::Group { title, .. } => {
                let mut chat = json!({"id": chat_id, "type": "supergroup", "title": title});
                if incoming.thread.is_some() {
                    chat["is_forum"] = json!(true);
                }
                chat
            }
        };
        let record = self.chats.entry(chat_id).or_insert_with(|| ChatRecord {
            json: chat_json.clone(),
            forum: false,
            topics: HashSet::new(),
        });
        if let Some(thread) = incoming.thread {
            record.forum = true;
            record.topics.insert(thread);
            record.json["is_forum"] = json!(true);
        }
        let chat_json = record.json.clone();

        let message_id = self.take_message_id();
        let mut message = json!({
            "message_id": message_id,
            "from": incoming.from.json(),
            "chat": chat_json,
            "date": now(),
        });
        if let Some(thread) = incoming.thread {
            message["message_thread_id"] = json!(thread);
            message["is_topic_message"] = json!(true);
        }
        if let Some(reply_to) = incoming.reply_to {
            let Some(original) = self.sent.iter().find(|m| m.message_id == reply_to).cloned()
            else {
                panic!("FakeTelegram: replying_to({reply_to}): the bot sent no such message");
            };
            message["reply_to_message"] = self.bot_message_json(&original);
        }
        let (text_key, entities_key) = if incoming.media.is_some() {
            ("caption", "caption_entities")
        } else {
            ("text", "entities")
        };
        if !incoming.text.is_empty() {
            message[text_key] = json!(incoming.text);
            let entities = text_entities(&incoming.text);
            if !entities.is_empty() {
                message[entities_key] = Value::Array(entities);
            }
        }
        match incoming.media {
            Some(Media::Photo(data)) => {
                let thumb: Vec<u8> = data.iter().take(16).copied().collect();
                let thumb_size = thumb.len() as u64;
                let full_size = incoming.declared_size.unwrap_or(data.len() as u64);
                let mut small = self.add_file("photos", "jpg", thumb, thumb_size);
                small["width"] = json!(90);
                small["height"] = json!(60);
                let mut large = self.add_file("photos", "jpg", data, full_size);
                large["width"] = json!(1280);
                large["height"] = json!(853);
                message["photo"] = json!([small, large]);
            }
            Some(Media::Voice(data)) => {
                let size = incoming.declared_size.unwrap_or(data.len() as u64);
                let mut voice = self.add_file("voice", "oga", data, size);
                voice["duration"] = json!(2);
                voice["mime_type"] = json!("audio/ogg");
                message["voice"] = voice;
            }
            Some(Media::Document { name, mime, data }) => {
                let size = incoming.declared_size.unwrap_or(data.len() as u64);
                let extension = name.rsplit_once('.').map_or("bin", |(_, ext)| ext);
                let extension = extension.to_owned();
                let mut document = self.add_file("documents", &extension, data, size);
                document["file_name"] = json!(name);
                document["mime_type"] = json!(mime);
                message["document"] = document;
            }
            None => {}
        }
        for (key, value) in incoming.fields {
            message[key] = value;
        }
        let update_id = self.take_update_id();
        json!({"update_id": update_id, "message": message})
    }
}

fn bot_user() -> Value {
    json!({"id": BOT_ID, "is_bot": true, "first_name": BOT_NAME, "username": BOT_USERNAME})
}

fn button_json(button: &SentButton) -> Value {
    let mut json = json!({"text": button.text});
    if let Some(data) = &button.callback_data {
        json["callback_data"] = json!(data);
    }
    if let Some(url) = &button.url {
        json["url"] = json!(url);
    }
    if let Some(style) = &button.style {
        json["style"] = json!(style);
    }
    json
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `mention` (`@name`, 5–32 word characters) and `bot_command` (`/cmd`
/// or `/cmd@bot` at the start of a word) entities, offsets and lengths in
/// UTF-16 code units, as Telegram computes them for a text message.
fn text_entities(text: &str) -> Vec<Value> {
    let chars: Vec<char> = text.chars().collect();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let units =
        |from: usize, to: usize| -> usize { chars[from..to].iter().map(|c| c.len_utf16()).sum() };
    let mut entities = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word =
            i == 0 || !word(chars[i - 1]) && chars[i - 1] != '@' && chars[i - 1] != '/';
        let run = |from: usize| {
            let mut end = from;
            while end < chars.len() && word(chars[end]) {
                end += 1;
            }
            end
        };
        if chars[i] == '@' && starts_word {
            let end = run(i + 1);
            if (5..=32).contains(&(end - i - 1)) {
                entities.push(
                    json!({"type": "mention", "offset": units(0, i), "length": units(i, end)}),
                );
                i = end;
                continue;
            }
        }
        if chars[i] == '/' && (i == 0 || chars[i - 1].is_whitespace()) {
            let mut end = run(i + 1);
            if end > i + 1 {
                if end < chars.len() && chars[end] == '@' {
                    let bot_end = run(end + 1);
                    if (5..=32).contains(&(bot_end - end - 1)) {
                        end = bot_end;
                    }
                }
                entities.push(
                    json!({"type": "bot_command", "offset": units(0, i), "length": units(i, end)}),
                );
                i = end;
                continue;
            }
        }
        i += 1;
    }
    entities
}

// ---------------------------------------------------------------- serving

/// The method in `/bot<token>/<method>`.
fn method_of(path: &str) -> Option<&str> {
    path.strip_prefix("/bot")?.split_once('/').map(|(_, m)| m)
}

/// An error the way the Bot API answers it, and whether a correct client
/// could have avoided it.
struct ApiError {
    code: u16,
    description: String,
    violation: bool,
    retry_after: Option<u64>,
}

impl ApiError {
    fn bad(description: impl std::fmt::Display) -> Self {
        ApiError {
            code: 400,
            description: format!("Bad Request: {description}"),
            violation: true,
            retry_after: None,
        }
    }

    fn benign(mut self) -> Self {
        self.violation = false;
        self
    }

    fn response(&self) -> Response {
        let mut body =
            json!({"ok": false, "error_code": self.code, "description": self.description});
        if let Some(retry_after) = self.retry_after {
            body["parameters"] = json!({"retry_after": retry_after});
        }
        server::json(self.code, &body)
    }
}

impl From<Failure> for ApiError {
    fn from(failure: Failure) -> Self {
        let (code, description, retry_after) = match failure {
            Failure::RateLimited { retry_after } => (
                429,
                format!("Too Many Requests: retry after {retry_after}"),
                Some(retry_after),
            ),
            Failure::Status(code) => {
                let reason = match code {
                    500 => "Internal Server Error",
                    502 => "Bad Gateway",
                    503 => "Service Unavailable",
                    504 => "Gateway Timeout",
                    _ => "Error",
                };
                (code, reason.to_owned(), None)
            }
            Failure::Error { code, description } => (code, description, None),
        };
        ApiError {
            code,
            description,
            violation: false,
            retry_after,
        }
    }
}

fn ok(result: Value) -> Response {
    server::json(200, &json!({"ok": true, "result": result}))
}

fn ok_described(result: Value, description: &str) -> Response {
    server::json(
        200,
        &json!({"ok": true, "result": result, "description": description}),
    )
}

async fn handle(inner: Arc<Inner>, request: Request) -> Response {
    let received = server::Received::read(request).await;
    let parsed = received.json();
    let bytes = received.bytes;
    let captured = CapturedRequest {
        method: received.method,
        path: received.path,
        headers: received.headers,
        body: parsed.as_ref().map_or(Value::Null, Clone::clone),
    };
    inner.lock().requests.push(captured.clone());
    inner.bump();

    let answer = serve(&inner, &captured, parsed.map_err(|e| e.to_string()), &bytes).await;
    match answer {
        Ok(response) => response,
        Err(error) => {
            if error.violation {
                inner.lock().violations.push(format!(
                    "{} {}: {} {}",
                    captured.method,
                    redact(&captured.path, &inner.token),
                    error.code,
                    error.description
                ));
            }
            error.response()
        }
    }
}

/// The path with the token replaced, for violation messages.
fn redact(path: &str, token: &str) -> String {
    path.replace(token, "<token>")
}

fn not_found() -> ApiError {
    ApiError {
        code: 404,
        description: "Not Found".to_owned(),
        violation: true,
        retry_after: None,
    }
}

fn unauthorized() -> ApiError {
    ApiError {
        code: 401,
        description: "Unauthorized".to_owned(),
        violation: true,
        retry_after: None,
    }
}

async fn serve(
    inner: &Inner,
    request: &CapturedRequest,
    body: Result<Value, String>,
    raw: &[u8],
) -> Result<Response, ApiError> {
    if let Some(rest) = request.path.strip_prefix("/file/bot") {
        let (token, file_path) = rest.split_once('/').unwrap_or((rest, ""));
        if token != inner.token {
            return Err(unauthorized());
        }
        if request.method != "GET" {
            return Err(not_found());
        }
        return download(inner, file_path);
    }
    let Some(rest) = request.path.strip_prefix("/bot") else {
        return Err(not_found());
    };
    let Some((token, method)) = rest.split_once('/') else {
        return Err(not_found());
    };
    if token != inner.token {
        return Err(unauthorized());
    }
    if request.method != "POST" {
        return Err(ApiError::bad(format!(
            "the fake serves methods as POST with a JSON body, not {}",
            request.method
        )));
    }
    let upload = UPLOADS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(method));
    let multipart = request
        .header("content-type")
        .filter(|t| t.starts_with("multipart/form-data"));
    if let (Some((method, field)), Some(content_type)) = (upload, multipart) {
        let parts = server::form_parts(content_type, bytes::Bytes::copy_from_slice(raw))
            .await
            .map_err(ApiError::bad)?;
        let injected = inner
            .lock()
            .failures
            .get_mut(&method.to_ascii_lowercase())
            .and_then(VecDeque::pop_front);
        if let Some(failure) = injected {
            return Err(ApiError::from(failure));
        }
        let answer = send_file(&mut inner.lock(), method, field, parts);
        inner.bump();
        return answer;
    }
    if !raw.is_empty() {
        let json_type = request
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json"));
        if !json_type {
            return Err(ApiError::bad(
                "the body must be JSON with Content-Type: application/json",
            ));
        }
    }
    let body = match body {
        Ok(Value::Null) => Map::new(),
        Ok(Value::Object(map)) => map,
        Ok(other) => return Err(ApiError::bad(format!("the body is not an object: {other}"))),
        Err(e) => return Err(ApiError::bad(format!("can't parse JSON object: {e}"))),
    };
    let method = method.to_ascii_lowercase();
    let injected = inner
        .lock()
        .failures
        .get_mut(&method)
        .and_then(VecDeque::pop_front);
    if let Some(failure) = injected {
        return Err(ApiError::from(failure));
    }
    if method == "getupdates" {
        return get_updates(inner, &body).await;
    }
    let mut state = inner.lock();
    let answer = match method.as_str() {
        "getme" => Ok(ok(bot_user_full())),
        "deletewebhook" => {
            let had = state.webhook.take().is_some();
            if body.get("drop_pending_updates").and_then(Value::as_bool) == Some(true) {
                state.updates.clear();
            }
            Ok(ok_described(
                json!(true),
                if had {
                    "Webhook was deleted"
                } else {
                    "Webhook is already deleted"
                },
            ))
        }
        "setwebhook" => set_webhook(&mut state, &body),
        "getwebhookinfo" => {
            let pending = state.updates.len();
            let info = state.webhook.clone();
            Ok(ok(json!({
                "url": info.as_ref().map_or("", |w| w.url.as_str()),
                "has_custom_certificate": false,
                "pending_update_count": pending,
            })))
        }
        "sendmessage" => send_message(&mut state, &body),
        "editmessagetext" => edit_message_text(&mut state, &body),
        "answercallbackquery" => answer_callback_query(&mut state, &body),
        "sendchataction" => send_chat_action(&mut state, &body),
        "getfile" => get_file(&state, &body),
        _ => Err(not_found()),
    };
    drop(state);
    inner.bump();
    answer
}

fn bot_user_full() -> Value {
    let mut user = bot_user();
    user["can_join_groups"] = json!(true);
    user["can_read_all_group_messages"] = json!(false);
    user["supports_inline_queries"] = json!(false);
    user
}

fn download(inner: &Inner, file_path: &str) -> Result<Response, ApiError> {
    let state = inner.lock();
    let Some(file) = state.files.values().find(|f| f.path == file_path) else {
        return Err(not_found());
    };
    Ok(server::respond(
        200,
        &[("content-type", "application/octet-stream")],
        Body::from(file.data.clone()),
    ))
}

fn updates_allowed(allowed: Option<&Vec<String>>, update: &Value) -> bool {
    let kind = update
        .as_object()
        .and_then(|o| o.keys().find(|k| k.as_str() != "update_id").cloned())
        .unwrap_or_default();
    match allowed {
        Some(list) => list.contains(&kind),
        // The documented default: everything but these three.
        None => !matches!(
            kind.as_str(),
            "chat_member" | "message_reaction" | "message_reaction_count"
        ),
    }
}

fn allowed_list(body: &Map<String, Value>) -> Result<Option<Vec<String>>, ApiError> {
    match body.get("allowed_updates") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| ApiError::bad("can't parse allowed updates JSON array"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(ApiError::bad("can't parse allowed updates JSON array")),
    }
}

async fn get_updates(inner: &Inner, body: &Map<String, Value>) -> Result<Response, ApiError> {
    let offset = match body.get("offset") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_i64()
                .ok_or_else(|| ApiError::bad("offset must be an integer"))?,
        ),
    };
    let limit = body
        .get("limit")
        .and_then(Value::as_u64)
        .unwrap_or(100)
        .clamp(1, 100) as usize;
    let timeout = body.get("timeout").and_then(Value::as_u64).unwrap_or(0);
    let allowed = allowed_list(body)?;
    let generation = {
        let mut state = inner.lock();
        if state.webhook.is_some() {
            return Err(ApiError {
                code: 409,
                description: "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first".to_owned(),
                violation: true,
                retry_after: None,
            });
        }
        match offset {
            Some(offset) if offset > 0 => {
                state
                    .updates
                    .retain(|u| u["update_id"].as_i64().is_some_and(|id| id >= offset));
                state.confirmed = state.confirmed.max(offset);
            }
            Some(offset) if offset < 0 => {
                let keep = usize::try_from(offset.unsigned_abs()).unwrap_or(usize::MAX);
                let drop = state.updates.len().saturating_sub(keep);
                state.updates.drain(..drop);
            }
            _ => {}
        }
        if let Some(list) = allowed {
            state.allowed_updates = (!list.is_empty()).then_some(list);
        }
        let allowed = state.allowed_updates.clone();
        state
            .updates
            .retain(|u| updates_allowed(allowed.as_ref(), u));
        state.poll_generation += 1;
        state.poll_generation
    };
    inner.bump();
    let started = tokio::time::Instant::now();
    let deadline = started + Duration::from_secs(timeout);
    let mut changes = inner.changed.subscribe();
    loop {
        changes.borrow_and_update();
        {
            let mut state = inner.lock();
            if let Some(after) = state.cut_polls_after
                && started.elapsed() >= after
                && state.updates.is_empty()
            {
                state.cut_polls += 1;
                drop(state);
                inner.bump();
                return Ok(cut_connection());
            }
            if state.poll_generation != generation {
                state.superseded += 1;
                return Err(ApiError {
                    code: 409,
                    description: "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running".to_owned(),
                    violation: false,
                    retry_after: None,
                });
            }
            let allowed = state.allowed_updates.clone();
            state
                .updates
                .retain(|u| updates_allowed(allowed.as_ref(), u));
            if !state.updates.is_empty() {
                let batch: Vec<Value> = state.updates.iter().take(limit).cloned().collect();
                return Ok(ok(Value::Array(batch)));
            }
        }
        // Wake up for a change, the poll's end, or the moment it is cut.
        let cut_at = inner.lock().cut_polls_after.map(|after| started + after);
        let wake = cut_at.map_or(deadline, |cut| cut.min(deadline));
        match tokio::time::timeout_at(wake, changes.changed()).await {
            Ok(Ok(())) => {}
            Err(_) if cut_at.is_some_and(|cut| cut <= deadline) => {}
            Ok(Err(_)) | Err(_) => return Ok(ok(json!([]))),
        }
    }
}

/// A response that never reaches the client: its body fails before the
/// first byte, so the server closes the connection without writing the
/// status line (the client reads a connection closed mid-request).
fn cut_connection() -> Response {
    let failing = futures::stream::once(async {
        Err::<bytes::Bytes, std::io::Error>(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "the fake cuts this long poll",
        ))
    });
    Response::new(Body::from_stream(failing))
}

fn set_webhook(state: &mut State, body: &Map<String, Value>) -> Result<Response, ApiError> {
    let url = body.get("url").and_then(Value::as_str).unwrap_or_default();
    if url.is_empty() {
        let had = state.webhook.take().is_some();
        return Ok(ok_described(
            json!(true),
            if had {
                "Webhook was deleted"
            } else {
                "Webhook is already deleted"
            },
        ));
    }
    if !url.starts_with("https://") {
        return Err(ApiError::bad(
            "bad webhook: An HTTPS URL must be provided for webhook",
        ));
    }
    let secret = body.get("secret_token").and_then(Value::as_str);
    if let Some(secret) = secret {
        let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if secret.is_empty() || secret.len() > 256 || !secret.chars().all(allowed) {
            return Err(ApiError::bad("secret token contains unallowed characters"));
        }
    }
    let allowed_updates = allowed_list(body)?;
    state.webhook = Some(WebhookInfo {
        url: url.to_owned(),
        secret_token: secret.map(str::to_owned),
        allowed_updates,
    });
    Ok(ok_described(json!(true), "Webhook was set"))
}

fn chat_of(state: &State, body: &Map<String, Value>) -> Result<i64, ApiError> {
    let id = match body.get("chat_id") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.parse::<i64>().ok(),
        None | Some(Value::Null) => return Err(ApiError::bad("chat_id is empty")),
        Some(_) => None,
    };
    match id {
        Some(id) if state.chats.contains_key(&id) => Ok(id),
        _ => Err(ApiError::bad("chat not found")),
    }
}

fn thread_of(
    state: &State,
    chat_id: i64,
    body: &Map<String, Value>,
) -> Result<Option<i64>, ApiError> {
    let Some(value) = body.get("message_thread_id").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let thread = value
        .as_i64()
        .ok_or_else(|| ApiError::bad("message_thread_id must be an integer"))?;
    let known = state
        .chats
        .get(&chat_id)
        .is_some_and(|c| c.forum && c.topics.contains(&thread));
    if known {
        Ok(Some(thread))
    } else {
        Err(ApiError::bad("message thread not found"))
    }
}

/// The text checks `sendMessage` and `editMessageText` share; returns
/// the text as sent, what the user reads and the parse mode.
fn checked_text(body: &Map<String, Value>) -> Result<(String, String, Option<String>), ApiError> {
    let text = match body.get("text") {
        Some(Value::String(text)) => text.clone(),
        None | Some(Value::Null) => return Err(ApiError::bad("message text is empty")),
        Some(_) => return Err(ApiError::bad("text must be a string")),
    };
    let parse_mode = match body.get("parse_mode") {
        None | Some(Value::Null) => None,
        Some(Value::String(mode)) => Some(mode.clone()),
        Some(_) => return Err(ApiError::bad("unsupported parse_mode")),
    };
    let plain = match parse_mode.as_deref() {
        None => text.clone(),
        Some(mode) if mode.eq_ignore_ascii_case("html") => {
            parse_html(&text).map_err(|e| ApiError::bad(format!("can't parse entities: {e}")))?
        }
        Some(other) => {
            return Err(ApiError::bad(format!(
                "unsupported parse_mode (the fake checks HTML only, got '{other}')"
            )));
        }
    };
    if plain.trim().is_empty() {
        return Err(ApiError::bad("message text is empty"));
    }
    if plain.encode_utf16().count() > MAX_TEXT {
        return Err(ApiError::bad("message is too long"));
    }
    if let Some(options) = body.get("link_preview_options")
        && !options.is_object()
    {
        return Err(ApiError::bad(
            "can't parse link preview options JSON object",
        ));
    }
    Ok((text, plain, parse_mode))
}

fn preview_disabled(body: &Map<String, Value>) -> bool {
    body.get("link_preview_options")
        .and_then(|o| o.get("is_disabled"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// An `InlineKeyboardMarkup`, checked as Telegram checks it.
fn keyboard(body: &Map<String, Value>) -> Result<Vec<Vec<SentButton>>, ApiError> {
    let Some(markup) = body.get("reply_markup").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let unparsable = || ApiError::bad("can't parse reply keyboard markup JSON object");
    let rows = markup
        .get("inline_keyboard")
        .and_then(Value::as_array)
        .ok_or_else(unparsable)?;
    let mut out = Vec::new();
    let mut total = 0;
    for row in rows {
        let row = row.as_array().ok_or_else(unparsable)?;
        if row.len() > 8 {
            return Err(ApiError::bad("too many buttons in a row"));
        }
        let mut buttons = Vec::new();
        for button in row {
            total += 1;
            let text = button
                .get("text")
                .and_then(Value::as_str)
                .ok_or_else(unparsable)?;
            if text.is_empty() {
                return Err(ApiError::bad(
                    "text buttons are unallowed in the inline keyboard",
                ));
            }
            let kinds = [
                "url",
                "callback_data",
                "web_app",
                "login_url",
                "switch_inline_query",
                "switch_inline_query_current_chat",
                "switch_inline_query_chosen_chat",
                "copy_text",
                "callback_game",
                "pay",
            ];
            let present = kinds.iter().filter(|k| button.get(**k).is_some()).count();
            if present != 1 {
                return Err(ApiError::bad(
                    "exactly one optional field of an inline keyboard button must be used",
                ));
            }
            let callback_data = match button.get("callback_data") {
                None => None,
                Some(Value::String(data)) if (1..=64).contains(&data.len()) => Some(data.clone()),
                Some(_) => return Err(ApiError::bad("BUTTON_DATA_INVALID")),
            };
            let style = match button.get("style") {
                None => None,
                Some(Value::String(s))
                    if matches!(s.as_str(), "danger" | "success" | "primary") =>
                {
                    Some(s.clone())
                }
                Some(_) => return Err(ApiError::bad("invalid button style")),
            };
            buttons.push(SentButton {
                text: text.to_owned(),
                callback_data,
                url: button.get("url").and_then(Value::as_str).map(str::to_owned),
                style,
            });
        }
        out.push(buttons);
    }
    if total > 100 {
        return Err(ApiError::bad("reply markup is too long"));
    }
    Ok(out)
}

fn send_message(state: &mut State, body: &Map<String, Value>) -> Result<Response, ApiError> {
    let chat_id = chat_of(state, body)?;
    let thread_id = thread_of(state, chat_id, body)?;
    let (text, plain, parse_mode) = checked_text(body)?;
    let keyboard = keyboard(body)?;
    let message = SentMessage {
        chat_id,
        message_id: state.take_message_id(),
        thread_id,
        text,
        plain,
        parse_mode,
        preview_disabled: preview_disabled(body),
        keyboard,
        edits: 0,
    };
    let json = state.bot_message_json(&message);
    state.sent.push(message);
    Ok(ok(json))
}

/// The methods that upload a file, with the part that carries it.
const UPLOADS: &[(&str, &str)] = &[
    ("sendPhoto", "photo"),
    ("sendDocument", "document"),
    ("sendAudio", "audio"),
    ("sendVoice", "voice"),
];
/// The Bot API's limits on uploads: 10 MB for a photo, 50 MB otherwise.
pub const MAX_PHOTO_UPLOAD: usize = 10 * 1024 * 1024;
pub const MAX_UPLOAD: usize = 50 * 1024 * 1024;
/// The longest caption, in UTF-16 code units after entities are parsed.
pub const MAX_CAPTION: usize = 1024;
/// The fields the upload methods take besides the file (those Flynn could
/// send; others are refused as unknown to the fake).
const UPLOAD_FIELDS: &[&str] = &[
    "chat_id",
    "message_thread_id",
    "caption",
    "parse_mode",
    "disable_notification",
    "duration",
    "title",
    "performer",
    "reply_markup",
];

/// `sendPhoto`, `sendDocument`, `sendAudio`, `sendVoice` with the file
/// uploaded as `multipart/form-data`, checked as the Bot API checks them.
fn send_file(
    state: &mut State,
    method: &str,
    field: &str,
    parts: Vec<FormPart>,
) -> Result<Response, ApiError> {
    let mut body = Map::new();
    let mut file = None;
    for part in parts {
        if part.name == field {
            if part.file_name.is_none() {
                return Err(ApiError::bad(format!(
                    "the fake takes `{field}` as an uploaded file, not a file_id or URL"
                )));
            }
            file = Some(part);
        } else if UPLOAD_FIELDS.contains(&part.name.as_str()) {
            let text = part
                .text()
                .ok_or_else(|| ApiError::bad(format!("field {} is not UTF-8", part.name)))?;
            body.insert(part.name.clone(), Value::String(text.to_owned()));
        } else {
            return Err(ApiError::bad(format!(
                "unknown field {} for {method}",
                part.name
            )));
        }
    }
    let chat_id = chat_of(state, &body)?;
    if let Some(Value::String(thread)) = body.get("message_thread_id") {
        let parsed = thread
            .parse::<i64>()
            .map_err(|_| ApiError::bad("message_thread_id must be an integer"))?;
        body.insert("message_thread_id".to_owned(), json!(parsed));
    }
    let thread_id = thread_of(state, chat_id, &body)?;
    let Some(file) = file else {
        return Err(ApiError::bad(format!("there is no {field} in the request")));
    };
    if file.data.is_empty() {
        return Err(ApiError::bad("file must be non-empty"));
    }
    if file.data.len() > MAX_UPLOAD {
        return Err(ApiError {
            code: 413,
            description: "Request Entity Too Large".to_owned(),
            violation: false,
            retry_after: None,
        });
    }
    if field == "photo" {
        if file.data.len() > MAX_PHOTO_UPLOAD {
            return Err(ApiError::bad("PHOTO_SAVE_FILE_INVALID").benign());
        }
        if image_format(&file.data).is_none() {
            return Err(ApiError::bad("IMAGE_PROCESS_FAILED").benign());
        }
    }
    if field == "voice" && !file.data.starts_with(b"OggS") {
        // Telegram takes other formats but shows them as a file, not a
        // voice note: never what a bot means by `sendVoice`.
        state.violations.push(format!(
            "sendVoice with a file that is not Ogg ({}): it shows as a document, not a voice note",
            file.content_type.as_deref().unwrap_or("no content type")
        ));
    }
    let caption = match body.get("caption").and_then(Value::as_str) {
        Some(caption) if !caption.is_empty() => {
            let plain = match body.get("parse_mode").and_then(Value::as_str) {
                None => caption.to_owned(),
                Some(mode) if mode.eq_ignore_ascii_case("html") => parse_html(caption)
                    .map_err(|e| ApiError::bad(format!("can't parse entities: {e}")))?,
                Some(other) => {
                    return Err(ApiError::bad(format!(
                        "unsupported parse_mode (the fake checks HTML only, got '{other}')"
                    )));
                }
            };
            if plain.encode_utf16().count() > MAX_CAPTION {
                return Err(ApiError::bad("message caption is too long"));
            }
            Some(plain)
        }
        _ => None,
    };
    let message_id = state.take_message_id();
    state.next_file += 1;
    let file_id = format!("sent-{}", state.next_file);
    let size = file.data.len();
    let file_name = file.file_name.clone().unwrap_or_default();
    let mut json = json!({
        "message_id": message_id,
        "from": bot_user(),
        "chat": state.chat_json(chat_id),
        "date": now(),
    });
    if let Some(thread) = thread_id {
        json["message_thread_id"] = json!(thread);
        json["is_topic_message"] = json!(true);
    }
    if let Some(caption) = &caption {
        json["caption"] = json!(caption);
    }
    let described = json!({
        "file_id": file_id,
        "file_unique_id": format!("u{file_id}"),
        "file_size": size,
    });
    json[field] = match field {
        "photo" => json!([described]),
        "voice" => {
            let mut voice = described;
            voice["duration"] = json!(1);
            voice["mime_type"] = json!("audio/ogg");
            voice
        }
        _ => {
            let mut document = described;
            document["file_name"] = json!(file_name);
            if let Some(kind) = &file.content_type {
                document["mime_type"] = json!(kind);
            }
            document
        }
    };
    state.uploads.push(SentFile {
        chat_id,
        message_id,
        thread_id,
        method: method.to_owned(),
        file_name,
        content_type: file.content_type,
        data: file.data.to_vec(),
        caption,
    });
    Ok(ok(json))
}

/// The image format of `data` by its first bytes, among those Telegram
/// takes as a photo.
fn image_format(data: &[u8]) -> Option<&'static str> {
    if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("png")
    } else if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("jpeg")
    } else if data.starts_with(b"GIF8") {
        Some("gif")
    } else if data.len() > 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WEBP" {
        Some("webp")
    } else {
        None
    }
}

fn edit_message_text(state: &mut State, body: &Map<String, Value>) -> Result<Response, ApiError> {
    if body.get("inline_message_id").is_some() {
        return Err(ApiError::bad("the fake does not serve inline messages"));
    }
    let chat_id = chat_of(state, body)?;
    let message_id = body
        .get("message_id")
        .and_then(Value::as_i64)
        .ok_or_else(|| ApiError::bad("message identifier is not specified"))?;
    let (text, plain, parse_mode) = checked_text(body)?;
    let keyboard = keyboard(body)?;
    let preview_disabled = preview_disabled(body);
    let Some(message) = state
        .sent
        .iter_mut()
        .find(|m| m.chat_id == chat_id && m.message_id == message_id)
    else {
        return Err(ApiError::bad("message to edit not found"));
    };
    if message.text == text && message.keyboard == keyboard {
        return Err(ApiError::bad(
            "message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
        )
        .benign());
    }
    message.text = text;
    message.plain = plain;
    message.parse_mode = parse_mode;
    message.preview_disabled = preview_disabled;
    message.keyboard = keyboard;
    message.edits += 1;
    let message = message.clone();
    Ok(ok(state.bot_message_json(&message)))
}

fn answer_callback_query(
    state: &mut State,
    body: &Map<String, Value>,
) -> Result<Response, ApiError> {
    let id = body
        .get("callback_query_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let stale =
        || ApiError::bad("query is too old and response timeout expired or query ID is invalid");
    match state.callbacks.get(&id) {
        Some(false) => {}
        _ => return Err(stale()),
    }
    let text = body.get("text").and_then(Value::as_str).map(str::to_owned);
    if text
        .as_ref()
        .is_some_and(|t| t.chars().count() > MAX_CALLBACK_TEXT)
    {
        return Err(ApiError::bad("MESSAGE_TOO_LONG"));
    }
    state.callbacks.insert(id.clone(), true);
    state.answers.push(CallbackAnswer {
        callback_query_id: id,
        text,
        show_alert: body
            .get("show_alert")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    });
    Ok(ok(json!(true)))
}

fn send_chat_action(state: &mut State, body: &Map<String, Value>) -> Result<Response, ApiError> {
    let chat_id = chat_of(state, body)?;
    let thread_id = thread_of(state, chat_id, body)?;
    let action = body
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or_default();
    const ACTIONS: [&str; 11] = [
        "typing",
        "upload_photo",
        "record_video",
        "upload_video",
        "record_voice",
        "upload_voice",
        "upload_document",
        "choose_sticker",
        "find_location",
        "record_video_note",
        "upload_video_note",
    ];
    if !ACTIONS.contains(&action) {
        return Err(ApiError::bad("wrong parameter action in request"));
    }
    state.actions.push(ChatActionSent {
        chat_id,
        action: action.to_owned(),
        thread_id,
    });
    Ok(ok(json!(true)))
}

fn get_file(state: &State, body: &Map<String, Value>) -> Result<Response, ApiError> {
    let file_id = body
        .get("file_id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let Some(file) = state.files.get(file_id) else {
        return Err(ApiError::bad("invalid file_id"));
    };
    if file.size > FILE_LIMIT {
        return Err(ApiError::bad("file is too big"));
    }
    Ok(ok(json!({
        "file_id": file_id,
        "file_unique_id": file.unique_id,
        "file_size": file.size,
        "file_path": file.path,
    })))
}

// ------------------------------------------------------------ HTML check

/// The text a user reads from Telegram HTML (`parse_mode: "HTML"`), or
/// why Telegram refuses it. Supported as documented: `b strong i em u ins
/// s strike del tg-spoiler`, `span class="tg-spoiler"`, `a href`, `code`,
/// `pre` (with one `code class="language-…"` inside), `blockquote`
/// (optionally `expandable`); the named entities `&lt; &gt; &amp; &quot;`
/// and numeric ones.
pub fn parse_html(text: &str) -> Result<String, String> {
    let mut plain = String::new();
    let mut stack: Vec<String> = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        if rest.starts_with('<') {
            let Some(end) = rest.find('>') else {
                return Err(format!("Unclosed start tag at byte offset {i}"));
            };
            let inside = &rest[1..end];
            if let Some(name) = inside.strip_prefix('/') {
                let name = name.trim().to_ascii_lowercase();
                match stack.pop() {
                    Some(open) if open == name => {}
                    Some(open) => {
                        return Err(format!(
                            "Unmatched end tag at byte offset {i}, expected \"</{open}>\", found \"</{name}>\""
                        ));
                    }
                    None => return Err(format!("Unexpected end tag at byte offset {i}")),
                }
            } else {
                let (name, attributes) =
                    parse_tag(inside).map_err(|e| format!("{e} at byte offset {i}"))?;
                check_tag(&name, &attributes, &stack)
                    .map_err(|e| format!("{e} at byte offset {i}"))?;
                stack.push(name);
            }
            i += end + 1;
        } else if rest.starts_with('&') {
            let (decoded, used) = entity(rest).map_err(|e| format!("{e} at byte offset {i}"))?;
            plain.push(decoded);
            i += used;
        } else {
            let Some(c) = rest.chars().next() else { break };
            plain.push(c);
            i += c.len_utf8();
        }
    }
    if let Some(open) = stack.pop() {
        return Err(format!(
            "Can't find end tag corresponding to start tag \"{open}\""
        ));
    }
    Ok(plain)
}

type Attributes = Vec<(String, Option<String>)>;

fn parse_tag(inside: &str) -> Result<(String, Attributes), String> {
    let name_end = inside
        .find(|c: char| c.is_whitespace() || c == '/')
        .unwrap_or(inside.len());
    let name = inside[..name_end].to_ascii_lowercase();
    if name.is_empty() {
        return Err("Empty tag name".to_owned());
    }
    let mut rest = &inside[name_end..];
    let mut attributes = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        if rest.starts_with('/') {
            return Err(format!("Unsupported start tag \"{name}/\""));
        }
        let key_end = rest
            .find(|c: char| c.is_whitespace() || c == '=')
            .unwrap_or(rest.len());
        let key = rest[..key_end].to_ascii_lowercase();
        rest = rest[key_end..].trim_start();
        if let Some(after) = rest.strip_prefix('=') {
            let after = after.trim_start();
            let (raw, remaining) = if let Some(quoted) = after.strip_prefix('"') {
                let end = quoted.find('"').ok_or("Unclosed attribute value")?;
                (&quoted[..end], &quoted[end + 1..])
            } else if let Some(quoted) = after.strip_prefix('\'') {
                let end = quoted.find('\'').ok_or("Unclosed attribute value")?;
                (&quoted[..end], &quoted[end + 1..])
            } else {
                let end = after.find(char::is_whitespace).unwrap_or(after.len());
                (&after[..end], &after[end..])
            };
            attributes.push((key, Some(decode_attribute(raw)?)));
            rest = remaining;
        } else {
            attributes.push((key, None));
        }
    }
    Ok((name, attributes))
}

fn decode_attribute(raw: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut i = 0;
    while i < raw.len() {
        let rest = &raw[i..];
        if rest.starts_with('&') {
            let (c, used) = entity(rest)?;
            out.push(c);
            i += used;
        } else {
            let Some(c) = rest.chars().next() else { break };
            out.push(c);
            i += c.len_utf8();
        }
    }
    Ok(out)
}

/// The character an entity at the start of `rest` stands for, and its
/// length in bytes.
fn entity(rest: &str) -> Result<(char, usize), String> {
    let end = rest
        .find(';')
        .filter(|end| *end <= 12)
        .ok_or("Character '&' must be escaped as &amp;")?;
    let name = &rest[1..end];
    let c = match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "quot" => '"',
        _ => {
            let number =
                if let Some(hex) = name.strip_prefix("#x").or_else(|| name.strip_prefix("#X")) {
                    u32::from_str_radix(hex, 16).ok()
                } else if let Some(decimal) = name.strip_prefix('#') {
                    decimal.parse::<u32>().ok()
                } else {
                    None
                };
            number
                .and_then(char::from_u32)
                .ok_or_else(|| format!("Unsupported HTML entity \"&{name};\""))?
        }
    };
    Ok((c, end + 1))
}

fn check_tag(name: &str, attributes: &Attributes, stack: &[String]) -> Result<(), String> {
    let parent = stack.last().map(String::as_str);
    if parent == Some("code") {
        return Err(format!("Tag \"{name}\" can't be nested in \"code\""));
    }
    if parent == Some("pre") && name != "code" {
        return Err(format!("Tag \"{name}\" can't be nested in \"pre\""));
    }
    let unsupported = || format!("Unsupported start tag \"{name}\"");
    let only = |allowed: &[(&str, bool)]| -> Result<(), String> {
        for (key, value) in attributes {
            let known = allowed
                .iter()
                .any(|(k, needs_value)| k == key && value.is_some() == *needs_value);
            if !known {
                return Err(format!("Unsupported attribute \"{key}\" in tag \"{name}\""));
            }
        }
        Ok(())
    };
    match name {
        "b" | "strong" | "i" | "em" | "u" | "ins" | "s" | "strike" | "del" | "tg-spoiler"
        | "pre" => only(&[]),
        "span" => {
            let spoiler = attributes.len() == 1
                && attributes[0].0 == "class"
                && attributes[0].1.as_deref() == Some("tg-spoiler");
            if spoiler { Ok(()) } else { Err(unsupported()) }
        }
        "a" => {
            only(&[("href", true)])?;
            if attributes.iter().any(|(k, _)| k == "href") {
                Ok(())
            } else {
                Err("Tag \"a\" must have attribute href".to_owned())
            }
        }
        "code" => {
            only(&[("class", true)])?;
            let class = attributes.iter().find(|(k, _)| k == "class");
            match class {
                None => Ok(()),
                Some((_, Some(value))) if parent == Some("pre") && value.starts_with("language-") => {
                    Ok(())
                }
                Some(_) => Err("Attribute \"class\" of tag \"code\" is allowed only as language-… inside \"pre\"".to_owned()),
            }
        }
        "blockquote" => only(&[("expandable", false)]),
        _ => Err(unsupported()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telegram_html_is_parsed_as_telegram_does() {
        assert_eq!(
            parse_html(
                "<b>Hi</b> &lt;there&gt; &amp; <a href=\"https://x.y/?a=1&amp;b=2\">link</a>"
            )
            .unwrap(),
            "Hi <there> & link"
        );
        assert_eq!(
            parse_html("<pre><code class=\"language-rust\">fn main() {}</code></pre>").unwrap(),
            "fn main() {}"
        );
        assert_eq!(parse_html("&#128512;&#x41;").unwrap(), "😀A");
        assert_eq!(
            parse_html("<span class=\"tg-spoiler\">x</span><blockquote expandable>q</blockquote>")
                .unwrap(),
            "xq"
        );
        assert!(
            parse_html("<br>")
                .unwrap_err()
                .contains("Unsupported start tag \"br\"")
        );
        assert!(
            parse_html("<b>open")
                .unwrap_err()
                .contains("Can't find end tag")
        );
        assert!(
            parse_html("<b><i>x</b></i>")
                .unwrap_err()
                .contains("Unmatched end tag")
        );
        assert!(
            parse_html("x</b>")
                .unwrap_err()
                .contains("Unexpected end tag")
        );
        assert!(parse_html("a & b").unwrap_err().contains("must be escaped"));
        assert!(
            parse_html("&nbsp;")
                .unwrap_err()
                .contains("Unsupported HTML entity")
        );
        assert!(parse_html("<code><b>x</b></code>").is_err());
        assert!(parse_html("<code class=\"language-x\">x</code>").is_err());
        assert!(parse_html("<a>x</a>").is_err());
        assert!(parse_html("1 < 2").is_err());
    }

    #[test]
    fn mentions_and_commands_get_entities_in_utf16_units() {
        assert_eq!(
            text_entities("😀 @flynn_bot hi /reset@flynn_bot /help"),
            vec![
                json!({"type": "mention", "offset": 3, "length": 10}),
                json!({"type": "bot_command", "offset": 17, "length": 16}),
                json!({"type": "bot_command", "offset": 34, "length": 5}),
            ]
        );
        // Too short to be a username; an e-mail address is not a mention.
        assert_eq!(
            text_entities("@abc mail me@example.com"),
            Vec::<Value>::new()
        );
    }
}
