//! The REST calls the adapter makes, on reqwest, and Discord's error
//! responses turned into [`ChannelError`]s.
//!
//! twilight-http is not used: it retries a 429 inside its response future
//! (immediately without its rate limiter, after the bucket reset with it)
//! and drops the response headers, so a caller never sees the
//! `retry_after` hint that [`crate::outbound::retrying`] honours.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use reqwest::multipart::{Form, Part};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use super::CHANNEL;
use crate::adapter::ChannelError;

/// Every REST call gives up after this long.
const TIMEOUT: Duration = Duration::from_secs(20);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// An upload (up to 10 MiB) gives up after this long.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// Discord's REST API version (the gateway speaks the same one).
pub(super) const API_VERSION: u8 = 10;

/// What Discord asks bots to send: `DiscordBot ($url, $versionNumber)`.
const BOT_USER_AGENT: &str = concat!(
    "DiscordBot (",
    env!("CARGO_PKG_REPOSITORY"),
    ", ",
    env!("CARGO_PKG_VERSION"),
    ")"
);

/// Discord's REST API at one base URL, authenticated as the bot.
#[derive(Debug)]
pub(super) struct Rest {
    http: reqwest::Client,
    /// `https://discord.com/api/v10`, without a trailing slash.
    base: String,
    /// `Bot <token>`.
    authorization: String,
}

/// A message as the REST API returns it: its id, and its text.
#[derive(Debug, Deserialize)]
struct Created {
    id: String,
    #[serde(default)]
    content: Option<String>,
}

impl Rest {
    /// `origin` is where `/api/v10` lives (`https://discord.com`).
    pub fn new(origin: &str, token: &str) -> Result<Rest, ChannelError> {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .user_agent(BOT_USER_AGENT)
            .build()
            .map_err(|e| ChannelError::Unavailable {
                channel: CHANNEL.to_owned(),
                detail: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(Rest {
            http,
            base: format!("{origin}/api/v{API_VERSION}"),
            authorization: format!("Bot {token}"),
        })
    }

    /// Sends one request; `Ok(None)` for `204 No Content`. `authorized`
    /// adds the bot token (interaction callbacks and webhooks take none:
    /// their token is in the path).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        authorized: bool,
    ) -> Result<Option<Value>, ChannelError> {
        let url = format!("{}{path}", self.base);
        let mut request = self.http.request(method.clone(), &url);
        if authorized {
            request = request.header(AUTHORIZATION, &self.authorization);
        }
        request = match body {
            Some(body) => request
                .header(CONTENT_TYPE, "application/json")
                .body(body.to_string()),
            // Discord answers 411 to a POST, PUT or PATCH without a length.
            None => request.header(CONTENT_LENGTH, "0"),
        };
        self.answer(request, method, path, authorized).await
    }

    /// Creates a message in a channel with one file, as Discord's
    /// "Uploading Files" describes: `multipart/form-data` with the message
    /// in a `payload_json` part (whose `attachments[0]` has `id: 0`) and
    /// the file in `files[0]`. The message's id.
    pub async fn upload(
        &self,
        path: &str,
        payload: &Value,
        file: Upload<'_>,
    ) -> Result<String, ChannelError> {
        let json = Part::text(payload.to_string())
            .mime_str("application/json")
            .map_err(|e| build_error(path, &e))?;
        let size = file.data.len() as u64;
        let data = Part::stream_with_length(reqwest::Body::from(file.data), size)
            .file_name(file.name.to_owned())
            .mime_str(file.media_type)
            .map_err(|e| build_error(path, &e))?;
        let form = Form::new()
            .part("payload_json", json)
            .part("files[0]", data);
        let request = self
            .http
            .post(format!("{}{path}", self.base))
            .header(AUTHORIZATION, &self.authorization)
            .timeout(UPLOAD_TIMEOUT)
            .multipart(form);
        let answer = self.answer(request, Method::POST, path, true).await?;
        answer
            .and_then(|v| serde_json::from_value::<Created>(v).ok())
            .map(|m| m.id)
            .ok_or_else(|| ChannelError::Unavailable {
                channel: CHANNEL.to_owned(),
                detail: format!("POST {path}: the answer carries no message id"),
            })
    }

    /// Sends a request; `Ok(None)` for `204 No Content`, the JSON of
    /// another success, the error a failure stands for.
    async fn answer(
        &self,
        request: reqwest::RequestBuilder,
        method: Method,
        path: &str,
        authorized: bool,
    ) -> Result<Option<Value>, ChannelError> {
        // Interaction tokens stay out of errors and logs.
        let path = &redact(path);
        let response = request
            .send()
            .await
            .map_err(|e| unavailable(&method, path, &e))?;
        let status = response.status();
        let retry_header = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok());
        let bytes = response
            .bytes()
            .await
            .map_err(|e| unavailable(&method, path, &e))?;
        if status.is_success() {
            if status == StatusCode::NO_CONTENT || bytes.is_empty() {
                return Ok(None);
            }
            return serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                ChannelError::Unavailable {
                    channel: CHANNEL.to_owned(),
                    detail: format!("{method} {path}: the answer is not JSON ({e})"),
                }
            });
        }
        Err(error_from(
            status,
            retry_header,
            &bytes,
            &method,
            path,
            authorized,
        ))
    }

    /// A call whose answer is a message object: its id.
    pub async fn message(
        &self,
        method: Method,
        path: &str,
        body: &Value,
        authorized: bool,
    ) -> Result<String, ChannelError> {
        Ok(self
            .message_and_text(method, path, body, authorized)
            .await?
            .0)
    }

    /// Like [`message`](Self::message), with the message's text as
    /// Discord returned it.
    pub async fn message_and_text(
        &self,
        method: Method,
        path: &str,
        body: &Value,
        authorized: bool,
    ) -> Result<(String, Option<String>), ChannelError> {
        let answer = self
            .call(method.clone(), path, Some(body), authorized)
            .await?;
        answer
            .and_then(|v| serde_json::from_value::<Created>(v).ok())
            .map(|m| (m.id, m.content))
            .ok_or_else(|| ChannelError::Unavailable {
                channel: CHANNEL.to_owned(),
                detail: format!("{method} {path}: the answer carries no message id"),
            })
    }

    /// Downloads an attachment from Discord's CDN, refusing more than
    /// `limit` bytes. The CDN's URLs are signed; the bot token is never
    /// sent there.
    pub async fn download(&self, url: &str, limit: u64) -> Result<Bytes, ChannelError> {
        let failed = |detail: String| ChannelError::Unavailable {
            channel: CHANNEL.to_owned(),
            detail: format!("downloading an attachment: {detail}"),
        };
        let mut response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| failed(e.to_string()))?;
        let status = response.status();
        if !status.is_success() {
            let error = failed(format!("HTTP {}", status.as_u16()));
            return Err(if status.is_server_error() {
                error
            } else {
                ChannelError::Rejected {
                    channel: CHANNEL.to_owned(),
                    detail: format!("downloading an attachment: HTTP {}", status.as_u16()),
                }
            });
        }
        let mut data = BytesMut::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
            if data.len() as u64 + chunk.len() as u64 > limit {
                return Err(ChannelError::Rejected {
                    channel: CHANNEL.to_owned(),
                    detail: format!("an attachment is larger than {} MB", limit / 1024 / 1024),
                });
            }
            data.extend_from_slice(&chunk);
        }
        Ok(data.freeze())
    }
}

/// The file of an [`upload`](Rest::upload).
#[derive(Debug)]
pub(super) struct Upload<'a> {
    /// The file name Discord shows.
    pub name: &'a str,
    /// Its MIME type.
    pub media_type: &'a str,
    pub data: Bytes,
}

/// A multipart part that cannot be built (a MIME type reqwest cannot
/// parse).
fn build_error(path: &str, error: &reqwest::Error) -> ChannelError {
    ChannelError::Rejected {
        channel: CHANNEL.to_owned(),
        detail: format!("POST {path}: cannot build the upload: {error}"),
    }
}

/// The path with an interaction token (`/interactions/{id}/{token}/…`,
/// `/webhooks/{app}/{token}/…`) replaced by `***`.
fn redact(path: &str) -> String {
    let mut parts: Vec<&str> = path.split('/').collect();
    if matches!(parts.get(1), Some(&("interactions" | "webhooks"))) && parts.len() > 3 {
        parts[3] = "***";
    }
    parts.join("/")
}

fn unavailable(method: &Method, path: &str, error: &reqwest::Error) -> ChannelError {
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "cannot connect"
    } else {
        "failed"
    };
    ChannelError::Unavailable {
        channel: CHANNEL.to_owned(),
        detail: format!("{method} {path}: {what}: {error}"),
    }
}

/// Discord's error body: `{"message", "code", "errors"?}`; a 429 adds
/// `retry_after` (seconds, fractional) and `global`.
#[derive(Debug, Default, Deserialize)]
struct ErrorBody {
    #[serde(default)]
    message: String,
    #[serde(default)]
    code: Option<i64>,
    #[serde(default)]
    errors: Option<Value>,
    #[serde(default)]
    retry_after: Option<f64>,
    #[serde(default)]
    global: Option<bool>,
}

/// The error a failed response stands for.
pub(super) fn error_from(
    status: StatusCode,
    retry_header: Option<f64>,
    body: &[u8],
    method: &Method,
    path: &str,
    authorized: bool,
) -> ChannelError {
    let parsed: ErrorBody = serde_json::from_slice(body).unwrap_or_default();
    let channel = CHANNEL.to_owned();
    if status == StatusCode::TOO_MANY_REQUESTS {
        let seconds = parsed.retry_after.or(retry_header);
        if parsed.global == Some(true) {
            tracing::warn!("Discord's global rate limit was hit");
        }
        return ChannelError::RateLimited {
            channel,
            retry_after: seconds.and_then(|s| Duration::try_from_secs_f64(s).ok()),
        };
    }
    let detail = describe(status, &parsed, body, method, path);
    if status.is_server_error() {
        ChannelError::Unavailable { channel, detail }
    } else if status == StatusCode::UNAUTHORIZED && authorized {
        ChannelError::Unauthorized { channel, detail }
    } else {
        // 403 is a permission in one channel (50001 Missing Access, 50013
        // Missing Permissions), not a refused token; a 401 without the bot
        // token is an expired interaction token (50027).
        ChannelError::Rejected { channel, detail }
    }
}

fn describe(
    status: StatusCode,
    parsed: &ErrorBody,
    body: &[u8],
    method: &Method,
    path: &str,
) -> String {
    let mut detail = format!("{method} {path}: HTTP {}", status.as_u16());
    if parsed.message.is_empty() {
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        if !text.is_empty() {
            detail.push_str(": ");
            detail.extend(text.chars().take(200));
        }
        return detail;
    }
    detail.push_str(": ");
    detail.push_str(&parsed.message);
    if let Some(code) = parsed.code {
        detail.push_str(&format!(" (code {code})"));
    }
    let mut fields = Vec::new();
    if let Some(errors) = &parsed.errors {
        field_errors(errors, &mut String::new(), &mut fields);
        fields.sort();
    }
    if !fields.is_empty() {
        detail.push_str(": ");
        detail.push_str(&fields.join("; "));
    }
    detail
}

/// Flattens Discord's nested `errors` object into `path: message` lines
/// (`content: Must be 2000 or fewer in length.`).
fn field_errors(value: &Value, path: &mut String, out: &mut Vec<String>) {
    let Value::Object(map) = value else {
        return;
    };
    for (key, inner) in map {
        if key == "_errors" {
            for error in inner.as_array().into_iter().flatten() {
                let message = error["message"].as_str().unwrap_or("invalid");
                out.push(format!("{path}: {message}"));
            }
            continue;
        }
        let len = path.len();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(key);
        field_errors(inner, path, out);
        path.truncate(len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(status: u16, header: Option<f64>, body: &str) -> ChannelError {
        error_from(
            StatusCode::from_u16(status).unwrap_or(StatusCode::IM_A_TEAPOT),
            header,
            body.as_bytes(),
            &Method::POST,
            "/channels/1/messages",
            true,
        )
    }

    #[test]
    fn rate_limits_carry_the_body_hint_before_the_header() {
        let body = r#"{"message":"You are being rate limited.","retry_after":0.25,"global":false}"#;
        assert_eq!(
            error(429, Some(1.0), body),
            ChannelError::RateLimited {
                channel: "discord".into(),
                retry_after: Some(Duration::from_millis(250)),
            }
        );
        assert_eq!(
            error(429, Some(2.0), "<html>slow down</html>"),
            ChannelError::RateLimited {
                channel: "discord".into(),
                retry_after: Some(Duration::from_secs(2)),
            }
        );
    }

    #[test]
    fn rate_limit_hints_too_large_for_a_duration_are_dropped_not_a_panic() {
        for (body, header) in [
            (r#"{"retry_after":1e30}"#, None),
            ("{}", Some(1e30)),
            (r#"{"retry_after":-1}"#, None),
        ] {
            assert_eq!(
                error(429, header, body),
                ChannelError::RateLimited {
                    channel: "discord".into(),
                    retry_after: None,
                }
            );
        }
    }

    #[test]
    fn interaction_tokens_are_kept_out_of_errors() {
        assert_eq!(
            redact("/interactions/1/secret/callback"),
            "/interactions/1/***/callback"
        );
        assert_eq!(
            redact("/webhooks/2/secret/messages/@original"),
            "/webhooks/2/***/messages/@original"
        );
        assert_eq!(redact("/webhooks/2/secret"), "/webhooks/2/***");
        assert_eq!(redact("/channels/3/messages"), "/channels/3/messages");
        // An expired interaction token is not a refused bot token.
        let expired = error_from(
            StatusCode::UNAUTHORIZED,
            None,
            br#"{"message":"Invalid Webhook Token","code":50027}"#,
            &Method::PATCH,
            "/webhooks/2/***/messages/@original",
            false,
        );
        assert!(
            matches!(expired, ChannelError::Rejected { .. }),
            "{expired:?}"
        );
    }

    #[test]
    fn statuses_map_to_what_callers_branch_on() {
        assert!(matches!(
            error(502, None, "<html>Bad Gateway</html>"),
            ChannelError::Unavailable { .. }
        ));
        assert!(matches!(
            error(401, None, r#"{"message":"401: Unauthorized","code":0}"#),
            ChannelError::Unauthorized { .. }
        ));
        assert_eq!(
            error(
                400,
                None,
                r#"{"message":"Invalid Form Body","code":50035,"errors":{"content":{"_errors":[{"code":"BASE_TYPE_MAX_LENGTH","message":"Must be 2000 or fewer in length."}]},"components":{"0":{"components":{"1":{"custom_id":{"_errors":[{"code":"X","message":"Too long."}]}}}}}}}"#
            ),
            ChannelError::Rejected {
                channel: "discord".into(),
                detail: "POST /channels/1/messages: HTTP 400: Invalid Form Body (code 50035): components.0.components.1.custom_id: Too long.; content: Must be 2000 or fewer in length.".into(),
            }
        );
        assert_eq!(
            error(404, None, r#"{"message":"Unknown Channel","code":10003}"#),
            ChannelError::Rejected {
                channel: "discord".into(),
                detail: "POST /channels/1/messages: HTTP 404: Unknown Channel (code 10003)".into(),
            }
        );
    }
}
