//! A strict fake of OpenAI's speech-to-text endpoint,
//! `POST /v1/audio/transcriptions` (OpenAI, Groq, whisper.cpp's and
//! faster-whisper's servers speak it): `multipart/form-data` with the
//! audio in `file` (a file name whose extension names a format the API
//! takes), `model`, and optionally `language` (ISO 639-1), `prompt`,
//! `response_format` (`json`, `text`, `verbose_json`) and
//! `temperature`. Answers `{"text": ...}` (or plain text), errors in
//! OpenAI's shape. Anything off the documented format is a violation.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::extract::{Multipart, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::json;

use crate::server::Server;

/// The formats the endpoint documents, by file extension.
const FORMATS: &[&str] = &[
    "flac", "mp3", "mp4", "mpeg", "mpga", "m4a", "ogg", "oga", "wav", "webm",
];

/// One transcription request as the fake received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SttRequest {
    pub model: String,
    pub file_name: String,
    /// The part's `Content-Type`.
    pub media_type: Option<String>,
    pub audio: Vec<u8>,
    pub language: Option<String>,
    pub response_format: Option<String>,
    /// The bearer token, if one was sent.
    pub key: Option<String>,
}

#[derive(Debug, Default)]
struct Recorded {
    transcripts: VecDeque<String>,
    failures: VecDeque<(u16, String)>,
    requests: Vec<SttRequest>,
    violations: Vec<String>,
    key: Option<String>,
}

type Shared = Arc<Mutex<Recorded>>;

/// A fake transcription service on `127.0.0.1`.
#[derive(Debug)]
pub struct FakeStt {
    state: Shared,
    server: Server,
}

impl FakeStt {
    /// Wants no key until [`require_key`](Self::require_key); answers each
    /// request with the next [`push`](Self::push)ed transcript.
    pub fn start() -> Self {
        let state: Shared = Arc::default();
        let router = Router::new()
            .route("/v1/audio/transcriptions", post(transcribe))
            .with_state(Arc::clone(&state));
        FakeStt {
            state,
            server: Server::start_router("stt", router),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The base URL to configure (`http://127.0.0.1:port/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr())
    }

    /// Refuses requests without this bearer token (401, as OpenAI does).
    pub fn require_key(&self, key: &str) {
        self.lock().key = Some(key.to_owned());
    }

    /// The text the next request is answered with.
    pub fn push(&self, transcript: &str) {
        self.lock().transcripts.push_back(transcript.to_owned());
    }

    /// Answers the next request with this status and message instead.
    pub fn fail_next(&self, status: u16, message: &str) {
        self.lock().failures.push_back((status, message.to_owned()));
    }

    pub fn requests(&self) -> Vec<SttRequest> {
        self.lock().requests.clone()
    }

    /// What requests did that the API does not document.
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}});
    (status, axum::Json(body)).into_response()
}

async fn transcribe(
    State(state): State<Shared>,
    headers: HeaderMap,
    mut form: Multipart,
) -> Response {
    let key = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let mut request = SttRequest {
        model: String::new(),
        file_name: String::new(),
        media_type: None,
        audio: Vec::new(),
        language: None,
        response_format: None,
        key: key.clone(),
    };
    let mut violations = Vec::new();
    let mut has_file = false;
    loop {
        let field = match form.next_field().await {
            Ok(Some(field)) => field,
            Ok(None) => break,
            Err(e) => {
                violations.push(format!("the body is not multipart/form-data: {e}"));
                break;
            }
        };
        let name = field.name().unwrap_or_default().to_owned();
        match name.as_str() {
            "file" => {
                has_file = true;
                request.file_name = field.file_name().unwrap_or_default().to_owned();
                request.media_type = field.content_type().map(str::to_owned);
                request.audio = field.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
            }
            "model" | "language" | "prompt" | "response_format" | "temperature" => {
                let value = field.text().await.unwrap_or_default();
                match name.as_str() {
                    "model" => request.model = value,
                    "language" => {
                        if value.len() != 2 || !value.chars().all(|c| c.is_ascii_lowercase()) {
                            violations.push(format!("language {value:?} is not an ISO 639-1 code"));
                        }
                        request.language = Some(value);
                    }
                    "response_format" => {
                        if !["json", "text", "verbose_json"].contains(&value.as_str()) {
                            violations.push(format!(
                                "response_format {value:?} is not json, text or verbose_json"
                            ));
                        }
                        request.response_format = Some(value);
                    }
                    _ => {}
                }
            }
            other => violations.push(format!("unknown form field {other:?}")),
        }
    }
    if !has_file {
        violations.push("no `file` part".to_owned());
    }
    let extension = request
        .file_name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase());
    if has_file && !extension.as_deref().is_some_and(|e| FORMATS.contains(&e)) {
        violations.push(format!(
            "file name {:?} does not end in a format the API takes ({})",
            request.file_name,
            FORMATS.join(", ")
        ));
    }
    if request.model.is_empty() {
        violations.push("no `model`".to_owned());
    }
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    let format = request.response_format.clone();
    let wanted_key = state.key.clone();
    let empty = request.audio.is_empty();
    state.requests.push(request);
    if let Some(wanted) = wanted_key
        && key.as_deref() != Some(wanted.as_str())
    {
        return error(StatusCode::UNAUTHORIZED, "Incorrect API key provided.");
    }
    if !violations.is_empty() {
        let message = violations.join("; ");
        state.violations.extend(violations);
        return error(StatusCode::BAD_REQUEST, &message);
    }
    if let Some((status, message)) = state.failures.pop_front() {
        return error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &message,
        );
    }
    if empty {
        return error(StatusCode::BAD_REQUEST, "Audio file is too short.");
    }
    let Some(text) = state.transcripts.pop_front() else {
        state
            .violations
            .push("a request with no transcript pushed".to_owned());
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no transcript pushed to the fake",
        );
    };
    match format.as_deref() {
        Some("text") => text.into_response(),
        Some("verbose_json") => axum::Json(json!({"task": "transcribe", "language": "english", "duration": 1.0, "text": text, "segments": []})).into_response(),
        _ => axum::Json(json!({"text": text})).into_response(),
    }
}
