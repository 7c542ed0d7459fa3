//! First-token latency and generation speed of a local GGUF model, as
//! recorded in docs/benchmarks.md:
//!
//! ```sh
//! cargo run --release -p flynn-models --features local-llm --example local_speed -- \
//!     "$(scripts/fetch-smollm2.sh)" 5
//! ```
//!
//! Loads the model once, then runs the same greedy question N times (5 by
//! default) and prints the median of each figure; then drops N streams
//! after a few tokens each and prints how long the model took to stop
//! (the median, and the slowest).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use flynn_models::{LocalClient, ModelClient, ModelRequest, StreamEvent};
use flynn_protocol::Message;
use flynn_protocol::config::{ProviderConfig, ProviderKind};
use futures::StreamExt;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = PathBuf::from(
        args.next()
            .ok_or("usage: local_speed <model.gguf> [runs]")?,
    );
    let runs: usize = args.next().map_or(Ok(5), |n| n.parse())?;
    let mut config = ProviderConfig::new(ProviderKind::Local);
    config.model_path = Some(path.clone());
    let client = LocalClient::new("local", &config)?;
    let loading = Instant::now();
    let window = client.context_window("m").await;
    println!(
        "model {} loaded in {:.0} ms (context {window:?})",
        path.display(),
        loading.elapsed().as_secs_f64() * 1000.0
    );
    let mut first = Vec::new();
    let mut speed = Vec::new();
    let mut prompt_tokens = 0;
    let mut output_tokens = Vec::new();
    for _ in 0..runs.max(1) {
        let mut request = ModelRequest::new(
            "m",
            vec![Message::user(
                "Explain in a few sentences why the sky is blue.",
            )],
        );
        request.temperature = Some(0.0);
        request.max_tokens = 128;
        let start = Instant::now();
        let mut stream = client.stream(request).await?;
        let mut first_at: Option<Duration> = None;
        while let Some(event) = stream.next().await {
            match event? {
                StreamEvent::TextDelta(_) => {
                    first_at.get_or_insert_with(|| start.elapsed());
                }
                StreamEvent::Completed(response) => {
                    let total = start.elapsed();
                    let first_at = first_at.unwrap_or(total);
                    prompt_tokens = response.usage.input_tokens;
                    let after_first = response.usage.output_tokens.saturating_sub(1) as f64;
                    first.push(first_at.as_secs_f64() * 1000.0);
                    speed.push(after_first / (total - first_at).as_secs_f64().max(1e-9));
                    output_tokens.push(response.usage.output_tokens as f64);
                }
                _ => {}
            }
        }
    }
    println!(
        "prompt {prompt_tokens} tokens; answer {:.0} tokens; first token {:.0} ms; {:.1} tokens/s (medians of {})",
        median(output_tokens),
        median(first),
        median(speed),
        runs.max(1)
    );
    let mut cancels = Vec::new();
    for _ in 0..runs.max(1) {
        let mut request = ModelRequest::new(
            "m",
            vec![Message::user("Write a very long story about the sea.")],
        );
        request.max_tokens = 2000;
        let mut stream = client.stream(request).await?;
        let mut deltas = 0;
        while deltas < 8 {
            match stream.next().await {
                Some(Ok(StreamEvent::TextDelta(_))) => deltas += 1,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => break,
            }
        }
        let dropped = Instant::now();
        drop(stream);
        client.wait_idle().await;
        cancels.push(dropped.elapsed().as_secs_f64() * 1000.0);
    }
    let slowest = cancels.iter().copied().fold(0.0, f64::max);
    println!(
        "cancel: the model stopped {:.1} ms after the stream was dropped (median of {}; slowest {slowest:.1} ms)",
        median(cancels),
        runs.max(1)
    );
    Ok(())
}
