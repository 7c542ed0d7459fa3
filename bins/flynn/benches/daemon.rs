//! Whole-process benchmarks of the daemon (run by `cargo xtask bench`,
//! which renders the "The daemon" section of `docs/benchmarks.md`).
//!
//! The daemon is `flynn start` (the daemon's start-up, gateway and
//! shutdown code) as a child process with a scratch `FLYNN_HOME`. The bench
//! drives it over its WebSocket (`agent.send`), times it from outside and
//! reads its memory from `/proc`. The model is a fake OpenAI-compatible
//! server inside this process that answers every request with the same
//! short streamed answer, at once or after a fixed delay, so what is
//! measured is Flynn itself.
//!
//! Results go, as JSON, to the file named by `FLYNN_BENCH_DAEMON_OUT`
//! (stdout when unset). `FLYNN_BENCH_RUNS` sets the runs of the per-run
//! cases (start-up, `flynn send`; default 100); `FLYNN_BENCH_QUICK=1`
//! shrinks every case, for development; `FLYNN_BENCH_ONLY=soak,turn`
//! runs only the cases named (`idle`, `startup`, `soak`, `turn`,
//! `concurrent`, `channels`, `send`); `FLYNN_BENCH_CONNECTIONS` sets the connections
//! of the `concurrent` case (default 1,000). `FLYNN_BENCH_DAEMON_BIN` names a
//! `flynn-daemon` binary whose idle memory is measured beside `flynn start`'s
//! (`cargo xtask bench` builds it and sets it; left out otherwise).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use jsonrpsee::core::client::{ClientT, Subscription, SubscriptionClientT};
use jsonrpsee::core::params::ObjectParams;
use jsonrpsee::ws_client::{HeaderMap, WsClient, WsClientBuilder};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

/// The gateway token every daemon of the bench runs with.
const TOKEN: &str = "flynn-bench-0123456789abcdef0123456789abcdef";
/// The API key the daemon sends to the fake model.
const API_KEY: &str = "sk-x";
/// Runs before the measured ones, in the per-run cases.
const WARMUP: usize = 5;
/// The longest one turn may take before it counts as an error.
const TURN_TIMEOUT: Duration = Duration::from_secs(120);
/// The longest a daemon may take to say it listens, or to exit.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of each case to run.
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Start-ups to `/healthz`, and `flynn send --gateway` runs.
    runs: usize,
    /// Turns timed one at a time through the gateway.
    latency_turns: usize,
    soak_sessions: usize,
    /// Turns per session in the memory soak.
    soak_turns: usize,
    /// WebSocket clients sending the soak's turns at once.
    soak_clients: usize,
    /// WebSocket connections (one session each) of the concurrency case.
    connections: usize,
    turns_per_connection: usize,
    /// The slow model's answer time.
    slow_model: Duration,
}

impl Plan {
    fn from_env() -> Result<Plan> {
        let quick = std::env::var("FLYNN_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let mut plan = if quick {
            Plan {
                runs: 5,
                latency_turns: 20,
                soak_sessions: 10,
                soak_turns: 10,
                soak_clients: 4,
                connections: 50,
                turns_per_connection: 2,
                slow_model: Duration::from_millis(200),
            }
        } else {
            Plan {
                runs: 100,
                latency_turns: 500,
                soak_sessions: 100,
                soak_turns: 50,
                soak_clients: 8,
                connections: 1000,
                turns_per_connection: 3,
                slow_model: Duration::from_millis(200),
            }
        };
        if let Ok(connections) = std::env::var("FLYNN_BENCH_CONNECTIONS") {
            plan.connections = connections
                .trim()
                .parse()
                .ok()
                .filter(|&n: &usize| n > 0)
                .with_context(|| {
                    format!("FLYNN_BENCH_CONNECTIONS is '{connections}'; expected a number above 0")
                })?;
        }
        if let Ok(runs) = std::env::var("FLYNN_BENCH_RUNS") {
            plan.runs = runs
                .trim()
                .parse()
                .ok()
                .filter(|&n: &usize| n > 0)
                .with_context(|| {
                    format!("FLYNN_BENCH_RUNS is '{runs}'; expected a number of runs above 0")
                })?;
        }
        Ok(plan)
    }
}

fn main() -> Result<()> {
    let plan = Plan::from_env()?;
    let open_files = raise_open_files_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("building the bench's tokio runtime")?;
    runtime.spawn(kill_daemons_on_signal());
    let instant = runtime.block_on(FakeModel::start(Duration::ZERO))?;
    let slow = runtime.block_on(FakeModel::start(plan.slow_model))?;

    let only = std::env::var("FLYNN_BENCH_ONLY").unwrap_or_default();
    let wanted = |case: &str| only.is_empty() || only.split(',').any(|c| c.trim() == case);
    let mut report = serde_json::Map::new();
    report.insert("daemon".into(), json!("flynn start"));
    if wanted("idle") {
        progress("idle memory after start-up");
        report.insert("idle".into(), idle(&instant)?);
    }
    if wanted("startup") {
        progress(&format!("start-up to /healthz, {} runs", plan.runs));
        report.insert("startup".into(), startup(&plan, &instant)?);
    }
    if wanted("soak") {
        progress(&format!(
            "memory over {} turns in {} sessions",
            plan.soak_sessions * plan.soak_turns,
            plan.soak_sessions
        ));
        report.insert("soak".into(), soak(&runtime, &plan, &instant)?);
    }
    if wanted("turn") {
        progress(&format!(
            "added latency of {} turns through the gateway",
            plan.latency_turns
        ));
        report.insert("turn".into(), latency(&runtime, &plan, &instant)?);
    }
    if wanted("concurrent") {
        progress(&format!(
            "{} WebSocket sessions against a model that answers in {} ms",
            plan.connections,
            plan.slow_model.as_millis()
        ));
        report.insert(
            "concurrent".into(),
            concurrent(&runtime, &plan, &slow, open_files)?,
        );
    }
    if wanted("channels") && cfg!(feature = "channels") {
        progress("the chat channels: idle memory with four adapters, inbound-to-model latency");
        report.insert("channels".into(), channels(&runtime, &plan, &instant)?);
    }
    if wanted("send") {
        progress(&format!("`flynn send --gateway`, {} runs", plan.runs));
        report.insert("send".into(), send(&plan, &instant)?);
    }
    report.insert(
        "unexpected_model_requests".into(),
        json!(instant.unexpected() + slow.unexpected()),
    );
    let report = Value::Object(report);
    match std::env::var("FLYNN_BENCH_DAEMON_OUT") {
        Ok(path) => std::fs::write(&path, report.to_string())
            .with_context(|| format!("writing the results to {path} (FLYNN_BENCH_DAEMON_OUT)"))?,
        Err(_) => println!("{report:#}"),
    }
    Ok(())
}

fn progress(what: &str) {
    eprintln!("daemon bench: {what}");
}

/// Case 1: the daemon's memory once it has started and sits idle:
/// `flynn start`, and the `flynn-daemon` binary when
/// `FLYNN_BENCH_DAEMON_BIN` names one.
fn idle(model: &FakeModel) -> Result<Value> {
    let scratch = Scratch::new(model, false)?;
    let mut report = idle_memory(scratch.start_command())?;
    let daemon_bin = std::env::var_os("FLYNN_BENCH_DAEMON_BIN");
    report["flynn_daemon"] = match daemon_bin {
        Some(binary) => {
            let scratch = Scratch::new(model, false)?;
            idle_memory(scratch.command_of(Path::new(&binary), &["--bind", "127.0.0.1:0"]))?
        }
        None => Value::Null,
    };
    Ok(report)
}

/// A daemon's memory 2 s after it said it listens.
fn idle_memory(command: Command) -> Result<Value> {
    let daemon = Daemon::start(command)?;
    std::thread::sleep(Duration::from_secs(2));
    let memory = daemon.memory()?;
    let mappings = daemon.mappings()?;
    let problems = daemon.stop()?.problems;
    Ok(json!({
        "rss_kib": memory.rss_kib,
        "anon_kib": memory.anon_kib,
        "file_kib": memory.file_kib,
        "threads": memory.threads,
        "mappings": mappings,
        "log_problems": problems,
    }))
}

/// Case 3: spawning the process to the first `200` from `/healthz`, and
/// SIGTERM to exit.
fn startup(plan: &Plan, model: &FakeModel) -> Result<Value> {
    let scratch = Scratch::new(model, false)?;
    let mut ready = Vec::new();
    let mut stop = Vec::new();
    let mut problems = Vec::new();
    for run in 0..WARMUP + plan.runs {
        // A port known before the daemon starts, so it can be polled at once.
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context("finding a free port")?;
        let bind = addr.to_string();
        let started = Instant::now();
        let mut daemon = Daemon::spawn(scratch.command(&["start", "--bind", &bind]), Some(addr))?;
        loop {
            if healthz(addr) {
                break;
            }
            if let Some(status) = daemon.child.try_wait().context("waiting for the daemon")? {
                bail!(
                    "the daemon exited ({status}) before /healthz answered; its log:\n{}",
                    daemon.log_tail()
                );
            }
            ensure!(
                started.elapsed() < PROCESS_TIMEOUT,
                "/healthz did not answer 200 within {PROCESS_TIMEOUT:?}; the daemon's log:\n{}",
                daemon.log_tail()
            );
            std::thread::sleep(Duration::from_micros(200));
        }
        let took = started.elapsed();
        let stopped = daemon.stop()?;
        if run >= WARMUP {
            ready.push(ms(took));
            stop.push(ms(stopped.took));
        }
        problems.extend(stopped.problems);
    }
    problems.truncate(10);
    Ok(json!({
        "runs": plan.runs,
        "ready": summary(&mut ready),
        "stop": summary(&mut stop),
        "log_problems": problems,
    }))
}

/// Case 2: memory over many turns in many sessions, sent by a few
/// clients at once against the instant model.
fn soak(runtime: &Runtime, plan: &Plan, model: &FakeModel) -> Result<Value> {
    let scratch = Scratch::new(model, true)?;
    let daemon = Daemon::start(scratch.start_command())?;
    let addr = daemon.addr()?;
    let clients = runtime.block_on(connect_all(addr, plan.soak_clients))?;
    let sessions = plan.soak_sessions;
    let total = sessions * plan.soak_turns;
    // Memory is read after each tenth of the turns (1,000 messages of
    // 10,000 in the full plan).
    let phases = 10.min(total);
    let cpu_before = daemon.cpu();
    let requests_before = model.requests();
    let started = Instant::now();
    let mut rss = Vec::new();
    let mut times = Vec::new();
    let mut errors = Errors::default();
    for phase in 0..phases {
        let jobs = phase * total / phases..(phase + 1) * total / phases;
        let (mut phase_times, phase_errors) =
            runtime.block_on(run_jobs(&clients, jobs, move |job| {
                // Round-robin: every session has its n-th turn before any its
                // (n+1)-th, and no session has two turns in flight.
                format!("bench:soak-{}", job % sessions)
            }));
        times.append(&mut phase_times);
        errors.merge(phase_errors);
        rss.push(daemon.memory()?.rss_kib);
    }
    let elapsed = started.elapsed();
    let cpu = cpu_per_turn(cpu_before, daemon.cpu(), times.len());
    let requests = model.requests() - requests_before;
    let peak = daemon.memory()?.hwm_kib;
    drop(clients);
    let problems = daemon.stop()?.problems;
    Ok(json!({
        "sessions": sessions,
        "turns": total,
        "messages": total * 2,
        "clients": plan.soak_clients,
        "rss_kib": rss,
        "peak_kib": peak,
        "turns_per_second": times.len() as f64 / elapsed.as_secs_f64(),
        "turn": summary(&mut times),
        "cpu_ms_per_turn": cpu,
        "model_requests": requests,
        "errors": errors.count,
        "error_examples": errors.examples,
        "log_problems": problems,
    }))
}

/// Case 4: one turn at a time through the gateway against the instant
/// model, minus the same model requests made directly by the bench.
fn latency(runtime: &Runtime, plan: &Plan, model: &FakeModel) -> Result<Value> {
    let scratch = Scratch::new(model, true)?;
    let daemon = Daemon::start(scratch.start_command())?;
    let addr = daemon.addr()?;
    let (measured, metrics) = runtime.block_on(async {
        let client = connect(addr).await?;
        let http = reqwest::Client::new();
        let url = format!("{}/chat/completions", model.base_url());
        model.record(true);
        let mut measured = Vec::new();
        let mut late = 0;
        let mut metrics_before = None;
        let mut cpu_before = None;
        for i in 0..WARMUP * 4 + plan.latency_turns {
            if i == WARMUP * 4 {
                metrics_before = Some(scrape_metrics(&http, addr).await?);
                cpu_before = daemon.cpu();
            }
            // Requests that arrived after the previous turn completed.
            late += model.take_bodies().len();
            let session = format!("bench:latency-{}", i % 10);
            let gateway = turn(&client, &session).await?;
            let bodies = model.take_bodies();
            ensure!(
                !bodies.is_empty(),
                "a turn completed without calling the model"
            );
            // The replays are not the daemon's requests: not kept.
            model.record(false);
            let mut direct = Duration::ZERO;
            for body in &bodies {
                direct += replay(&http, &url, body.clone()).await?;
            }
            model.record(true);
            if i >= WARMUP * 4 {
                measured.push((gateway, direct, bodies.len()));
            }
        }
        model.record(false);
        let cpu = cpu_per_turn(cpu_before, daemon.cpu(), measured.len());
        let after = scrape_metrics(&http, addr).await?;
        let before = metrics_before.unwrap_or_default();
        let mean = |name: &str| {
            let count = metric(&after, &format!("{name}_count"))
                - metric(&before, &format!("{name}_count"));
            let sum =
                metric(&after, &format!("{name}_sum")) - metric(&before, &format!("{name}_sum"));
            if count > 0.0 {
                sum / count * 1000.0
            } else {
                f64::NAN
            }
        };
        let metrics = json!({
            "turn_duration_mean_ms": mean("flynn_turn_duration_seconds"),
            "model_call_mean_ms": mean("flynn_model_call_seconds"),
            "turn_overhead_mean_ms": mean("flynn_turn_overhead_seconds"),
            "late_model_requests": late,
            "cpu_ms_per_turn": cpu,
        });
        anyhow::Ok((measured, metrics))
    })?;
    let problems = daemon.stop()?.problems;
    let mut gateway: Vec<f64> = measured.iter().map(|(g, _, _)| ms(*g)).collect();
    let mut direct: Vec<f64> = measured.iter().map(|(_, d, _)| ms(*d)).collect();
    let mut added: Vec<f64> = measured.iter().map(|(g, d, _)| ms(*g) - ms(*d)).collect();
    let requests: usize = measured.iter().map(|(_, _, n)| n).sum();
    Ok(json!({
        "turns": measured.len(),
        "gateway": summary(&mut gateway),
        "direct": summary(&mut direct),
        "added": summary(&mut added),
        "model_requests_per_turn": requests as f64 / measured.len().max(1) as f64,
        "daemon_metrics": metrics,
        "log_problems": problems,
    }))
}

/// Case 7: the chat channels. Idle memory of a daemon with Telegram,
/// Discord, Slack and WhatsApp connected to their fakes, against the same
/// daemon without channels; then the time from a WhatsApp webhook post to
/// the model's request, against the time from a gateway `agent.send` to
/// the model's request (what the channel layer adds: the webhook's
/// signature check, parsing, access checks, the store's duplicate check).
fn channels(runtime: &Runtime, plan: &Plan, model: &FakeModel) -> Result<Value> {
    use flynn_testkit::discord::FakeDiscord;
    use flynn_testkit::slack::{self, FakeSlack};
    use flynn_testkit::telegram::{self, FakeTelegram};
    use flynn_testkit::whatsapp::{self as wa, FakeWhatsApp, Signing};

    const NUMBER: &str = "15551234567";
    let (tg, dc, sl, whatsapp) = runtime.block_on(async {
        (
            FakeTelegram::start().await,
            FakeDiscord::start().await,
            FakeSlack::start().await,
            FakeWhatsApp::start().await,
        )
    });
    let open = "    dm_policy: open\n    rate_limit: {messages: 0}\n";
    let extra = format!(
        "channels:\n  telegram:\n    bot_token: \"{}\"\n    api_url: {}\n{open}  discord:\n    bot_token: \"{}\"\n    api_url: {}\n    gateway_url: {}\n{open}  slack:\n    bot_token: {}\n    app_token: {}\n    api_url: {}\n{open}  whatsapp:\n    access_token: {}\n    phone_number_id: \"{}\"\n    app_secret: {}\n    verify_token: {}\n    api_url: {}\n{open}",
        telegram::TOKEN,
        tg.api_url(),
        flynn_testkit::discord::TOKEN,
        dc.api_url(),
        dc.gateway_url(),
        slack::BOT_TOKEN,
        slack::APP_TOKEN,
        sl.api_url(),
        wa::ACCESS_TOKEN,
        wa::PHONE_NUMBER_ID,
        wa::APP_SECRET,
        wa::VERIFY_TOKEN,
        whatsapp.base_url(),
    );

    // Idle, without and with the channels, each read 2 s after start-up
    // (with channels: after all four said they are connected).
    let plain = Scratch::with_config(model, Some(""))?;
    let daemon = Daemon::start(plain.start_command())?;
    std::thread::sleep(Duration::from_secs(2));
    let without = daemon.memory()?;
    daemon.stop()?;

    let scratch = Scratch::with_config(model, Some(&extra))?;
    let daemon = Daemon::start(scratch.start_command())?;
    let addr = daemon.addr()?;
    let (connected_after, with, measured) = runtime.block_on(async {
        let client = connect(addr).await?;
        let started = Instant::now();
        loop {
            let status: Value = client
                .request("channels.status", ObjectParams::new())
                .await
                .context("channels.status")?;
            let states: Vec<(String, String)> = status
                .as_array()
                .map(|all| {
                    all.iter()
                        .map(|c| {
                            (
                                c["name"].as_str().unwrap_or_default().to_owned(),
                                c["state"].as_str().unwrap_or_default().to_owned(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            if states.iter().filter(|(_, s)| s == "connected").count() == 5 {
                break;
            }
            ensure!(
                started.elapsed() < PROCESS_TIMEOUT,
                "the channels did not all connect within {PROCESS_TIMEOUT:?}: {states:?}; the daemon's log:\n{}",
                daemon.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let connected_after = started.elapsed();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let with = daemon.memory()?;

        // Inbound to the model's request: a WhatsApp webhook, and the
        // gateway, one after the other, each turn waited for.
        let hook = format!("http://{addr}/channels/whatsapp/webhook");
        whatsapp.customer_wrote(NUMBER);
        model.record(true);
        let mut measured = Vec::new();
        let turns = WARMUP * 2 + plan.latency_turns.min(200);
        for i in 0..turns {
            let answered = whatsapp.sent().len();
            model.take_arrivals();
            model.take_bodies();
            let message = whatsapp.text_message(NUMBER, "Bench", &format!("hi {i}"));
            let posted = Instant::now();
            let answer = whatsapp.post(&hook, &message, Signing::AppSecret).await;
            ensure!(answer.status == 200, "the webhook answered {answer:?}");
            let arrived = wait_arrival(model).await?;
            let channel = arrived.saturating_duration_since(posted);
            let deadline = Instant::now() + TURN_TIMEOUT;
            while whatsapp.sent().len() <= answered {
                ensure!(Instant::now() < deadline, "the WhatsApp answer never came");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }

            model.take_arrivals();
            let sent = Instant::now();
            turn(&client, "bench:channels").await?;
            let arrived = lock(&model.state.arrivals).first().copied();
            let gateway = arrived
                .context("a gateway turn completed without calling the model")?
                .saturating_duration_since(sent);
            if i >= WARMUP * 2 {
                measured.push((channel, gateway));
            }
        }
        model.record(false);
        anyhow::Ok((connected_after, with, measured))
    })?;
    let problems = daemon.stop()?.problems;
    ensure!(
        whatsapp.violations().is_empty(),
        "the WhatsApp fake saw violations: {:?}",
        whatsapp.violations()
    );
    let mut channel: Vec<f64> = measured.iter().map(|(c, _)| ms(*c)).collect();
    let mut gateway: Vec<f64> = measured.iter().map(|(_, g)| ms(*g)).collect();
    let mut added: Vec<f64> = measured.iter().map(|(c, g)| ms(*c) - ms(*g)).collect();
    Ok(json!({
        "rss_without_kib": without.rss_kib,
        "rss_with_kib": with.rss_kib,
        "anon_with_kib": with.anon_kib,
        "threads_with": with.threads,
        "connected_ms": ms(connected_after),
        "turns": measured.len(),
        "webhook_to_model": summary(&mut channel),
        "gateway_to_model": summary(&mut gateway),
        "added": summary(&mut added),
        "log_problems": problems,
    }))
}

/// Waits for the fake model's next recorded request; when it arrived.
async fn wait_arrival(model: &FakeModel) -> Result<Instant> {
    let deadline = Instant::now() + TURN_TIMEOUT;
    loop {
        if let Some(at) = lock(&model.state.arrivals).first().copied() {
            return Ok(at);
        }
        ensure!(Instant::now() < deadline, "the model was never called");
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

/// Case 5: many WebSocket sessions at once, each sending turns back to
/// back to a model that takes `plan.slow_model` to answer.
fn concurrent(
    runtime: &Runtime,
    plan: &Plan,
    model: &FakeModel,
    open_files: Option<u64>,
) -> Result<Value> {
    // Each connection holds a descriptor in the bench and in the daemon,
    // and each model request one in the daemon and one in the fake here.
    let needed = 2 * plan.connections as u64 + 256;
    if let Some(limit) = open_files {
        ensure!(
            limit >= needed,
            "{} connections need about {needed} open files, but the limit is {limit}; raise it (`ulimit -n {needed}`)",
            plan.connections
        );
    }
    let scratch = Scratch::new(model, true)?;
    let daemon = Daemon::start(scratch.start_command())?;
    let addr = daemon.addr()?;
    let idle_kib = daemon.memory()?.rss_kib;
    let mut errors = Errors::default();
    let clients = runtime.block_on(async {
        let gate = Arc::new(tokio::sync::Semaphore::new(50));
        let mut opening = JoinSet::new();
        for i in 0..plan.connections {
            let gate = gate.clone();
            opening.spawn(async move {
                let _permit = gate.acquire_owned().await;
                (i, connect(addr).await)
            });
        }
        let mut clients = Vec::new();
        while let Some(joined) = opening.join_next().await {
            match joined {
                Ok((i, Ok(client))) => clients.push((i, Arc::new(client))),
                Ok((_, Err(error))) => errors.add(format!("{error:#}")),
                Err(error) => errors.add(format!("a connecting task failed: {error}")),
            }
        }
        clients
    });
    let connected_kib = daemon.memory()?.rss_kib;
    let cpu_before = daemon.cpu();
    let bench_cpu_before = process_cpu("self");
    let started = Instant::now();
    let (mut added, turn_errors) = runtime.block_on(async {
        let mut running = JoinSet::new();
        let count = plan.connections as u32;
        for (i, client) in &clients {
            let client = client.clone();
            // Spread the first turns over one model answer time, so the
            // sessions do not all start in the same millisecond.
            let offset = plan.slow_model * (*i as u32) / count.max(1);
            let session = format!("bench:conn-{i}");
            let turns = plan.turns_per_connection;
            let delay = plan.slow_model;
            running.spawn(async move {
                tokio::time::sleep(offset).await;
                let mut out = Vec::new();
                for _ in 0..turns {
                    out.push(
                        turn(&client, &session)
                            .await
                            .map(|took| ms(took) - ms(delay)),
                    );
                }
                out
            });
        }
        let mut added = Vec::new();
        let mut errors = Errors::default();
        while let Some(joined) = running.join_next().await {
            match joined {
                Ok(results) => {
                    for result in results {
                        match result {
                            Ok(ms) => added.push(ms),
                            Err(error) => errors.add(format!("{error:#}")),
                        }
                    }
                }
                Err(error) => errors.add(format!("a session task failed: {error}")),
            }
        }
        (added, errors)
    });
    let elapsed = started.elapsed();
    errors.merge(turn_errors);
    let memory = daemon.memory()?;
    let cpu = cpu_per_turn(cpu_before, daemon.cpu(), added.len());
    let bench_cpu = cpu_per_turn(bench_cpu_before, process_cpu("self"), added.len());
    let turns = added.len();
    drop(clients);
    let problems = daemon.stop()?.problems;
    Ok(json!({
        "connections": plan.connections,
        "turns_per_connection": plan.turns_per_connection,
        "model_ms": plan.slow_model.as_millis() as u64,
        "turns": turns,
        "added": summary(&mut added),
        "turns_per_second": turns as f64 / elapsed.as_secs_f64(),
        "cpu_ms_per_turn": cpu,
        "bench_cpu_ms_per_turn": bench_cpu,
        "elapsed_ms": ms(elapsed),
        "idle_kib": idle_kib,
        "connected_kib": connected_kib,
        "end_kib": memory.rss_kib,
        "peak_kib": memory.hwm_kib,
        "errors": errors.count,
        "error_examples": errors.examples,
        "open_files_limit": open_files,
        "log_problems": problems,
    }))
}

/// Case 6: `flynn send --gateway` as a process against a running daemon.
fn send(plan: &Plan, model: &FakeModel) -> Result<Value> {
    let scratch = Scratch::new(model, true)?;
    let daemon = Daemon::start(scratch.start_command())?;
    let url = format!("http://{}", daemon.addr()?);
    let mut times = Vec::new();
    for run in 0..WARMUP + plan.runs {
        let session = format!("bench:send-{run}");
        let started = Instant::now();
        let output = scratch
            .command(&["send", "--gateway", &url, "--session", &session, "hi"])
            .stdout(Stdio::null())
            .output()
            .context("running `flynn send --gateway`")?;
        let took = started.elapsed();
        ensure!(
            output.status.success(),
            "`flynn send --gateway` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        if run >= WARMUP {
            times.push(ms(took));
        }
    }
    let problems = daemon.stop()?.problems;
    Ok(json!({
        "runs": plan.runs,
        "time": summary(&mut times),
        "log_problems": problems,
    }))
}

/// A scratch home for one daemon: `FLYNN_HOME`, `HOME` and the config
/// dir live in it, and the child sees none of the developer's variables.
struct Scratch {
    dir: TempDir,
    model_url: String,
    /// A config file that lifts the gateway's per-client rate limit: every
    /// client of the bench is one token from one address.
    config: Option<PathBuf>,
}

impl Scratch {
    fn new(model: &FakeModel, unlimited: bool) -> Result<Scratch> {
        Scratch::with_config(model, unlimited.then_some(""))
    }

    /// A scratch home whose config file (when `extra` is given) has the
    /// fake model, no gateway rate limit, and `extra` appended.
    fn with_config(model: &FakeModel, extra: Option<&str>) -> Result<Scratch> {
        let dir = tempfile::tempdir().context("creating a scratch FLYNN_HOME")?;
        let model_url = model.base_url();
        let config = if let Some(extra) = extra {
            let path = dir.path().join("flynn.yaml");
            let text = format!(
                "providers:\n  openai: {{ kind: openai-compatible, base_url: \"{model_url}\", api_key: \"{API_KEY}\" }}\nmodels:\n  tiers:\n    default: [openai/gpt-4o-mini]\ngateway:\n  rate_limit_per_minute: 1000000\n  max_connections: 100000\n  max_connections_per_ip: 100000\n{extra}"
            );
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            Some(path)
        } else {
            None
        };
        Ok(Scratch {
            dir,
            model_url,
            config,
        })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `flynn` with these arguments in this home. Without a config file,
    /// `OPENAI_BASE_URL` and `OPENAI_API_KEY` make the zero-config
    /// `openai/gpt-4o-mini`.
    fn command(&self, args: &[&str]) -> Command {
        self.command_of(Path::new(env!("CARGO_BIN_EXE_flynn")), args)
    }

    /// `binary` with these arguments in this home, as [`command`](Self::command).
    fn command_of(&self, binary: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(binary);
        command
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.path())
            .env("FLYNN_HOME", self.path().join("home"))
            .env("XDG_CONFIG_HOME", self.path().join("config"))
            .env("OPENAI_BASE_URL", &self.model_url)
            .env("OPENAI_API_KEY", API_KEY)
            .env("FLYNN_GATEWAY_TOKEN", TOKEN)
            .current_dir(self.path())
            .stdin(Stdio::null());
        command
    }

    /// `flynn start` on a port of its choosing.
    fn start_command(&self) -> Command {
        let mut args = vec!["start", "--bind", "127.0.0.1:0"];
        let config = self
            .config
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned());
        if let Some(config) = &config {
            args.extend(["--config", config.as_str()]);
        }
        self.command(&args)
    }
}

/// What the daemon logged: the last lines, and its warnings and errors.
#[derive(Debug, Default)]
struct Log {
    tail: VecDeque<String>,
    problems: Vec<String>,
}

/// Lines of the log kept for error messages.
const LOG_TAIL: usize = 30;
/// Warnings and errors kept for the report.
const LOG_PROBLEMS: usize = 10;

/// A running `flynn start`.
struct Daemon {
    child: Child,
    /// The address it listens on, once it has said so.
    addr: Option<SocketAddr>,
    announced: Receiver<SocketAddr>,
    log: Arc<Mutex<Log>>,
}

/// How a daemon stopped.
struct Stopped {
    /// SIGTERM to exit.
    took: Duration,
    problems: Vec<String>,
}

impl Daemon {
    /// Starts the daemon and waits for its "listening on" line.
    fn start(command: Command) -> Result<Daemon> {
        let mut daemon = Daemon::spawn(command, None)?;
        match daemon.announced.recv_timeout(PROCESS_TIMEOUT) {
            Ok(addr) => daemon.addr = Some(addr),
            Err(RecvTimeoutError::Timeout) => bail!(
                "the daemon did not say it was listening within {PROCESS_TIMEOUT:?}; its log:\n{}",
                daemon.log_tail()
            ),
            Err(RecvTimeoutError::Disconnected) => {
                let status = daemon.child.wait().ok();
                bail!(
                    "the daemon exited ({status:?}) before it listened; its log:\n{}",
                    daemon.log_tail()
                )
            }
        }
        Ok(daemon)
    }

    /// Spawns the daemon, reading its log on a thread.
    fn spawn(mut command: Command, addr: Option<SocketAddr>) -> Result<Daemon> {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawning `flynn start`")?;
        lock(&RUNNING).push(child.id());
        let stderr = child
            .stderr
            .take()
            .context("the daemon's stderr was not captured")?;
        let log = Arc::new(Mutex::new(Log::default()));
        let (tx, announced) = std::sync::mpsc::channel();
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some((_, rest)) = line.split_once("listening on http://")
                    && let Some(addr) = rest.split_whitespace().next()
                    && let Ok(addr) = addr.parse::<SocketAddr>()
                {
                    let _ = tx.send(addr);
                }
                let mut log = lock(&lines);
                if (line.contains(" WARN ") || line.contains(" ERROR "))
                    && log.problems.len() < LOG_PROBLEMS
                {
                    log.problems.push(line.clone());
                }
                log.tail.push_back(line);
                if log.tail.len() > LOG_TAIL {
                    log.tail.pop_front();
                }
            }
        });
        Ok(Daemon {
            child,
            addr,
            announced,
            log,
        })
    }

    fn addr(&self) -> Result<SocketAddr> {
        self.addr
            .context("the daemon's address is not known (it has not said it listens)")
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_tail(&self) -> String {
        Vec::from(lock(&self.log).tail.clone()).join("\n")
    }

    /// Its memory, from `/proc/<pid>/status`.
    fn memory(&self) -> Result<Memory> {
        let path = format!("/proc/{}/status", self.pid());
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let field = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.trim_start_matches(':').split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok(Memory {
            rss_kib: field("VmRSS"),
            hwm_kib: field("VmHWM"),
            anon_kib: field("RssAnon"),
            file_kib: field("RssFile"),
            threads: field("Threads"),
        })
    }

    /// What the resident memory is made of, from `/proc/<pid>/smaps`: the
    /// binary's own pages, shared libraries, the main heap, and other
    /// anonymous memory (allocator arenas of other threads, stacks).
    fn mappings(&self) -> Result<Value> {
        let path = format!("/proc/{}/smaps", self.pid());
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let exe = std::fs::read_link(format!("/proc/{}/exe", self.pid()))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (mut binary, mut libraries, mut heap, mut other) = (0u64, 0u64, 0u64, 0u64);
        let mut current = String::new();
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let first = fields.next().unwrap_or_default();
            if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
                current = fields.nth(4).unwrap_or_default().to_owned();
            } else if first == "Rss:" {
                let kib: u64 = fields.next().and_then(|n| n.parse().ok()).unwrap_or(0);
                if !exe.is_empty() && current == exe {
                    binary += kib;
                } else if current == "[heap]" {
                    heap += kib;
                } else if current.starts_with('/') {
                    libraries += kib;
                } else {
                    other += kib;
                }
            }
        }
        Ok(json!({
            "binary_kib": binary,
            "libraries_kib": libraries,
            "heap_kib": heap,
            "other_anon_kib": other,
        }))
    }

    /// CPU time it has used so far, every thread counted.
    fn cpu(&self) -> Option<Duration> {
        process_cpu(&self.pid().to_string())
    }

    /// SIGTERM, then waits for it to exit.
    fn stop(mut self) -> Result<Stopped> {
        let started = Instant::now();
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)
            .context("sending SIGTERM to the daemon")?;
        loop {
            if let Some(status) = self.child.try_wait().context("waiting for the daemon")? {
                ensure!(
                    status.success(),
                    "the daemon exited with {status} after SIGTERM; its log:\n{}",
                    self.log_tail()
                );
                break;
            }
            ensure!(
                started.elapsed() < PROCESS_TIMEOUT,
                "the daemon did not exit within {PROCESS_TIMEOUT:?} of SIGTERM; its log:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let took = started.elapsed();
        let problems = std::mem::take(&mut lock(&self.log).problems);
        Ok(Stopped { took, problems })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let pid = self.child.id();
        lock(&RUNNING).retain(|&p| p != pid);
    }
}

/// The daemons running now: killed if the bench itself is stopped by a
/// signal, so none outlives it.
static RUNNING: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Waits for SIGINT, SIGTERM or SIGHUP, then kills the running daemons and
/// exits as the signal would have.
async fn kill_daemons_on_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate), Ok(mut hangup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        eprintln!(
            "daemon bench: cannot watch for signals; a killed bench may leave daemons behind"
        );
        return;
    };
    let code = tokio::select! {
        _ = interrupt.recv() => 130,
        _ = terminate.recv() => 143,
        _ = hangup.recv() => 129,
    };
    for &pid in lock(&RUNNING).iter() {
        if let Some(pid) = i32::try_from(pid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
    eprintln!("daemon bench: stopped by a signal; killed the daemons it had started");
    std::process::exit(code);
}

/// A process's memory, in KiB.
#[derive(Debug, Clone, Copy)]
struct Memory {
    rss_kib: u64,
    /// The peak RSS so far.
    hwm_kib: u64,
    anon_kib: u64,
    file_kib: u64,
    threads: u64,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether `GET /healthz` answers 200 now.
fn healthz(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(request).is_err() {
        return false;
    }
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    response.starts_with(b"HTTP/1.1 200")
}

/// Turns of one failing step, counted, with the first few messages.
#[derive(Debug, Default)]
struct Errors {
    count: usize,
    examples: Vec<String>,
}

impl Errors {
    fn add(&mut self, message: String) {
        self.count += 1;
        if self.examples.len() < 5 {
            self.examples.push(message);
        }
    }

    fn merge(&mut self, other: Errors) {
        self.count += other.count;
        for example in other.examples {
            if self.examples.len() < 5 {
                self.examples.push(example);
            }
        }
    }
}

/// Opens a WebSocket to the daemon's `/rpc` with the bench's token.
async fn connect(addr: SocketAddr) -> Result<WsClient> {
    let mut headers = HeaderMap::new();
    headers.insert(
        "authorization",
        format!("Bearer {TOKEN}")
            .parse()
            .context("the token is not a header value")?,
    );
    let url = format!("ws://{addr}/rpc");
    WsClientBuilder::default()
        .set_headers(headers)
        .connection_timeout(PROCESS_TIMEOUT)
        .request_timeout(TURN_TIMEOUT)
        .build(&url)
        .await
        .with_context(|| format!("opening a WebSocket to {url}"))
}

async fn connect_all(addr: SocketAddr, count: usize) -> Result<Vec<Arc<WsClient>>> {
    let mut clients = Vec::new();
    for _ in 0..count {
        clients.push(Arc::new(connect(addr).await?));
    }
    Ok(clients)
}

/// One turn: `agent.send` on an open WebSocket until the turn's
/// `run_state` of `complete`; how long that took.
async fn turn(client: &WsClient, session: &str) -> Result<Duration> {
    let started = Instant::now();
    let mut params = ObjectParams::new();
    params.insert("session", session)?;
    params.insert("message", "hi")?;
    let mut events: Subscription<Value> = client
        .subscribe("agent.send", params, "agent.unsubscribe")
        .await
        .with_context(|| format!("agent.send to {session}"))?;
    let mut error = None;
    loop {
        let event = tokio::time::timeout(TURN_TIMEOUT, events.next())
            .await
            .with_context(|| format!("the turn in {session} did not end within {TURN_TIMEOUT:?}"))?
            .with_context(|| format!("the subscription of {session} closed before its turn ended"))?
            .with_context(|| format!("a malformed event in {session}"))?;
        match event["type"].as_str() {
            Some("error") => error = Some(event.to_string()),
            Some("run_state") => match event["state"].as_str() {
                Some("complete") => return Ok(started.elapsed()),
                Some(state @ ("cancelled" | "error")) => bail!(
                    "the turn in {session} ended '{state}': {}",
                    error.as_deref().unwrap_or("no error event")
                ),
                _ => {}
            },
            _ => {}
        }
    }
}

/// Runs the turns numbered `jobs`, each in the session `session(job)`,
/// with every client sending one at a time; the turns' times in ms.
async fn run_jobs(
    clients: &[Arc<WsClient>],
    jobs: std::ops::Range<usize>,
    session: impl Fn(usize) -> String + Send + Sync + 'static,
) -> (Vec<f64>, Errors) {
    let next = Arc::new(AtomicUsize::new(jobs.start));
    let session = Arc::new(session);
    let mut running = JoinSet::new();
    for client in clients {
        let (client, next, session) = (client.clone(), next.clone(), session.clone());
        let end = jobs.end;
        running.spawn(async move {
            let mut times = Vec::new();
            let mut errors = Errors::default();
            loop {
                let job = next.fetch_add(1, Ordering::Relaxed);
                if job >= end {
                    break;
                }
                match turn(&client, &session(job)).await {
                    Ok(took) => times.push(ms(took)),
                    Err(error) => errors.add(format!("{error:#}")),
                }
            }
            (times, errors)
        });
    }
    let mut times = Vec::new();
    let mut errors = Errors::default();
    while let Some(joined) = running.join_next().await {
        match joined {
            Ok((mut t, e)) => {
                times.append(&mut t);
                errors.merge(e);
            }
            Err(error) => errors.add(format!("a client task failed: {error}")),
        }
    }
    (times, errors)
}

/// The model request a turn made, sent by the bench straight to the fake
/// on a kept-alive connection: send to last byte of the answer.
async fn replay(http: &reqwest::Client, url: &str, body: Bytes) -> Result<Duration> {
    let started = Instant::now();
    let response = http
        .post(url)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::AUTHORIZATION, format!("Bearer {API_KEY}"))
        .body(body)
        .send()
        .await
        .context("sending a model request to the fake directly")?;
    ensure!(
        response.status().is_success(),
        "the fake model answered {} to a replayed request",
        response.status()
    );
    response
        .bytes()
        .await
        .context("reading the fake model's answer")?;
    Ok(started.elapsed())
}

/// The daemon's `/metrics` text.
async fn scrape_metrics(http: &reqwest::Client, addr: SocketAddr) -> Result<String> {
    let response = http
        .get(format!("http://{addr}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .context("reading the daemon's /metrics")?;
    ensure!(
        response.status().is_success(),
        "/metrics answered {}",
        response.status()
    );
    response
        .text()
        .await
        .context("reading the daemon's /metrics")
}

/// The value of an unlabelled series in Prometheus text (0 when absent).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            let (series, value) = line.split_once(' ')?;
            (series == name).then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0.0)
}

/// CPU time (user and system, every thread) a process has used so far,
/// from `/proc/<pid>/stat`, in clock ticks of 10 ms (Linux's `USER_HZ`).
fn process_cpu(pid: &str) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name, which is in parentheses: state
    // is field 3, utime field 14 and stime field 15.
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

fn cpu_per_turn(before: Option<Duration>, after: Option<Duration>, turns: usize) -> Option<f64> {
    let used = after?.checked_sub(before?)?;
    (turns > 0).then(|| ms(used) / turns as f64)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// Median, p90, p99, min and max of `values` (ms), sorted in place.
fn summary(values: &mut [f64]) -> Value {
    if values.is_empty() {
        return json!({"count": 0});
    }
    values.sort_unstable_by(f64::total_cmp);
    let at = |q: f64| {
        let index = ((values.len() - 1) as f64 * q).round() as usize;
        values[index]
    };
    json!({
        "count": values.len(),
        "median_ms": at(0.5),
        "p90_ms": at(0.9),
        "p99_ms": at(0.99),
        "min_ms": at(0.0),
        "max_ms": at(1.0),
    })
}

/// Raises this process's soft limit of open files to its hard limit (the
/// daemons it starts inherit it); the limit now, when there is one.
fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let wanted = limit.maximum.unwrap_or(1 << 20).min(1 << 20);
    if limit.current.is_some_and(|current| current < wanted) {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(wanted),
                maximum: limit.maximum,
            },
        );
    }
    getrlimit(Resource::Nofile).current
}

/// The fake model: answers every `POST /v1/chat/completions` with the same
/// short answer (streamed as OpenAI's `chat.completion.chunk`s, with a
/// usage chunk when asked for) after a fixed delay, and counts requests.
struct FakeModel {
    addr: SocketAddr,
    state: Arc<FakeState>,
}

#[derive(Debug, Default)]
struct FakeState {
    delay: Duration,
    requests: AtomicUsize,
    unexpected: AtomicUsize,
    recording: AtomicBool,
    bodies: Mutex<Vec<Bytes>>,
    /// When each recorded request arrived.
    arrivals: Mutex<Vec<Instant>>,
}

impl FakeModel {
    async fn start(delay: Duration) -> Result<FakeModel> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the fake model server")?;
        let addr = listener.local_addr()?;
        let state = Arc::new(FakeState {
            delay,
            ..FakeState::default()
        });
        let router = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(complete))
            .fallback(unexpected)
            .with_state(state.clone());
        tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, router).await {
                eprintln!("daemon bench: the fake model server stopped: {error}");
            }
        });
        Ok(FakeModel { addr, state })
    }

    /// The base URL to configure, ending in `/v1`.
    fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    fn requests(&self) -> usize {
        self.state.requests.load(Ordering::Relaxed)
    }

    fn unexpected(&self) -> usize {
        self.state.unexpected.load(Ordering::Relaxed)
    }

    /// Keeps (or stops keeping) the body of every request.
    fn record(&self, on: bool) {
        self.state.recording.store(on, Ordering::Relaxed);
    }

    /// The bodies kept since the last call.
    fn take_bodies(&self) -> Vec<Bytes> {
        std::mem::take(&mut *lock(&self.state.bodies))
    }

    /// When the requests kept since the last call arrived.
    fn take_arrivals(&self) -> Vec<Instant> {
        std::mem::take(&mut *lock(&self.state.arrivals))
    }
}

async fn complete(State(state): State<Arc<FakeState>>, body: Bytes) -> Response {
    state.requests.fetch_add(1, Ordering::Relaxed);
    if state.recording.load(Ordering::Relaxed) {
        lock(&state.arrivals).push(Instant::now());
        lock(&state.bodies).push(body.clone());
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !state.delay.is_zero() {
        tokio::time::sleep(state.delay).await;
    }
    let model = request["model"].as_str().unwrap_or("gpt-4o-mini");
    let usage = json!({"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17});
    if request["stream"] != Value::Bool(true) {
        let answer = json!({
            "id": "chatcmpl-bench", "object": "chat.completion", "created": 1694268190,
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there.", "refusal": null}, "logprobs": null, "finish_reason": "stop"}],
            "usage": usage,
        });
        return axum::Json(answer).into_response();
    }
    let chunk = |delta: Value, finish: Option<&str>| {
        let chunk = json!({
            "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1694268190,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        format!("data: {chunk}\n\n")
    };
    let mut sse = String::new();
    sse.push_str(&chunk(json!({"role": "assistant", "content": ""}), None));
    sse.push_str(&chunk(json!({"content": "Hello"}), None));
    sse.push_str(&chunk(json!({"content": " there."}), None));
    sse.push_str(&chunk(json!({}), Some("stop")));
    if request["stream_options"]["include_usage"] == Value::Bool(true) {
        let chunk = json!({
            "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1694268190,
            "model": model, "choices": [], "usage": usage,
        });
        sse.push_str(&format!("data: {chunk}\n\n"));
    }
    sse.push_str("data: [DONE]\n\n");
    (
        [
            (header::CONTENT_TYPE, "text/event-stream; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        sse,
    )
        .into_response()
}

async fn unexpected(State(state): State<Arc<FakeState>>) -> Response {
    state.unexpected.fetch_add(1, Ordering::Relaxed);
    (
        StatusCode::NOT_FOUND,
        "the fake model serves only POST /v1/chat/completions",
    )
        .into_response()
}
