//! Streaming parse throughput: how fast a model's answer is turned into
//! deltas, in MB/s and events/s, through the real path (the SSE parser, the
//! vendor's assembler and the stream loop every call goes through), fed
//! from memory one event per chunk, as servers flush them.
//!
//! The streams are the documented examples of `flynn-testkit`'s fixtures
//! with their text delta repeated: 5,000 `chat.completion.chunk`s for
//! OpenAI, 5,000 `content_block_delta`s for Anthropic.
//!
//! `cargo bench -p flynn-models --bench sse`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flynn_models::bench::{Wire, parse};
use flynn_testkit::fixtures;

const DELTAS: usize = 5_000;

/// The events of a fixture: blocks separated by a blank line, without the
/// `:` comment lines naming the source.
fn events(fixture: &str) -> Vec<String> {
    fixture
        .split("\n\n")
        .map(|block| {
            block
                .lines()
                .filter(|line| !line.starts_with(':'))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .filter(|block| !block.is_empty())
        .map(|block| format!("{block}\n\n"))
        .collect()
}

/// A word-sized piece of text, different each time.
fn word(i: usize) -> String {
    format!("word{i} ")
}

/// The documented OpenAI text stream with its one content chunk repeated.
fn openai_stream() -> Vec<Bytes> {
    let events = events(fixtures::OPENAI_STREAMING_TEXT);
    let [first, content, finish, done] = events.as_slice() else {
        panic!("the OpenAI fixture changed shape: {events:?}");
    };
    let mut out = vec![Bytes::from(first.clone())];
    for i in 0..DELTAS {
        out.push(Bytes::from(
            content.replace("\"Hello\"", &format!("\"{}\"", word(i))),
        ));
    }
    out.push(Bytes::from(finish.clone()));
    out.push(Bytes::from(done.clone()));
    out
}

/// The documented Anthropic text stream with its first text delta repeated
/// (and its second dropped).
fn anthropic_stream() -> Vec<Bytes> {
    let events = events(fixtures::ANTHROPIC_STREAMING_TEXT);
    let delta = events
        .iter()
        .find(|event| event.contains("\"text_delta\""))
        .expect("a text delta")
        .clone();
    let mut out = Vec::new();
    let mut repeated = false;
    for event in &events {
        if event.contains("\"text_delta\"") {
            if !repeated {
                repeated = true;
                for i in 0..DELTAS {
                    out.push(Bytes::from(
                        delta.replace("\"Hello\"", &format!("\"{}\"", word(i))),
                    ));
                }
            }
        } else {
            out.push(Bytes::from(event.clone()));
        }
    }
    out
}

fn sse(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    for (name, wire, stream) in [
        ("openai", Wire::OpenAi, openai_stream()),
        ("anthropic", Wire::Anthropic, anthropic_stream()),
    ] {
        let bytes: usize = stream.iter().map(Bytes::len).sum();
        // Every delta, then the assembled answer.
        let events = runtime
            .block_on(parse(wire, stream.clone()))
            .expect("parses");
        assert_eq!(events, DELTAS + 1, "{name}");

        let mut group = c.benchmark_group("sse_bytes");
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                runtime
                    .block_on(parse(wire, stream.clone()))
                    .expect("parses")
            });
        });
        group.finish();

        let mut group = c.benchmark_group("sse_events");
        group.throughput(Throughput::Elements(events as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                runtime
                    .block_on(parse(wire, stream.clone()))
                    .expect("parses")
            });
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = sse
}
criterion_main!(benches);
