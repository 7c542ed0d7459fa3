//! Speech to text through an OpenAI-compatible transcription endpoint.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde::Deserialize;

/// Audio to transcribe, as a chat platform delivered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audio {
    pub data: Bytes,
    /// A file name whose extension says the format (`voice.ogg`): the
    /// endpoints read the format from it.
    pub file_name: String,
    /// MIME type (`audio/ogg`).
    pub media_type: String,
}

/// Why audio could not be transcribed.
#[derive(Debug, thiserror::Error)]
pub enum VoiceError {
    /// The service answered with an error status.
    #[error("{service} answered {status}: {message}")]
    Status {
        service: String,
        status: u16,
        message: String,
    },
    /// The service could not be reached, or did not answer in time.
    #[error("{service} could not be reached: {message}")]
    Unreachable { service: String, message: String },
    /// The answer was not what the endpoint documents.
    #[error("{service} answered something that is not a transcription: {message}")]
    Malformed { service: String, message: String },
    /// Nothing to transcribe, or nothing to say.
    #[error("there is nothing to transcribe or say")]
    Empty,
    /// A speech engine answered with something that is not the audio
    /// asked for.
    #[error("{service} answered something that is not the speech asked for: {message}")]
    NotAudio { service: String, message: String },
    /// A local speech program failed.
    #[error("{command} failed: {message}")]
    Program { command: String, message: String },
}

/// Turns speech into text.
#[async_trait]
pub trait Transcriber: Send + Sync + std::fmt::Debug {
    /// Names the service and model (`openai/whisper-1`), for messages.
    fn id(&self) -> &str;

    /// The text spoken in `audio`.
    async fn transcribe(&self, audio: Audio) -> Result<String, VoiceError>;
}

/// An OpenAI-compatible `POST {base_url}/audio/transcriptions`.
#[derive(Debug, Clone)]
pub struct OpenAiTranscriber {
    id: String,
    http: reqwest::Client,
    url: String,
    api_key: Option<String>,
    model: String,
    language: Option<String>,
}

/// How long a transcription may take: a minute of speech takes a few
/// seconds on a hosted service, longer on a small local one.
const TIMEOUT: Duration = Duration::from_secs(120);

impl OpenAiTranscriber {
    /// The endpoint under `base_url` (`https://api.openai.com/v1`), with
    /// `model` (`whisper-1`, `whisper-large-v3-turbo`...); `api_key` is
    /// sent as a bearer token when given (local servers often want none).
    pub fn new(base_url: &str, api_key: Option<String>, model: &str) -> Result<Self, VoiceError> {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| VoiceError::Unreachable {
                service: base_url.to_owned(),
                message: e.to_string(),
            })?;
        Ok(OpenAiTranscriber {
            id: format!("{}/{model}", host_of(base_url)),
            http,
            url: format!("{}/audio/transcriptions", base_url.trim_end_matches('/')),
            api_key,
            model: model.to_owned(),
            language: None,
        })
    }

    /// The language spoken, as an ISO 639-1 code (`en`): faster and more
    /// accurate than letting the model guess.
    pub fn language(mut self, language: &str) -> Self {
        self.language = Some(language.to_owned());
        self
    }
}

/// The host of a URL, for names in messages.
pub(crate) fn host_of(url: &str) -> String {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| url.to_owned())
}

#[derive(Deserialize)]
struct Transcription {
    text: String,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    message: String,
}

#[async_trait]
impl Transcriber for OpenAiTranscriber {
    fn id(&self) -> &str {
        &self.id
    }

    async fn transcribe(&self, audio: Audio) -> Result<String, VoiceError> {
        if audio.data.is_empty() {
            return Err(VoiceError::Empty);
        }
        let service = self.id.clone();
        let part = reqwest::multipart::Part::stream(audio.data)
            .file_name(audio.file_name)
            .mime_str(&audio.media_type)
            .map_err(|e| VoiceError::Malformed {
                service: service.clone(),
                message: format!("the audio's type: {e}"),
            })?;
        let mut form = reqwest::multipart::Form::new()
            .part("file", part)
            .text("model", self.model.clone())
            .text("response_format", "json");
        if let Some(language) = &self.language {
            form = form.text("language", language.clone());
        }
        let mut request = self.http.post(&self.url).multipart(form);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| VoiceError::Unreachable {
            service: service.clone(),
            message: e.to_string(),
        })?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|e| VoiceError::Unreachable {
                service: service.clone(),
                message: e.to_string(),
            })?;
        if !status.is_success() {
            let message = serde_json::from_slice::<ErrorBody>(&body)
                .map(|b| b.error.message)
                .unwrap_or_else(|_| String::from_utf8_lossy(&body).chars().take(300).collect());
            return Err(VoiceError::Status {
                service,
                status: status.as_u16(),
                message,
            });
        }
        let transcription: Transcription =
            serde_json::from_slice(&body).map_err(|e| VoiceError::Malformed {
                service,
                message: e.to_string(),
            })?;
        Ok(transcription.text.trim().to_owned())
    }
}
