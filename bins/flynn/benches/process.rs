//! Whole-process benchmarks of the `flynn` binary (run by `cargo xtask
//! bench`, which renders `docs/benchmarks.md`). Each case starts the real,
//! optimised binary many times and reports the median and p90 wall time.
//! `flynn send` runs against a fake OpenAI-compatible server that answers
//! at once, so what is measured is Flynn itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flynn_testkit::{FakeOpenAi, Reply};
use serde_json::json;

const WARMUP: usize = 5;

fn main() {
    let runs: usize = std::env::var("FLYNN_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let fake = runtime.block_on(FakeOpenAi::start());
    let home = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_flynn");

    let command = |args: &[&str]| {
        let mut command = Command::new(bin);
        command
            .args(args)
            .env_clear()
            .env("HOME", home.path())
            .env("FLYNN_HOME", home.path().join("home"))
            .env("OPENAI_BASE_URL", fake.base_url())
            .env("OPENAI_API_KEY", "sk-bench")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    };

    let version = measure(runs, |_| {
        let status = command(&["--version"]).status().unwrap();
        assert!(status.success());
    });
    let send = measure(runs, |i| {
        fake.push(Reply::Text("ok".into()));
        let session = format!("bench:{i}");
        let status = command(&["send", "--session", &session, "hello"])
            .status()
            .unwrap();
        assert!(status.success());
    });
    assert_eq!(fake.violations(), Vec::<String>::new());
    let request_bytes = fake
        .requests()
        .last()
        .map(|r| serde_json::to_vec(&r.body).unwrap().len())
        .unwrap_or(0);

    let report = json!({
        "runs": runs,
        "version": stats(&version),
        "send": stats(&send),
        "send_request_bytes": request_bytes,
    });
    match std::env::var("FLYNN_BENCH_OUT") {
        Ok(path) => std::fs::write(path, report.to_string()).unwrap(),
        Err(_) => println!("{report:#}"),
    }
}

fn measure(runs: usize, mut run: impl FnMut(usize)) -> Vec<Duration> {
    for i in 0..WARMUP {
        run(usize::MAX - i);
    }
    let mut times: Vec<Duration> = (0..runs)
        .map(|i| {
            let start = Instant::now();
            run(i);
            start.elapsed()
        })
        .collect();
    times.sort_unstable();
    times
}

fn stats(sorted: &[Duration]) -> serde_json::Value {
    let at = |q: f64| {
        let index = ((sorted.len() - 1) as f64 * q).round() as usize;
        sorted[index].as_secs_f64() * 1000.0
    };
    json!({"median_ms": at(0.5), "p90_ms": at(0.9), "min_ms": at(0.0)})
}
