//! The machinery every fake shares: a server on its own thread, the request
//! log, the reply script and the list of protocol violations.
//!
//! Each family of fakes (a cargo feature) uses its own part of it: a build
//! with only some families leaves the rest unused, which is not a defect.
#![cfg_attr(
    not(all(feature = "providers", feature = "channels", feature = "search")),
    allow(dead_code, unused_imports, unused_macros)
)]

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::StatusCode;
use axum::http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use axum::response::Response;
use serde_json::Value;
use tokio::sync::oneshot;

/// One request a fake received.
#[derive(Debug, Clone, PartialEq)]
pub struct CapturedRequest {
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    /// Every header, names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; `Value::Null` when it was empty or not JSON (which
    /// is recorded as a violation).
    pub body: Value,
}

impl CapturedRequest {
    /// The first value of a header (`name` in lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// What a fake answers to one request. Replies are used in the order they
/// were pushed, one per request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// An answer in text: streamed in several SSE chunks, or a JSON body
    /// when the request does not ask for `"stream": true`.
    Text(String),
    /// Tool calls as `(wire tool name, arguments)`. Ids are generated:
    /// `call_1`, `call_2`... (OpenAI) or `toolu_01`, `toolu_02`...
    /// (Anthropic), counting across the fake's lifetime.
    ToolCalls(Vec<(String, Value)>),
    /// Anthropic: a thinking block with its signature, then a text block.
    /// OpenAI: `reasoning_content` deltas, then the text (the signature has
    /// no place there).
    Thinking {
        thinking: String,
        signature: String,
        text: String,
    },
    /// An HTTP error: this status, these headers, this body, verbatim.
    Error {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// A `200 text/event-stream` response whose body is exactly these bytes
    /// (truncated or malformed streams, error events).
    RawSse(String),
    /// A `200 text/event-stream` response that sends exactly these bytes and
    /// then stays open, sending nothing more: a server that hangs in the
    /// middle of an answer (for cancellation and crash tests).
    Stall(String),
}

/// The methods every scripted fake shares. Expands inside `impl FakeX`
/// for a struct with fields `shared: Arc<Shared>` and `server: Server`.
macro_rules! scripted_fake_methods {
    () => {
        /// The address the fake listens on.
        pub fn addr(&self) -> std::net::SocketAddr {
            self.server.addr()
        }

        /// Adds a reply to the script; each request takes the next one.
        pub fn push(&self, reply: $crate::Reply) {
            self.shared.push(reply);
        }

        /// Every request received, in order.
        pub fn requests(&self) -> Vec<$crate::CapturedRequest> {
            self.shared.requests()
        }

        /// Every protocol violation seen; empty when the client behaved.
        pub fn violations(&self) -> Vec<String> {
            self.shared.violations()
        }
    };
}
pub(crate) use scripted_fake_methods;

/// Token counts every scripted answer reports, so tests can assert them.
pub const INPUT_TOKENS: u64 = 12;
/// See [`INPUT_TOKENS`].
pub const OUTPUT_TOKENS: u64 = 5;

#[derive(Debug, Default)]
struct State {
    script: VecDeque<Reply>,
    requests: Vec<CapturedRequest>,
    violations: Vec<String>,
    counters: HashMap<&'static str, u64>,
}

/// The state a fake shares with its server thread.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn push(&self, reply: Reply) {
        self.lock().script.push_back(reply);
    }

    pub fn next_reply(&self) -> Option<Reply> {
        self.lock().script.pop_front()
    }

    pub fn record(&self, request: CapturedRequest) {
        self.lock().requests.push(request);
    }

    pub fn violation(&self, message: String) {
        self.lock().violations.push(message);
    }

    pub fn requests(&self) -> Vec<CapturedRequest> {
        self.lock().requests.clone()
    }

    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    /// 1, 2, 3... per kind of id, across the fake's lifetime.
    pub fn next_id(&self, kind: &'static str) -> u64 {
        let mut state = self.lock();
        let counter = state.counters.entry(kind).or_default();
        *counter += 1;
        *counter
    }
}

/// Answers one captured request.
pub(crate) type Handler = Arc<dyn Fn(&CapturedRequest) -> Response + Send + Sync>;

/// An HTTP server on `127.0.0.1:0`, run on a thread of its own so that it
/// keeps answering whatever the test's runtime is doing (a test may block
/// on a child process). Stopped when dropped.
#[derive(Debug)]
pub(crate) struct Server {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    pub fn start(name: &str, shared: Arc<Shared>, handler: Handler) -> Server {
        let router = Router::new().fallback(move |request: Request| {
            let shared = Arc::clone(&shared);
            let handler = Arc::clone(&handler);
            async move { capture_and_answer(&shared, &handler, request).await }
        });
        Server::start_router(name, router)
    }

    /// Serves `router` as it is, for fakes that capture requests their own
    /// way (form bodies, query strings).
    pub fn start_router(name: &str, router: Router) -> Server {
        let listener = match std::net::TcpListener::bind("127.0.0.1:0") {
            Ok(listener) => listener,
            Err(error) => panic!("flynn-testkit: cannot bind 127.0.0.1:0: {error}"),
        };
        let addr = match listener.local_addr() {
            Ok(addr) => addr,
            Err(error) => panic!("flynn-testkit: cannot read the bound address: {error}"),
        };
        if let Err(error) = listener.set_nonblocking(true) {
            panic!("flynn-testkit: cannot make the listener non-blocking: {error}");
        }
        let (shutdown, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("flynn-testkit-{name}"))
            .spawn(move || serve(listener, router, stopped));
        let thread = match thread {
            Ok(thread) => thread,
            Err(error) => panic!("flynn-testkit: cannot start the server thread: {error}"),
        };
        Server {
            addr,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            // The thread may already be gone; nothing else to do then.
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            // Dropping the thread's runtime ends every connection at once.
            let _ = thread.join();
        }
    }
}

fn serve(listener: std::net::TcpListener, router: Router, stopped: oneshot::Receiver<()>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => panic!("flynn-testkit: cannot start a runtime: {error}"),
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(listener) => listener,
            Err(error) => panic!("flynn-testkit: cannot use the listener: {error}"),
        };
        tokio::select! {
            result = axum::serve(listener, router) => {
                if let Err(error) = result {
                    panic!("flynn-testkit: the server failed: {error}");
                }
            }
            _ = stopped => {}
        }
    });
}

/// A request as the fakes read it: its line, headers (names in lower
/// case) and whole body.
pub(crate) struct Received {
    pub method: String,
    pub path: String,
    /// The raw query string, without `?`.
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub bytes: Bytes,
}

impl Received {
    /// Reads a whole request (bodies up to 64 MiB).
    pub async fn read(request: Request) -> Received {
        let (parts, body) = request.into_parts();
        let headers = parts
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let bytes = axum::body::to_bytes(body, 64 * 1024 * 1024)
            .await
            .unwrap_or_default();
        Received {
            method: parts.method.as_str().to_owned(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            headers,
            bytes,
        }
    }

    /// The body as JSON: `Null` when empty.
    pub fn json(&self) -> Result<Value, serde_json::Error> {
        if self.bytes.is_empty() {
            Ok(Value::Null)
        } else {
            serde_json::from_slice(&self.bytes)
        }
    }

    /// The first value of a header (`name` in lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

async fn capture_and_answer(shared: &Shared, handler: &Handler, request: Request) -> Response {
    let received = Received::read(request).await;
    let (body, unreadable) = match received.json() {
        Ok(value) => (value, None),
        Err(error) => (Value::Null, Some(error)),
    };
    let captured = CapturedRequest {
        method: received.method,
        path: received.path,
        headers: received.headers,
        body,
    };
    shared.record(captured.clone());
    if let Some(error) = unreadable {
        shared.violation(format!(
            "{} {}: the body is not JSON ({error})",
            captured.method, captured.path
        ));
    }
    handler(&captured)
}

/// A JSON response.
pub(crate) fn json(status: u16, value: &Value) -> Response {
    respond(
        status,
        &[("content-type", "application/json")],
        Body::from(value.to_string()),
    )
}

/// A `200 text/event-stream` response sending each event as its own chunk.
pub(crate) fn event_stream(events: Vec<String>, extra: &[(&str, &str)]) -> Response {
    let chunks = futures::stream::iter(
        events
            .into_iter()
            .map(|event| Ok::<_, Infallible>(Bytes::from(event))),
    );
    let mut headers = vec![
        ("content-type", "text/event-stream; charset=utf-8"),
        ("cache-control", "no-cache"),
    ];
    headers.extend_from_slice(extra);
    respond(200, &headers, Body::from_stream(chunks))
}

/// `Reply::RawSse`: exactly these bytes.
pub(crate) fn raw_sse(body: &str) -> Response {
    respond(
        200,
        &[("content-type", "text/event-stream; charset=utf-8")],
        Body::from(body.to_owned()),
    )
}

/// `Reply::Stall`: these bytes, then an open connection and silence.
pub(crate) fn stalled_sse(body: &str) -> Response {
    let first = futures::stream::once(std::future::ready(Ok::<_, Infallible>(Bytes::from(
        body.to_owned(),
    ))));
    let chunks = futures::StreamExt::chain(first, futures::stream::pending());
    respond(
        200,
        &[("content-type", "text/event-stream; charset=utf-8")],
        Body::from_stream(chunks),
    )
}

/// `Reply::Error`: the status, headers and body as scripted; a JSON body
/// gets a JSON content type unless the script set one.
pub(crate) fn scripted_error(status: u16, headers: &[(String, String)], body: &str) -> Response {
    let mut all: Vec<(&str, &str)> = headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("content-type"))
    {
        let kind = if serde_json::from_str::<Value>(body).is_ok() {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        all.push(("content-type", kind));
    }
    respond(status, &all, Body::from(body.to_owned()))
}

pub(crate) fn respond(status: u16, headers: &[(&str, &str)], body: Body) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in headers {
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(name), Ok(value)) => {
                response.headers_mut().append(name, value);
            }
            _ => panic!("flynn-testkit: invalid scripted header {name}: {value}"),
        }
    }
    if !response.headers().contains_key(CONTENT_TYPE) {
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    }
    response
}

/// Whether `name` is a tool name every vendor accepts:
/// `^[a-zA-Z0-9_-]{1,64}$`.
pub(crate) fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The problem with a tool name at `at`, if it has one.
pub(crate) fn tool_name_problem(at: &str, name: Option<&str>) -> Option<String> {
    match name {
        Some(name) if valid_tool_name(name) => None,
        Some(name) => Some(format!(
            "{at}: '{name}' does not match '^[a-zA-Z0-9_-]{{1,64}}$'"
        )),
        None => Some(format!("{at}: Field required")),
    }
}

/// `text` cut into the pieces a model would stream: word by word, keeping
/// the spaces. Never empty.
pub(crate) fn pieces(text: &str) -> Vec<String> {
    let pieces: Vec<String> = text.split_inclusive(' ').map(str::to_owned).collect();
    if pieces.is_empty() {
        vec![String::new()]
    } else {
        pieces
    }
}

/// JSON text cut into three roughly equal pieces on character boundaries,
/// the way tool arguments stream.
pub(crate) fn json_pieces(json: &str) -> Vec<String> {
    let chars: Vec<char> = json.chars().collect();
    let size = chars.len().div_ceil(3).max(1);
    chars
        .chunks(size)
        .map(|chunk| chunk.iter().collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn multipart_bodies_are_read_strictly() {
        let body = Bytes::from_static(
            b"--XyZ\r\nContent-Disposition: form-data; name=\"payload_json\"\r\n\
Content-Type: application/json\r\n\r\n{\"a\":1}\r\n--XyZ\r\n\
Content-Disposition: form-data; name=\"files[0]\"; filename=\"a.txt\"\r\n\
\r\nline\r\n--XyZ--\r\n",
        );
        let parts = form_parts("multipart/form-data; boundary=\"XyZ\"", body.clone())
            .await
            .unwrap();
        assert_eq!(
            parts,
            vec![
                FormPart {
                    name: "payload_json".into(),
                    file_name: None,
                    content_type: Some("application/json".into()),
                    data: Bytes::from_static(b"{\"a\":1}"),
                },
                FormPart {
                    name: "files[0]".into(),
                    file_name: Some("a.txt".into()),
                    content_type: None,
                    data: Bytes::from_static(b"line"),
                },
            ]
        );
        let cut = body.slice(..body.len() - 12);
        assert!(
            form_parts("multipart/form-data; boundary=XyZ", cut)
                .await
                .is_err()
        );
        assert!(form_parts("multipart/form-data", body).await.is_err());
        let unnamed =
            Bytes::from_static(b"--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--");
        assert!(
            form_parts("multipart/form-data; boundary=b", unnamed)
                .await
                .is_err()
        );
    }

    #[test]
    fn tool_names_follow_the_documented_pattern() {
        assert!(valid_tool_name("shell_exec"));
        assert!(valid_tool_name("get-weather-2"));
        assert!(!valid_tool_name("shell.exec"));
        assert!(!valid_tool_name(""));
        assert!(!valid_tool_name(&"a".repeat(65)));
    }

    #[test]
    fn text_and_json_are_cut_into_pieces_that_join_back() {
        assert_eq!(
            pieces("Hello there, friend"),
            vec!["Hello ", "there, ", "friend"]
        );
        assert_eq!(pieces(""), vec![""]);
        let json = r#"{"command":"ls -la"}"#;
        let cut = json_pieces(json);
        assert_eq!(cut.len(), 3);
        assert_eq!(cut.concat(), json);
    }
}

/// One part of a `multipart/form-data` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormPart {
    pub name: String,
    /// Set for a file part.
    pub file_name: Option<String>,
    pub content_type: Option<String>,
    pub data: Bytes,
}

impl FormPart {
    /// The part as text, when it is UTF-8.
    pub fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.data).ok()
    }
}

/// The parts of a `multipart/form-data` body, or why it is not one.
#[cfg_attr(not(feature = "channels"), allow(dead_code))]
pub(crate) async fn form_parts(content_type: &str, body: Bytes) -> Result<Vec<FormPart>, String> {
    let boundary = multer::parse_boundary(content_type)
        .map_err(|e| format!("not multipart/form-data with a boundary ({content_type}): {e}"))?;
    let stream = futures::stream::once(async move { Ok::<Bytes, std::io::Error>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    let mut parts = Vec::new();
    while let Some(field) = form
        .next_field()
        .await
        .map_err(|e| format!("a malformed multipart body: {e}"))?
    {
        let name = field
            .name()
            .ok_or("a multipart part without a name")?
            .to_owned();
        let file_name = field.file_name().map(str::to_owned);
        let content_type = field.content_type().map(ToString::to_string);
        let data = field
            .bytes()
            .await
            .map_err(|e| format!("part {name}: {e}"))?;
        parts.push(FormPart {
            name,
            file_name,
            content_type,
            data,
        });
    }
    Ok(parts)
}
