//! flynn-voice against the strict fakes of the transcription endpoint
//! and the speech APIs, and with real local programs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod tts;

use bytes::Bytes;
use flynn_testkit::FakeStt;
use flynn_voice::{Audio, OpenAiTranscriber, Transcriber, VoiceError};

fn note() -> Audio {
    Audio {
        data: Bytes::from_static(b"OggS\0fake opus pages"),
        file_name: "voice.ogg".to_owned(),
        media_type: "audio/ogg".to_owned(),
    }
}

#[tokio::test]
async fn a_voice_note_is_sent_as_the_endpoint_documents_and_its_text_returned() {
    let stt = FakeStt::start();
    stt.require_key("sk-voice");
    stt.push("  Book a table for two at eight.\n");
    let transcriber =
        OpenAiTranscriber::new(&stt.base_url(), Some("sk-voice".to_owned()), "whisper-1")
            .unwrap()
            .language("en");
    assert_eq!(transcriber.id(), "127.0.0.1/whisper-1");
    let text = transcriber.transcribe(note()).await.unwrap();
    assert_eq!(text, "Book a table for two at eight.");
    let requests = stt.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(
        (
            request.model.as_str(),
            request.file_name.as_str(),
            request.media_type.as_deref(),
            request.language.as_deref(),
            request.response_format.as_deref(),
            request.key.as_deref()
        ),
        (
            "whisper-1",
            "voice.ogg",
            Some("audio/ogg"),
            Some("en"),
            Some("json"),
            Some("sk-voice")
        )
    );
    assert_eq!(request.audio, b"OggS\0fake opus pages");
    assert_eq!(stt.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn errors_name_the_service_and_say_what_it_answered() {
    let stt = FakeStt::start();
    stt.require_key("sk-voice");
    let wrong =
        OpenAiTranscriber::new(&stt.base_url(), Some("sk-other".to_owned()), "whisper-1").unwrap();
    let error = wrong.transcribe(note()).await.unwrap_err();
    assert!(
        matches!(&error, VoiceError::Status { status: 401, .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "127.0.0.1/whisper-1 answered 401: Incorrect API key provided."
    );

    let right =
        OpenAiTranscriber::new(&stt.base_url(), Some("sk-voice".to_owned()), "whisper-1").unwrap();
    stt.fail_next(429, "Rate limit reached for requests");
    let error = right.transcribe(note()).await.unwrap_err();
    assert!(
        error
            .to_string()
            .ends_with("answered 429: Rate limit reached for requests"),
        "{error}"
    );

    assert!(matches!(
        right
            .transcribe(Audio {
                data: Bytes::new(),
                ..note()
            })
            .await,
        Err(VoiceError::Empty)
    ));

    // A server that is not there.
    let gone = OpenAiTranscriber::new("http://127.0.0.1:9/v1", None, "whisper-1").unwrap();
    let error = gone.transcribe(note()).await.unwrap_err();
    assert!(matches!(error, VoiceError::Unreachable { .. }), "{error:?}");
    assert_eq!(stt.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn the_fake_refuses_what_the_endpoint_does_not_take() {
    let stt = FakeStt::start();
    stt.push("never said");
    let transcriber = OpenAiTranscriber::new(&stt.base_url(), None, "whisper-1").unwrap();
    let error = transcriber
        .transcribe(Audio {
            file_name: "voice.opus".to_owned(),
            ..note()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(error, VoiceError::Status { status: 400, .. }),
        "{error:?}"
    );
    assert_eq!(stt.violations().len(), 1, "{:?}", stt.violations());
    assert!(stt.violations()[0].contains("voice.opus"));
}
