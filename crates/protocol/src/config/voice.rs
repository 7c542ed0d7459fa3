//! `voice`: speech to text for voice notes.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Voice notes and audio files from the chats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VoiceConfig {
    /// The speech-to-text service that turns voice notes into text before
    /// the turn; absent: voice notes are saved as files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stt: Option<SttConfig>,
}

/// An OpenAI-compatible `POST <base_url>/audio/transcriptions`: OpenAI
/// (`https://api.openai.com/v1`, `whisper-1`), Groq
/// (`https://api.groq.com/openai/v1`, `whisper-large-v3-turbo`), or a
/// local whisper.cpp or faster-whisper server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SttConfig {
    /// The API's base URL, up to `/v1`.
    pub base_url: String,
    /// Sent as a bearer token; a local server usually wants none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// The transcription model.
    #[serde(default = "default_stt_model")]
    pub model: String,
    /// The language spoken, as an ISO 639-1 code (`en`); absent: the
    /// model detects it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
}

fn default_stt_model() -> String {
    "whisper-1".to_owned()
}
