//! Text to speech: OpenAI's and ElevenLabs' APIs against their strict
//! fake, and local programs through `sh -c`.

use flynn_protocol::config::TtsConfig;
use flynn_testkit::{FakeTts, fake_audio};
use std::path::Path;

use flynn_tools::find_program;
use flynn_voice::{CommandSpeech, Synthesizer, VoiceError, synthesizer};

#[tokio::test]
async fn openai_speech_is_asked_for_ogg_opus_with_the_model_and_voice() {
    let tts = FakeTts::start();
    tts.require_key("sk-tts");
    let engine = synthesizer(&TtsConfig::Openai {
        base_url: tts.base_url(),
        api_key: Some("sk-tts".to_owned()),
        model: "gpt-4o-mini-tts".to_owned(),
        voice: "nova".to_owned(),
    })
    .unwrap();
    assert_eq!(engine.id(), "127.0.0.1/gpt-4o-mini-tts");
    let speech = engine.speak("  Booked for eight.  ").await.unwrap();
    assert!(speech.is_voice_note());
    assert_eq!(
        (speech.media_type.as_str(), speech.file_name.as_str()),
        ("audio/ogg", "voice.ogg")
    );
    assert_eq!(&speech.data[..], fake_audio("opus", "Booked for eight."));
    let asked = tts.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        (
            asked[0].api,
            asked[0].text.as_str(),
            asked[0].model.as_deref(),
            asked[0].voice.as_str(),
            asked[0].format.as_deref(),
            asked[0].key.as_deref()
        ),
        (
            "openai",
            "Booked for eight.",
            Some("gpt-4o-mini-tts"),
            "nova",
            Some("opus"),
            Some("sk-tts")
        )
    );
    // Too long for one request: cut to what the API takes.
    let long = "A sentence to say. ".repeat(400);
    engine.speak(&long).await.unwrap();
    assert!(tts.requests()[1].text.chars().count() <= flynn_voice::MAX_SPOKEN_CHARS);
    assert_eq!(tts.violations(), Vec::<String>::new());

    // Errors name the engine and say what it answered.
    let wrong = synthesizer(&TtsConfig::Openai {
        base_url: tts.base_url(),
        api_key: Some("sk-other".to_owned()),
        model: "gpt-4o-mini-tts".to_owned(),
        voice: "nova".to_owned(),
    })
    .unwrap();
    let error = wrong.speak("hello").await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "127.0.0.1/gpt-4o-mini-tts answered 401: Incorrect API key provided."
    );
    assert!(matches!(engine.speak(" \n").await, Err(VoiceError::Empty)));
}

#[tokio::test]
async fn elevenlabs_is_asked_for_opus_with_its_key_header() {
    let tts = FakeTts::start();
    tts.require_key("xi-secret");
    let engine = synthesizer(&TtsConfig::Elevenlabs {
        base_url: tts.elevenlabs_url(),
        api_key: "xi-secret".to_owned(),
        voice_id: "JBFqnCBsd6RMkjVDRZzb".to_owned(),
        model: "eleven_multilingual_v2".to_owned(),
    })
    .unwrap();
    let speech = engine.speak("Your table is booked.").await.unwrap();
    assert!(speech.is_voice_note());
    let asked = tts.requests();
    assert_eq!(
        (
            asked[0].api,
            asked[0].voice.as_str(),
            asked[0].model.as_deref(),
            asked[0].format.as_deref(),
            asked[0].key.as_deref()
        ),
        (
            "elevenlabs",
            "JBFqnCBsd6RMkjVDRZzb",
            Some("eleven_multilingual_v2"),
            Some(flynn_voice::ELEVENLABS_FORMAT),
            Some("xi-secret")
        )
    );
    tts.fail_next(429, "Too many concurrent requests");
    let error = engine.speak("again").await.unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with("answered 429: Too many concurrent requests"),
        "{error}"
    );
    assert_eq!(tts.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn a_local_program_reads_the_text_and_writes_the_audio() {
    // An engine that writes a WAV header and the text it read: without an
    // encoder it goes as a WAV file.
    let engine = CommandSpeech::new("printf 'RIFF\\0\\0\\0\\0WAVE'; cat").opusenc(None);
    let speech = engine.speak("hello there").await.unwrap();
    assert_eq!(
        (speech.media_type.as_str(), speech.file_name.as_str()),
        ("audio/wav", "voice.wav")
    );
    assert_eq!(&speech.data[..], b"RIFF\0\0\0\0WAVEhello there");
    assert!(!speech.is_voice_note());

    // A program that fails says why, with what it wrote to stderr.
    let failing = CommandSpeech::new("echo 'no voice named xx' >&2; exit 3");
    let error = failing.speak("hi").await.unwrap_err();
    assert!(
        error.to_string().contains("no voice named xx")
            && error.to_string().contains("exit status: 3"),
        "{error}"
    );
    // One that writes no audio.
    let silent = CommandSpeech::new("cat > /dev/null");
    let error = silent.speak("hi").await.unwrap_err();
    assert!(error.to_string().contains("wrote no audio"), "{error}");
}

/// The real thing: espeak-ng speaks, opusenc makes it a voice note.
#[tokio::test]
async fn espeak_ng_through_opusenc_makes_an_ogg_opus_voice_note() {
    let (Some(_), Some(opusenc)) = (
        find_program(Path::new("espeak-ng")),
        find_program(Path::new("opusenc")),
    ) else {
        panic!(
            "this test needs espeak-ng and opusenc (opus-tools): run scripts/install-test-deps.sh"
        );
    };
    let engine = CommandSpeech::new("espeak-ng --stdout").opusenc(Some(opusenc));
    let speech = engine
        .speak("Your table is booked for eight.")
        .await
        .unwrap();
    assert!(speech.is_voice_note(), "{}", speech.media_type);
    // An Ogg stream whose first page holds Opus's identification header.
    assert!(speech.data.starts_with(b"OggS"));
    assert!(
        speech.data[..200].windows(8).any(|w| w == b"OpusHead"),
        "no OpusHead in the first page"
    );
    assert!(speech.data.len() > 2000, "{} bytes", speech.data.len());
}
