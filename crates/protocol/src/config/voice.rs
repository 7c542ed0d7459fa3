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
    /// The text-to-speech engine for spoken answers (`voice.say`,
    /// `reply`); absent: answers are text only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tts: Option<TtsConfig>,
    /// When answers in chats are also spoken: `off` (the default), `auto`
    /// (a voice note is answered with one) or `always`. A session's
    /// `/voice` command overrides it. Needs `tts`.
    #[serde(default)]
    pub reply: VoiceReply,
}

/// When a chat's answers are also sent as voice notes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VoiceReply {
    /// Text only.
    #[default]
    Off,
    /// A voice note is answered with a voice note (and the text).
    Auto,
    /// Every answer is also spoken.
    Always,
}

impl VoiceReply {
    pub fn as_str(self) -> &'static str {
        match self {
            VoiceReply::Off => "off",
            VoiceReply::Auto => "auto",
            VoiceReply::Always => "always",
        }
    }
}

impl std::str::FromStr for VoiceReply {
    type Err = String;

    /// `off`, `auto` or `always` (`on` is `always`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" => Ok(VoiceReply::Off),
            "auto" => Ok(VoiceReply::Auto),
            "always" | "on" => Ok(VoiceReply::Always),
            other => Err(format!(
                "'{other}' is not a voice reply mode: off, auto or on (always)"
            )),
        }
    }
}

/// A text-to-speech engine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "provider", rename_all = "snake_case", deny_unknown_fields)]
pub enum TtsConfig {
    /// An OpenAI-compatible `POST <base_url>/audio/speech`, asked for Ogg
    /// Opus (`response_format: opus`).
    Openai {
        /// The API's base URL, up to `/v1`.
        base_url: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key: Option<String>,
        /// The speech model.
        #[serde(default = "default_tts_model")]
        model: String,
        /// The voice (`alloy`, `nova`, ...).
        #[serde(default = "default_tts_voice")]
        voice: String,
    },
    /// ElevenLabs' `POST /v1/text-to-speech/<voice_id>`, asked for Ogg
    /// Opus.
    Elevenlabs {
        /// `https://api.elevenlabs.io` unless set.
        #[serde(default = "default_elevenlabs_url")]
        base_url: String,
        api_key: String,
        /// The voice's id (from the voice library).
        voice_id: String,
        #[serde(default = "default_elevenlabs_model")]
        model: String,
    },
    /// A local program (espeak-ng, piper) run through `sh -c`: the text
    /// on its standard input, the audio (WAV, Ogg or MP3) on its standard
    /// output, e.g. `espeak-ng --stdout`. WAV is encoded to Ogg Opus with
    /// `opusenc` (opus-tools) when it is installed.
    Command { command: String },
}

fn default_tts_model() -> String {
    "gpt-4o-mini-tts".to_owned()
}

fn default_tts_voice() -> String {
    "alloy".to_owned()
}

fn default_elevenlabs_url() -> String {
    "https://api.elevenlabs.io".to_owned()
}

fn default_elevenlabs_model() -> String {
    "eleven_multilingual_v2".to_owned()
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
