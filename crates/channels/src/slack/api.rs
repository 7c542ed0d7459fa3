//! Slack's Web API over reqwest: `POST <api_url>/<method>` with a bearer
//! token and a JSON body, answered `{"ok": true, ...}` or
//! `{"ok": false, "error": "<code>"}` with HTTP 200; and the two other
//! URLs Slack hands out: private file URLs (read with the bot token) and
//! interaction `response_url`s (no token).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Response, StatusCode, Url};
use serde_json::Value;

use crate::adapter::ChannelError;

/// The channel's name in errors.
pub(super) const CHANNEL: &str = "slack";

/// `ok: false` codes that mean the token is wrong, gone or not allowed.
const AUTH_ERRORS: &[&str] = &[
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "not_allowed_token_type",
    "missing_scope",
];

/// An upload (up to [`super::UPLOAD_LIMIT`]) gives up after this long.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// A Web API client for one workspace.
#[derive(Debug, Clone)]
pub(super) struct Api {
    http: reqwest::Client,
    /// `https://slack.com/api`, without a trailing slash.
    base: String,
}

impl Api {
    pub fn new(base: &str) -> Result<Api, ChannelError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| unavailable(format!("cannot build an HTTP client: {e}")))?;
        Ok(Api {
            http,
            base: base.trim_end_matches('/').to_owned(),
        })
    }

    /// Calls one Web API method with `token`; the answer's JSON when it
    /// says `ok`.
    pub async fn call(
        &self,
        method: &str,
        token: &str,
        body: &Value,
    ) -> Result<Value, ChannelError> {
        let request = self
            .http
            .post(format!("{}/{method}", self.base))
            .header(AUTHORIZATION, format!("Bearer {token}"))
            .header(CONTENT_TYPE, "application/json; charset=utf-8")
            .body(body.to_string());
        answer(method, request).await
    }

    /// Calls a method that takes its arguments form-encoded
    /// (`files.getUploadURLExternal` does not read JSON bodies).
    pub async fn call_form(
        &self,
        method: &str,
        token: &str,
        args: &[(&str, &str)],
    ) -> Result<Value, ChannelError> {
        let body = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(args)
            .finish();
        let request = self
            .http
            .post(format!("{}/{method}", self.base))
            .header(AUTHORIZATION, format!("Bearer {token}"))
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(body);
        answer(method, request).await
    }

    /// Sends a file's bytes to the `upload_url` that
    /// `files.getUploadURLExternal` gave, as the raw body of type
    /// `media_type`. The URL is the credential: no token goes with it.
    pub async fn upload(
        &self,
        upload_url: &str,
        media_type: &str,
        data: Bytes,
    ) -> Result<(), ChannelError> {
        const WHAT: &str = "the upload URL";
        let url = Url::parse(upload_url)
            .ok()
            .filter(|url| matches!(url.scheme(), "https" | "http"))
            .ok_or_else(|| {
                unavailable(
                    "files.getUploadURLExternal gave an upload_url that is not an http(s) URL",
                )
            })?;
        let response = self
            .http
            .post(url)
            .header(CONTENT_TYPE, media_type)
            .timeout(UPLOAD_TIMEOUT)
            .body(data)
            .send()
            .await
            .map_err(|e| unavailable(format!("{WHAT}: {}", without_url(&e))))?;
        check_status(WHAT, response).map(drop)
    }

    /// Reads a private file with the bot token, refusing more than
    /// `limit` bytes. The token goes only to Slack's own hosts and to the
    /// configured API host.
    pub async fn download(&self, url: &str, token: &str, limit: u64) -> Result<Bytes, String> {
        let parsed = Url::parse(url).map_err(|e| format!("bad file URL: {e}"))?;
        if !self.may_send_token_to(&parsed) {
            return Err(format!(
                "the file is on {}, not on Slack; not sending the token there",
                parsed.host_str().unwrap_or("an unnamed host")
            ));
        }
        let mut response = self
            .http
            .get(parsed)
            .header(AUTHORIZATION, format!("Bearer {token}"))
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .map_err(|e| without_url(&e))?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status().as_u16()));
        }
        let html = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/html"));
        if html {
            // Slack answers a token without `files:read` with its login page.
            return Err(
                "Slack answered with a login page (does the app have the files:read scope?)"
                    .to_owned(),
            );
        }
        if response.content_length().is_some_and(|n| n > limit) {
            return Err(format!("larger than {} MB", limit / 1_000_000));
        }
        let mut data = BytesMut::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| without_url(&e))? {
            if data.len() as u64 + chunk.len() as u64 > limit {
                return Err(format!("larger than {} MB", limit / 1_000_000));
            }
            data.extend_from_slice(&chunk);
        }
        Ok(data.freeze())
    }

    /// Posts to an interaction's `response_url`.
    pub async fn respond(&self, response_url: &str, body: &Value) -> Result<(), ChannelError> {
        let response = self
            .http
            .post(response_url)
            .header(CONTENT_TYPE, "application/json; charset=utf-8")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| unavailable(format!("response_url: {}", without_url(&e))))?;
        check_status("response_url", response).map(drop)
    }

    fn may_send_token_to(&self, url: &Url) -> bool {
        let Some(host) = url.host_str() else {
            return false;
        };
        let slack =
            url.scheme() == "https" && (host == "slack.com" || host.ends_with(".slack.com"));
        let configured = Url::parse(&self.base).ok().is_some_and(|base| {
            base.host_str() == Some(host)
                && base.port_or_known_default() == url.port_or_known_default()
        });
        slack || configured
    }
}

/// Sends a Web API call; the answer's JSON when it says `ok`, else the
/// error its status or `error` code stands for.
async fn answer(method: &str, request: reqwest::RequestBuilder) -> Result<Value, ChannelError> {
    let response = request
        .send()
        .await
        .map_err(|e| unavailable(format!("{method}: {}", without_url(&e))))?;
    let response = check_status(method, response)?;
    let retry_after = retry_after(&response);
    let answer: Value = response
        .json()
        .await
        .map_err(|e| unavailable(format!("{method}: unreadable answer: {}", without_url(&e))))?;
    if answer.get("ok").and_then(Value::as_bool) == Some(true) {
        return Ok(answer);
    }
    let code = answer
        .get("error")
        .and_then(Value::as_str)
        .unwrap_or("unknown_error");
    Err(api_error(method, code, retry_after))
}

/// The status line's verdict: 429 and 5xx are transient, 401/403 refuse
/// the token, other failures refuse the request.
fn check_status(method: &str, response: Response) -> Result<Response, ChannelError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let detail = format!("{method}: HTTP {}", status.as_u16());
    Err(match status {
        StatusCode::TOO_MANY_REQUESTS => ChannelError::RateLimited {
            channel: CHANNEL.to_owned(),
            retry_after: retry_after(&response),
        },
        s if s.is_server_error() => unavailable(detail),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ChannelError::Unauthorized {
            channel: CHANNEL.to_owned(),
            detail,
        },
        _ => ChannelError::Rejected {
            channel: CHANNEL.to_owned(),
            detail,
        },
    })
}

/// `Retry-After`, in seconds (Slack sends whole seconds).
pub(super) fn retry_after(response: &Response) -> Option<Duration> {
    seconds_hint(response.headers().get(RETRY_AFTER)?.to_str().ok()?)
}

/// A `Retry-After` value as a wait, when it is one.
fn seconds_hint(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    // `try_from` refuses what `from_secs_f64` panics on: negative, NaN,
    // infinite and too large for a `Duration`.
    Duration::try_from_secs_f64(secs).ok()
}

/// An `ok: false` answer as an error.
pub(super) fn api_error(method: &str, code: &str, retry_after: Option<Duration>) -> ChannelError {
    let mut detail = format!("{method}: {code}");
    if code == "missing_scope" && method.starts_with("files.") && method.ends_with("External") {
        detail.push_str(
            " (sending files needs the files:write scope: add it under OAuth & Permissions and reinstall the app)",
        );
    }
    if AUTH_ERRORS.contains(&code) {
        ChannelError::Unauthorized {
            channel: CHANNEL.to_owned(),
            detail,
        }
    } else if code == "ratelimited" {
        ChannelError::RateLimited {
            channel: CHANNEL.to_owned(),
            retry_after,
        }
    } else if matches!(
        code,
        "internal_error" | "fatal_error" | "service_unavailable" | "request_timeout"
    ) {
        unavailable(detail)
    } else {
        ChannelError::Rejected {
            channel: CHANNEL.to_owned(),
            detail,
        }
    }
}

pub(super) fn unavailable(detail: impl Into<String>) -> ChannelError {
    ChannelError::Unavailable {
        channel: CHANNEL.to_owned(),
        detail: detail.into(),
    }
}

/// A reqwest error and its causes, without the URL (a `response_url` is
/// a credential of sorts).
fn without_url(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    if let Some(at) = text.find(" for url (") {
        text.truncate(at);
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn retry_hints_that_are_no_duration_are_ignored_not_a_panic() {
        assert_eq!(seconds_hint(" 3 "), Some(Duration::from_secs(3)));
        for value in ["1e20", "99999999999999999999", "-1", "NaN", "inf", "soon"] {
            assert_eq!(seconds_hint(value), None, "{value}");
        }
    }

    #[test]
    fn error_codes_map_to_what_callers_branch_on() {
        assert!(matches!(
            api_error("auth.test", "invalid_auth", None),
            ChannelError::Unauthorized { .. }
        ));
        assert!(matches!(
            api_error("chat.postMessage", "token_revoked", None),
            ChannelError::Unauthorized { .. }
        ));
        assert_eq!(
            api_error(
                "chat.postMessage",
                "ratelimited",
                Some(Duration::from_secs(3))
            ),
            ChannelError::RateLimited {
                channel: "slack".into(),
                retry_after: Some(Duration::from_secs(3))
            }
        );
        assert_eq!(
            api_error("chat.postMessage", "channel_not_found", None),
            ChannelError::Rejected {
                channel: "slack".into(),
                detail: "chat.postMessage: channel_not_found".into()
            }
        );
        assert!(api_error("chat.update", "internal_error", None).is_transient());
        assert_eq!(
            api_error("files.getUploadURLExternal", "missing_scope", None),
            ChannelError::Unauthorized {
                channel: "slack".into(),
                detail: "files.getUploadURLExternal: missing_scope (sending files needs the files:write scope: add it under OAuth & Permissions and reinstall the app)".into()
            }
        );
    }

    #[test]
    fn the_token_goes_only_to_slack_and_the_configured_host() {
        let api = Api::new("http://127.0.0.1:4000/api").unwrap();
        let yes = [
            "https://files.slack.com/files-pri/T1-F1/a.png",
            "http://127.0.0.1:4000/files-pri/x",
        ];
        let no = [
            "http://files.slack.com/files-pri/T1-F1/a.png",
            "https://evil.example/files.slack.com",
            "https://slack.com.evil.example/x",
            "http://127.0.0.1:4001/x",
        ];
        for url in yes {
            assert!(api.may_send_token_to(&Url::parse(url).unwrap()), "{url}");
        }
        for url in no {
            assert!(!api.may_send_token_to(&Url::parse(url).unwrap()), "{url}");
        }
    }
}
