//! The HTTP transport both providers share: a `reqwest` client built from a
//! provider's config, a JSON POST that turns HTTP failures into typed
//! [`Error`]s, and the loop that reads a server-sent event stream into
//! [`StreamEvent`]s.

use std::error::Error as StdError;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use eventsource_stream::{Event, EventStreamError, Eventsource};
use flynn_protocol::config::{ProviderConfig, ProviderKind};
use futures::StreamExt;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde::Serialize;
use serde_json::Value;

use crate::{Error, ModelResponse, ModelStream, Result, StreamEvent};

/// Longest piece of an unparsed error body quoted in an error message.
const MAX_BODY_QUOTE: usize = 300;

/// What a vendor's error body says, read from whichever of the documented
/// shapes it uses: `{"error":{"message","type","code"}}` (OpenAI and
/// Anthropic), `{"error":"text"}` (Ollama), or a bare `{"message"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct VendorError {
    pub message: String,
    /// `error.type`, e.g. `invalid_request_error` or `overloaded_error`.
    pub kind: Option<String>,
    /// `error.code`, e.g. `context_length_exceeded`.
    pub code: Option<String>,
}

impl VendorError {
    /// Reads an error body; a body that is not one of the known shapes
    /// becomes its own (trimmed, shortened) text.
    pub fn parse(body: &str) -> VendorError {
        let parsed = serde_json::from_str::<Value>(body).ok();
        // Some OpenAI-compatible servers (Gemini's among them) wrap the
        // error object in a one-element array.
        let object = match parsed {
            Some(Value::Array(mut items)) if !items.is_empty() => items.swap_remove(0),
            Some(value) => value,
            None => Value::Null,
        };
        if let Some(found) = VendorError::from_value(&object) {
            return found;
        }
        VendorError {
            message: quote(body),
            kind: None,
            code: None,
        }
    }

    /// Reads an already-parsed value holding an `error` (or a `message`).
    pub fn from_value(value: &Value) -> Option<VendorError> {
        match value.get("error") {
            Some(Value::Object(error)) => Some(VendorError {
                message: error.get("message").and_then(Value::as_str).map_or_else(
                    || quote(&Value::Object(error.clone()).to_string()),
                    str::to_owned,
                ),
                kind: error.get("type").and_then(as_text),
                code: error.get("code").and_then(as_text),
            }),
            Some(Value::String(message)) => Some(VendorError {
                message: message.clone(),
                kind: None,
                code: None,
            }),
            _ => value
                .get("message")
                .and_then(Value::as_str)
                .map(|message| VendorError {
                    message: message.to_owned(),
                    kind: None,
                    code: None,
                }),
        }
    }
}

/// A string field, or a number written as text (some servers send numeric
/// codes).
fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// Trims `text` and cuts it to [`MAX_BODY_QUOTE`] bytes on a character
/// boundary.
pub(crate) fn quote(text: &str) -> String {
    let text = text.trim();
    if text.len() <= MAX_BODY_QUOTE {
        return text.to_owned();
    }
    let end = text.floor_char_boundary(MAX_BODY_QUOTE);
    format!("{}…", &text[..end])
}

/// Decides whether an error body means the prompt does not fit the model's
/// context window. Each vendor module supplies its own, from the fields its
/// vendor documents.
pub(crate) type OverflowCheck = fn(status: u16, error: &VendorError) -> bool;

/// A `reqwest` client configured for one provider.
///
/// The client itself is built on first use: loading the system's root
/// certificates costs milliseconds, which a provider that is configured but
/// never called (a fallback) should not cost every `flynn send`. A provider
/// whose base URL is plain `http://` (a local server) gets no certificate
/// store at all.
#[derive(Debug, Clone)]
pub(crate) struct Transport {
    provider: String,
    kind: ProviderKind,
    headers: HeaderMap,
    connect_timeout: Duration,
    read_timeout: Duration,
    plain_http: bool,
    client: Arc<OnceLock<Result<reqwest::Client>>>,
}

impl Transport {
    pub fn new(provider: &str, config: &ProviderConfig) -> Result<Transport> {
        let mut headers = HeaderMap::new();
        // The kind's own headers first, so that configured ones replace them.
        for (name, value) in crate::preset::preset(config.kind).headers {
            headers.insert(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        for (name, value) in &config.headers {
            let header_name =
                HeaderName::from_bytes(name.as_bytes()).map_err(|_| Error::Config {
                    message: format!(
                        "providers.{provider}.headers: '{name}' is not a valid HTTP header name"
                    ),
                })?;
            let header_value = HeaderValue::from_str(value).map_err(|_| Error::Config {
                message: format!(
                    "providers.{provider}.headers.{name}: the value is not a valid HTTP header value (printable ASCII only)"
                ),
            })?;
            headers.insert(header_name, header_value);
        }
        let plain_http = base_url(provider, config)?.starts_with("http://");
        Ok(Transport {
            provider: provider.to_owned(),
            kind: config.kind,
            headers,
            connect_timeout: Duration::from_secs(config.connect_timeout_secs),
            read_timeout: Duration::from_secs(config.read_timeout_secs),
            plain_http,
            client: Arc::default(),
        })
    }

    /// The HTTP client, built on the first call.
    fn client(&self) -> Result<&reqwest::Client> {
        self.client
            .get_or_init(|| {
                // Uncompressed, whatever features other crates turn on:
                // streamed tokens must arrive as they are sent, not when a
                // compression block fills.
                let mut builder = reqwest::Client::builder()
                    // reqwest drops `Authorization` on a redirect to
                    // another host, but not `x-api-key` or configured
                    // headers: a redirect is an error (`Error::Redirect`).
                    .redirect(reqwest::redirect::Policy::none())
                    .no_gzip()
                    .connect_timeout(self.connect_timeout)
                    .read_timeout(self.read_timeout)
                    .default_headers(self.headers.clone());
                if self.plain_http {
                    builder = builder.tls_certs_only([]);
                }
                builder.build().map_err(|error| Error::Config {
                    message: format!(
                        "provider '{}': cannot set up the HTTP client: {}",
                        self.provider,
                        chain(&error)
                    ),
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// POSTs `body` as JSON and returns the response if it succeeded, or the
    /// typed error its status and body describe.
    pub async fn post_json(
        &self,
        url: &str,
        headers: HeaderMap,
        body: &impl Serialize,
        overflow: OverflowCheck,
    ) -> Result<reqwest::Response> {
        let response = self
            .client()?
            .post(url)
            .headers(headers)
            .json(body)
            .send()
            .await
            .map_err(|error| self.request_error(url, &error))?;
        let status = response.status().as_u16();
        if response.status().is_success() {
            return Ok(response);
        }
        if response.status().is_redirection() {
            return Err(redirect_error(&self.provider, &response));
        }
        let headers = response.headers().clone();
        // The body is only read for its message; a body that cannot be read
        // still leaves the status to classify the failure.
        let body = response.text().await.unwrap_or_default();
        Err(status_error(
            &self.provider,
            self.kind,
            status,
            &headers,
            &body,
            overflow,
        ))
    }

    /// The error for a request that got no HTTP response.
    fn request_error(&self, url: &str, error: &reqwest::Error) -> Error {
        if error.is_connect() {
            Error::Connect {
                provider: self.provider.clone(),
                url: url.to_owned(),
                message: chain(error),
            }
        } else if error.is_timeout() {
            Error::Timeout {
                provider: self.provider.clone(),
                after: self.read_timeout,
            }
        } else {
            Error::Stream {
                provider: self.provider.clone(),
                message: format!("the request to {url} failed: {}", chain(error)),
            }
        }
    }

    /// Sends a small JSON request that is not a model call (a server's
    /// model information) and reads its JSON answer, waiting at most
    /// `timeout` in all.
    pub async fn json_request(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
        headers: HeaderMap,
        timeout: Duration,
    ) -> Result<Value> {
        let mut request = self
            .client()?
            .request(method, url)
            .timeout(timeout)
            .headers(headers);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|error| self.request_error(url, &error))?;
        if response.status().is_redirection() {
            return Err(redirect_error(&self.provider, &response));
        }
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response
            .text()
            .await
            .map_err(|error| self.request_error(url, &error))?;
        if !(200..300).contains(&status) {
            return Err(status_error(
                &self.provider,
                self.kind,
                status,
                &headers,
                &text,
                |_, _| false,
            ));
        }
        serde_json::from_str(&text).map_err(|error| Error::Protocol {
            provider: self.provider.clone(),
            message: format!("{url} did not answer with JSON ({error}): {}", quote(&text)),
        })
    }

    /// Reads a successful response as a server-sent event stream, feeding
    /// each event to `assembler`. The stream ends with the assembled
    /// response, or with the first error.
    pub fn event_stream<A: Assembler>(
        &self,
        response: reqwest::Response,
        assembler: A,
    ) -> ModelStream {
        let provider = self.provider.clone();
        let read_timeout = self.read_timeout;
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("")
            .to_owned();
        // A success that is not a stream (a server that ignored
        // `"stream": true`, a proxy's page): say what it said. A missing
        // content type is given the benefit of the doubt.
        if !content_type.is_empty() && !content_type.starts_with("text/event-stream") {
            return Box::pin(async_stream::stream! {
                let body = response.text().await.unwrap_or_default();
                let said = VendorError::parse(&body).message;
                yield Err(Error::Protocol {
                    provider,
                    message: format!(
                        "expected an event stream (text/event-stream) but got '{content_type}': {said}"
                    ),
                });
            });
        }
        sse_stream(
            provider,
            read_timeout,
            Some(read_timeout),
            response.bytes_stream(),
            assembler,
        )
    }
}

/// The error for a redirect (never followed, see [`Transport`]'s client):
/// where it pointed, as `host[:port]`.
fn redirect_error(provider: &str, response: &reqwest::Response) -> Error {
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|value| value.to_str().ok());
    let to = match location {
        None => "nowhere (no Location header)".to_owned(),
        Some(location) => match response.url().join(location) {
            Ok(url) => match (url.host_str(), url.port()) {
                (Some(host), Some(port)) => format!("{host}:{port}"),
                (Some(host), None) => host.to_owned(),
                (None, _) => quote(location),
            },
            Err(_) => quote(location),
        },
    };
    Error::Redirect {
        provider: provider.to_owned(),
        status: response.status().as_u16(),
        to,
    }
}

/// The most bytes one server-sent event may take before the blank line
/// that ends it. An event is one chunk of an answer; a stream that never
/// ends its event (no `\n\n`) would otherwise be buffered for ever.
pub(crate) const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Why reading a stream's body stopped below the SSE parser.
#[derive(Debug)]
pub(crate) enum BodyError {
    Transport(reqwest::Error),
    /// An event grew past [`MAX_EVENT_BYTES`].
    EventTooLarge,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Transport(error) => write!(f, "{}", chain(error)),
            BodyError::EventTooLarge => write!(
                f,
                "an event grew past {} MiB without ending",
                MAX_EVENT_BYTES >> 20
            ),
        }
    }
}

/// Counts the bytes of the event being received, across chunks: an event
/// ends at a blank line (two line ends in a row; a line ends with `\r\n`,
/// `\n` or `\r`).
#[derive(Debug, Default)]
struct EventMeter {
    /// Bytes since the last blank line.
    pending: usize,
    /// Bytes of the current line (its end not counted).
    line: usize,
    /// The last byte was a `\r` (a `\n` after it ends nothing more).
    after_cr: bool,
}

impl EventMeter {
    /// Reads one chunk; false when the event in progress is now too long.
    fn read(&mut self, chunk: &[u8]) -> bool {
        for &byte in chunk {
            let after_cr = std::mem::replace(&mut self.after_cr, byte == b'\r');
            match byte {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    if self.line == 0 {
                        self.pending = 0;
                    } else {
                        self.line = 0;
                        self.pending += 1;
                    }
                }
                _ => {
                    self.line += 1;
                    self.pending += 1;
                }
            }
            if self.pending > MAX_EVENT_BYTES {
                return false;
            }
        }
        true
    }
}

/// `body`, failing with [`BodyError::EventTooLarge`] as soon as an event
/// grows past [`MAX_EVENT_BYTES`].
fn metered<S>(
    body: S,
) -> impl futures::Stream<Item = std::result::Result<bytes::Bytes, BodyError>> + Send + 'static
where
    S: futures::Stream<Item = std::result::Result<bytes::Bytes, reqwest::Error>> + Send + 'static,
{
    let mut meter = EventMeter::default();
    let mut over = false;
    body.map(move |chunk| match chunk {
        Ok(bytes) if !over && meter.read(&bytes) => Ok(bytes),
        Ok(_) => {
            over = true;
            Err(BodyError::EventTooLarge)
        }
        Err(error) => Err(BodyError::Transport(error)),
    })
}

/// Whether an event says something: anything but a keep-alive `ping`
/// event (comments, the other keep-alive, never reach the assembler).
fn carries_data(event: &Event) -> bool {
    event.event != "ping"
}

/// Parses a body of server-sent events as it arrives, feeding each event to
/// `assembler`: the deltas as they come, then the assembled response, or the
/// first error. The one loop every provider's stream goes through (and the
/// one the SSE benchmark measures).
///
/// `idle` (the provider's read timeout; `None` only where no Tokio timer
/// runs, as in the fuzz target) bounds the silence between two events that
/// carry data: keep-alive comments and `ping` events reset the socket's
/// read timeout but not this one, so a server that only pings is given up
/// on. One event may take at most [`MAX_EVENT_BYTES`].
pub(crate) fn sse_stream<S, A>(
    provider: String,
    read_timeout: Duration,
    idle: Option<Duration>,
    body: S,
    mut assembler: A,
) -> ModelStream
where
    S: futures::Stream<Item = std::result::Result<bytes::Bytes, reqwest::Error>> + Send + 'static,
    A: Assembler,
{
    Box::pin(async_stream::stream! {
        let mut events = std::pin::pin!(metered(body).eventsource());
        let mut out = Vec::new();
        let mut quiet_until = idle.map(|idle| tokio::time::Instant::now() + idle);
        loop {
            let next = match quiet_until {
                Some(until) => match tokio::time::timeout_at(until, events.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        yield Err(Error::Timeout {
                            provider: provider.clone(),
                            after: idle.unwrap_or(read_timeout),
                        });
                        return;
                    }
                },
                None => events.next().await,
            };
            match next {
                Some(Ok(event)) => {
                    if let Some(idle) = idle.filter(|_| carries_data(&event)) {
                        quiet_until = Some(tokio::time::Instant::now() + idle);
                    }
                    let fed = assembler.feed(&event, &mut out);
                    for delta in out.drain(..) {
                        yield Ok(delta);
                    }
                    match fed {
                        Ok(Fed::More) => {}
                        Ok(Fed::Done) => {
                            yield assembler.finish(true).map(StreamEvent::Completed);
                            return;
                        }
                        Err(error) => {
                            yield Err(error);
                            return;
                        }
                    }
                }
                Some(Err(error)) => {
                    yield Err(sse_error(&provider, read_timeout, &error));
                    return;
                }
                None => {
                    yield assembler.finish(false).map(StreamEvent::Completed);
                    return;
                }
            }
        }
    })
}

/// Whether a stream has more to say after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fed {
    More,
    /// The vendor's end-of-stream marker arrived.
    Done,
}

/// Turns one vendor's server-sent events into [`StreamEvent`]s and, at the
/// end, the assembled [`ModelResponse`].
pub(crate) trait Assembler: Send + 'static {
    /// Reads one event, pushing any deltas it carries onto `out`.
    fn feed(&mut self, event: &Event, out: &mut Vec<StreamEvent>) -> Result<Fed>;

    /// The assembled answer. `marked` says whether the vendor's end marker
    /// arrived (`false`: the body simply ended).
    fn finish(&mut self, marked: bool) -> Result<ModelResponse>;
}

fn sse_error(provider: &str, read_timeout: Duration, error: &EventStreamError<BodyError>) -> Error {
    match error {
        EventStreamError::Transport(BodyError::Transport(error)) if error.is_timeout() => {
            Error::Timeout {
                provider: provider.to_owned(),
                after: read_timeout,
            }
        }
        EventStreamError::Transport(BodyError::Transport(error)) => Error::Stream {
            provider: provider.to_owned(),
            message: format!("reading the stream failed: {}", chain(error)),
        },
        EventStreamError::Transport(BodyError::EventTooLarge) => Error::Protocol {
            provider: provider.to_owned(),
            message: format!(
                "an event grew past {} MiB without ending (no blank line after it): the server is not sending events Flynn can read",
                MAX_EVENT_BYTES >> 20
            ),
        },
        EventStreamError::Utf8(error) => Error::Stream {
            provider: provider.to_owned(),
            message: format!("the stream is not valid UTF-8: {error}"),
        },
        EventStreamError::Parser(error) => Error::Stream {
            provider: provider.to_owned(),
            message: format!("the stream is not valid server-sent events: {error}"),
        },
    }
}

/// Classifies a failed HTTP response.
pub(crate) fn status_error(
    provider: &str,
    kind: ProviderKind,
    status: u16,
    headers: &HeaderMap,
    body: &str,
    overflow: OverflowCheck,
) -> Error {
    let error = VendorError::parse(body);
    let message = if error.message.is_empty() {
        reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|status| status.canonical_reason())
            .unwrap_or("no message")
            .to_owned()
    } else {
        error.message.clone()
    };
    let provider = provider.to_owned();
    match status {
        401 | 403 => Error::Auth {
            provider,
            status,
            message,
            env: kind.api_key_env(),
        },
        429 => Error::RateLimited {
            provider,
            retry_after: retry_after(headers),
            message,
        },
        503 | 529 => Error::Overloaded {
            provider,
            status,
            retry_after: retry_after(headers),
            message,
        },
        500..=599 => Error::Server {
            provider,
            status,
            message,
        },
        400..=499 if overflow(status, &error) => Error::ContextOverflow { provider, message },
        400..=499 => Error::InvalidRequest {
            provider,
            status,
            message,
        },
        _ => Error::Protocol {
            provider,
            message: format!("unexpected HTTP status {status}: {message}"),
        },
    }
}

/// How long the server asked us to wait: `retry-after-ms` (OpenAI) when
/// present, else `Retry-After` as delta-seconds or an HTTP-date.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
    };
    // A hint too large for a `Duration` (`1e300`) is no hint: `try_from`
    // refuses it (and negatives and NaN) where `from_secs_f64` panics.
    if let Some(millis) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return Duration::try_from_secs_f64(millis / 1000.0).ok();
    }
    let value = text("retry-after")?;
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    if let Ok(seconds) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).ok();
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// An error and its sources, joined with ": " (reqwest's own message is
/// only the outermost layer).
pub(crate) fn chain(error: &dyn StdError) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(next) = source {
        let text = next.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = next.source();
    }
    out
}

/// A header value from configuration or a key, or a config error naming
/// the provider.
pub(crate) fn header_value(provider: &str, what: &str, value: &str) -> Result<HeaderValue> {
    HeaderValue::from_str(value).map_err(|_| Error::Config {
        message: format!(
            "provider '{provider}': the {what} is not a valid HTTP header value (printable ASCII only)"
        ),
    })
}

/// The configured base URL (or the kind's default), checked and without a
/// trailing slash.
pub(crate) fn base_url(provider: &str, config: &ProviderConfig) -> Result<String> {
    let Some(base) = config
        .base_url
        .as_deref()
        .filter(|url| !url.trim().is_empty())
        .or(config.kind.default_base_url())
    else {
        return Err(Error::Config {
            message: format!(
                "provider '{provider}' ({}): base_url is required for this kind (e.g. http://127.0.0.1:8080/v1)",
                config.kind
            ),
        });
    };
    let base = base.trim().trim_end_matches('/');
    match reqwest::Url::parse(base) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {
            Ok(base.to_owned())
        }
        Ok(_) => Err(Error::Config {
            message: format!(
                "provider '{provider}': invalid base_url '{base}': expected an http:// or https:// URL"
            ),
        }),
        Err(error) => Err(Error::Config {
            message: format!("provider '{provider}': invalid base_url '{base}': {error}"),
        }),
    }
}

/// The configured API key; an empty one (an unset `${VAR}`) counts as none.
pub(crate) fn api_key(config: &ProviderConfig) -> Option<String> {
    config
        .api_key
        .as_deref()
        .map(str::trim)
        .filter(|key| !key.is_empty())
        .map(str::to_owned)
}

/// Parses the data of one event as JSON, or says which event was not.
pub(crate) fn event_json(provider: &str, event: &Event) -> Result<Value> {
    serde_json::from_str(&event.data).map_err(|error| Error::Protocol {
        provider: provider.to_owned(),
        message: format!(
            "event '{}' does not hold valid JSON ({error}): {}",
            event.event,
            quote(&event.data)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: u16, _: &VendorError) -> bool {
        false
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn the_event_meter_counts_from_each_blank_line_whatever_the_line_ends() {
        let over = "a".repeat(MAX_EVENT_BYTES + 1);
        let under = "a".repeat(MAX_EVENT_BYTES / 2);
        // Two halves of the limit, each ended by a blank line of another
        // style, split across chunks anywhere: never over.
        for end in ["\n\n", "\r\n\r\n", "\r\r", "\r\n\n"] {
            let mut meter = EventMeter::default();
            let body = format!("data: {under}{end}data: {under}{end}data: {under}{end}");
            let (first, rest) = body.as_bytes().split_at(MAX_EVENT_BYTES / 2 + 7);
            assert!(meter.read(first) && meter.read(rest), "{end:?}");
        }
        // One line end is not the end of an event.
        let mut meter = EventMeter::default();
        assert!(meter.read(format!("data: {under}\r\n").as_bytes()));
        assert!(!meter.read(format!("data: {under}\r\n").as_bytes()));
        assert!(!EventMeter::default().read(over.as_bytes()));
    }

    #[test]
    fn reads_each_documented_error_shape() {
        assert_eq!(
            VendorError::parse(
                r#"{"error":{"message":"too long","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#
            ),
            VendorError {
                message: "too long".into(),
                kind: Some("invalid_request_error".into()),
                code: Some("context_length_exceeded".into()),
            }
        );
        assert_eq!(
            VendorError::parse(
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}"#
            ),
            VendorError {
                message: "Overloaded".into(),
                kind: Some("overloaded_error".into()),
                code: None,
            }
        );
        assert_eq!(
            VendorError::parse(r#"{"error":"model 'x' not found"}"#),
            VendorError {
                message: "model 'x' not found".into(),
                kind: None,
                code: None,
            }
        );
        assert_eq!(
            VendorError::parse(
                r#"[{"error":{"code":400,"message":"bad","status":"INVALID_ARGUMENT"}}]"#
            ),
            VendorError {
                message: "bad".into(),
                kind: None,
                code: Some("400".into()),
            }
        );
        assert_eq!(
            VendorError::parse("  <html>Bad Gateway</html>\n"),
            VendorError {
                message: "<html>Bad Gateway</html>".into(),
                kind: None,
                code: None,
            }
        );
    }

    #[test]
    fn long_bodies_are_cut_on_a_character_boundary() {
        let body = "é".repeat(400);
        let quoted = quote(&body);
        assert_eq!(quoted, format!("{}…", "é".repeat(150)));
    }

    #[test]
    fn statuses_map_to_typed_errors() {
        let kind = ProviderKind::Openai;
        let error = |status, pairs: &[(&'static str, &'static str)], body: &str| {
            status_error("p", kind, status, &headers(pairs), body, never)
        };
        assert_eq!(
            error(401, &[], r#"{"error":{"message":"bad key"}}"#),
            Error::Auth {
                provider: "p".into(),
                status: 401,
                message: "bad key".into(),
                env: Some("OPENAI_API_KEY"),
            }
        );
        assert_eq!(
            error(429, &[("retry-after", "7")], "slow down"),
            Error::RateLimited {
                provider: "p".into(),
                retry_after: Some(Duration::from_secs(7)),
                message: "slow down".into(),
            }
        );
        assert_eq!(
            error(529, &[], ""),
            Error::Overloaded {
                provider: "p".into(),
                status: 529,
                retry_after: None,
                message: "no message".into(),
            }
        );
        assert_eq!(
            error(503, &[], ""),
            Error::Overloaded {
                provider: "p".into(),
                status: 503,
                retry_after: None,
                message: "Service Unavailable".into(),
            }
        );
        assert_eq!(
            error(502, &[], "bad gateway"),
            Error::Server {
                provider: "p".into(),
                status: 502,
                message: "bad gateway".into(),
            }
        );
        assert_eq!(
            error(404, &[], r#"{"error":"model 'x' not found"}"#),
            Error::InvalidRequest {
                provider: "p".into(),
                status: 404,
                message: "model 'x' not found".into(),
            }
        );
        let overflow = status_error("p", kind, 400, &HeaderMap::new(), "{}", |_, _| true);
        assert!(overflow.is_context_overflow());
    }

    #[test]
    fn retry_after_reads_every_documented_form() {
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")])),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&headers(&[
                ("retry-after", "7"),
                ("retry-after-ms", "1500")
            ])),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry_after(&headers(&[(
                "retry-after",
                "Wed, 21 Oct 2015 07:28:00 GMT"
            )])),
            Some(Duration::ZERO)
        );
        let later = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
        let mut map = HeaderMap::new();
        map.insert(
            "retry-after",
            HeaderValue::from_str(&later).unwrap_or(HeaderValue::from_static("")),
        );
        let waited = retry_after(&map).unwrap_or_default();
        assert!(
            waited > Duration::from_secs(110) && waited <= Duration::from_secs(120),
            "{waited:?}"
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn retry_hints_too_large_for_a_duration_are_ignored_not_a_panic() {
        for (name, value) in [
            ("retry-after", "99999999999999999999"),
            ("retry-after", "1e20"),
            ("retry-after", "-1"),
            ("retry-after", "NaN"),
            ("retry-after", "inf"),
            ("retry-after-ms", "1e300"),
            ("retry-after-ms", "-5"),
        ] {
            assert_eq!(
                retry_after(&headers(&[(name, value)])),
                None,
                "{name}: {value}"
            );
        }
        assert_eq!(
            retry_after(&headers(&[("retry-after", "1.5")])),
            Some(Duration::from_millis(1500))
        );
    }

    #[test]
    fn base_urls_are_checked_and_trimmed() {
        let mut config = ProviderConfig::new(ProviderKind::OpenaiCompatible);
        assert_eq!(
            base_url("local", &config),
            Err(Error::Config {
                message: "provider 'local' (openai-compatible): base_url is required for this kind (e.g. http://127.0.0.1:8080/v1)".into()
            })
        );
        config.base_url = Some("http://127.0.0.1:8080/v1/".into());
        assert_eq!(
            base_url("local", &config),
            Ok("http://127.0.0.1:8080/v1".into())
        );
        config.base_url = Some("not a url".into());
        assert_eq!(
            base_url("local", &config),
            Err(Error::Config {
                message:
                    "provider 'local': invalid base_url 'not a url': relative URL without a base"
                        .into()
            })
        );
        config.base_url = Some("ftp://example.com".into());
        assert_eq!(
            base_url("local", &config),
            Err(Error::Config {
                message: "provider 'local': invalid base_url 'ftp://example.com': expected an http:// or https:// URL".into()
            })
        );
        assert_eq!(
            base_url("o", &ProviderConfig::new(ProviderKind::Ollama)),
            Ok("http://127.0.0.1:11434/v1".into())
        );
    }
}
