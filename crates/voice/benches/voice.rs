//! What transcribing a voice note adds before its turn, apart from the
//! service's own model time: the multipart request and its answer over
//! loopback, against the strict fake of `/audio/transcriptions` (which
//! answers at once). Also what speaking an answer adds through the
//! OpenAI-compatible `/audio/speech` client against its fake.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use flynn_protocol::config::TtsConfig;
use flynn_testkit::{FakeStt, FakeTts};
use flynn_voice::{Audio, OpenAiTranscriber, Transcriber, synthesizer};

/// About 30 s of Opus at 8 kb/s, as a phone's voice note.
const NOTE_BYTES: usize = 30 * 1024;

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let stt = FakeStt::start();
    let transcriber = OpenAiTranscriber::new(&stt.base_url(), None, "whisper-1").unwrap();
    let mut data = b"OggS".to_vec();
    data.resize(NOTE_BYTES, 7);
    let note = Audio {
        data: Bytes::from(data),
        file_name: "voice.ogg".to_owned(),
        media_type: "audio/ogg".to_owned(),
    };
    let mut group = c.benchmark_group("voice");
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("transcribe_voice_note_30kb", |b| {
        b.iter_custom(|iters| {
            for _ in 0..iters {
                stt.push("Book a table for two at eight.");
            }
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    let text = transcriber.transcribe(note.clone()).await.unwrap();
                    assert!(!text.is_empty());
                }
                start.elapsed()
            })
        });
    });
    let tts = FakeTts::start();
    let speech = synthesizer(&TtsConfig::Openai {
        base_url: tts.base_url(),
        api_key: None,
        model: "gpt-4o-mini-tts".to_owned(),
        voice: "alloy".to_owned(),
    })
    .unwrap();
    let answer = "Booked for eight. ".repeat(20);
    group.bench_function("speak_answer_360_chars", |b| {
        b.iter(|| runtime.block_on(speech.speak(&answer)).unwrap());
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
