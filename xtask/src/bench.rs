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

/// Cargo, run from the project's root.
struct Cargo {
    program: String,
    root: std::path::PathBuf,
}

impl Cargo {
    /// Runs `cargo <args>` with `env` added, failing with the command when
    /// it fails.
    fn run(&self, args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Result<()> {
        let status = Command::new(&self.program)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(&self.root)
            .status()
            .with_context(|| format!("running cargo {}", args.join(" ")))?;
        if !status.success() {
            bail!("cargo {} failed ({status})", args.join(" "));
        }
        Ok(())
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let root = crate::project_root();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .map_or(Ok(100), |v| v.parse::<usize>())
        .context("--runs takes a number")?;
    let out = std::env::temp_dir().join(format!("flynn-bench-{}.json", std::process::id()));
    let runs_text = runs.to_string();
    let cargo = Cargo {
        program: std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned()),
        root: root.clone(),
    };
    cargo.run(
        &["bench", "-p", "flynn", "--bench", "process"],
        &[
            ("FLYNN_BENCH_OUT", out.as_os_str()),
            ("FLYNN_BENCH_RUNS", std::ffi::OsStr::new(&runs_text)),
        ],
    )?;
    let results: Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    let _ = std::fs::remove_file(&out);

    let daemon_out =
        std::env::temp_dir().join(format!("flynn-bench-daemon-{}.json", std::process::id()));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), std::path::PathBuf::from);
    // The release binaries as users build them (default features, every
    // chat channel in): `flynn` is already built by the process bench,
    // in the bench profile, which is the release profile. `flynn-daemon`
    // is measured idle by the daemon bench, and for its size.
    cargo.run(&["build", "--profile", "bench", "-p", "flynn-daemon"], &[])?;
    let daemon_bin = target.join("release").join("flynn-daemon");
    // The default build, every chat channel in: the same build as the
    // process bench, so it is not built again.
    cargo.run(
        &["bench", "-p", "flynn", "--bench", "daemon"],
        &[
            ("FLYNN_BENCH_DAEMON_OUT", daemon_out.as_os_str()),
            ("FLYNN_BENCH_RUNS", std::ffi::OsStr::new(&runs_text)),
            ("FLYNN_BENCH_DAEMON_BIN", daemon_bin.as_os_str()),
        ],
    )?;
    let daemon: Value =
        serde_json::from_str(&std::fs::read_to_string(&daemon_out).with_context(|| {
            format!(
                "reading the daemon benchmark's results from {}",
                daemon_out.display()
            )
        })?)?;
    let _ = std::fs::remove_file(&daemon_out);

    for (package, benches) in [
        ("flynn-models", ["router", "sse"]),
        ("flynn-orchestrator", ["runtime", "compaction"]),
        ("flynn-tools", ["executor", "extract"]),
    ] {
        cargo.run(
            &[
                "bench", "-p", package, "--bench", benches[0], "--bench", benches[1],
            ],
            &[],
        )?;
    }
    // Voice: what transcribing a note and speaking an answer add.
    cargo.run(&["bench", "-p", "flynn-voice", "--bench", "voice"], &[])?;
    // One browser tool call against the system's Chromium (installed by
    // scripts/install-test-deps.sh).
    cargo.run(
        &[
            "bench",
            "-p",
            "flynn-tools",
            "--features",
            "browser",
            "--bench",
            "browser",
        ],
        &[],
    )?;
    // Memory search in PostgreSQL too, on the test server the project's
    // script starts (or finds running).
    let postgres = Command::new(root.join("scripts/postgres.sh"))
        .output()
        .context("running scripts/postgres.sh")?;
    if !postgres.status.success() {
        bail!(
            "scripts/postgres.sh failed ({}): {}; run scripts/install-test-deps.sh first",
            postgres.status,
            String::from_utf8_lossy(&postgres.stderr).trim()
        );
    }
    let postgres_url = String::from_utf8_lossy(&postgres.stdout).trim().to_owned();
    cargo.run(
        &["bench", "-p", "flynn-memory", "--bench", "search"],
        &[(
            "FLYNN_TEST_POSTGRES_URL",
            std::ffi::OsStr::new(&postgres_url),
        )],
    )?;
    let mut sizes = Vec::new();
    for binary in ["flynn-daemon", "flynn"] {
        let path = target.join("release").join(binary);
        let bytes = std::fs::metadata(&path)
            .with_context(|| format!("reading the size of {}", path.display()))?
            .len();
        sizes.push((binary, bytes));
    }
    let micro = micro_results(&target.join("criterion"))?;
    let compaction: Value = serde_json::from_str(
        &std::fs::read_to_string(target.join("criterion/flynn-compaction.json"))
            .context("reading the compaction benchmark's counts")?,
    )?;

    let mut markdown = render(&results, &machine());
    markdown.push_str(&render_daemon(&daemon, &results));
    markdown.push_str(&render_sizes(&sizes));
    markdown.push_str(&render_micro(&micro));
    markdown.push_str(&render_compaction(&compaction, &micro));
    let memory: Value = serde_json::from_str(
        &std::fs::read_to_string(target.join("criterion/flynn-memory.json"))
            .context("reading the memory benchmark's counts")?,
    )?;
    markdown.push_str(&render_memory(&memory, &micro));
    let path = root.join("docs/benchmarks.md");
    let previous = std::fs::read_to_string(&path).unwrap_or_default();
    let markdown = with_hand_written(markdown, &previous);
    std::fs::write(&path, &markdown)?;
    print!("{markdown}");
    Ok(())
}

/// The line after which `docs/benchmarks.md` is written by hand: the
/// measurements no bench case renders (one-off runs, before/after
/// comparisons, crash runs), which a new run keeps as they are.
const HAND_WRITTEN: &str =
    "<!-- Written by hand below this line; `cargo xtask bench` keeps it as it is. -->";

/// `generated`, then the hand-written part of `previous` (from its
/// [`HAND_WRITTEN`] line on), if it has one.
fn with_hand_written(mut generated: String, previous: &str) -> String {
    if let Some(at) = previous.find(HAND_WRITTEN) {
        if !generated.ends_with("\n\n") {
            generated.push('\n');
        }
        generated.push_str(&previous[at..]);
    }
    generated
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
    "browser/snapshot_small_page",
    "compaction/history_200k_tokens",
    "memory/hybrid_search_100k",
    "memory/keyword_search_100k",
    "memory/vector_search_100k",
    "memory_postgres/hybrid_search_100k",
    "memory_postgres/keyword_search_100k",
    "memory_postgres/vector_search_100k",
    "voice/transcribe_voice_note_30kb",
    "voice/speak_answer_360_chars",
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
            "\nFramework overhead of a whole turn through the session manager (accepted and started in one commit, prompt, the answer stored with its usage and the turn's end in another; zero-latency model, SQLite file): {ms:.3} ms; target under 1 ms at p50: {verdict}."
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
    if let Some(ns) = by_id("voice/transcribe_voice_note_30kb") {
        let _ = writeln!(
            md,
            "\nWhat transcribing a 30 KB voice note adds before its turn, apart from the service's model time (the multipart request and its answer over loopback, `voice.stt` client against its fake): {:.2} ms.",
            ns / 1e6
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
    let postgres = &counts["postgres"];
    let pg = |key: &str| postgres[key].as_u64().unwrap_or(0);
    let hybrid = ms("memory_postgres/hybrid_search_100k");
    let verdict = if hybrid <= MEMORY_SEARCH_MS {
        "meets"
    } else {
        "misses"
    };
    let _ = writeln!(
        md,
        "\nThe same files with memory in PostgreSQL (the test server of `scripts/postgres.sh`, on the same machine): hybrid search {hybrid:.2} ms at the median (target: at most {MEMORY_SEARCH_MS} ms): {verdict}; keywords alone {:.2} ms, vectors alone {:.2} ms. Imported file by file as `memory.write` stores them: {} chunks a second ({:.1} s for all, embedding included); the tables take {:.0} MB.",
        ms("memory_postgres/keyword_search_100k"),
        ms("memory_postgres/vector_search_100k"),
        pg("chunks_per_second"),
        pg("build_ms") as f64 / 1000.0,
        pg("bytes") as f64 / 1_048_576.0,
    );
    md
}

/// Targets of the daemon's cases (see `bins/flynn/benches/daemon.rs`).
const IDLE_RSS_MB: f64 = 8.0;
/// "Flat": the RSS after all the soak's messages is at most this much
/// above the RSS after its first tenth, in percent.
const FLAT_GROWTH_PCT: f64 = 10.0;
const READY_MS: f64 = 50.0;
const TURN_ADDED_MS: f64 = 2.0;
const CONCURRENT_P99_MS: f64 = 10.0;
const CONCURRENT_RSS_MB: f64 = 200.0;
const REMOTE_SEND_MS: f64 = 10.0;
/// Four chat adapters connected may add at most this to the idle RSS.
const CHANNELS_RSS_MB: f64 = 4.0;

/// The daemon as a process (`bins/flynn/benches/daemon.rs`): memory,
/// start-up, latency through the gateway and under many connections.
fn render_daemon(daemon: &Value, process: &Value) -> String {
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let int = |v: &Value| v.as_u64().unwrap_or(0);
    let mb = |v: &Value| num(v) / 1024.0;
    let verdict = |ok: bool| if ok { "meets" } else { "misses" };
    let (idle, startup, soak, turn, concurrent, send) = (
        &daemon["idle"],
        &daemon["startup"],
        &daemon["soak"],
        &daemon["turn"],
        &daemon["concurrent"],
        &daemon["send"],
    );
    let mut md = String::from(
        "\n## The daemon\n\nThe daemon is `flynn start` as a process: the start-up, gateway and shutdown code of\n`flynn-daemon`, on the same multi-threaded tokio runtime (the CLI's other commands run on one\nthread). Each case starts it afresh with a scratch `FLYNN_HOME`; the bench drives it over WebSockets\n(JSON-RPC `agent.send`) and reads its memory from `/proc`. The model is a fake OpenAI-compatible\nserver in the bench process that answers every request with the same short streamed answer, at\nonce or after a fixed delay. The daemon, the bench's clients and the fake share the machine's cores.\nThe cases that send many turns run with a config file that lifts `gateway.rate_limit_per_minute`\n(every bench client is one token from 127.0.0.1). The binary is the default build, every chat\nchannel in.\n\n| case | target | result | verdict |\n|---|---|---|---|\n",
    );

    let rss = mb(&idle["rss_kib"]);
    let _ = writeln!(
        md,
        "| Idle RSS after start-up, `flynn start` | ≤ {IDLE_RSS_MB} MB | {rss:.1} MB ({:.1} MB anonymous, {:.1} MB file-backed) | {} |",
        mb(&idle["anon_kib"]),
        mb(&idle["file_kib"]),
        verdict(rss <= IDLE_RSS_MB),
    );
    let bare = &idle["flynn_daemon"];
    if bare.is_object() {
        let rss = mb(&bare["rss_kib"]);
        let _ = writeln!(
            md,
            "| Idle RSS after start-up, `flynn-daemon` | ≤ {IDLE_RSS_MB} MB | {rss:.1} MB ({:.1} MB anonymous, {:.1} MB file-backed; binary's own pages {:.1} MB; {} threads) | {} |",
            mb(&bare["anon_kib"]),
            mb(&bare["file_kib"]),
            mb(&bare["mappings"]["binary_kib"]),
            int(&bare["threads"]),
            verdict(rss <= IDLE_RSS_MB),
        );
    } else {
        let _ = writeln!(
            md,
            "| Idle RSS after start-up, `flynn-daemon` | ≤ {IDLE_RSS_MB} MB | not measured (`FLYNN_BENCH_DAEMON_BIN` was not set) | misses |",
        );
    }

    let series: Vec<f64> = soak["rss_kib"]
        .as_array()
        .map(|a| a.iter().map(mb).collect())
        .unwrap_or_default();
    let first = series.first().copied().unwrap_or(f64::NAN);
    let last = series.last().copied().unwrap_or(f64::NAN);
    let growth = (last - first) / first * 100.0;
    let soak_errors = int(&soak["errors"]);
    let _ = writeln!(
        md,
        "| RSS after {} messages in {} sessions, against after the first {} | flat (at most +{FLAT_GROWTH_PCT}%), no errors | {first:.1} → {last:.1} MB ({:+.1} MB, {growth:+.1}%); {soak_errors} errors | {} |",
        int(&soak["messages"]),
        int(&soak["sessions"]),
        int(&soak["messages"]) / series.len().max(1) as u64,
        last - first,
        verdict(growth <= FLAT_GROWTH_PCT && soak_errors == 0),
    );

    let ready = num(&startup["ready"]["median_ms"]);
    let _ = writeln!(
        md,
        "| Spawn to the first 200 from `/healthz` (median of {}) | ≤ {READY_MS} ms | {ready:.2} ms (p90 {:.2} ms) | {} |",
        int(&startup["runs"]),
        num(&startup["ready"]["p90_ms"]),
        verdict(ready <= READY_MS),
    );

    let added = num(&turn["added"]["median_ms"]);
    let _ = writeln!(
        md,
        "| Added latency of one turn through the gateway, instant model (median of {}) | < {TURN_ADDED_MS} ms | {added:.2} ms (p99 {:.2} ms) | {} |",
        int(&turn["turns"]),
        num(&turn["added"]["p99_ms"]),
        verdict(added < TURN_ADDED_MS),
    );

    let sessions = format!(
        "{} WebSocket sessions × {} turns, model answering in {} ms",
        int(&concurrent["connections"]),
        int(&concurrent["turns_per_connection"]),
        int(&concurrent["model_ms"]),
    );
    let p99 = num(&concurrent["added"]["p99_ms"]);
    let _ = writeln!(
        md,
        "| {sessions}: p99 added latency | < {CONCURRENT_P99_MS} ms | {p99:.1} ms (median {:.1} ms) | {} |",
        num(&concurrent["added"]["median_ms"]),
        verdict(p99 < CONCURRENT_P99_MS),
    );
    let peak = mb(&concurrent["peak_kib"]);
    let _ = writeln!(
        md,
        "| {sessions}: peak RSS | < {CONCURRENT_RSS_MB} MB | {peak:.1} MB | {} |",
        verdict(peak < CONCURRENT_RSS_MB),
    );
    let errors = int(&concurrent["errors"]);
    let _ = writeln!(
        md,
        "| {sessions}: errors | 0 | {errors} of {} turns | {} |",
        int(&concurrent["connections"]) * int(&concurrent["turns_per_connection"]),
        verdict(errors == 0),
    );

    let channels = &daemon["channels"];
    if channels.is_object() {
        let without = mb(&channels["rss_without_kib"]);
        let with = mb(&channels["rss_with_kib"]);
        let _ = writeln!(
            md,
            "| Idle RSS with Telegram, Discord, Slack and WhatsApp connected to their fakes | ≤ idle + {CHANNELS_RSS_MB} MB | {with:.1} MB against {without:.1} MB without channels ({:+.1} MB; all connected {:.0} ms after start-up) | {} |",
            with - without,
            num(&channels["connected_ms"]),
            verdict(with - without <= CHANNELS_RSS_MB),
        );
        let _ = writeln!(
            md,
            "| Inbound to model request: a signed WhatsApp webhook against a gateway `agent.send` (median of {}) | — | {:.2} ms against {:.2} ms: the channel layer adds {:.2} ms (p99 {:.2} ms) | — |",
            int(&channels["turns"]),
            num(&channels["webhook_to_model"]["median_ms"]),
            num(&channels["gateway_to_model"]["median_ms"]),
            num(&channels["added"]["median_ms"]),
            num(&channels["added"]["p99_ms"]),
        );
    }

    let remote = num(&send["time"]["median_ms"]);
    let _ = writeln!(
        md,
        "| `flynn send --gateway` one turn against a running daemon, instant model (median of {}) | ≤ {REMOTE_SEND_MS} ms | {remote:.2} ms (p90 {:.2} ms; embedded `flynn send`: {:.2} ms) | {} |",
        int(&send["runs"]),
        num(&send["time"]["p90_ms"]),
        num(&process["send"]["median_ms"]),
        verdict(remote <= REMOTE_SEND_MS),
    );

    let map = &idle["mappings"];
    let _ = writeln!(
        md,
        "\nIdle: read 2 s after the daemon said it listens, before any request (zero-config from\n`OPENAI_BASE_URL` and `OPENAI_API_KEY`). By mapping (`/proc/<pid>/smaps`): the binary's own pages\n{:.1} MB, shared libraries {:.1} MB, the main heap {:.1} MB, other anonymous memory (allocations\nmapped on their own, other threads' arenas, stacks) {:.1} MB; {} threads.",
        mb(&map["binary_kib"]),
        mb(&map["libraries_kib"]),
        mb(&map["heap_kib"]),
        mb(&map["other_anon_kib"]),
        int(&idle["threads"]),
    );
    let series_text: Vec<String> = series.iter().map(|m| format!("{m:.1}")).collect();
    let _ = writeln!(
        md,
        "\nMemory over many turns: {} clients send {} turns round-robin over the sessions (every session has\nits n-th turn before any its n+1-th) against the instant model; RSS after each tenth, in MB:\n{}; peak {:.1} MB. {:.0} turns/s, {:.2} ms of daemon CPU per turn, {} model requests.",
        int(&soak["clients"]),
        int(&soak["turns"]),
        series_text.join(", "),
        mb(&soak["peak_kib"]),
        num(&soak["turns_per_second"]),
        num(&soak["cpu_ms_per_turn"]),
        int(&soak["model_requests"]),
    );
    let _ = writeln!(
        md,
        "\nStart-up: the bench picks a free port, spawns the daemon on it and polls `GET /healthz` every\n0.2 ms from the spawn (after 5 warm-up runs, so the database exists); each daemon is then\nstopped with SIGTERM ({:.2} ms to exit at the median).",
        num(&startup["stop"]["median_ms"]),
    );
    let metrics = &turn["daemon_metrics"];
    let _ = writeln!(
        md,
        "\nAdded latency: from sending `agent.send` on an open WebSocket to receiving the turn's\n`run_state` `complete`, minus, turn by turn, the time the bench takes to send the same model\nrequest (the body the fake received from the daemon) straight to the fake on a kept-alive HTTP\nconnection and read the whole streamed answer. Through the gateway {:.2} ms, direct {:.2} ms at\nthe median; {:.1} model requests per turn; {:.2} ms of daemon CPU (all threads) per turn. The daemon's own\n`/metrics` over the same turns: turn {:.2} ms, model call {:.2} ms, Flynn's own work {:.2} ms (means).",
        num(&turn["gateway"]["median_ms"]),
        num(&turn["direct"]["median_ms"]),
        num(&turn["model_requests_per_turn"]),
        num(&metrics["cpu_ms_per_turn"]),
        num(&metrics["turn_duration_mean_ms"]),
        num(&metrics["model_call_mean_ms"]),
        num(&metrics["turn_overhead_mean_ms"]),
    );
    let _ = writeln!(
        md,
        "\nMany sessions: the connections open 50 at a time, one session each; the first turns are spread\nover one model answer time, then each connection sends its turns back to back; added latency is\nthe turn's time minus the model's {} ms. {:.0} turns/s, {:.2} ms of daemon CPU per turn (the bench's\nclients and fake: {:.2} ms). RSS: {:.1} MB before connecting, {:.1} MB with the connections open,\n{:.1} MB at the end (limit on open files: {}).",
        int(&concurrent["model_ms"]),
        num(&concurrent["turns_per_second"]),
        num(&concurrent["cpu_ms_per_turn"]),
        num(&concurrent["bench_cpu_ms_per_turn"]),
        mb(&concurrent["idle_kib"]),
        mb(&concurrent["connected_kib"]),
        mb(&concurrent["end_kib"]),
        concurrent["open_files_limit"],
    );
    let problems: Vec<&str> = ["idle", "startup", "soak", "turn", "concurrent", "send"]
        .iter()
        .flat_map(|case| {
            daemon[*case]["log_problems"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .chain(["soak", "concurrent"].iter().flat_map(|case| {
            daemon[*case]["error_examples"]
                .as_array()
                .into_iter()
                .flatten()
        }))
        .filter_map(Value::as_str)
        .take(5)
        .collect();
    if !problems.is_empty() {
        md.push_str("\nWarnings and errors (the first few, from the daemon's log and the failed turns):\n\n");
        for problem in problems {
            let _ = writeln!(md, "- `{}`", problem.replace('`', "'"));
        }
    }
    md
}

/// The largest release binary, every chat channel in (15 MB).
const MAX_BINARY_BYTES: u64 = 15_000_000;

/// The release binaries' sizes on disk.
fn render_sizes(sizes: &[(&str, u64)]) -> String {
    let mut md = String::from(
        "\n## Binary size\n\nThe release binaries as `cargo install` builds them (default features: every chat channel\nin), stripped, in bytes on disk.\n\n| binary | target | size | verdict |\n|---|---|---|---|\n",
    );
    for (binary, bytes) in sizes {
        let verdict = if *bytes <= MAX_BINARY_BYTES {
            "meets"
        } else {
            "misses"
        };
        let _ = writeln!(
            md,
            "| `{binary}` | ≤ {:.0} MB | {:.1} MB ({bytes} bytes) | {verdict} |",
            MAX_BINARY_BYTES as f64 / 1e6,
            *bytes as f64 / 1e6,
        );
    }
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
        "# Benchmarks\n\nWritten by `cargo xtask bench` down to the line that says otherwise; the rest is written by hand\nand kept by the command. Whole-process wall time of the release binary, started afresh for\nevery run (after 5 warm-up runs).\n\n",
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
    fn sizes_are_judged_against_fifteen_megabytes() {
        let md = render_sizes(&[("flynn-daemon", 14_900_000), ("flynn", 15_000_001)]);
        assert!(
            md.contains("| `flynn-daemon` | ≤ 15 MB | 14.9 MB (14900000 bytes) | meets |"),
            "{md}"
        );
        assert!(
            md.contains("| `flynn` | ≤ 15 MB | 15.0 MB (15000001 bytes) | misses |"),
            "{md}"
        );
    }

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
    fn renders_the_daemon_cases_with_targets_and_verdicts() {
        let summary = |median: f64, p99: f64| serde_json::json!({"median_ms": median, "p90_ms": p99, "p99_ms": p99});
        let daemon = serde_json::json!({
            "idle": {"rss_kib": 20480, "anon_kib": 6144, "file_kib": 14336, "threads": 3,
                "mappings": {"binary_kib": 12288, "libraries_kib": 2048, "heap_kib": 256, "other_anon_kib": 5888},
                "flynn_daemon": {"rss_kib": 18432, "anon_kib": 5120, "file_kib": 13312, "threads": 7,
                    "mappings": {"binary_kib": 11264, "libraries_kib": 2048, "heap_kib": 256, "other_anon_kib": 4864}}},
            "startup": {"runs": 30, "ready": summary(9.5, 11.0), "stop": summary(2.0, 3.0), "log_problems": []},
            "soak": {"sessions": 100, "turns": 5000, "messages": 10000, "clients": 8,
                "rss_kib": [102400, 103424, 104448], "peak_kib": 104448, "turns_per_second": 180.0,
                "cpu_ms_per_turn": 1.4, "model_requests": 5000, "errors": 0, "error_examples": [], "log_problems": []},
            "turn": {"turns": 500, "gateway": summary(3.0, 4.0), "direct": summary(0.5, 0.6),
                "added": summary(1.5, 3.5), "model_requests_per_turn": 1.0,
                "daemon_metrics": {"cpu_ms_per_turn": 1.2, "turn_duration_mean_ms": 2.0,
                    "model_call_mean_ms": 0.7, "turn_overhead_mean_ms": 1.3}, "log_problems": []},
            "concurrent": {"connections": 1000, "turns_per_connection": 3, "model_ms": 200,
                "added": summary(4.0, 12.5), "turns_per_second": 900.0, "cpu_ms_per_turn": 1.5,
                "idle_kib": 20480, "connected_kib": 40960, "end_kib": 300000, "peak_kib": 307200,
                "errors": 2, "error_examples": ["agent.send to bench:conn-7: refused"],
                "open_files_limit": 20000, "log_problems": ["2026-01-01T00:00:00Z  WARN flynn: `slow` lane"]},
            "send": {"runs": 30, "time": summary(8.5, 9.0), "log_problems": []},
        });
        let process = serde_json::json!({"send": {"median_ms": 9.68}});
        let md = render_daemon(&daemon, &process);
        for row in [
            "| Idle RSS after start-up, `flynn start` | ≤ 8 MB | 20.0 MB (6.0 MB anonymous, 14.0 MB file-backed) | misses |",
            "| Idle RSS after start-up, `flynn-daemon` | ≤ 8 MB | 18.0 MB (5.0 MB anonymous, 13.0 MB file-backed; binary's own pages 11.0 MB; 7 threads) | misses |",
            "| RSS after 10000 messages in 100 sessions, against after the first 3333 | flat (at most +10%), no errors | 100.0 → 102.0 MB (+2.0 MB, +2.0%); 0 errors | meets |",
            "| Spawn to the first 200 from `/healthz` (median of 30) | ≤ 50 ms | 9.50 ms (p90 11.00 ms) | meets |",
            "| Added latency of one turn through the gateway, instant model (median of 500) | < 2 ms | 1.50 ms (p99 3.50 ms) | meets |",
            "| 1000 WebSocket sessions × 3 turns, model answering in 200 ms: p99 added latency | < 10 ms | 12.5 ms (median 4.0 ms) | misses |",
            "| 1000 WebSocket sessions × 3 turns, model answering in 200 ms: peak RSS | < 200 MB | 300.0 MB | misses |",
            "| 1000 WebSocket sessions × 3 turns, model answering in 200 ms: errors | 0 | 2 of 3000 turns | misses |",
            "| `flynn send --gateway` one turn against a running daemon, instant model (median of 30) | ≤ 10 ms | 8.50 ms (p90 9.00 ms; embedded `flynn send`: 9.68 ms) | meets |",
        ] {
            assert!(md.contains(row), "missing {row} in\n{md}");
        }
        assert!(
            md.contains("RSS after each tenth, in MB:\n100.0, 101.0, 102.0; peak 102.0 MB."),
            "{md}"
        );
        assert!(md.contains("- `2026-01-01T00:00:00Z  WARN flynn: 'slow' lane`\n- `agent.send to bench:conn-7: refused`\n"), "{md}");
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
        let memory = serde_json::json!({"chunks": 100000, "dimensions": 384, "build_ms": 48500, "chunks_per_second": 2062, "index_bytes": 524288000, "rss_growth_kib": 25600, "postgres": {"build_ms": 16400, "chunks_per_second": 6098, "bytes": 274530304}});
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
            Micro {
                id: "memory_postgres/hybrid_search_100k".into(),
                median_ns: 4.98e6,
                throughput: None,
            },
            Micro {
                id: "memory_postgres/keyword_search_100k".into(),
                median_ns: 1.3e6,
                throughput: None,
            },
            Micro {
                id: "memory_postgres/vector_search_100k".into(),
                median_ns: 3.54e6,
                throughput: None,
            },
        ];
        let md = render_memory(&memory, &micro);
        assert!(md.contains("memory in PostgreSQL (the test server of `scripts/postgres.sh`, on the same machine): hybrid search 4.98 ms at the median (target: at most 20 ms): meets; keywords alone 1.30 ms, vectors alone 3.54 ms. Imported file by file as `memory.write` stores them: 6098 chunks a second (16.4 s for all, embedding included); the tables take 262 MB."), "{md}");
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

    #[test]
    fn a_new_run_keeps_the_hand_written_part_and_replaces_the_rest() {
        let previous =
            format!("# Benchmarks\n\nold rows\n\n{HAND_WRITTEN}\n\n## Crashes\n\nkept\n");
        assert_eq!(
            with_hand_written("# Benchmarks\n\nnew rows\n".into(), &previous),
            format!("# Benchmarks\n\nnew rows\n\n{HAND_WRITTEN}\n\n## Crashes\n\nkept\n")
        );
        assert_eq!(
            with_hand_written("# Benchmarks\n\nnew rows\n".into(), "# Benchmarks\n\nold\n"),
            "# Benchmarks\n\nnew rows\n"
        );
    }
}
