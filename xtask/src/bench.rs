//! `cargo xtask bench`: runs the whole-process benchmarks on an optimised
//! build and writes the results, with the targets from SPEC.md, to
//! `docs/benchmarks.md`.

use std::fmt::Write as _;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// (case key, what is measured, target in milliseconds)
const CASES: &[(&str, &str, f64)] = &[
    ("version", "`flynn --version`", 3.0),
    (
        "send",
        "`flynn send` one turn against a local server that answers at once",
        10.0,
    ),
];

/// The most a plain turn may send to the model, in bytes (3.5 KB).
const PLAIN_TURN_BYTES: u64 = 3584;

pub fn run(args: &[String]) -> Result<()> {
    let root = crate::project_root();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(100), |v| v.parse::<usize>())
        .context("--runs takes a number")?;
    let out = std::env::temp_dir().join(format!("flynn-bench-{}.json", std::process::id()));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(&cargo)
        .args(["bench", "-p", "flynn", "--bench", "process"])
        .env("FLYNN_BENCH_OUT", &out)
        .env("FLYNN_BENCH_RUNS", runs.to_string())
        .current_dir(&root)
        .status()
        .context("running cargo bench")?;
    if !status.success() {
        bail!("cargo bench failed ({status})");
    }
    let results: Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    let _ = std::fs::remove_file(&out);

    let status = Command::new(&cargo)
        .args([
            "bench",
            "-p",
            "flynn-models",
            "--bench",
            "router",
            "--bench",
            "sse",
        ])
        .current_dir(&root)
        .status()
        .context("running cargo bench")?;
    if !status.success() {
        bail!("cargo bench -p flynn-models failed ({status})");
    }
    let status = Command::new(&cargo)
        .args([
            "bench",
            "-p",
            "flynn-orchestrator",
            "--bench",
            "runtime",
            "--bench",
            "compaction",
        ])
        .current_dir(&root)
        .status()
        .context("running cargo bench")?;
    if !status.success() {
        bail!("cargo bench -p flynn-orchestrator failed ({status})");
    }
    let status = Command::new(&cargo)
        .args([
            "bench",
            "-p",
            "flynn-tools",
            "--bench",
            "executor",
            "--bench",
            "extract",
        ])
        .current_dir(&root)
        .status()
        .context("running cargo bench")?;
    if !status.success() {
        bail!("cargo bench -p flynn-tools failed ({status})");
    }
    let status = Command::new(&cargo)
        .args(["bench", "-p", "flynn-memory", "--bench", "search"])
        .current_dir(&root)
        .status()
        .context("running cargo bench")?;
    if !status.success() {
        bail!("cargo bench -p flynn-memory failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), std::path::PathBuf::from);
    let micro = micro_results(&target.join("criterion"))?;
    let compaction: Value = serde_json::from_str(
        &std::fs::read_to_string(target.join("criterion/flynn-compaction.json"))
            .context("reading the compaction benchmark's counts")?,
    )?;

    let mut markdown = render(&results, &machine());
    markdown.push_str(&render_micro(&micro));
    markdown.push_str(&render_compaction(&compaction, &micro));
    let memory: Value = serde_json::from_str(
        &std::fs::read_to_string(target.join("criterion/flynn-memory.json"))
            .context("reading the memory benchmark's counts")?,
    )?;
    markdown.push_str(&render_memory(&memory, &micro));
    std::fs::write(root.join("docs/benchmarks.md"), &markdown)?;
    print!("{markdown}");
    Ok(())
}

/// Median time (ns) and throughput (bytes or elements per iteration) of
/// one criterion benchmark, read from its `new/` estimates.
#[derive(Debug, Clone, PartialEq)]
struct Micro {
    id: String,
    median_ns: f64,
    throughput: Option<(String, f64)>,
}

const MICRO: &[&str] = &[
    "router/direct",
    "router/routed",
    "router/routed_after_failover",
    "sse_bytes/openai",
    "sse_bytes/anthropic",
    "sse_events/openai",
    "sse_events/anthropic",
    "turn/overhead",
    "cancel/model_stream",
    "cancel/tool_process",
    "tools/executor_call",
    "web_fetch_extract/markdown_1mb_article",
    "compaction/history_200k_tokens",
    "memory/hybrid_search_100k",
    "memory/keyword_search_100k",
    "memory/vector_search_100k",
];

/// Hybrid memory search over 100,000 chunks must take at most this, at
/// the median (ms).
const MEMORY_SEARCH_MS: f64 = 20.0;

fn micro_results(criterion: &std::path::Path) -> Result<Vec<Micro>> {
    MICRO
        .iter()
        .map(|id| {
            let dir = criterion.join(id).join("new");
            let estimates: Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join("estimates.json"))
                    .with_context(|| format!("reading {}", dir.display()))?,
            )?;
            let benchmark: Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("benchmark.json"))?)?;
            let throughput = benchmark["throughput"].as_object().and_then(|t| {
                t.iter()
                    .next()
                    .and_then(|(kind, n)| n.as_f64().map(|n| (kind.clone(), n)))
            });
            Ok(Micro {
                id: (*id).to_owned(),
                median_ns: estimates["median"]["point_estimate"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
                throughput,
            })
        })
        .collect()
}

fn render_micro(micro: &[Micro]) -> String {
    let mut md = String::from(
        "\n## In process (criterion): model layer, runtime and tools\n\n| benchmark | median | throughput |\n|---|---|---|\n",
    );
    for m in micro {
        let throughput = match &m.throughput {
            Some((kind, n)) if kind == "Bytes" => {
                format!("{:.0} MiB/s", n / (m.median_ns / 1e9) / (1024.0 * 1024.0))
            }
            Some((_, n)) => format!("{:.0} events/s", n / (m.median_ns / 1e9)),
            None => String::new(),
        };
        let _ = writeln!(
            md,
            "| `{}` | {:.2} µs | {throughput} |",
            m.id,
            m.median_ns / 1000.0
        );
    }
    let by_id = |id: &str| micro.iter().find(|m| m.id == id).map(|m| m.median_ns);
    if let (Some(direct), Some(routed)) = (by_id("router/direct"), by_id("router/routed")) {
        let overhead = (routed - direct) / 1000.0;
        let verdict = if overhead < 100.0 { "meets" } else { "misses" };
        let _ = writeln!(
            md,
            "\nRouter overhead per call (routed minus direct, zero-latency client): {overhead:.2} µs; target under 100 µs: {verdict}."
        );
    }
    if let Some(turn) = by_id("turn/overhead") {
        let ms = turn / 1e6;
        let verdict = if ms < 1.0 { "meets" } else { "misses" };
        let _ = writeln!(
            md,
            "\nFramework overhead of a whole turn through the session manager (accept, start, prompt, answer and usage stored, finish; zero-latency model, SQLite file): {ms:.3} ms; target under 1 ms at p50: {verdict}."
        );
    }
    if let Some(ns) = by_id("tools/executor_call") {
        let us = ns / 1000.0;
        let verdict = if us < 50.0 { "meets" } else { "misses" };
        let _ = writeln!(
            md,
            "\nExecutor overhead per tool call (lookup, policy, hooks, timeout, redaction, truncation, one audit line written; a tool that returns at once): {us:.2} µs; target under 50 µs: {verdict}."
        );
    }
    if let Some(ns) = by_id("web_fetch_extract/markdown_1mb_article") {
        let ms = ns / 1e6;
        let verdict = if ms < 50.0 { "meets" } else { "misses" };
        let _ = writeln!(
            md,
            "\nReadability extraction of a 1 MB article page to markdown (web.fetch): {ms:.2} ms; target under 50 ms: {verdict}."
        );
    }
    for (id, what) in [
        ("cancel/model_stream", "a waiting model stream"),
        ("cancel/tool_process", "a running tool process"),
    ] {
        if let Some(ns) = by_id(id) {
            let ms = ns / 1e6;
            let verdict = if ms < 100.0 { "meets" } else { "misses" };
            let _ = writeln!(
                md,
                "\nCancel to turn end, {what}: {ms:.3} ms; target within 100 ms: {verdict}."
            );
        }
    }
    md
}

/// Compaction of a long history, and what background work costs in a long
/// conversation (see `crates/orchestrator/benches/compaction.rs`).
fn render_compaction(counts: &Value, micro: &[Micro]) -> String {
    let n = |key: &str| counts[key].as_u64().unwrap_or(0);
    let mut md = String::from("\n## Compaction and delegation\n");
    if let Some(m) = micro
        .iter()
        .find(|m| m.id == "compaction/history_200k_tokens")
    {
        let _ = writeln!(
            md,
            "\nCompacting a {}-token history (500 exchanges with tool calls) at 80% of the window, with a summariser that answers at once: {:.1} ms of Flynn's own work (split, render, {} summariser calls, store); {} tokens sent to the summariser; about {} tokens left in the prompt.",
            n("history_tokens"),
            m.median_ns / 1e6,
            n("summariser_calls"),
            n("summariser_tokens"),
            n("tokens_after"),
        );
    }
    let (fast, all) = (n("fast_tokens"), n("all_tokens"));
    if all > 0 {
        let share = fast as f64 * 100.0 / all as f64;
        let _ = writeln!(
            md,
            "\nA {}-turn conversation on a 16k-token default model, compacting on the fast tier: {fast} of {all} tokens billed ({share:.1}%) went to the fast tier.",
            n("conversation_turns"),
        );
    }
    md
}

/// Memory search over 100,000 chunks, indexing speed and the index's
/// cost (see `crates/memory/benches/search.rs`).
fn render_memory(counts: &Value, micro: &[Micro]) -> String {
    let n = |key: &str| counts[key].as_u64().unwrap_or(0);
    let ms = |id: &str| {
        micro
            .iter()
            .find(|m| m.id == id)
            .map_or(f64::NAN, |m| m.median_ns / 1e6)
    };
    let hybrid = ms("memory/hybrid_search_100k");
    let verdict = if hybrid <= MEMORY_SEARCH_MS {
        "meets"
    } else {
        "misses"
    };
    let mut md = String::from("\n## Memory search\n");
    let _ = writeln!(
        md,
        "\nOver {} chunks ({} files of notes, {}-dimension vectors from an in-process stand-in embedder): hybrid search {hybrid:.2} ms at the median (target: at most {MEMORY_SEARCH_MS} ms): {verdict}; keywords alone {:.2} ms, vectors alone {:.2} ms.",
        n("chunks"),
        n("chunks") / 100,
        n("dimensions"),
        ms("memory/keyword_search_100k"),
        ms("memory/vector_search_100k"),
    );
    let _ = writeln!(
        md,
        "\nBuilding the index from the files: {} chunks a second ({:.1} s for all, embedding included). The index file: {:.0} MB; the process grew by {:.1} MB of RSS building and searching it.",
        n("chunks_per_second"),
        n("build_ms") as f64 / 1000.0,
        n("index_bytes") as f64 / 1_048_576.0,
        n("rss_growth_kib") as f64 / 1024.0,
    );
    md
}

fn machine() -> String {
    let output = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    format!(
        "{} cores, {} {}, {}, commit {}, {}",
        std::thread::available_parallelism().map_or(0, usize::from),
        output("uname", &["-s"]),
        output("uname", &["-m"]),
        output("rustc", &["--version"]),
        output("git", &["rev-parse", "--short", "HEAD"]),
        output("date", &["-u", "+%Y-%m-%d"]),
    )
}

fn render(results: &Value, machine: &str) -> String {
    let mut md = String::from(
        "# Benchmarks\n\nWritten by `cargo xtask bench`; do not edit by hand. Whole-process wall time of the\nrelease binary, started afresh for every run (after 5 warm-up runs).\n\n",
    );
    let _ = writeln!(
        md,
        "Machine: {machine}. Runs per case: {}.\n",
        results["runs"]
    );
    md.push_str("| case | target | median | p90 | min | verdict |\n|---|---|---|---|---|---|\n");
    for (key, what, target) in CASES {
        let case = &results[*key];
        let median = case["median_ms"].as_f64().unwrap_or(f64::NAN);
        let verdict = if median <= *target { "meets" } else { "misses" };
        let _ = writeln!(
            md,
            "| {what} | ≤ {target} ms | {median:.2} ms | {:.2} ms | {:.2} ms | {verdict} |",
            case["p90_ms"].as_f64().unwrap_or(f64::NAN),
            case["min_ms"].as_f64().unwrap_or(f64::NAN),
        );
    }
    let bytes = results["send_request_bytes"].as_u64().unwrap_or(0);
    let verdict = if bytes > 0 && bytes <= PLAIN_TURN_BYTES {
        "meets"
    } else {
        "misses"
    };
    let _ = writeln!(
        md,
        "\nA plain `flynn send` turn sent {bytes} bytes of JSON to the model: the system prompt assembled\nfor the turn, the default tools' schemas and the message (target: at most 3.5 KB = {PLAIN_TURN_BYTES} bytes): {verdict}."
    );
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_results_report_throughput_and_router_overhead() {
        let micro = vec![
            Micro {
                id: "router/direct".into(),
                median_ns: 2_000.0,
                throughput: None,
            },
            Micro {
                id: "router/routed".into(),
                median_ns: 5_500.0,
                throughput: None,
            },
            Micro {
                id: "sse_bytes/openai".into(),
                median_ns: 1e9,
                throughput: Some(("Bytes".into(), 2.0 * 1024.0 * 1024.0)),
            },
            Micro {
                id: "sse_events/openai".into(),
                median_ns: 5e8,
                throughput: Some(("Elements".into(), 1000.0)),
            },
        ];
        let md = render_micro(&micro);
        assert!(md.contains("| `router/routed` | 5.50 µs |  |"), "{md}");
        assert!(
            md.contains("| `sse_bytes/openai` | 1000000.00 µs | 2 MiB/s |"),
            "{md}"
        );
        assert!(
            md.contains("| `sse_events/openai` | 500000.00 µs | 2000 events/s |"),
            "{md}"
        );
        assert!(md.contains("overhead per call (routed minus direct, zero-latency client): 3.50 µs; target under 100 µs: meets."), "{md}");
    }

    #[test]
    fn renders_a_row_per_case_with_a_verdict() {
        let results = serde_json::json!({
            "runs": 10,
            "version": {"median_ms": 1.5, "p90_ms": 2.0, "min_ms": 1.0},
            "send": {"median_ms": 12.25, "p90_ms": 15.0, "min_ms": 11.0},
            "send_request_bytes": 1234,
        });
        let md = render(&results, "test machine");
        assert!(
            md.contains("Machine: test machine. Runs per case: 10."),
            "{md}"
        );
        assert!(
            md.contains("| `flynn --version` | ≤ 3 ms | 1.50 ms | 2.00 ms | 1.00 ms | meets |"),
            "{md}"
        );
        assert!(
            md.contains("| ≤ 10 ms | 12.25 ms | 15.00 ms | 11.00 ms | misses |"),
            "{md}"
        );
        assert!(
            md.contains("sent 1234 bytes of JSON to the model: the system prompt assembled\nfor the turn, the default tools' schemas and the message (target: at most 3.5 KB = 3584 bytes): meets."),
            "{md}"
        );
        let memory = serde_json::json!({"chunks": 100000, "dimensions": 384, "build_ms": 48500, "chunks_per_second": 2062, "index_bytes": 524288000, "rss_growth_kib": 25600});
        let micro = vec![
            Micro {
                id: "memory/hybrid_search_100k".into(),
                median_ns: 16.5e6,
                throughput: None,
            },
            Micro {
                id: "memory/keyword_search_100k".into(),
                median_ns: 1.4e6,
                throughput: None,
            },
            Micro {
                id: "memory/vector_search_100k".into(),
                median_ns: 14.3e6,
                throughput: None,
            },
        ];
        let md = render_memory(&memory, &micro);
        assert!(md.contains("hybrid search 16.50 ms at the median (target: at most 20 ms): meets; keywords alone 1.40 ms, vectors alone 14.30 ms."), "{md}");
        assert!(md.contains("2062 chunks a second (48.5 s for all, embedding included). The index file: 500 MB; the process grew by 25.0 MB"), "{md}");
        let slow = vec![Micro {
            id: "memory/hybrid_search_100k".into(),
            median_ns: 21e6,
            throughput: None,
        }];
        assert!(render_memory(&memory, &slow).contains(": misses;"));
        let heavy = serde_json::json!({"runs": 1, "send_request_bytes": 4000});
        assert!(render(&heavy, "m").contains("(target: at most 3.5 KB = 3584 bytes): misses."));
    }
}
