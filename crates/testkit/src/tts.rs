//! A strict fake of two text-to-speech APIs on one server:
//!
//! - OpenAI's `POST /v1/audio/speech`: a JSON body with `model`, `input`
//!   (at most 4,096 characters), `voice` (one of the documented voices)
//!   and optionally `response_format` (`mp3`, `opus`, `aac`, `flac`,
//!   `wav`, `pcm`), `speed` (0.25 to 4) and `instructions`; a bearer
//!   token; the audio in the answer, errors in OpenAI's shape.
//! - ElevenLabs' `POST /v1/text-to-speech/{voice_id}?output_format=...`:
//!   the key in `xi-api-key`, a JSON body with `text` and optionally
//!   `model_id`, `language_code`, `voice_settings`, `seed`; errors as
//!   `{"detail": {"status", "message"}}`.
//!
//! The audio answered is made up but has its format's signature (Ogg
//! pages start `OggS`, WAV `RIFF…WAVE`, MP3 an ID3 tag), with the text
//! inside, so a test can tell which text was spoken. Anything off the
//! documented format is a violation.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

use crate::server::Server;

/// OpenAI's voices.
pub const OPENAI_VOICES: &[&str] = &[
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
];
/// OpenAI's formats.
const OPENAI_FORMATS: &[&str] = &["mp3", "opus", "aac", "flac", "wav", "pcm"];
/// OpenAI's longest input.
pub const OPENAI_MAX_INPUT: usize = 4096;
/// ElevenLabs' output formats that the fake knows (a subset of the
/// documented list: MP3, PCM, µ-law and Opus).
const ELEVENLABS_FORMATS: &[&str] = &[
    "mp3_22050_32",
    "mp3_44100_64",
    "mp3_44100_128",
    "mp3_44100_192",
    "pcm_16000",
    "pcm_22050",
    "pcm_24000",
    "pcm_44100",
    "ulaw_8000",
    "opus_48000_32",
    "opus_48000_64",
    "opus_48000_96",
    "opus_48000_128",
    "opus_48000_192",
];
const ELEVENLABS_FIELDS: &[&str] = &[
    "text",
    "model_id",
    "language_code",
    "voice_settings",
    "seed",
    "previous_text",
    "next_text",
];

/// One speech request as the fake received it.
#[derive(Debug, Clone, PartialEq)]
pub struct TtsRequest {
    /// `openai` or `elevenlabs`.
    pub api: &'static str,
    /// The text to speak.
    pub text: String,
    /// OpenAI's `model`, ElevenLabs' `model_id`.
    pub model: Option<String>,
    /// OpenAI's `voice`, ElevenLabs' voice id.
    pub voice: String,
    /// OpenAI's `response_format`, ElevenLabs' `output_format`.
    pub format: Option<String>,
    /// The key sent (bearer token or `xi-api-key`).
    pub key: Option<String>,
}

#[derive(Debug, Default)]
struct Recorded {
    failures: VecDeque<(u16, String)>,
    requests: Vec<TtsRequest>,
    violations: Vec<String>,
    key: Option<String>,
}

type Shared = Arc<Mutex<Recorded>>;

/// A fake speech service on `127.0.0.1`.
#[derive(Debug)]
pub struct FakeTts {
    state: Shared,
    server: Server,
}

impl FakeTts {
    /// Wants no key until [`require_key`](Self::require_key).
    pub fn start() -> Self {
        let state: Shared = Arc::default();
        let router = Router::new()
            .route("/v1/audio/speech", post(openai))
            .route("/v1/text-to-speech/{voice}", post(elevenlabs))
            .with_state(Arc::clone(&state));
        FakeTts {
            state,
            server: Server::start_router("tts", router),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// OpenAI's base URL (`http://127.0.0.1:port/v1`).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr())
    }

    /// ElevenLabs' base URL (`http://127.0.0.1:port`).
    pub fn elevenlabs_url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// Refuses requests without this key (401).
    pub fn require_key(&self, key: &str) {
        self.lock().key = Some(key.to_owned());
    }

    /// Answers the next request with this status and message instead.
    pub fn fail_next(&self, status: u16, message: &str) {
        self.lock().failures.push_back((status, message.to_owned()));
    }

    pub fn requests(&self) -> Vec<TtsRequest> {
        self.lock().requests.clone()
    }

    /// What requests did that the APIs do not document.
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }
}

/// Made-up audio of `format`, carrying `text`.
pub fn fake_audio(format: &str, text: &str) -> Vec<u8> {
    let mut audio = if format.starts_with("opus") {
        b"OggS\0\x02fake-opus:".to_vec()
    } else if format.starts_with("wav") {
        b"RIFF\0\0\0\0WAVEfmt fake-wav:".to_vec()
    } else if format.starts_with("mp3") {
        b"ID3\x04\0fake-mp3:".to_vec()
    } else {
        format!("fake-{format}:").into_bytes()
    };
    audio.extend_from_slice(text.as_bytes());
    audio
}

fn content_type(format: &str) -> &'static str {
    match format.split('_').next().unwrap_or(format) {
        "mp3" => "audio/mpeg",
        "opus" => "audio/ogg",
        "aac" => "audio/aac",
        "flac" => "audio/flac",
        "wav" => "audio/wav",
        "ulaw" => "audio/basic",
        _ => "audio/pcm",
    }
}

fn openai_error(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}});
    (status, axum::Json(body)).into_response()
}

fn elevenlabs_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"detail": {"status": code, "message": message}})),
    )
        .into_response()
}

fn audio(format: &str, text: &str) -> Response {
    (
        [(header::CONTENT_TYPE, content_type(format))],
        fake_audio(format, text),
    )
        .into_response()
}

async fn openai(State(state): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let key = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let mut violations = Vec::new();
    let json_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !json_type {
        violations.push("the body is not sent as application/json".to_owned());
    }
    let body: Value = match serde_json::from_slice(&body) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ => {
            let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
            state
                .violations
                .push("the body is not a JSON object".to_owned());
            return openai_error(
                StatusCode::BAD_REQUEST,
                "We could not parse the JSON body of your request.",
            );
        }
    };
    for field in body.as_object().into_iter().flat_map(|o| o.keys()) {
        if ![
            "model",
            "input",
            "voice",
            "response_format",
            "speed",
            "instructions",
        ]
        .contains(&field.as_str())
        {
            violations.push(format!("unknown field {field:?}"));
        }
    }
    let text = body["input"].as_str().unwrap_or_default().to_owned();
    if text.is_empty() {
        violations.push("no `input`".to_owned());
    } else if text.chars().count() > OPENAI_MAX_INPUT {
        violations.push(format!(
            "`input` has {} characters, over {OPENAI_MAX_INPUT}",
            text.chars().count()
        ));
    }
    let model = body["model"].as_str().map(str::to_owned);
    if model.is_none() {
        violations.push("no `model`".to_owned());
    }
    let voice = body["voice"].as_str().unwrap_or_default().to_owned();
    if !OPENAI_VOICES.contains(&voice.as_str()) {
        violations.push(format!("voice {voice:?} is not one of OpenAI's"));
    }
    let format = body["response_format"].as_str().map(str::to_owned);
    if let Some(format) = &format
        && !OPENAI_FORMATS.contains(&format.as_str())
    {
        violations.push(format!(
            "response_format {format:?} is not one the API takes"
        ));
    }
    if let Some(speed) = body.get("speed")
        && !speed.as_f64().is_some_and(|s| (0.25..=4.0).contains(&s))
    {
        violations.push(format!("speed {speed} is not a number from 0.25 to 4"));
    }
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    let wanted = state.key.clone();
    state.requests.push(TtsRequest {
        api: "openai",
        text: text.clone(),
        model,
        voice,
        format: format.clone(),
        key: key.clone(),
    });
    if let Some(wanted) = wanted
        && key.as_deref() != Some(wanted.as_str())
    {
        return openai_error(StatusCode::UNAUTHORIZED, "Incorrect API key provided.");
    }
    if !violations.is_empty() {
        let message = violations.join("; ");
        state.violations.extend(violations);
        return openai_error(StatusCode::BAD_REQUEST, &message);
    }
    if let Some((status, message)) = state.failures.pop_front() {
        return openai_error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &message,
        );
    }
    audio(format.as_deref().unwrap_or("mp3"), &text)
}

async fn elevenlabs(
    State(state): State<Shared>,
    Path(voice): Path<String>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = headers
        .get("xi-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut violations = Vec::new();
    let body: Value = match serde_json::from_slice(&body) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ => {
            let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
            state
                .violations
                .push("the body is not a JSON object".to_owned());
            return elevenlabs_error(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_json",
                "the body is not JSON",
            );
        }
    };
    for field in body.as_object().into_iter().flat_map(|o| o.keys()) {
        if !ELEVENLABS_FIELDS.contains(&field.as_str()) {
            violations.push(format!("unknown field {field:?}"));
        }
    }
    let text = body["text"].as_str().unwrap_or_default().to_owned();
    if text.is_empty() {
        violations.push("no `text`".to_owned());
    }
    let mut format = None;
    for pair in uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("output_format", value)) => format = Some(value.to_owned()),
            Some(("enable_logging" | "optimize_streaming_latency", _)) => {}
            _ => violations.push(format!("unknown query parameter {pair:?}")),
        }
    }
    if let Some(format) = &format
        && !ELEVENLABS_FORMATS.contains(&format.as_str())
    {
        violations.push(format!("output_format {format:?} is not one the API takes"));
    }
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    let wanted = state.key.clone();
    state.requests.push(TtsRequest {
        api: "elevenlabs",
        text: text.clone(),
        model: body["model_id"].as_str().map(str::to_owned),
        voice,
        format: format.clone(),
        key: key.clone(),
    });
    if key.is_none() {
        return elevenlabs_error(
            StatusCode::UNAUTHORIZED,
            "needs_authorization",
            "Neither authorization header nor xi-api-key received, please provide one.",
        );
    }
    if let Some(wanted) = wanted
        && key.as_deref() != Some(wanted.as_str())
    {
        return elevenlabs_error(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "Invalid API key",
        );
    }
    if !violations.is_empty() {
        let message = violations.join("; ");
        state.violations.extend(violations);
        return elevenlabs_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            &message,
        );
    }
    if let Some((status, message)) = state.failures.pop_front() {
        return elevenlabs_error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "error",
            &message,
        );
    }
    audio(format.as_deref().unwrap_or("mp3_44100_128"), &text)
}
