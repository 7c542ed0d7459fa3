//! The few Graph API calls the adapter makes, and Graph errors turned
//! into [`ChannelError`]s by their documented codes.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::multipart::{Form, Part};
use serde::Deserialize;
use serde_json::Value;

use crate::adapter::ChannelError;

/// The channel's name in errors.
pub(super) const CHANNEL: &str = "whatsapp";

/// What a send outside the customer service window gets, from the adapter
/// (before sending) or from the API (error 131047).
pub(super) const OUTSIDE_WINDOW: &str =
    "outside WhatsApp's 24-hour window; the person must write first";

/// The largest attachment downloaded (WhatsApp's own limit for images
/// is 5 MB, for documents 100 MB).
pub(super) const MAX_MEDIA: u64 = 20 * 1024 * 1024;

/// Every Graph call gives up after this long.
const TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A media upload (up to 100 MB) gives up after this long.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// The business number as the Graph API describes it.
#[derive(Debug, Deserialize)]
pub(super) struct PhoneNumber {
    #[serde(default)]
    pub display_phone_number: String,
    #[serde(default)]
    pub verified_name: String,
}

/// The answer to a media upload.
#[derive(Debug, Deserialize)]
struct Uploaded {
    id: String,
}

/// A media object's metadata (`GET /{version}/{media_id}`).
#[derive(Debug, Deserialize)]
pub(super) struct Media {
    pub url: String,
    /// A number, or a number in a string (both are seen in the wild).
    #[serde(default)]
    pub file_size: Option<Value>,
}

impl Media {
    pub fn size(&self) -> Option<u64> {
        match self.file_size.as_ref()? {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }
}

/// The Graph API for one business number.
#[derive(Debug, Clone)]
pub(super) struct Graph {
    http: reqwest::Client,
    /// `https://graph.facebook.com/v23.0`
    base: String,
    token: String,
    phone_number_id: String,
}

impl Graph {
    pub fn new(
        api_url: &str,
        version: &str,
        token: &str,
        phone_number_id: &str,
    ) -> Result<Self, ChannelError> {
        let config_error = |detail: String| ChannelError::Rejected {
            channel: CHANNEL.to_owned(),
            detail,
        };
        let version = version.trim().trim_matches('/');
        if version.is_empty() || version.contains('/') {
            return Err(config_error(format!(
                "channels.whatsapp.api_version: '{version}' is not a Graph API version (like 'v23.0')"
            )));
        }
        let phone_number_id = phone_number_id.trim();
        if phone_number_id.is_empty() || !phone_number_id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(config_error(format!(
                "channels.whatsapp.phone_number_id: '{phone_number_id}' is not a Phone number ID (digits, from WhatsApp → API Setup; not the phone number)"
            )));
        }
        if token.trim().is_empty() {
            return Err(config_error(
                "channels.whatsapp.access_token is empty".to_owned(),
            ));
        }
        let api_url = api_url.trim().trim_end_matches('/');
        let parsed = reqwest::Url::parse(api_url).map_err(|e| {
            config_error(format!(
                "channels.whatsapp.api_url: '{api_url}' is not a URL ({e})"
            ))
        })?;
        let mut builder = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT);
        if parsed.scheme() == "http" {
            // A local fake or proxy: no need to load the system's roots.
            builder = builder.tls_certs_only([]);
        }
        let http = builder.build().map_err(|e| ChannelError::Unavailable {
            channel: CHANNEL.to_owned(),
            detail: format!("cannot set up the HTTP client: {e}"),
        })?;
        Ok(Graph {
            http,
            base: format!("{api_url}/{version}"),
            token: token.trim().to_owned(),
            phone_number_id: phone_number_id.to_owned(),
        })
    }

    /// Checks the token and the number: `GET /{version}/{phone_number_id}`.
    pub async fn phone_number(&self) -> Result<PhoneNumber, ChannelError> {
        let request = self
            .http
            .get(format!("{}/{}", self.base, self.phone_number_id))
            .query(&[("fields", "display_phone_number,verified_name")]);
        let body = self.call(request).await?;
        decode(&body)
    }

    /// `POST /{version}/{phone_number_id}/messages` with `body`; the
    /// answer's JSON.
    pub async fn post_message(&self, body: &Value) -> Result<Value, ChannelError> {
        let request = self
            .http
            .post(format!("{}/{}/messages", self.base, self.phone_number_id))
            .json(body);
        let answer = self.call(request).await?;
        decode(&answer)
    }

    /// Uploads a file as a media object for messages:
    /// `POST /{version}/{phone_number_id}/media`, multipart with
    /// `messaging_product=whatsapp`, `type` (its MIME type) and the
    /// `file`. The media id.
    pub async fn upload_media(
        &self,
        media_type: &str,
        name: &str,
        data: Bytes,
    ) -> Result<String, ChannelError> {
        let size = data.len() as u64;
        let file = Part::stream_with_length(reqwest::Body::from(data), size)
            .file_name(name.to_owned())
            .mime_str(media_type)
            .map_err(|e| ChannelError::Rejected {
                channel: CHANNEL.to_owned(),
                detail: format!("'{media_type}' is not a MIME type ({e})"),
            })?;
        let form = Form::new()
            .text("messaging_product", "whatsapp")
            .text("type", media_type.to_owned())
            .part("file", file);
        let request = self
            .http
            .post(format!("{}/{}/media", self.base, self.phone_number_id))
            .timeout(UPLOAD_TIMEOUT)
            .multipart(form);
        let answer = self.call(request).await?;
        let uploaded: Uploaded = decode(&answer)?;
        if uploaded.id.is_empty() {
            return Err(ChannelError::Unavailable {
                channel: CHANNEL.to_owned(),
                detail: "the media upload was answered without an id".to_owned(),
            });
        }
        Ok(uploaded.id)
    }

    /// Downloads a media object: its metadata, then its bytes (at most
    /// `limit`, and never more than [`MAX_MEDIA`]). The token goes only
    /// to Meta's media hosts or the configured Graph host.
    pub async fn download(&self, media_id: &str, limit: u64) -> Result<Bytes, ChannelError> {
        let limit = limit.min(MAX_MEDIA);
        let refused = |detail: String| ChannelError::Rejected {
            channel: CHANNEL.to_owned(),
            detail,
        };
        if media_id.is_empty() || !media_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(refused(format!("'{media_id}' is not a media id")));
        }
        let request = self.http.get(format!("{}/{media_id}", self.base));
        let body = self.call(request).await?;
        let media: Media = decode(&body)?;
        if let Some(size) = media.size().filter(|size| *size > limit) {
            return Err(ChannelError::too_large(CHANNEL, size, limit));
        }
        let url = reqwest::Url::parse(&media.url).map_err(|e| {
            refused(format!(
                "the Graph API gave a media URL that is not a URL ({e})"
            ))
        })?;
        if !self.may_send_token_to(&url) {
            return Err(refused(format!(
                "the media URL is on {}, not on Meta's servers; not sending the access token there",
                host_and_port(&url)
            )));
        }
        let mut response = self
            .http
            .get(url)
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| transport(&e))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let body = response.bytes().await.unwrap_or_default();
            return Err(classify(status, &body));
        }
        let mut data = BytesMut::new();
        while let Some(piece) = response.chunk().await.map_err(|e| transport(&e))? {
            let size = (data.len() + piece.len()) as u64;
            if size > limit {
                return Err(ChannelError::too_large(CHANNEL, size, limit));
            }
            data.extend_from_slice(&piece);
        }
        Ok(data.freeze())
    }

    /// Whether the access token may go to `url`: Meta's media hosts over
    /// https (`lookaside.fbsbx.com` serves Cloud API media; `*.fbcdn.net`,
    /// `*.whatsapp.net`), or the configured Graph API host and port.
    fn may_send_token_to(&self, url: &reqwest::Url) -> bool {
        let Some(host) = url.host_str() else {
            return false;
        };
        let under = |domain: &str| {
            host == domain
                || host
                    .strip_suffix(domain)
                    .is_some_and(|rest| rest.ends_with('.'))
        };
        let meta = url.scheme() == "https"
            && (under("fbsbx.com") || under("fbcdn.net") || under("whatsapp.net"));
        let configured = reqwest::Url::parse(&self.base).ok().is_some_and(|base| {
            base.scheme() == url.scheme()
                && base.host_str() == Some(host)
                && base.port_or_known_default() == url.port_or_known_default()
        });
        meta || configured
    }

    /// Sends a Graph request with the token; the body of a 2xx answer, or
    /// the error its status and body describe.
    async fn call(&self, request: reqwest::RequestBuilder) -> Result<Bytes, ChannelError> {
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| transport(&e))?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(|e| transport(&e))?;
        if (200..300).contains(&status) {
            Ok(body)
        } else {
            Err(classify(status, &body))
        }
    }
}

/// `host[:port]` of a URL, for messages.
fn host_and_port(url: &reqwest::Url) -> String {
    match (url.host_str(), url.port()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_owned(),
        (None, _) => "an unnamed host".to_owned(),
    }
}

/// A 2xx body as `T`; anything else means the API changed under us.
fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ChannelError> {
    serde_json::from_slice(body).map_err(|e| ChannelError::Unavailable {
        channel: CHANNEL.to_owned(),
        detail: format!("the Graph API answered in an unexpected shape ({e})"),
    })
}

fn transport(error: &reqwest::Error) -> ChannelError {
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "cannot connect"
    } else {
        "the request failed"
    };
    let mut detail = format!("{what}: {error}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        detail.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    ChannelError::Unavailable {
        channel: CHANNEL.to_owned(),
        detail,
    }
}

/// The Graph API's error object.
#[derive(Debug, Default, Deserialize)]
struct GraphError {
    #[serde(default)]
    message: String,
    #[serde(default)]
    code: Option<i64>,
    #[serde(default)]
    error_data: Option<ErrorData>,
    #[serde(default)]
    fbtrace_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorData {
    #[serde(default)]
    details: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: GraphError,
}

/// A failed Graph call as a [`ChannelError`], by HTTP status and the
/// documented error code (codes win where Meta answers 400 for a limit).
pub(super) fn classify(status: u16, body: &[u8]) -> ChannelError {
    let error = serde_json::from_slice::<ErrorBody>(body)
        .map(|b| b.error)
        .ok();
    let code = error.as_ref().and_then(|e| e.code);
    let channel = CHANNEL.to_owned();
    let detail = match &error {
        Some(error) => describe(error),
        None => {
            let text = String::from_utf8_lossy(body);
            let text: String = text.trim().chars().take(200).collect();
            if text.is_empty() {
                format!("HTTP {status}")
            } else {
                format!("HTTP {status}: {text}")
            }
        }
    };
    match code {
        // Throughput and call-rate limits; Meta gives no Retry-After.
        Some(4 | 80007 | 130429 | 131056) => ChannelError::RateLimited {
            channel,
            retry_after: None,
        },
        Some(190) => ChannelError::Unauthorized { channel, detail },
        Some(131047) => ChannelError::Rejected {
            channel,
            detail: format!("{OUTSIDE_WINDOW} ({detail})"),
        },
        Some(1 | 2 | 131000) => ChannelError::Unavailable { channel, detail },
        // Permission missing or removed: a config problem, like a bad token.
        Some(10 | 200..=299) => ChannelError::Unauthorized { channel, detail },
        _ => match status {
            429 => ChannelError::RateLimited {
                channel,
                retry_after: None,
            },
            401 | 403 => ChannelError::Unauthorized { channel, detail },
            500.. => ChannelError::Unavailable { channel, detail },
            _ => ChannelError::Rejected { channel, detail },
        },
    }
}

/// "Parameter value is not valid: details (code 131009, fbtrace_id X)".
fn describe(error: &GraphError) -> String {
    let mut text = if error.message.is_empty() {
        "the Graph API gave no message".to_owned()
    } else {
        error.message.clone()
    };
    if let Some(details) = error
        .error_data
        .as_ref()
        .and_then(|d| d.details.as_deref())
        .filter(|d| !d.is_empty())
    {
        text.push_str(": ");
        text.push_str(details);
    }
    let mut tags = Vec::new();
    if let Some(code) = error.code {
        tags.push(format!("code {code}"));
    }
    if let Some(trace) = error.fbtrace_id.as_deref().filter(|t| !t.is_empty()) {
        tags.push(format!("fbtrace_id {trace}"));
    }
    if !tags.is_empty() {
        text.push_str(&format!(" ({})", tags.join(", ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph_error(code: i64, message: &str) -> Vec<u8> {
        serde_json::json!({"error": {
            "message": message,
            "type": "OAuthException",
            "code": code,
            "error_data": {"messaging_product": "whatsapp", "details": "more"},
            "fbtrace_id": "AbC"
        }})
        .to_string()
        .into_bytes()
    }

    fn rate_limited() -> ChannelError {
        ChannelError::RateLimited {
            channel: CHANNEL.to_owned(),
            retry_after: None,
        }
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn the_token_goes_only_to_meta_and_the_configured_host() {
        let graph = Graph::new("http://127.0.0.1:4000", "v23.0", "token", "123").unwrap();
        let yes = [
            "https://lookaside.fbsbx.com/whatsapp_business/attachments/?mid=1",
            "https://scontent.xx.fbcdn.net/v/t1/x.jpg",
            "https://mmg.whatsapp.net/d/f/x.enc",
            "http://127.0.0.1:4000/whatsapp_business/attachments/?mid=1",
        ];
        let no = [
            "http://lookaside.fbsbx.com/whatsapp_business/attachments/?mid=1",
            "https://evil.example/lookaside.fbsbx.com/x",
            "https://fbsbx.com.evil.example/x",
            "https://evilfbsbx.com/x",
            "http://127.0.0.1:4001/x",
            "https://127.0.0.1:4000/x",
        ];
        for url in yes {
            assert!(
                graph.may_send_token_to(&reqwest::Url::parse(url).unwrap()),
                "{url}"
            );
        }
        for url in no {
            assert!(
                !graph.may_send_token_to(&reqwest::Url::parse(url).unwrap()),
                "{url}"
            );
        }
    }

    #[test]
    fn codes_decide_before_statuses() {
        for code in [4, 80007, 130429, 131056] {
            assert_eq!(
                classify(400, &graph_error(code, "slow down")),
                rate_limited()
            );
        }
        assert_eq!(classify(429, b""), rate_limited());
        assert_eq!(
            classify(400, &graph_error(131047, "(#131047) Re-engagement message")),
            ChannelError::Rejected {
                channel: CHANNEL.to_owned(),
                detail: format!(
                    "{OUTSIDE_WINDOW} ((#131047) Re-engagement message: more (code 131047, fbtrace_id AbC))"
                ),
            }
        );
        assert!(matches!(
            classify(401, &graph_error(190, "Invalid OAuth access token")),
            ChannelError::Unauthorized { .. }
        ));
        for code in [1, 2, 131000] {
            assert!(matches!(
                classify(400, &graph_error(code, "x")),
                ChannelError::Unavailable { .. }
            ));
        }
        assert!(matches!(
            classify(502, b"<html>Bad Gateway</html>"),
            ChannelError::Unavailable { .. }
        ));
        assert_eq!(
            classify(
                400,
                &graph_error(131009, "(#131009) Parameter value is not valid")
            ),
            ChannelError::Rejected {
                channel: CHANNEL.to_owned(),
                detail:
                    "(#131009) Parameter value is not valid: more (code 131009, fbtrace_id AbC)"
                        .to_owned(),
            }
        );
    }

    #[test]
    fn bad_settings_are_named() {
        let error = Graph::new("https://graph.facebook.com", "v23.0", "t", "+1 555").err();
        assert!(
            matches!(&error, Some(ChannelError::Rejected { detail, .. }) if detail.contains("phone_number_id")),
            "{error:?}"
        );
        assert!(Graph::new("not a url", "v23.0", "t", "123").is_err());
        assert!(Graph::new("https://graph.facebook.com/", "/v23.0/", "t", "123").is_ok());
    }
}
