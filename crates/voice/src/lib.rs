//! Flynn's voice: speech to text and text to speech.
//!
//! [`Transcriber`] turns a voice note's audio into text, and
//! [`OpenAiTranscriber`] does it through an OpenAI-compatible `POST
//! /audio/transcriptions` endpoint (OpenAI, Groq, a local whisper.cpp or
//! faster-whisper server); the channel router uses it for voice notes
//! when `voice.stt` is set.
//!
//! [`Synthesizer`] speaks text, as Ogg Opus where it can (a voice note on
//! Telegram and WhatsApp): [`OpenAiSpeech`] (`/audio/speech`),
//! [`ElevenLabsSpeech`], or a local program ([`CommandSpeech`]: espeak-ng,
//! piper), chosen by `voice.tts`; [`VoiceSay`] is the `voice.say` tool
//! that sends it to the turn's chat.

mod stt;
mod tool;
mod tts;

pub use stt::{Audio, OpenAiTranscriber, Transcriber, VoiceError};
pub use tool::VoiceSay;
pub use tts::{
    CommandSpeech, ELEVENLABS_FORMAT, ElevenLabsSpeech, MAX_SPOKEN_CHARS, OpenAiSpeech, Speech,
    Synthesizer, spoken_part, synthesizer,
};
