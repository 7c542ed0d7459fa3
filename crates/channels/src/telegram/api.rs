//! The part of the Bot API the adapter uses, written by hand: every
//! method is `POST <api_url>/bot<token>/<method>` with a JSON body,
//! answered `{"ok": true, "result": …}` or `{"ok": false, "error_code":
//! …, "description": …, "parameters": {"retry_after": …}}`.
//!
//! The types hold only the fields the adapter reads; serde skips every
//! other one, so fields and update kinds Telegram adds later decode as
//! before (an update of a kind Flynn does not ask for has neither a
//! `message` nor a `callback_query`). Request bodies leave out what is
//! not set.

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The `parse_mode` of everything Flynn sends.
pub(super) const HTML: &str = "HTML";
/// Link previews off.
pub(super) const NO_PREVIEW: LinkPreviewOptions = LinkPreviewOptions { is_disabled: true };

/// A call that failed, in the cases the adapter tells apart.
#[derive(Debug)]
pub(super) enum Error {
    /// Telegram answered `ok: false`.
    Api(Refusal),
    /// No answer: refused, timed out, cut off. Without the URL, which
    /// holds the token.
    Http(reqwest::Error),
    /// An answer that is not the Bot API's envelope (a proxy's HTML error
    /// page, an answer cut short); `input` is all of it.
    Decode {
        source: serde_json::Error,
        input: String,
    },
}

/// An `ok: false` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    /// `error_code`: an HTTP status (429, 400, 401…).
    pub code: u64,
    pub description: String,
    /// `parameters.retry_after`, on a 429.
    pub retry_after: Option<Duration>,
}

/// The envelope of every answer.
#[derive(Deserialize)]
struct Answer<T> {
    ok: bool,
    result: Option<T>,
    description: Option<String>,
    error_code: Option<u64>,
    parameters: Option<Parameters>,
}

#[derive(Deserialize)]
struct Parameters {
    retry_after: Option<u64>,
}

/// Reads an answer: its `result` when `ok`, else the refusal. The HTTP
/// status is not consulted: the envelope says both.
fn read<T: DeserializeOwned>(input: String) -> Result<T, Error> {
    let answer: Answer<T> = match serde_json::from_str(&input) {
        Ok(answer) => answer,
        Err(source) => return Err(Error::Decode { source, input }),
    };
    let missing = |field| {
        let source = <serde_json::Error as serde::de::Error>::missing_field(field);
        Err(Error::Decode {
            source,
            input: input.clone(),
        })
    };
    if answer.ok {
        return match answer.result {
            Some(result) => Ok(result),
            None => missing("result"),
        };
    }
    let Some(code) = answer.error_code else {
        return missing("error_code");
    };
    let Some(description) = answer.description else {
        return missing("description");
    };
    Err(Error::Api(Refusal {
        code,
        description,
        retry_after: answer
            .parameters
            .and_then(|p| p.retry_after)
            .map(Duration::from_secs),
    }))
}

/// The Bot API of one bot, on one HTTP client (whose timeout bounds each
/// call). Not `Debug`: its URL holds the token.
pub(super) struct Bot {
    http: reqwest::Client,
    /// `<api_url>/bot<token>`.
    url: String,
}

impl Bot {
    pub fn new(http: reqwest::Client, url: String) -> Self {
        Bot { http, url }
    }

    /// Calls `method` with `params` as its JSON body; its `result`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        params: &impl Serialize,
    ) -> Result<T, Error> {
        answer(
            self.http
                .post(format!("{}/{method}", self.url))
                .json(params),
        )
        .await
    }

    /// Calls `method` with `form` as its `multipart/form-data` body (a
    /// file upload); its `result`.
    pub async fn upload<T: DeserializeOwned>(
        &self,
        method: &str,
        form: reqwest::multipart::Form,
    ) -> Result<T, Error> {
        answer(
            self.http
                .post(format!("{}/{method}", self.url))
                .multipart(form),
        )
        .await
    }
}

/// Sends `request` and reads its answer (the URL, which holds the token,
/// left out of errors).
async fn answer<T: DeserializeOwned>(request: reqwest::RequestBuilder) -> Result<T, Error> {
    let response = request
        .send()
        .await
        .map_err(|e| Error::Http(e.without_url()))?;
    let input = response
        .text()
        .await
        .map_err(|e| Error::Http(e.without_url()))?;
    read(input)
}

// ------------------------------------------------------------ answers

/// One entry of `getUpdates`, or a webhook's body. Exactly one kind is
/// set by Telegram; both `None` is a kind Flynn does not read.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Update {
    pub update_id: i64,
    pub message: Option<Message>,
    pub callback_query: Option<CallbackQuery>,
}

/// A message: one a person sent, the one under a pressed button (which
/// may be an `InaccessibleMessage`: a chat, an id and `date: 0`).
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Message {
    pub message_id: i32,
    pub message_thread_id: Option<i32>,
    pub is_topic_message: Option<bool>,
    pub from: Option<User>,
    pub chat: Chat,
    pub reply_to_message: Option<Replied>,
    pub text: Option<String>,
    pub entities: Option<Vec<MessageEntity>>,
    pub caption: Option<String>,
    pub caption_entities: Option<Vec<MessageEntity>>,
    /// The sizes of one photo.
    pub photo: Option<Vec<PhotoSize>>,
    pub document: Option<Document>,
    /// A voice note (Opus in Ogg).
    pub voice: Option<Voice>,
    /// An audio file (music, a recording sent as a file).
    pub audio: Option<Document>,
}

/// The message a message replies to: only who wrote it is read.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Replied {
    pub from: Option<User>,
}

/// A user or a bot (`getMe` answers one).
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct User {
    pub id: u64,
    pub is_bot: bool,
    pub first_name: String,
    pub last_name: Option<String>,
    pub username: Option<String>,
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Chat {
    pub id: i64,
    #[serde(rename = "type")]
    pub kind: ChatType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum ChatType {
    Private,
    /// A group, a supergroup, a channel or a kind added later.
    #[serde(other)]
    Other,
}

/// A marked span of a text, in UTF-16 code units.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct MessageEntity {
    #[serde(rename = "type")]
    pub kind: EntityKind,
    pub offset: u16,
    pub length: u16,
    /// The user a `text_mention` names.
    pub user: Option<User>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum EntityKind {
    /// `@username`.
    Mention,
    /// A name linked to a user without a username.
    TextMention,
    /// `/command` or `/command@bot`.
    BotCommand,
    /// Formatting, links and kinds added later.
    #[serde(other)]
    Other,
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct PhotoSize {
    pub file_id: String,
    pub width: u32,
    pub height: u32,
    pub file_size: Option<u64>,
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Voice {
    pub file_id: String,
    /// Seconds.
    pub duration: u32,
    pub mime_type: Option<String>,
    pub file_size: Option<u64>,
}

#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Document {
    pub file_id: String,
    pub file_name: Option<String>,
    pub mime_type: Option<String>,
    pub file_size: Option<u64>,
}

/// A button press.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct CallbackQuery {
    pub id: String,
    pub from: User,
    pub message: Option<Message>,
    pub data: Option<String>,
}

/// `getFile`'s answer.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct File {
    pub file_size: Option<u64>,
    /// Where to download it, below `<api_url>/file/bot<token>/`.
    pub file_path: Option<String>,
}

/// The message `sendMessage` sent: only its id is read.
#[derive(Debug, PartialEq, Deserialize)]
pub(super) struct Sent {
    pub message_id: i32,
}

// ------------------------------------------------------------ requests

/// The body of a method without parameters: `{}`.
#[derive(Serialize)]
pub(super) struct NoParams {}

#[derive(Serialize)]
pub(super) struct GetUpdates {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Seconds to wait for an update.
    pub timeout: u32,
    pub allowed_updates: &'static [&'static str],
}

#[derive(Serialize)]
pub(super) struct SetWebhook<'a> {
    pub url: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_token: Option<&'a str>,
    pub allowed_updates: &'static [&'static str],
}

#[derive(Serialize)]
pub(super) struct LinkPreviewOptions {
    pub is_disabled: bool,
}

#[derive(Serialize)]
pub(super) struct SendMessage<'a> {
    pub chat_id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_thread_id: Option<i32>,
    pub text: &'a str,
    pub parse_mode: &'static str,
    pub link_preview_options: LinkPreviewOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_markup: Option<InlineKeyboard<'a>>,
}

#[derive(Serialize)]
pub(super) struct EditMessageText<'a> {
    pub chat_id: i64,
    pub message_id: i32,
    pub text: &'a str,
    pub parse_mode: &'static str,
    pub link_preview_options: LinkPreviewOptions,
    /// Always sent: an empty keyboard removes the buttons.
    pub reply_markup: InlineKeyboard<'a>,
}

#[derive(Debug, PartialEq, Serialize)]
pub(super) struct InlineKeyboard<'a> {
    pub inline_keyboard: Vec<Vec<InlineButton<'a>>>,
}

#[derive(Debug, PartialEq, Serialize)]
pub(super) struct InlineButton<'a> {
    pub text: &'a str,
    pub callback_data: &'a str,
    /// `primary` or `danger`.
    pub style: &'static str,
}

#[derive(Serialize)]
pub(super) struct SendChatAction {
    pub chat_id: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_thread_id: Option<i32>,
    pub action: &'static str,
}

#[derive(Serialize)]
pub(super) struct AnswerCallbackQuery<'a> {
    pub callback_query_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<&'a str>,
}

#[derive(Serialize)]
pub(super) struct GetFile<'a> {
    pub file_id: &'a str,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde::de::IgnoredAny;
    use serde_json::json;

    use super::*;
    use crate::adapter::ChannelError;

    /// A supergroup's id.
    const GROUP: i64 = -1_001_234_567_890;

    fn user(id: u64, first_name: &str) -> User {
        User {
            id,
            is_bot: false,
            first_name: first_name.to_owned(),
            last_name: None,
            username: None,
        }
    }

    #[test]
    fn a_refusal_with_retry_after_is_a_rate_limit() {
        let answer = json!({
            "ok": false,
            "error_code": 429,
            "description": "Too Many Requests: retry after 7",
            "parameters": {"retry_after": 7, "migrate_to_chat_id": GROUP}
        });
        let Err(Error::Api(refusal)) = read::<IgnoredAny>(answer.to_string()) else {
            panic!("not a refusal");
        };
        assert_eq!(
            refusal,
            Refusal {
                code: 429,
                description: "Too Many Requests: retry after 7".to_owned(),
                retry_after: Some(Duration::from_secs(7)),
            }
        );
        assert_eq!(
            super::super::api_error(Error::Api(refusal)),
            ChannelError::RateLimited {
                channel: "telegram".to_owned(),
                retry_after: Some(Duration::from_secs(7)),
            }
        );
    }

    #[test]
    fn a_result_is_read_and_a_missing_one_is_unreadable() {
        let sent: Sent =
            read(json!({"ok": true, "result": {"message_id": 12, "date": 1}}).to_string()).unwrap();
        assert_eq!(sent, Sent { message_id: 12 });
        let input = json!({"ok": true}).to_string();
        let Err(Error::Decode {
            source,
            input: kept,
        }) = read::<Sent>(input.clone())
        else {
            panic!("an answer without a result was read");
        };
        assert_eq!(kept, input);
        assert_eq!(source.to_string(), "missing field `result`");
    }

    #[test]
    fn an_unreadable_answer_keeps_its_input() {
        let page = "<html><body><h1>502 Bad Gateway</h1></body></html>";
        let Err(Error::Decode { source, input }) = read::<IgnoredAny>(page.to_owned()) else {
            panic!("HTML was read as an answer");
        };
        assert_eq!(input, page);
        assert_eq!(
            super::super::api_error(Error::Decode { source, input }),
            ChannelError::Unavailable {
                channel: "telegram".to_owned(),
                detail: format!("unreadable answer (expected value at line 1 column 1): {page}"),
            }
        );
    }

    #[test]
    fn an_update_of_an_unknown_kind_still_has_its_id() {
        let update: Update = serde_json::from_value(json!({
            "update_id": 870_000_123,
            "message_reaction_count": {"chat": {"id": 5, "type": "private"}, "reactions": []}
        }))
        .unwrap();
        assert_eq!(
            update,
            Update {
                update_id: 870_000_123,
                message: None,
                callback_query: None,
            }
        );
        // An id past u32, which Telegram's ids may reach.
        let update: Update =
            serde_json::from_value(json!({"update_id": 5_000_000_000_i64, "future_kind": 1}))
                .unwrap();
        assert_eq!(update.update_id, 5_000_000_000);
    }

    #[test]
    fn fields_and_kinds_flynn_ignores_do_not_stop_a_message() {
        let message: Message = serde_json::from_value(json!({
            "message_id": 7,
            "date": 1_700_000_000,
            "chat": {"id": GROUP, "type": "channel_direct_messages", "title": "T", "is_forum": true},
            "from": {
                "id": 11, "is_bot": false, "first_name": "Ann", "language_code": "en",
                "is_premium": true, "added_to_attachment_menu": true
            },
            "sender_boost_count": 3,
            "forward_origin": {"type": "hidden_user", "date": 1, "sender_user_name": "X"},
            "reply_to_message": {
                "message_id": 6, "date": 1, "chat": {"id": GROUP, "type": "supergroup"},
                "from": {"id": 42, "is_bot": true, "first_name": "Flynn", "username": "flynn_bot"},
                "text": "earlier", "some_new_field": {"nested": [1, 2]}
            },
            "text": "hi @flynn_bot on 2025-01-01",
            "entities": [
                {"type": "mention", "offset": 3, "length": 10},
                {"type": "date_time", "offset": 17, "length": 10, "unix_time": 1},
                {"type": "text_mention", "offset": 0, "length": 2,
                 "user": {"id": 9, "is_bot": false, "first_name": "Bo"}}
            ],
            "link_preview_options": {"is_disabled": true},
            "reply_markup": {"inline_keyboard": [[{"text": "x", "url": "https://x.example"}]]},
            "effect_id": "5104841245755180586"
        }))
        .unwrap();
        assert_eq!(
            message,
            Message {
                message_id: 7,
                message_thread_id: None,
                is_topic_message: None,
                from: Some(user(11, "Ann")),
                chat: Chat {
                    id: GROUP,
                    kind: ChatType::Other,
                },
                reply_to_message: Some(Replied {
                    from: Some(User {
                        is_bot: true,
                        username: Some("flynn_bot".to_owned()),
                        ..user(42, "Flynn")
                    }),
                }),
                text: Some("hi @flynn_bot on 2025-01-01".to_owned()),
                entities: Some(vec![
                    MessageEntity {
                        kind: EntityKind::Mention,
                        offset: 3,
                        length: 10,
                        user: None,
                    },
                    MessageEntity {
                        kind: EntityKind::Other,
                        offset: 17,
                        length: 10,
                        user: None,
                    },
                    MessageEntity {
                        kind: EntityKind::TextMention,
                        offset: 0,
                        length: 2,
                        user: Some(user(9, "Bo")),
                    },
                ]),
                caption: None,
                caption_entities: None,
                photo: None,
                document: None,
                voice: None,
                audio: None,
            }
        );
    }

    #[test]
    fn a_pressed_button_under_an_inaccessible_message_is_read() {
        let query: CallbackQuery = serde_json::from_value(json!({
            "id": "4382",
            "from": {"id": 11, "is_bot": false, "first_name": "Ann"},
            "chat_instance": "-77",
            "data": "y:1",
            "message": {"message_id": 3, "date": 0, "chat": {"id": 11, "type": "private"}}
        }))
        .unwrap();
        let message = query.message.unwrap();
        assert_eq!(
            (message.message_id, message.chat, message.is_topic_message),
            (
                3,
                Chat {
                    id: 11,
                    kind: ChatType::Private
                },
                None
            )
        );
    }

    #[test]
    fn request_bodies_leave_out_what_is_not_set() {
        let keyboard = InlineKeyboard {
            inline_keyboard: vec![vec![InlineButton {
                text: "Approve",
                callback_data: "y:1",
                style: "primary",
            }]],
        };
        let send = SendMessage {
            chat_id: GROUP,
            message_thread_id: None,
            text: "<b>hi</b>",
            parse_mode: HTML,
            link_preview_options: NO_PREVIEW,
            reply_markup: Some(keyboard),
        };
        assert_eq!(
            serde_json::to_value(&send).unwrap(),
            json!({
                "chat_id": GROUP,
                "text": "<b>hi</b>",
                "parse_mode": "HTML",
                "link_preview_options": {"is_disabled": true},
                "reply_markup": {"inline_keyboard": [[
                    {"text": "Approve", "callback_data": "y:1", "style": "primary"}
                ]]}
            })
        );
        let poll = GetUpdates {
            offset: None,
            limit: None,
            timeout: 25,
            allowed_updates: &["message", "callback_query"],
        };
        assert_eq!(
            serde_json::to_value(&poll).unwrap(),
            json!({"timeout": 25, "allowed_updates": ["message", "callback_query"]})
        );
        assert_eq!(serde_json::to_value(NoParams {}).unwrap(), json!({}));
    }
}
