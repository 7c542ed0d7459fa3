//! Strict fakes of the embedding APIs memory search uses: OpenAI's
//! `POST /v1/embeddings`, Ollama's `POST /api/embed`, Gemini's
//! `POST /v1beta/models/{model}:batchEmbedContents` and Voyage AI's
//! `POST /v1/embeddings`, each with the request and answer shapes its
//! vendor documents.
//!
//! A request the real service would reject is answered with its error
//! (status and body shape) and listed in `violations()`. A wrong or
//! missing key is answered like the service does but is not a violation.
//! Vectors are [`fake_embedding`]s: deterministic, and similar for texts
//! that share words.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use axum::response::Response;
use serde_json::{Value, json};

use crate::server::{self, CapturedRequest, Server, Shared};

/// Vector size when a request does not ask for one.
pub const DEFAULT_DIMENSIONS: usize = 64;

/// A deterministic unit vector for `text`: lower-case words and their
/// first five letters hashed (FNV-1a) to a position and a sign, summed,
/// normalised. Texts sharing words or word stems point the same way.
pub fn fake_embedding(text: &str, dimensions: usize) -> Vec<f32> {
    let dimensions = dimensions.max(1);
    let mut vector = vec![0.0f32; dimensions];
    let mut add = |token: &str| {
        let hash = token.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let slot = usize::try_from(hash % dimensions as u64).unwrap_or(0);
        vector[slot] += if hash >> 63 == 0 { 1.0 } else { -1.0 };
    };
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let word = word.to_lowercase();
        add(&word);
        let stem: String = word.chars().take(5).collect();
        add(&format!("stem:{stem}"));
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        vector[0] = 1.0;
        return vector;
    }
    vector.iter().map(|x| x / norm).collect()
}

/// Which vendor a fake speaks as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    OpenAi,
    Ollama,
    Gemini,
    Voyage,
}

#[derive(Debug, Default)]
struct State {
    key: Option<String>,
    models: BTreeSet<String>,
    failures: VecDeque<(u16, Option<u64>)>,
    texts: usize,
}

/// A fake embedding service on `127.0.0.1`.
#[derive(Debug)]
pub struct FakeEmbeddings {
    vendor: Vendor,
    shared: Arc<Shared>,
    state: Arc<Mutex<State>>,
    server: Server,
}

impl FakeEmbeddings {
    /// Knows each vendor's usual model (`text-embedding-3-small`,
    /// `nomic-embed-text`, `gemini-embedding-001`, `voyage-3.5-lite`) and
    /// wants no key until [`require_key`](Self::require_key).
    pub fn start(vendor: Vendor) -> Self {
        let model = match vendor {
            Vendor::OpenAi => "text-embedding-3-small",
            Vendor::Ollama => "nomic-embed-text",
            Vendor::Gemini => "gemini-embedding-001",
            Vendor::Voyage => "voyage-3.5-lite",
        };
        let shared = Arc::new(Shared::default());
        let state = Arc::new(Mutex::new(State {
            models: BTreeSet::from([model.to_owned()]),
            ..State::default()
        }));
        let (for_handler, state_for_handler) = (Arc::clone(&shared), Arc::clone(&state));
        let server = Server::start(
            "embeddings",
            Arc::clone(&shared),
            Arc::new(move |request| answer(vendor, &for_handler, &state_for_handler, request)),
        );
        FakeEmbeddings {
            vendor,
            shared,
            state,
            server,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The base URL to configure: `/v1` (OpenAI, Voyage), `/v1beta`
    /// (Gemini) or the server itself (Ollama).
    pub fn base_url(&self) -> String {
        let addr = self.server.addr();
        match self.vendor {
            Vendor::OpenAi | Vendor::Voyage => format!("http://{addr}/v1"),
            Vendor::Gemini => format!("http://{addr}/v1beta"),
            Vendor::Ollama => format!("http://{addr}"),
        }
    }

    /// Refuses requests without this key (bearer, or `x-goog-api-key`).
    pub fn require_key(&self, key: &str) {
        self.state().key = Some(key.to_owned());
    }

    /// Makes `model` known.
    pub fn add_model(&self, model: &str) {
        self.state().models.insert(model.to_owned());
    }

    /// Answers the next request with `status` (and `retry-after`), in the
    /// vendor's error shape.
    pub fn fail_next(&self, status: u16, retry_after: Option<u64>) {
        self.state().failures.push_back((status, retry_after));
    }

    /// Texts embedded so far (requests that succeeded).
    pub fn texts_embedded(&self) -> usize {
        self.state().texts
    }

    pub fn requests(&self) -> Vec<CapturedRequest> {
        self.shared.requests()
    }

    /// What the client did that the real service would reject.
    pub fn violations(&self) -> Vec<String> {
        self.shared.violations()
    }
}

/// The vendor's error answer.
fn error(vendor: Vendor, status: u16, message: &str, retry_after: Option<u64>) -> Response {
    let body = match vendor {
        Vendor::OpenAi => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}})
        }
        Vendor::Ollama => json!({"error": message}),
        Vendor::Gemini => {
            json!({"error": {"code": status, "message": message, "status": match status {
                400 => "INVALID_ARGUMENT",
                403 => "PERMISSION_DENIED",
                404 => "NOT_FOUND",
                429 => "RESOURCE_EXHAUSTED",
                _ => "INTERNAL",
            }}})
        }
        Vendor::Voyage => json!({"detail": message}),
    };
    let retry = retry_after.map(|s| s.to_string());
    let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
    if let Some(retry) = &retry {
        headers.push(("retry-after", retry));
    }
    server::respond(status, &headers, axum::body::Body::from(body.to_string()))
}

fn answer(
    vendor: Vendor,
    shared: &Shared,
    state: &Mutex<State>,
    request: &CapturedRequest,
) -> Response {
    let mut state = state.lock().unwrap_or_else(PoisonError::into_inner);
    // A client mistake: the service's 400 (or `status`), and a violation.
    let reject = |status: u16, message: String| {
        shared.violation(message.clone());
        error(vendor, status, &message, None)
    };
    let path_ok = match vendor {
        Vendor::OpenAi | Vendor::Voyage => request.path == "/v1/embeddings",
        Vendor::Ollama => request.path == "/api/embed",
        Vendor::Gemini => {
            request.path.starts_with("/v1beta/models/")
                && request.path.ends_with(":batchEmbedContents")
        }
    };
    if request.method != "POST" || !path_ok {
        return reject(
            404,
            format!("no such endpoint: {} {}", request.method, request.path),
        );
    }
    if let Some((status, retry_after)) = state.failures.pop_front() {
        return error(vendor, status, "scripted failure", retry_after);
    }
    if let Some(key) = &state.key {
        let sent = match vendor {
            Vendor::Gemini => request.header("x-goog-api-key").map(str::to_owned),
            _ => request
                .header("authorization")
                .and_then(|h| h.strip_prefix("Bearer "))
                .map(str::to_owned),
        };
        if sent.as_deref() != Some(key.as_str()) {
            let (status, message) = match vendor {
                Vendor::Gemini => (400, "API key not valid. Please pass a valid API key."),
                Vendor::Ollama => (401, "unauthorized"),
                Vendor::OpenAi => (401, "Incorrect API key provided."),
                Vendor::Voyage => (401, "Provided API key is invalid."),
            };
            return error(vendor, status, message, None);
        }
    }
    let body = &request.body;
    let Some(object) = body.as_object() else {
        return reject(400, "the body is not a JSON object".to_owned());
    };
    let allowed: &[&str] = match vendor {
        Vendor::OpenAi => &["model", "input", "encoding_format", "dimensions", "user"],
        Vendor::Ollama => &[
            "model",
            "input",
            "truncate",
            "options",
            "keep_alive",
            "dimensions",
        ],
        Vendor::Gemini => &["requests"],
        Vendor::Voyage => &[
            "model",
            "input",
            "input_type",
            "truncation",
            "output_dimension",
            "output_dtype",
            "encoding_format",
        ],
    };
    if let Some(unknown) = object.keys().find(|k| !allowed.contains(&k.as_str())) {
        return reject(
            400,
            format!("unrecognized request argument supplied: {unknown}"),
        );
    }
    let (model, texts, dimensions) = match vendor {
        Vendor::Gemini => match gemini_request(&request.path, object) {
            Ok(parsed) => parsed,
            Err(message) => return reject(400, message),
        },
        _ => match flat_request(vendor, object) {
            Ok(parsed) => parsed,
            Err(message) => return reject(400, message),
        },
    };
    if !state.models.contains(&model) {
        let message = match vendor {
            Vendor::OpenAi => {
                format!("The model `{model}` does not exist or you do not have access to it.")
            }
            Vendor::Ollama => format!("model \"{model}\" not found, try pulling it first"),
            Vendor::Gemini => format!(
                "models/{model} is not found for API version v1beta, or is not supported for embedContent."
            ),
            Vendor::Voyage => format!("Model {model} is not supported."),
        };
        // The client spoke the protocol; the model is the user's choice.
        return error(
            vendor,
            if vendor == Vendor::Gemini || vendor == Vendor::Ollama {
                404
            } else {
                400
            },
            &message,
            None,
        );
    }
    state.texts += texts.len();
    let dims = dimensions.unwrap_or(DEFAULT_DIMENSIONS);
    let vectors: Vec<Vec<f32>> = texts.iter().map(|t| fake_embedding(t, dims)).collect();
    let tokens: usize = texts
        .iter()
        .map(|t| t.split_whitespace().count().max(1))
        .sum();
    let answer = match vendor {
        Vendor::OpenAi => json!({
            "object": "list",
            "data": vectors.iter().enumerate().map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v})).collect::<Vec<_>>(),
            "model": model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }),
        Vendor::Ollama => json!({
            "model": model,
            "embeddings": vectors,
            "total_duration": 14_143_917,
            "load_duration": 1_019_500,
            "prompt_eval_count": tokens,
        }),
        Vendor::Gemini => json!({
            "embeddings": vectors.iter().map(|v| json!({"values": v})).collect::<Vec<_>>(),
        }),
        Vendor::Voyage => json!({
            "object": "list",
            "data": vectors.iter().enumerate().map(|(i, v)| json!({"object": "embedding", "embedding": v, "index": i})).collect::<Vec<_>>(),
            "model": model,
            "usage": {"total_tokens": tokens},
        }),
    };
    server::json(200, &answer)
}

type Parsed = (String, Vec<String>, Option<usize>);

/// OpenAI, Ollama and Voyage: `model`, `input` (a string or a list of
/// strings), a size field.
fn flat_request(vendor: Vendor, object: &serde_json::Map<String, Value>) -> Result<Parsed, String> {
    let model = object
        .get("model")
        .and_then(Value::as_str)
        .ok_or("`model` is missing or not a string")?
        .to_owned();
    let texts: Vec<String> = match object.get("input") {
        Some(Value::String(text)) => vec![text.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or("`input` holds something that is not a string")
            })
            .collect::<Result<_, _>>()?,
        _ => return Err("`input` is missing; expected a string or a list of strings".to_owned()),
    };
    if texts.is_empty() {
        return Err("`input` is an empty list".to_owned());
    }
    let limit = match vendor {
        Vendor::OpenAi => 2048,
        Vendor::Voyage => 1000,
        _ => usize::MAX,
    };
    if texts.len() > limit {
        return Err(format!(
            "{} inputs; at most {limit} per request",
            texts.len()
        ));
    }
    if vendor != Vendor::Ollama && texts.iter().any(String::is_empty) {
        return Err("`input` holds an empty string".to_owned());
    }
    if vendor == Vendor::OpenAi
        && let Some(format) = object.get("encoding_format")
        && !matches!(format.as_str(), Some("float" | "base64"))
    {
        return Err(format!(
            "encoding_format {format}: expected 'float' or 'base64'"
        ));
    }
    if vendor == Vendor::Voyage
        && let Some(kind) = object.get("input_type")
        && !kind.is_null()
        && !matches!(kind.as_str(), Some("query" | "document"))
    {
        return Err(format!(
            "input_type {kind}: expected null, 'query' or 'document'"
        ));
    }
    let size_key = match vendor {
        Vendor::Voyage => "output_dimension",
        _ => "dimensions",
    };
    let dimensions = match object.get(size_key) {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            value
                .as_u64()
                .filter(|d| *d > 0)
                .and_then(|d| usize::try_from(d).ok())
                .ok_or(format!("`{size_key}` must be a positive integer"))?,
        ),
    };
    Ok((model, texts, dimensions))
}

/// Gemini: `requests`, each naming the URL's model, with text parts and a
/// known task type.
fn gemini_request(path: &str, object: &serde_json::Map<String, Value>) -> Result<Parsed, String> {
    let model = path
        .trim_start_matches("/v1beta/models/")
        .trim_end_matches(":batchEmbedContents")
        .to_owned();
    let requests = object
        .get("requests")
        .and_then(Value::as_array)
        .ok_or("`requests` is missing or not a list")?;
    if requests.is_empty() || requests.len() > 100 {
        return Err(format!(
            "{} requests; expected 1 to 100 per batch",
            requests.len()
        ));
    }
    let mut texts = Vec::with_capacity(requests.len());
    let mut dimensions = None;
    for (i, request) in requests.iter().enumerate() {
        let named = request
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if named != format!("models/{model}") {
            return Err(format!(
                "requests[{i}].model is '{named}'; * batchEmbedContents needs models/{model}, the model of the URL"
            ));
        }
        let parts = request
            .pointer("/content/parts")
            .and_then(Value::as_array)
            .ok_or(format!("requests[{i}].content.parts is missing"))?;
        let text: Vec<&str> = parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        if text.is_empty() {
            return Err(format!("requests[{i}] has no text part"));
        }
        if let Some(task) = request.get("taskType")
            && !matches!(
                task.as_str(),
                Some(
                    "TASK_TYPE_UNSPECIFIED"
                        | "RETRIEVAL_QUERY"
                        | "RETRIEVAL_DOCUMENT"
                        | "SEMANTIC_SIMILARITY"
                        | "CLASSIFICATION"
                        | "CLUSTERING"
                        | "QUESTION_ANSWERING"
                        | "FACT_VERIFICATION"
                        | "CODE_RETRIEVAL_QUERY"
                )
            )
        {
            return Err(format!("requests[{i}].taskType {task} is not a task type"));
        }
        if let Some(size) = request.get("outputDimensionality") {
            dimensions = Some(
                size.as_u64()
                    .filter(|d| *d > 0)
                    .and_then(|d| usize::try_from(d).ok())
                    .ok_or(format!(
                        "requests[{i}].outputDimensionality must be a positive integer"
                    ))?,
            );
        }
        texts.push(text.join(""));
    }
    Ok((model, texts, dimensions))
}
