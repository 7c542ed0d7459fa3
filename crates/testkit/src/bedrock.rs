//! A strict fake of AWS Bedrock's Converse API:
//! `POST /model/{modelId}/converse` (JSON) and
//! `POST /model/{modelId}/converse-stream` (AWS event-stream frames,
//! `application/vnd.amazon.eventstream`).
//!
//! Requests must carry a SigV4 `Authorization` header for service `bedrock`
//! (or, with [`FakeBedrock::start_with_api_key`], a Bedrock API key as a
//! bearer token). The signature itself is not checked. Errors use the AWS
//! JSON protocol: the status, an `x-amzn-ErrorType` header naming the
//! exception, and a body `{"message": ...}`. Event payloads follow the API
//! reference's `ConverseStreamOutput` (see `fixtures/bedrock/`).

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::http::header::{CONTENT_TYPE, HeaderName, HeaderValue};
use axum::response::Response;
use serde_json::{Value, json};

use crate::server::{
    self, CapturedRequest, INPUT_TOKENS, OUTPUT_TOKENS, Reply, Server, Shared, valid_tool_name,
};

/// The content type of a ConverseStream response.
pub const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

/// One scripted answer.
#[derive(Debug, Clone)]
enum Script {
    Reply(Reply),
    /// Raw ConverseStream events, each `{"<eventType>": payload}`.
    Events(Vec<Value>),
}

/// Who the fake lets in.
#[derive(Debug, Clone)]
enum Auth {
    /// Any well-formed SigV4 signature.
    AnySigV4,
    /// SigV4 with this access key id; another id is answered 403
    /// `UnrecognizedClientException`, as AWS does.
    AccessKey(String),
    /// `Authorization: Bearer <key>`.
    ApiKey(String),
}

#[derive(Debug)]
struct Inner {
    shared: Arc<Shared>,
    auth: Auth,
    script: Mutex<VecDeque<Script>>,
}

/// A fake Bedrock Runtime endpoint on `127.0.0.1`.
#[derive(Debug)]
pub struct FakeBedrock {
    inner: Arc<Inner>,
    server: Server,
}

impl FakeBedrock {
    /// Starts a fake that accepts any well-formed SigV4 signature.
    pub async fn start() -> Self {
        Self::start_inner(Auth::AnySigV4)
    }

    /// Starts a fake that knows one access key id: requests signed with
    /// another are answered 403 `UnrecognizedClientException` ("The
    /// security token included in the request is invalid."), which is not a
    /// violation.
    pub async fn start_with_access_key(access_key_id: impl Into<String>) -> Self {
        Self::start_inner(Auth::AccessKey(access_key_id.into()))
    }

    /// Starts a fake that takes a Bedrock API key (`Authorization: Bearer
    /// <key>`) instead of a signature.
    pub async fn start_with_api_key(key: impl Into<String>) -> Self {
        Self::start_inner(Auth::ApiKey(key.into()))
    }

    fn start_inner(auth: Auth) -> Self {
        let shared = Arc::new(Shared::default());
        let inner = Arc::new(Inner {
            shared: Arc::clone(&shared),
            auth,
            script: Mutex::new(VecDeque::new()),
        });
        let for_handler = Arc::clone(&inner);
        let server = Server::start(
            "bedrock",
            shared,
            Arc::new(move |request| answer(&for_handler, request)),
        );
        FakeBedrock { inner, server }
    }

    /// The endpoint URL to configure (`base_url`), without a path.
    pub fn endpoint_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The address the fake listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Adds a reply to the script; each request takes the next one.
    /// `Reply::RawSse` is sent as the raw bytes of an event-stream body.
    pub fn push(&self, reply: Reply) {
        self.script().push_back(Script::Reply(reply));
    }

    /// Adds a ConverseStream answer made of exactly these events, each an
    /// object with one key: the event type (`messageStart`,
    /// `contentBlockDelta`...) or, for names ending in `Exception`
    /// (`modelStreamErrorException`...), an exception message.
    pub fn push_events(&self, events: Vec<Value>) {
        self.script().push_back(Script::Events(events));
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<CapturedRequest> {
        self.inner.shared.requests()
    }

    /// Every protocol violation seen; empty when the client behaved.
    pub fn violations(&self) -> Vec<String> {
        self.inner.shared.violations()
    }

    fn script(&self) -> std::sync::MutexGuard<'_, VecDeque<Script>> {
        self.inner
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The reply AWS sends for a failed call: `status`, an
/// `x-amzn-ErrorType: <exception>` header and `{"message": message}`.
pub fn bedrock_error(status: u16, exception: &str, message: &str) -> Reply {
    Reply::Error {
        status,
        headers: vec![
            (
                "x-amzn-errortype".to_owned(),
                format!("{exception}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
            ),
            ("content-type".to_owned(), "application/json".to_owned()),
        ],
        body: json!({ "message": message }).to_string(),
    }
}

fn error(status: u16, exception: &str, message: &str) -> Response {
    match bedrock_error(status, exception, message) {
        Reply::Error {
            status,
            headers,
            body,
        } => server::scripted_error(status, &headers, &body),
        _ => server::json(500, &json!({ "message": message })),
    }
}

fn answer(inner: &Inner, request: &CapturedRequest) -> Response {
    let shared = &inner.shared;
    let Some((_model, stream)) = route(&request.path) else {
        shared.violation(format!(
            "unexpected request {} {} (only POST /model/{{modelId}}/converse and /converse-stream are served)",
            request.method, request.path
        ));
        return error(404, "UnknownOperationException", "Unknown operation");
    };
    if request.method != "POST" {
        shared.violation(format!(
            "{} {}: Converse must be called with POST",
            request.method, request.path
        ));
        return error(405, "UnknownOperationException", "Unknown operation");
    }
    if let Some(refusal) = authorize(inner, request) {
        return refusal;
    }
    let problems = check(&request.body);
    if let Some(first) = problems.first() {
        for problem in &problems {
            shared.violation(problem.clone());
        }
        return error(400, "ValidationException", first);
    }
    let next = inner
        .script
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .pop_front();
    let Some(script) = next else {
        let message = "flynn-testkit: the fake Bedrock server has no scripted reply left for this request (push a Reply first)";
        shared.violation(message.to_owned());
        return error(500, "InternalServerException", message);
    };
    let request_id = format!("req-{:04}", shared.next_id("request"));
    let blocks = match script {
        Script::Events(events) if stream => {
            return event_stream(events.iter().map(frame_for).collect(), &request_id);
        }
        Script::Events(_) => {
            let message = format!(
                "flynn-testkit: raw events were scripted but {} is not a stream call",
                request.path
            );
            shared.violation(message.clone());
            return error(500, "InternalServerException", &message);
        }
        Script::Reply(Reply::Error {
            status,
            headers,
            body,
        }) => return server::scripted_error(status, &headers, &body),
        Script::Reply(Reply::RawSse(body)) => {
            return binary(vec![body.into_bytes()], &request_id);
        }
        Script::Reply(Reply::Stall(body)) => {
            let message = format!(
                "flynn-testkit: FakeBedrock does not script Reply::Stall (got {} bytes); use FakeOpenAi or FakeAnthropic",
                body.len()
            );
            shared.violation(message.clone());
            return error(500, "InternalServerException", &message);
        }
        Script::Reply(Reply::Text(text)) => vec![Block::Text(text)],
        Script::Reply(Reply::ToolCalls(calls)) => calls
            .into_iter()
            .map(|(name, input)| Block::ToolUse {
                id: format!("tooluse_{:02}", shared.next_id("tool_use")),
                name,
                input,
            })
            .collect(),
        Script::Reply(Reply::Thinking {
            thinking,
            signature,
            text,
        }) => vec![
            Block::Reasoning {
                text: thinking,
                signature,
            },
            Block::Text(text),
        ],
    };
    let stop_reason = if blocks.iter().any(|b| matches!(b, Block::ToolUse { .. })) {
        "tool_use"
    } else {
        "end_turn"
    };
    let usage = json!({
        "inputTokens": INPUT_TOKENS,
        "outputTokens": OUTPUT_TOKENS,
        "totalTokens": INPUT_TOKENS + OUTPUT_TOKENS
    });
    if !stream {
        let mut response = server::json(
            200,
            &json!({
                "output": {"message": {
                    "role": "assistant",
                    "content": blocks.iter().map(Block::whole).collect::<Vec<_>>()
                }},
                "stopReason": stop_reason,
                "usage": usage,
                "metrics": {"latencyMs": 42}
            }),
        );
        insert_header(&mut response, "x-amzn-requestid", &request_id);
        return response;
    }
    let mut events = vec![json!({"messageStart": {"role": "assistant"}})];
    for (index, block) in blocks.iter().enumerate() {
        if let Some(start) = block.start() {
            events.push(json!({"contentBlockStart": {"contentBlockIndex": index, "start": start}}));
        }
        for delta in block.deltas() {
            events.push(json!({"contentBlockDelta": {"contentBlockIndex": index, "delta": delta}}));
        }
        events.push(json!({"contentBlockStop": {"contentBlockIndex": index}}));
    }
    events.push(json!({"messageStop": {"stopReason": stop_reason}}));
    events.push(json!({"metadata": {"usage": usage, "metrics": {"latencyMs": 42}}}));
    event_stream(events.iter().map(frame_for).collect(), &request_id)
}

/// `(model id, is the stream call)` for `/model/{modelId}/converse[-stream]`,
/// with the model id percent-decoded.
fn route(path: &str) -> Option<(String, bool)> {
    let rest = path.strip_prefix("/model/")?;
    let (model, operation) = rest.rsplit_once('/')?;
    let stream = match operation {
        "converse" => false,
        "converse-stream" => true,
        _ => return None,
    };
    let model = percent_decode(model)?;
    (!model.is_empty() && !model.contains('/')).then_some((model, stream))
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Checks the `Authorization` header: the refusal to send, if any. A
/// missing or malformed header is a violation (answered 403); a header
/// naming an unknown key is a plain 403.
fn authorize(inner: &Inner, request: &CapturedRequest) -> Option<Response> {
    let header = request.header("authorization").unwrap_or_default();
    let refuse = |message: String| {
        inner.shared.violation(message.clone());
        Some(error(403, "MissingAuthenticationTokenException", &message))
    };
    if let Auth::ApiKey(key) = &inner.auth {
        return match header.strip_prefix("Bearer ") {
            Some(given) if given == key => None,
            Some(_) => Some(error(
                403,
                "UnrecognizedClientException",
                "Invalid API Key format: Must start with pre-defined prefix",
            )),
            None => refuse(format!(
                "expected 'Authorization: Bearer <Bedrock API key>', got {header:?}"
            )),
        };
    }
    let signature = match SigV4::parse(header) {
        Ok(signature) => signature,
        Err(problem) => return refuse(format!("Authorization: {problem} (got {header:?})")),
    };
    let date = request.header("x-amz-date").unwrap_or_default();
    if date.len() != 16 || !date.starts_with(&signature.date) || !date.ends_with('Z') {
        return refuse(format!(
            "x-amz-date {date:?} is missing or does not match the credential date {}",
            signature.date
        ));
    }
    if let Auth::AccessKey(known) = &inner.auth
        && signature.access_key_id != *known
    {
        return Some(error(
            403,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        ));
    }
    None
}

/// The parts of a SigV4 `Authorization` header the fake checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigV4 {
    pub access_key_id: String,
    /// `yyyymmdd`.
    pub date: String,
    pub region: String,
    pub signed_headers: Vec<String>,
}

impl SigV4 {
    /// Reads `AWS4-HMAC-SHA256 Credential=<key>/<date>/<region>/bedrock/aws4_request,
    /// SignedHeaders=<a;b;c>, Signature=<64 hex digits>`.
    pub fn parse(header: &str) -> Result<SigV4, String> {
        let rest = header
            .strip_prefix("AWS4-HMAC-SHA256 ")
            .ok_or("not an AWS4-HMAC-SHA256 signature")?;
        let mut credential = None;
        let mut signed = None;
        let mut signature = None;
        for part in rest.split(',').map(str::trim) {
            if let Some(value) = part.strip_prefix("Credential=") {
                credential = Some(value);
            } else if let Some(value) = part.strip_prefix("SignedHeaders=") {
                signed = Some(value);
            } else if let Some(value) = part.strip_prefix("Signature=") {
                signature = Some(value);
            }
        }
        let credential = credential.ok_or("no Credential=")?;
        let scope: Vec<&str> = credential.split('/').collect();
        let [access_key_id, date, region, service, terminator] = scope[..] else {
            return Err(format!(
                "Credential={credential} is not <key>/<date>/<region>/<service>/aws4_request"
            ));
        };
        if access_key_id.is_empty()
            || date.len() != 8
            || !date.bytes().all(|b| b.is_ascii_digit())
            || region.is_empty()
            || terminator != "aws4_request"
        {
            return Err(format!(
                "Credential={credential} is not <key>/<yyyymmdd>/<region>/<service>/aws4_request"
            ));
        }
        if service != "bedrock" {
            return Err(format!(
                "the credential scope names service '{service}', not 'bedrock'"
            ));
        }
        let signed_headers: Vec<String> = signed
            .ok_or("no SignedHeaders=")?
            .split(';')
            .map(str::to_owned)
            .collect();
        for needed in ["host", "x-amz-date"] {
            if !signed_headers.iter().any(|h| h == needed) {
                return Err(format!("SignedHeaders does not include {needed}"));
            }
        }
        let signature = signature.ok_or("no Signature=")?;
        if signature.len() != 64 || !signature.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("Signature= is not 64 hex digits".to_owned());
        }
        Ok(SigV4 {
            access_key_id: access_key_id.to_owned(),
            date: date.to_owned(),
            region: region.to_owned(),
            signed_headers,
        })
    }
}

enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    Reasoning {
        text: String,
        signature: String,
    },
}

impl Block {
    /// The block as a Converse (non-streamed) response holds it.
    fn whole(&self) -> Value {
        match self {
            Block::Text(text) => json!({"text": text}),
            Block::ToolUse { id, name, input } => {
                json!({"toolUse": {"toolUseId": id, "name": name, "input": input}})
            }
            Block::Reasoning { text, signature } => json!({
                "reasoningContent": {"reasoningText": {"text": text, "signature": signature}}
            }),
        }
    }

    /// The `start` of its `contentBlockStart`; only tool calls have one.
    fn start(&self) -> Option<Value> {
        match self {
            Block::ToolUse { id, name, .. } => {
                Some(json!({"toolUse": {"toolUseId": id, "name": name}}))
            }
            _ => None,
        }
    }

    /// The `delta`s of its `contentBlockDelta` events.
    fn deltas(&self) -> Vec<Value> {
        match self {
            Block::Text(text) => server::pieces(text)
                .into_iter()
                .map(|piece| json!({"text": piece}))
                .collect(),
            Block::ToolUse { input, .. } => server::json_pieces(&input.to_string())
                .into_iter()
                .map(|piece| json!({"toolUse": {"input": piece}}))
                .collect(),
            Block::Reasoning { text, signature } => server::pieces(text)
                .into_iter()
                .map(|piece| json!({"reasoningContent": {"text": piece}}))
                .chain(std::iter::once(
                    json!({"reasoningContent": {"signature": signature}}),
                ))
                .collect(),
        }
    }
}

// ---------------------------------------------------------------------------
// Event-stream frames

/// One message of an AWS event stream: string headers and a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub headers: Vec<(String, String)>,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// The header value type "string" of the event-stream encoding.
const STRING_HEADER: u8 = 7;

/// Encodes one message: the prelude (total length, headers length, CRC32 of
/// both), the headers (name length, name, type 7, value length, value), the
/// payload, and the CRC32 of everything before it.
pub fn encode_frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut encoded_headers = Vec::new();
    for (name, value) in headers {
        let name_len = u8::try_from(name.len())
            .unwrap_or_else(|_| panic!("flynn-testkit: header name {name:?} is too long"));
        let value_len = u16::try_from(value.len())
            .unwrap_or_else(|_| panic!("flynn-testkit: header {name} is too long"));
        encoded_headers.push(name_len);
        encoded_headers.extend_from_slice(name.as_bytes());
        encoded_headers.push(STRING_HEADER);
        encoded_headers.extend_from_slice(&value_len.to_be_bytes());
        encoded_headers.extend_from_slice(value.as_bytes());
    }
    let total = 12 + encoded_headers.len() + payload.len() + 4;
    let length = |n: usize| {
        u32::try_from(n)
            .unwrap_or_else(|_| panic!("flynn-testkit: event of {n} bytes is too long"))
            .to_be_bytes()
    };
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&length(total));
    out.extend_from_slice(&length(encoded_headers.len()));
    let prelude_crc = crc32fast::hash(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&encoded_headers);
    out.extend_from_slice(payload);
    let message_crc = crc32fast::hash(&out);
    out.extend_from_slice(&message_crc.to_be_bytes());
    out
}

/// Decodes a whole event-stream body, checking both CRCs of every message.
/// Only string headers are read (the only type Bedrock sends).
pub fn decode_frames(mut bytes: &[u8]) -> Result<Vec<Frame>, String> {
    let word = |b: &[u8], at: usize| -> Result<usize, String> {
        let raw: [u8; 4] = b
            .get(at..at + 4)
            .and_then(|s| s.try_into().ok())
            .ok_or("truncated prelude")?;
        usize::try_from(u32::from_be_bytes(raw)).map_err(|e| e.to_string())
    };
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        let total = word(bytes, 0)?;
        let headers_len = word(bytes, 4)?;
        if total < 16 + headers_len || bytes.len() < total {
            return Err(format!(
                "message of {total} bytes with {headers_len} bytes of headers does not fit the {} bytes left",
                bytes.len()
            ));
        }
        if word(bytes, 8)? != crc32fast::hash(&bytes[..8]) as usize {
            return Err("prelude CRC mismatch".to_owned());
        }
        if word(bytes, total - 4)? != crc32fast::hash(&bytes[..total - 4]) as usize {
            return Err("message CRC mismatch".to_owned());
        }
        let mut headers = Vec::new();
        let mut at = 12;
        let end = 12 + headers_len;
        while at < end {
            let name_len = usize::from(bytes[at]);
            let name = String::from_utf8_lossy(&bytes[at + 1..at + 1 + name_len]).into_owned();
            at += 1 + name_len;
            if bytes[at] != STRING_HEADER {
                return Err(format!("header {name} is not a string"));
            }
            let value_len = usize::from(u16::from_be_bytes([bytes[at + 1], bytes[at + 2]]));
            let value = String::from_utf8_lossy(&bytes[at + 3..at + 3 + value_len]).into_owned();
            at += 3 + value_len;
            headers.push((name, value));
        }
        frames.push(Frame {
            headers,
            payload: bytes[end..total - 4].to_vec(),
        });
        bytes = &bytes[total..];
    }
    Ok(frames)
}

/// The frame for `{"<type>": payload}`: an event, or an exception when the
/// type ends in `Exception`. Payloads get the `p` padding field the service
/// adds to hide their length.
fn frame_for(event: &Value) -> Vec<u8> {
    let Some((kind, payload)) = event.as_object().and_then(|map| map.iter().next()) else {
        panic!("flynn-testkit: a scripted event must be {{\"<eventType>\": payload}}, got {event}");
    };
    let mut payload = payload.clone();
    if let Some(map) = payload.as_object_mut()
        && !kind.ends_with("Exception")
    {
        map.insert(
            "p".to_owned(),
            Value::String("abcdefghijklmnopqrstu".to_owned()),
        );
    }
    let body = payload.to_string();
    if kind.ends_with("Exception") {
        encode_frame(
            &[
                (":exception-type", kind),
                (":content-type", "application/json"),
                (":message-type", "exception"),
            ],
            body.as_bytes(),
        )
    } else {
        encode_frame(
            &[
                (":event-type", kind),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            body.as_bytes(),
        )
    }
}

/// A `200` ConverseStream response. Each frame is split in two chunks
/// inside its prelude, as a network may cut it.
fn event_stream(frames: Vec<Vec<u8>>, request_id: &str) -> Response {
    let mut chunks = Vec::new();
    for frame in frames {
        let (head, tail) = frame.split_at(frame.len().min(5));
        chunks.push(head.to_vec());
        chunks.push(tail.to_vec());
    }
    binary(chunks, request_id)
}

fn binary(chunks: Vec<Vec<u8>>, request_id: &str) -> Response {
    let body = futures::stream::iter(
        chunks
            .into_iter()
            .map(|chunk| Ok::<_, Infallible>(Bytes::from(chunk))),
    );
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = StatusCode::OK;
    insert_header(&mut response, CONTENT_TYPE.as_str(), EVENT_STREAM);
    insert_header(&mut response, "x-amzn-requestid", request_id);
    response
}

fn insert_header(response: &mut Response, name: &str, value: &str) {
    if let (Ok(name), Ok(value)) = (
        HeaderName::from_bytes(name.as_bytes()),
        HeaderValue::from_str(value),
    ) {
        response.headers_mut().insert(name, value);
    }
}

// ---------------------------------------------------------------------------
// Request checks

/// Every way `body` breaks the documented Converse request format.
pub(crate) fn check(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(object) = body.as_object() else {
        return vec!["the request body is not a JSON object".to_owned()];
    };
    for key in object.keys() {
        if !matches!(
            key.as_str(),
            "messages"
                | "system"
                | "inferenceConfig"
                | "toolConfig"
                | "guardrailConfig"
                | "additionalModelRequestFields"
                | "additionalModelResponseFieldPaths"
                | "promptVariables"
                | "requestMetadata"
                | "performanceConfig"
        ) {
            problems.push(format!("{key}: not a Converse request field"));
        }
    }
    if let Some(system) = object.get("system") {
        match system.as_array() {
            Some(blocks) => {
                for (i, block) in blocks.iter().enumerate() {
                    match block.get("text").and_then(Value::as_str) {
                        Some(text) if !text.trim().is_empty() => {}
                        Some(_) => problems.push(format!("system.{i}.text: is blank")),
                        None if block.get("cachePoint").is_some() => {}
                        None => problems.push(format!("system.{i}: expected {{text}}")),
                    }
                }
            }
            None => problems.push("system: must be a list of blocks".to_owned()),
        }
    }
    if let Some(config) = object.get("inferenceConfig") {
        if let Some(max) = config.get("maxTokens")
            && max.as_u64().is_none_or(|n| n < 1)
        {
            problems.push(format!(
                "inferenceConfig.maxTokens: {max} is not a positive integer"
            ));
        }
        if let Some(temperature) = config.get("temperature")
            && !temperature
                .as_f64()
                .is_some_and(|t| (0.0..=1.0).contains(&t))
        {
            problems.push(format!(
                "inferenceConfig.temperature: {temperature} is not between 0 and 1"
            ));
        }
    }
    let has_tool_config = match object.get("toolConfig") {
        None => false,
        Some(config) => {
            match config.get("tools").and_then(Value::as_array) {
                Some(tools) if !tools.is_empty() => {
                    for (i, tool) in tools.iter().enumerate() {
                        let at = format!("toolConfig.tools.{i}.toolSpec");
                        let spec = &tool["toolSpec"];
                        match spec["name"].as_str() {
                            Some(name) if valid_tool_name(name) => {}
                            Some(name) => problems.push(format!(
                                "{at}.name: '{name}' does not match '^[a-zA-Z0-9_-]{{1,64}}$'"
                            )),
                            None => problems.push(format!("{at}.name: Field required")),
                        }
                        if matches!(spec.get("description"), Some(Value::String(d)) if d.is_empty())
                        {
                            problems.push(format!("{at}.description: must not be empty"));
                        }
                        if !spec["inputSchema"]["json"].is_object() {
                            problems.push(format!("{at}.inputSchema.json: Field required"));
                        }
                    }
                }
                _ => problems.push("toolConfig.tools: at least one tool is required".to_owned()),
            }
            true
        }
    };
    match object.get("messages") {
        Some(Value::Array(messages)) if !messages.is_empty() => {
            check_messages(messages, has_tool_config, &mut problems);
        }
        Some(Value::Array(_)) => {
            problems.push("messages: at least one message is required".to_owned())
        }
        _ => problems.push("messages: Field required".to_owned()),
    }
    problems
}

fn check_messages(messages: &[Value], has_tool_config: bool, problems: &mut Vec<String>) {
    if messages[0]["role"] != "user" {
        problems.push("A conversation must start with a user message. Try again with a conversation that starts with a user message.".to_owned());
    }
    let mut known: HashSet<String> = HashSet::new();
    let mut pending: Vec<String> = Vec::new();
    let mut uses_tools = false;
    let mut previous_role = "";
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or("");
        if !matches!(role, "user" | "assistant") {
            problems.push(format!(
                "messages.{i}.role: must be \"user\" or \"assistant\", not {role:?}"
            ));
            continue;
        }
        if role == previous_role {
            problems.push(
                "A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.".to_owned(),
            );
        }
        previous_role = role;
        let Some(blocks) = message["content"].as_array().filter(|b| !b.is_empty()) else {
            problems.push(format!(
                "messages.{i}.content: at least one block is required"
            ));
            continue;
        };
        let mut answered: Vec<String> = Vec::new();
        let mut calls: Vec<String> = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let at = format!("messages.{i}.content.{j}");
            let Some(map) = block.as_object().filter(|m| m.len() == 1) else {
                problems.push(format!(
                    "{at}: a content block must have exactly one member"
                ));
                continue;
            };
            let Some((kind, value)) = map.iter().next() else {
                continue;
            };
            match (role, kind.as_str()) {
                (_, "text") => match value.as_str() {
                    Some(text) if !text.trim().is_empty() => {}
                    _ => problems.push(format!(
                        "The text field in the ContentBlock object at {at} is blank. Add text to the text field, and try again."
                    )),
                },
                (_, "cachePoint") => {}
                ("user", "image") => {
                    if !matches!(value["format"].as_str(), Some("png" | "jpeg" | "gif" | "webp")) {
                        problems.push(format!("{at}.image.format: must be png, jpeg, gif or webp"));
                    }
                    let source = &value["source"];
                    let bytes = source["bytes"].as_str().is_some_and(|b| !b.is_empty());
                    let s3 = source["s3Location"]["uri"]
                        .as_str()
                        .is_some_and(|uri| uri.starts_with("s3://"));
                    if bytes == s3 {
                        problems.push(format!(
                            "{at}.image.source: expected exactly one of bytes (base64) or s3Location {{uri}}"
                        ));
                    }
                }
                ("assistant", "toolUse") => {
                    uses_tools = true;
                    match value["toolUseId"].as_str().filter(|id| !id.is_empty()) {
                        Some(id) => {
                            known.insert(id.to_owned());
                            calls.push(id.to_owned());
                        }
                        None => problems.push(format!("{at}.toolUse.toolUseId: Field required")),
                    }
                    match value["name"].as_str() {
                        Some(name) if valid_tool_name(name) => {}
                        other => problems.push(format!(
                            "{at}.toolUse.name: {other:?} does not match '^[a-zA-Z0-9_-]{{1,64}}$'"
                        )),
                    }
                    if !value["input"].is_object() {
                        problems.push(format!("{at}.toolUse.input: must be an object"));
                    }
                }
                ("user", "toolResult") => {
                    uses_tools = true;
                    let id = value["toolUseId"].as_str().unwrap_or("");
                    if !known.contains(id) {
                        problems.push(format!(
                            "{at}.toolResult: the toolUseId {id:?} does not match any toolUse block"
                        ));
                    } else if !pending.iter().any(|p| p == id) {
                        problems.push(format!(
                            "{at}.toolResult: {id} does not answer the previous assistant message"
                        ));
                    }
                    match value["content"].as_array() {
                        Some(content) if !content.is_empty() => {
                            for (k, item) in content.iter().enumerate() {
                                let ok = match item.as_object() {
                                    Some(item) if item.len() == 1 => match item.iter().next() {
                                        Some((key, v)) if key == "text" => {
                                            v.as_str().is_some_and(|t| !t.trim().is_empty())
                                        }
                                        Some((key, _)) => {
                                            matches!(key.as_str(), "json" | "image" | "document")
                                        }
                                        None => false,
                                    },
                                    _ => false,
                                };
                                if !ok {
                                    problems.push(format!(
                                        "{at}.toolResult.content.{k}: expected one non-blank {{text}}, {{json}}, {{image}} or {{document}}"
                                    ));
                                }
                            }
                        }
                        _ => problems.push(format!(
                            "{at}.toolResult.content: at least one block is required"
                        )),
                    }
                    if !matches!(
                        value.get("status").and_then(Value::as_str),
                        None | Some("success" | "error")
                    ) {
                        problems.push(format!(
                            "{at}.toolResult.status: must be \"success\" or \"error\""
                        ));
                    }
                    answered.push(id.to_owned());
                }
                ("assistant", "reasoningContent") => {
                    let text = &value["reasoningText"];
                    let redacted = value.get("redactedContent");
                    match (text.is_object(), redacted) {
                        (true, None) => {
                            if !text["text"].is_string() {
                                problems.push(format!(
                                    "{at}.reasoningContent.reasoningText.text: Field required"
                                ));
                            }
                            if !matches!(text.get("signature"), None | Some(Value::String(_))) {
                                problems.push(format!(
                                    "{at}.reasoningContent.reasoningText.signature: must be a string"
                                ));
                            }
                        }
                        (false, Some(Value::String(_))) => {}
                        _ => problems.push(format!(
                            "{at}.reasoningContent: expected exactly one of reasoningText {{text, signature}} or redactedContent (base64)"
                        )),
                    }
                }
                _ => problems.push(format!(
                    "{at}: a {role} message cannot hold a {kind} block"
                )),
            }
        }
        if !pending.is_empty() {
            let missing: Vec<&String> =
                pending.iter().filter(|id| !answered.contains(id)).collect();
            if !missing.is_empty() {
                problems.push(format!(
                    "messages.{i}: Expected toolResult blocks for the following Ids: {missing:?}"
                ));
            }
        }
        pending = calls;
    }
    if uses_tools && !has_tool_config {
        problems.push(
            "The toolConfig field must be defined when using toolUse and toolResult content blocks."
                .to_owned(),
        );
    }
    if !pending.is_empty() {
        problems.push(format!(
            "the conversation ends with toolUse ids {pending:?} that have no toolResult"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_match_the_reference_vector_and_decode_back() {
        // aws-c-event-stream's test vector "empty_message".
        assert_eq!(
            encode_frame(&[], b""),
            [
                0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x05, 0xc2, 0x48, 0xeb, 0x7d, 0x98,
                0xc8, 0xff
            ]
        );
        let mut body = encode_frame(
            &[(":event-type", "messageStart")],
            br#"{"role":"assistant"}"#,
        );
        body.extend(encode_frame(&[], b""));
        assert_eq!(
            decode_frames(&body),
            Ok(vec![
                Frame {
                    headers: vec![(":event-type".into(), "messageStart".into())],
                    payload: br#"{"role":"assistant"}"#.to_vec(),
                },
                Frame {
                    headers: Vec::new(),
                    payload: Vec::new(),
                },
            ])
        );
        let last = body.len() - 1;
        body[last] ^= 1;
        assert_eq!(decode_frames(&body), Err("message CRC mismatch".to_owned()));
    }

    #[test]
    fn routes_decode_the_model_id() {
        assert_eq!(
            route("/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream"),
            Some(("anthropic.claude-3-haiku-20240307-v1:0".into(), true))
        );
        assert_eq!(
            route("/model/amazon.nova-lite-v1:0/converse"),
            Some(("amazon.nova-lite-v1:0".into(), false))
        );
        assert_eq!(route("/model//converse"), None);
        assert_eq!(route("/model/m/invoke"), None);
        assert_eq!(route("/v1/messages"), None);
    }

    #[test]
    fn sigv4_headers_are_read_and_checked() {
        let header = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20240101/us-east-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7";
        assert_eq!(
            SigV4::parse(header),
            Ok(SigV4 {
                access_key_id: "AKIDEXAMPLE".into(),
                date: "20240101".into(),
                region: "us-east-1".into(),
                signed_headers: vec!["content-type".into(), "host".into(), "x-amz-date".into()],
            })
        );
        assert_eq!(
            SigV4::parse(&header.replace("/bedrock/", "/s3/")),
            Err("the credential scope names service 's3', not 'bedrock'".into())
        );
        assert_eq!(
            SigV4::parse("Bearer abc"),
            Err("not an AWS4-HMAC-SHA256 signature".into())
        );
        assert_eq!(
            SigV4::parse(&header.replace(";x-amz-date", "")),
            Err("SignedHeaders does not include x-amz-date".into())
        );
    }

    #[test]
    fn a_well_formed_tool_conversation_passes() {
        let body = json!({
            "system": [{"text": "Be brief."}],
            "inferenceConfig": {"maxTokens": 512, "temperature": 0.5},
            "toolConfig": {"tools": [{"toolSpec": {"name": "shell_exec", "inputSchema": {"json": {"type": "object"}}}}]},
            "messages": [
                {"role": "user", "content": [{"text": "ls"}, {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}}]},
                {"role": "assistant", "content": [
                    {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "sig"}}},
                    {"toolUse": {"toolUseId": "tooluse_01", "name": "shell_exec", "input": {}}}
                ]},
                {"role": "user", "content": [
                    {"toolResult": {"toolUseId": "tooluse_01", "content": [{"text": "a.txt"}], "status": "success"}}
                ]}
            ]
        });
        assert_eq!(check(&body), Vec::<String>::new());
    }

    #[test]
    fn protocol_breaks_are_named() {
        let body = json!({
            "modelId": "m",
            "inferenceConfig": {"maxTokens": 0},
            "messages": [
                {"role": "assistant", "content": [{"text": " "}]},
                {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_09", "content": []}}]},
                {"role": "user", "content": [{"text": "again", "image": {}}]}
            ]
        });
        assert_eq!(
            check(&body),
            vec![
                "modelId: not a Converse request field",
                "inferenceConfig.maxTokens: 0 is not a positive integer",
                "A conversation must start with a user message. Try again with a conversation that starts with a user message.",
                "The text field in the ContentBlock object at messages.0.content.0 is blank. Add text to the text field, and try again.",
                "messages.1.content.0.toolResult: the toolUseId \"tooluse_09\" does not match any toolUse block",
                "messages.1.content.0.toolResult.content: at least one block is required",
                "A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.",
                "messages.2.content.0: a content block must have exactly one member",
                "The toolConfig field must be defined when using toolUse and toolResult content blocks.",
            ]
        );
    }
}
