//! `kind: local` with a real model: SmolLM2-135M-Instruct (llama
//! architecture, ChatML template) from `FLYNN_SMOLLM2`, the path
//! `scripts/fetch-smollm2.sh` prints. Without it these tests fail and
//! say how to get it.

#![cfg(feature = "local-llm")]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use flynn_models::{LocalClient, ModelClient, ModelRequest, StopReason, StreamEvent};
use flynn_protocol::config::{ProviderConfig, ProviderKind};
use flynn_protocol::{ContentBlock, Message};
use futures::StreamExt;

use super::{client, run};

fn smollm2() -> PathBuf {
    match std::env::var_os("FLYNN_SMOLLM2") {
        Some(path) => PathBuf::from(path),
        None => panic!(
            "FLYNN_SMOLLM2 is not set: run `export FLYNN_SMOLLM2=$(scripts/fetch-smollm2.sh)` (.ci/run does)"
        ),
    }
}

fn local_config(path: PathBuf) -> ProviderConfig {
    let mut config = ProviderConfig::new(ProviderKind::Local);
    config.model_path = Some(path);
    config
}

fn question(text: &str, max_tokens: u32) -> ModelRequest<'static> {
    let mut request = ModelRequest::new("smollm2", vec![Message::user(text)]);
    request.max_tokens = max_tokens;
    request.temperature = Some(0.0);
    request
}

#[tokio::test]
async fn a_real_turn_streams_text_and_reports_usage() {
    let client = client("local", &local_config(smollm2()));
    assert!(client.info().local);
    assert_eq!(client.context_window("smollm2").await, Some(4096));
    let (deltas, response) = run(
        &client,
        question("What is the capital of France? Answer in one word.", 24),
    )
    .await;
    let response = response.unwrap();
    let streamed: String = deltas
        .iter()
        .map(|delta| match delta {
            StreamEvent::TextDelta(text) => text.as_str(),
            other => panic!("unexpected event {other:?}"),
        })
        .collect();
    assert!(deltas.len() > 1, "the answer came in one piece: {deltas:?}");
    let [ContentBlock::Text { text }] = response.message.content.as_slice() else {
        panic!("expected one text block: {:?}", response.message);
    };
    assert_eq!(streamed.trim_end(), text);
    assert!(text.contains("Paris"), "{text}");
    // The prompt: SmolLM2's default system prompt, the question, the
    // markers; the answer: what was streamed, then the end-of-turn token.
    assert!(
        (30..80).contains(&response.usage.input_tokens),
        "{:?}",
        response.usage
    );
    assert!(
        (1..=24).contains(&response.usage.output_tokens),
        "{:?}",
        response.usage
    );
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.model, "smollm2");
}

#[tokio::test]
async fn max_tokens_cuts_the_answer_and_says_so() {
    let client = client("local", &local_config(smollm2()));
    let (_, response) = run(&client, question("Tell me a long story about a dragon.", 5)).await;
    let response = response.unwrap();
    assert_eq!(response.stop_reason, StopReason::MaxTokens);
    assert_eq!(response.usage.output_tokens, 5);
}

/// Cancelling stops the generation between two tokens: after the stream
/// is dropped the model samples at most the token it was working on. That
/// is the 100 ms the issue asks for as long as a token takes less (see
/// docs/benchmarks.md for the time per token); counted in tokens, not
/// timed, so a busy machine cannot make it fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_stops_the_model_within_one_token() {
    let client = LocalClient::new("local", &local_config(smollm2())).unwrap();
    let mut request = question("Write a very long story about the sea.", 2000);
    request.temperature = Some(0.8);
    let mut stream = client.stream(request).await.unwrap();
    let mut deltas = 0;
    while deltas < 6 {
        match stream.next().await {
            Some(Ok(StreamEvent::TextDelta(_))) => deltas += 1,
            other => panic!("expected text, got {other:?}"),
        }
    }
    let dropped = Instant::now();
    drop(stream);
    // Read after the drop: a token sampled between the drop and this read
    // is not counted, which can only make the check below more lenient,
    // never fail it spuriously.
    let at_drop = client.tokens_sampled();
    // Bounded, not timed: long enough for any load, far shorter than the
    // 2000 tokens asked for (which would take minutes here).
    tokio::time::timeout(Duration::from_secs(60), client.wait_idle())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the model was still busy {:?} after the stream was dropped ({} tokens sampled since)",
                dropped.elapsed(),
                client.tokens_sampled() - at_drop
            )
        });
    let after = client.tokens_sampled() - at_drop;
    eprintln!(
        "idle {:?} after the drop, {after} token(s) sampled after it",
        dropped.elapsed()
    );
    assert!(
        after <= 1,
        "the model sampled {after} tokens after the stream was dropped; expected at most the one in progress"
    );
    // The model is free for the next call.
    let response = client.complete(question("Say hi.", 8)).await.unwrap();
    assert!(response.usage.output_tokens > 0);
    assert!(client.tokens_sampled() > at_drop + after);
}

#[tokio::test]
async fn a_prompt_longer_than_the_context_is_refused_before_it_runs() {
    let mut config = local_config(smollm2());
    config.context = Some(64);
    let client = client("local", &config);
    assert_eq!(client.context_window("smollm2").await, Some(64));
    let long = "word ".repeat(200);
    let error = client.stream(question(&long, 8)).await.err().unwrap();
    assert!(
        matches!(error, flynn_models::Error::ContextOverflow { .. }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("tokens and the model runs with a context of 64"),
        "{error}"
    );
}

#[test]
fn a_missing_file_names_the_path_and_how_to_get_a_model() {
    let config = local_config(PathBuf::from("/nonexistent/model.gguf"));
    let error = flynn_models::build_client("mine", &config).err().unwrap();
    assert_eq!(
        error.to_string(),
        "provider 'mine' (local): model file /nonexistent/model.gguf does not exist; download one with `flynn models pull <repo>/<file.gguf>` (or scripts/fetch-smollm2.sh) and set model_path to it"
    );
}

#[tokio::test]
async fn a_file_that_is_not_a_model_fails_the_call_not_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.gguf");
    std::fs::write(&path, b"not a model").unwrap();
    let client = client("local", &local_config(path.clone()));
    let error = client.stream(question("hi", 4)).await.err().unwrap();
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "provider 'local' (local): {} is not a GGUF file Flynn can read",
            path.display()
        )),
        "{message}"
    );
}
