//! Flynn's voice. For now, speech to text: [`Transcriber`] turns a voice
//! note's audio into text, and [`OpenAiTranscriber`] does it through an
//! OpenAI-compatible `POST /audio/transcriptions` endpoint (OpenAI, Groq,
//! a local whisper.cpp or faster-whisper server). The channel router uses
//! it for voice notes when `voice.stt` is set.

mod stt;

pub use stt::{Audio, OpenAiTranscriber, Transcriber, VoiceError};
