//! Text to speech: OpenAI-compatible `/audio/speech`, ElevenLabs, or a
//! local program, each giving Ogg Opus where it can (what Telegram and
//! WhatsApp play as a voice note).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use flynn_protocol::config::TtsConfig;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::stt::{VoiceError, host_of};

/// The longest text spoken at once; a longer answer is cut there (at a
/// sentence end when one is near), which the APIs' own limits (4,096
/// characters at OpenAI, 5,000 or more at ElevenLabs) would refuse.
pub const MAX_SPOKEN_CHARS: usize = 4000;
/// How long making speech may take.
const TIMEOUT: Duration = Duration::from_secs(120);
/// The most audio a program or a service may hand back.
const MAX_AUDIO_BYTES: usize = 25 * 1024 * 1024;
/// ElevenLabs' Ogg Opus output format.
pub const ELEVENLABS_FORMAT: &str = "opus_48000_64";

/// Speech made from text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Speech {
    pub data: Bytes,
    /// `audio/ogg` (Opus), `audio/mpeg` or `audio/wav`.
    pub media_type: String,
    /// A name with the format's extension (`voice.ogg`).
    pub file_name: String,
}

impl Speech {
    /// Whether chats can play it as a voice note (Ogg Opus).
    pub fn is_voice_note(&self) -> bool {
        self.media_type == "audio/ogg"
    }
}

/// Turns text into speech.
#[async_trait]
pub trait Synthesizer: Send + Sync + std::fmt::Debug {
    /// Names the engine (`api.openai.com/gpt-4o-mini-tts`), for messages.
    fn id(&self) -> &str;

    /// `text`, spoken.
    async fn speak(&self, text: &str) -> Result<Speech, VoiceError>;
}

/// The engine `config` describes.
pub fn synthesizer(config: &TtsConfig) -> Result<std::sync::Arc<dyn Synthesizer>, VoiceError> {
    Ok(match config {
        TtsConfig::Openai {
            base_url,
            api_key,
            model,
            voice,
        } => std::sync::Arc::new(OpenAiSpeech::new(base_url, api_key.clone(), model, voice)?),
        TtsConfig::Elevenlabs {
            base_url,
            api_key,
            voice_id,
            model,
        } => std::sync::Arc::new(ElevenLabsSpeech::new(base_url, api_key, voice_id, model)?),
        TtsConfig::Command { command } => std::sync::Arc::new(CommandSpeech::new(command)),
    })
}

/// `text` cut to what is spoken at once.
pub fn spoken_part(text: &str) -> &str {
    let text = text.trim();
    let Some((cut, _)) = text.char_indices().nth(MAX_SPOKEN_CHARS) else {
        return text;
    };
    let head = &text[..cut];
    // The last sentence end in the final fifth, if any.
    let sentence = head
        .rfind(['.', '!', '?', '\n'])
        .filter(|at| *at > cut * 4 / 5);
    match sentence {
        Some(at) => &head[..=at],
        None => head,
    }
}

fn http_client(service: &str) -> Result<reqwest::Client, VoiceError> {
    reqwest::Client::builder()
        .timeout(TIMEOUT)
        .build()
        .map_err(|e| VoiceError::Unreachable {
            service: service.to_owned(),
            message: e.to_string(),
        })
}

/// An OpenAI-compatible `POST {base_url}/audio/speech`.
#[derive(Debug, Clone)]
pub struct OpenAiSpeech {
    id: String,
    http: reqwest::Client,
    url: String,
    api_key: Option<String>,
    model: String,
    voice: String,
}

impl OpenAiSpeech {
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        model: &str,
        voice: &str,
    ) -> Result<Self, VoiceError> {
        Ok(OpenAiSpeech {
            id: format!("{}/{model}", host_of(base_url)),
            http: http_client(base_url)?,
            url: format!("{}/audio/speech", base_url.trim_end_matches('/')),
            api_key,
            model: model.to_owned(),
            voice: voice.to_owned(),
        })
    }
}

#[async_trait]
impl Synthesizer for OpenAiSpeech {
    fn id(&self) -> &str {
        &self.id
    }

    async fn speak(&self, text: &str) -> Result<Speech, VoiceError> {
        let text = spoken_part(text);
        if text.is_empty() {
            return Err(VoiceError::Empty);
        }
        let mut request = self.http.post(&self.url).json(&json!({
            "model": self.model,
            "input": text,
            "voice": self.voice,
            "response_format": "opus",
        }));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let data = fetch_audio(&self.id, request, |body| {
            serde_json::from_slice::<OpenAiError>(body)
                .ok()
                .map(|e| e.error.message)
        })
        .await?;
        ogg(&self.id, data)
    }
}

#[derive(Deserialize)]
struct OpenAiError {
    error: OpenAiErrorDetail,
}

#[derive(Deserialize)]
struct OpenAiErrorDetail {
    message: String,
}

/// ElevenLabs' `POST {base_url}/v1/text-to-speech/{voice_id}`.
#[derive(Debug, Clone)]
pub struct ElevenLabsSpeech {
    id: String,
    http: reqwest::Client,
    url: String,
    api_key: String,
    model: String,
}

impl ElevenLabsSpeech {
    pub fn new(
        base_url: &str,
        api_key: &str,
        voice_id: &str,
        model: &str,
    ) -> Result<Self, VoiceError> {
        let mut url = reqwest::Url::parse(base_url).map_err(|e| VoiceError::Unreachable {
            service: base_url.to_owned(),
            message: format!("not a URL: {e}"),
        })?;
        url.path_segments_mut()
            .map_err(|()| VoiceError::Unreachable {
                service: base_url.to_owned(),
                message: "not a base URL".to_owned(),
            })?
            .pop_if_empty()
            .extend(["v1", "text-to-speech", voice_id]);
        url.query_pairs_mut()
            .append_pair("output_format", ELEVENLABS_FORMAT);
        Ok(ElevenLabsSpeech {
            id: format!("{}/{model}", host_of(base_url)),
            http: http_client(base_url)?,
            url: url.to_string(),
            api_key: api_key.to_owned(),
            model: model.to_owned(),
        })
    }
}

#[derive(Deserialize)]
struct ElevenLabsError {
    detail: ElevenLabsDetail,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ElevenLabsDetail {
    Described { message: String },
    Text(String),
}

#[async_trait]
impl Synthesizer for ElevenLabsSpeech {
    fn id(&self) -> &str {
        &self.id
    }

    async fn speak(&self, text: &str) -> Result<Speech, VoiceError> {
        let text = spoken_part(text);
        if text.is_empty() {
            return Err(VoiceError::Empty);
        }
        let request = self
            .http
            .post(&self.url)
            .header("xi-api-key", &self.api_key)
            .json(&json!({"text": text, "model_id": self.model}));
        let data = fetch_audio(&self.id, request, |body| {
            serde_json::from_slice::<ElevenLabsError>(body)
                .ok()
                .map(|e| match e.detail {
                    ElevenLabsDetail::Described { message } | ElevenLabsDetail::Text(message) => {
                        message
                    }
                })
        })
        .await?;
        ogg(&self.id, data)
    }
}

/// Sends `request`; the audio of a successful answer, else its error.
async fn fetch_audio(
    service: &str,
    request: reqwest::RequestBuilder,
    message_of: impl Fn(&[u8]) -> Option<String>,
) -> Result<Bytes, VoiceError> {
    let unreachable = |e: reqwest::Error| VoiceError::Unreachable {
        service: service.to_owned(),
        message: e.to_string(),
    };
    let response = request.send().await.map_err(unreachable)?;
    let status = response.status();
    let body = response.bytes().await.map_err(unreachable)?;
    if !status.is_success() {
        let message = message_of(&body)
            .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(300).collect());
        return Err(VoiceError::Status {
            service: service.to_owned(),
            status: status.as_u16(),
            message,
        });
    }
    if body.len() > MAX_AUDIO_BYTES {
        return Err(VoiceError::NotAudio {
            service: service.to_owned(),
            message: format!("{} bytes, more than speech should take", body.len()),
        });
    }
    Ok(body)
}

/// `data` as Ogg Opus speech, or why it is not.
fn ogg(service: &str, data: Bytes) -> Result<Speech, VoiceError> {
    match format_of(&data) {
        Some(AudioFormat::Ogg) => Ok(Speech {
            data,
            media_type: "audio/ogg".to_owned(),
            file_name: "voice.ogg".to_owned(),
        }),
        other => Err(VoiceError::NotAudio {
            service: service.to_owned(),
            message: format!(
                "asked for Ogg Opus, got {}",
                other.map_or("something else", AudioFormat::name)
            ),
        }),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AudioFormat {
    Ogg,
    Wav,
    Mp3,
}

impl AudioFormat {
    fn name(self) -> &'static str {
        match self {
            AudioFormat::Ogg => "Ogg",
            AudioFormat::Wav => "WAV",
            AudioFormat::Mp3 => "MP3",
        }
    }
}

/// The container of `data`, by its first bytes.
fn format_of(data: &[u8]) -> Option<AudioFormat> {
    if data.starts_with(b"OggS") {
        Some(AudioFormat::Ogg)
    } else if data.len() >= 12 && &data[..4] == b"RIFF" && &data[8..12] == b"WAVE" {
        Some(AudioFormat::Wav)
    } else if data.starts_with(b"ID3")
        || (data.len() >= 2 && data[0] == 0xFF && data[1] & 0xE0 == 0xE0)
    {
        Some(AudioFormat::Mp3)
    } else {
        None
    }
}

/// A local program through `sh -c`: text on standard input, audio on
/// standard output. WAV is encoded to Ogg Opus by `opusenc` when it is on
/// the `PATH`; otherwise it is sent as an audio file.
#[derive(Debug, Clone)]
pub struct CommandSpeech {
    id: String,
    command: String,
    /// The Ogg Opus encoder WAV goes through, if any.
    opusenc: Option<PathBuf>,
}

impl CommandSpeech {
    /// Runs `command`; WAV it writes is encoded by the `opusenc` on the
    /// `PATH`, if there is one.
    pub fn new(command: &str) -> Self {
        let program = command.split_whitespace().next().unwrap_or("sh");
        CommandSpeech {
            id: format!("command {program}"),
            command: command.to_owned(),
            opusenc: flynn_tools::find_program(Path::new("opusenc")),
        }
    }

    /// Encodes WAV with this `opusenc` (`None`: sends WAV as it is).
    pub fn opusenc(mut self, opusenc: Option<PathBuf>) -> Self {
        self.opusenc = opusenc;
        self
    }
}

/// Runs `program` with `args` (not through a shell), `input` on its
/// standard input; its standard output.
async fn pipe(
    service: &str,
    program: &str,
    args: &[&str],
    input: Bytes,
) -> Result<Bytes, VoiceError> {
    let failed = |message: String| VoiceError::Program {
        command: service.to_owned(),
        message,
    };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("could not start {program}: {e}")))?;
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let write = async move {
        if let Some(stdin) = stdin.as_mut() {
            // A program that stops reading early is not an error here: its
            // exit status says how it went.
            let _ = stdin.write_all(&input).await;
        }
        drop(stdin);
    };
    let read = async move {
        let mut out = Vec::new();
        if let Some(stdout) = stdout.as_mut() {
            stdout
                .take(MAX_AUDIO_BYTES as u64 + 1)
                .read_to_end(&mut out)
                .await?;
        }
        Ok::<_, std::io::Error>(out)
    };
    let errors = async move {
        let mut err = Vec::new();
        if let Some(stderr) = stderr.as_mut() {
            let _ = stderr.take(4096).read_to_end(&mut err).await;
        }
        err
    };
    let run = async {
        let ((), out, err) = tokio::join!(write, read, errors);
        let status = child.wait().await?;
        Ok::<_, std::io::Error>((status, out?, err))
    };
    let (status, out, err) = tokio::time::timeout(TIMEOUT, run)
        .await
        .map_err(|_| failed(format!("took longer than {} s", TIMEOUT.as_secs())))?
        .map_err(|e| failed(e.to_string()))?;
    if !status.success() {
        let said = String::from_utf8_lossy(&err).trim().to_owned();
        return Err(failed(format!(
            "{status}{}",
            if said.is_empty() {
                String::new()
            } else {
                format!(": {said}")
            }
        )));
    }
    if out.len() > MAX_AUDIO_BYTES {
        return Err(failed(
            "wrote more audio than speech should take".to_owned(),
        ));
    }
    Ok(Bytes::from(out))
}

#[async_trait]
impl Synthesizer for CommandSpeech {
    fn id(&self) -> &str {
        &self.id
    }

    async fn speak(&self, text: &str) -> Result<Speech, VoiceError> {
        let text = spoken_part(text);
        if text.is_empty() {
            return Err(VoiceError::Empty);
        }
        let audio = pipe(
            &self.id,
            "sh",
            &["-c", &self.command],
            Bytes::copy_from_slice(text.as_bytes()),
        )
        .await?;
        match format_of(&audio) {
            Some(AudioFormat::Ogg) => ogg(&self.id, audio),
            Some(AudioFormat::Mp3) => Ok(Speech {
                data: audio,
                media_type: "audio/mpeg".to_owned(),
                file_name: "voice.mp3".to_owned(),
            }),
            Some(AudioFormat::Wav) if self.opusenc.is_some() => {
                let opusenc = self.opusenc.as_deref().unwrap_or(Path::new("opusenc"));
                let program = opusenc.to_string_lossy();
                let encoded = pipe("opusenc", &program, &["--quiet", "-", "-"], audio).await?;
                ogg("opusenc", encoded)
            }
            Some(AudioFormat::Wav) => {
                tracing::debug!(
                    "opusenc is not installed: speech goes as a WAV file, not a voice note"
                );
                Ok(Speech {
                    data: audio,
                    media_type: "audio/wav".to_owned(),
                    file_name: "voice.wav".to_owned(),
                })
            }
            None => Err(VoiceError::Program {
                command: self.id.clone(),
                message: if audio.is_empty() {
                    "wrote no audio to its standard output".to_owned()
                } else {
                    "wrote something that is not WAV, Ogg or MP3".to_owned()
                },
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn long_text_is_cut_at_a_sentence_end_near_the_limit() {
        let sentence = "This is one sentence. ";
        let long = sentence.repeat(400);
        let spoken = spoken_part(&long);
        assert!(spoken.chars().count() <= MAX_SPOKEN_CHARS);
        assert!(spoken.ends_with('.'), "{spoken:?}");
        assert_eq!(spoken_part("  short  "), "short");
        let unbroken = "a".repeat(MAX_SPOKEN_CHARS + 10);
        assert_eq!(spoken_part(&unbroken).len(), MAX_SPOKEN_CHARS);
    }

    #[test]
    fn formats_are_told_by_their_first_bytes() {
        assert_eq!(format_of(b"OggS\0\x02"), Some(AudioFormat::Ogg));
        assert_eq!(format_of(b"RIFF\0\0\0\0WAVEfmt "), Some(AudioFormat::Wav));
        assert_eq!(format_of(b"ID3\x04"), Some(AudioFormat::Mp3));
        assert_eq!(format_of(&[0xFF, 0xFB, 0x90]), Some(AudioFormat::Mp3));
        assert_eq!(format_of(b"{\"error\""), None);
    }
}
