//! `/metrics` in Prometheus' text format (version 0.0.4).
//!
//! Counters and histograms fed by the runtime's global event stream, and
//! gauges and usage totals read at scrape time. Hand-written: a few atomic
//! counters are all this needs, where the exporter crates bring their own
//! registries, HTTP servers and dependencies.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use flynn_protocol::{AgentEvent, EventEnvelope, RunState, SessionKey, TurnId};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 17] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

#[derive(Debug, Default)]
struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// Sum in microseconds.
    sum_micros: AtomicU64,
}

impl Histogram {
    fn observe(&self, seconds: f64) {
        for (bound, count) in BUCKETS.iter().zip(&self.counts) {
            if seconds <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        // Saturating float-to-int: negative or NaN become 0.
        let micros = (seconds * 1e6) as u64;
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (bound, count) in BUCKETS.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{bound}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

/// What the gateway counts.
#[derive(Debug, Default)]
pub struct Metrics {
    turns_complete: AtomicU64,
    turns_cancelled: AtomicU64,
    turns_error: AtomicU64,
    errors: Mutex<HashMap<String, u64>>,
    tool_calls_ok: AtomicU64,
    tool_calls_failed: AtomicU64,
    auth_failures: AtomicU64,
    connections_refused: AtomicU64,
    rpc_calls: AtomicU64,
    http_requests: AtomicU64,
    turn_seconds: Histogram,
    first_output_seconds: Histogram,
    model_call_seconds: Histogram,
    overhead_seconds: Histogram,
    cancel_seconds: Histogram,
    /// Turns seen starting: when, and whether output came yet.
    started: Mutex<HashMap<(SessionKey, TurnId), (Instant, bool)>>,
    /// Turns asked to stop: when.
    cancelling: Mutex<HashMap<(SessionKey, TurnId), Instant>>,
}

impl Metrics {
    pub(crate) fn auth_failure(&self) {
        self.auth_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn rpc_call(&self) {
        self.rpc_calls.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn http_request(&self) {
        self.http_requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one event of the runtime.
    pub(crate) fn observe(&self, envelope: &EventEnvelope) {
        let Some(turn) = envelope.turn else {
            return;
        };
        let key = (envelope.session.clone(), turn);
        match &envelope.event {
            AgentEvent::RunState { state } => match state {
                RunState::Start => {
                    let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
                    // A turn whose end was never seen must not pile up.
                    if started.len() > 100_000 {
                        started.clear();
                    }
                    started.insert(key, (Instant::now(), false));
                }
                RunState::CancelRequested => {
                    let mut cancelling = self
                        .cancelling
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner);
                    if cancelling.len() > 100_000 {
                        cancelling.clear();
                    }
                    cancelling.entry(key).or_insert_with(Instant::now);
                }
                RunState::Complete | RunState::Cancelled | RunState::Error => {
                    // However it ended once asked to stop: how long the
                    // stop took.
                    let asked = self
                        .cancelling
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&key);
                    if let Some(at) = asked {
                        self.cancel_seconds.observe(at.elapsed().as_secs_f64());
                    }
                    let counter = match state {
                        RunState::Complete => &self.turns_complete,
                        RunState::Cancelled => &self.turns_cancelled,
                        _ => &self.turns_error,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    let began = self
                        .started
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&key);
                    if let Some((at, _)) = began {
                        self.turn_seconds.observe(at.elapsed().as_secs_f64());
                    }
                }
            },
            AgentEvent::ContentDelta { .. }
            | AgentEvent::Thinking { .. }
            | AgentEvent::ToolStart { .. } => {
                let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some((at, seen)) = started.get_mut(&key)
                    && !*seen
                {
                    *seen = true;
                    self.first_output_seconds
                        .observe(at.elapsed().as_secs_f64());
                }
            }
            AgentEvent::Done { outcome } => {
                let Some(timing) = &outcome.timing else {
                    return;
                };
                for call in &timing.model_calls_us {
                    self.model_call_seconds.observe(*call as f64 / 1e6);
                }
                let began = self
                    .started
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(&key)
                    .map(|(at, _)| *at);
                if let Some(at) = began {
                    let total = u64::try_from(at.elapsed().as_micros()).unwrap_or(u64::MAX);
                    let overhead = total.saturating_sub(timing.waiting_us());
                    self.overhead_seconds.observe(overhead as f64 / 1e6);
                }
            }
            AgentEvent::ToolEnd { ok, .. } => {
                let counter = if *ok {
                    &self.tool_calls_ok
                } else {
                    &self.tool_calls_failed
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
            AgentEvent::Error { code, .. } => {
                let code = serde_json::to_value(code)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "internal".to_owned());
                *self
                    .errors
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(code)
                    .or_default() += 1;
            }
            _ => {}
        }
    }

    /// The text of `/metrics`, with the values read at scrape time.
    pub(crate) fn render(&self, now: &Snapshot) -> String {
        let mut out = String::with_capacity(4096);
        let counter = |out: &mut String, name: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        };
        let gauge = |out: &mut String, name: &str, help: &str, value: f64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        };

        counter(
            &mut out,
            "flynn_turns_total",
            "Turns ended, by how they ended.",
        );
        for (outcome, value) in [
            ("complete", &self.turns_complete),
            ("cancelled", &self.turns_cancelled),
            ("error", &self.turns_error),
        ] {
            let _ = writeln!(
                out,
                "flynn_turns_total{{outcome=\"{outcome}\"}} {}",
                value.load(Ordering::Relaxed)
            );
        }
        counter(
            &mut out,
            "flynn_errors_total",
            "Turn errors, by error code.",
        );
        let mut errors: Vec<(String, u64)> = self
            .errors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        errors.sort();
        for (code, value) in errors {
            let _ = writeln!(out, "flynn_errors_total{{code=\"{code}\"}} {value}");
        }
        counter(&mut out, "flynn_tool_calls_total", "Tool calls, by result.");
        let _ = writeln!(
            out,
            "flynn_tool_calls_total{{ok=\"true\"}} {}\nflynn_tool_calls_total{{ok=\"false\"}} {}",
            self.tool_calls_ok.load(Ordering::Relaxed),
            self.tool_calls_failed.load(Ordering::Relaxed)
        );

        gauge(
            &mut out,
            "flynn_store_up",
            "Whether the session store answered this scrape's usage query (1) or failed (0: the usage series are left out; the daemon's log says why).",
            if now.tiers.is_some() { 1.0 } else { 0.0 },
        );
        let tiers = now.tiers.as_deref().unwrap_or_default();
        counter(
            &mut out,
            "flynn_model_calls_total",
            "Model calls recorded, by tier (from the session store).",
        );
        for (tier, usage) in tiers {
            let _ = writeln!(
                out,
                "flynn_model_calls_total{{tier=\"{tier}\"}} {}",
                usage.calls
            );
        }
        counter(
            &mut out,
            "flynn_tokens_total",
            "Tokens used, by tier and direction (from the session store).",
        );
        for (tier, usage) in tiers {
            for (direction, value) in [
                ("input", usage.usage.input_tokens),
                ("output", usage.usage.output_tokens),
                ("cache_read", usage.usage.cache_read_tokens),
                ("cache_write", usage.usage.cache_write_tokens),
            ] {
                let _ = writeln!(
                    out,
                    "flynn_tokens_total{{tier=\"{tier}\",direction=\"{direction}\"}} {value}"
                );
            }
        }
        counter(
            &mut out,
            "flynn_cost_usd_total",
            "Cost in USD of priced model calls, by tier.",
        );
        for (tier, usage) in tiers {
            let _ = writeln!(
                out,
                "flynn_cost_usd_total{{tier=\"{tier}\"}} {}",
                usage.cost_usd
            );
        }

        self.turn_seconds.render(
            &mut out,
            "flynn_turn_duration_seconds",
            "Time from a turn's start to its end.",
        );
        self.first_output_seconds.render(
            &mut out,
            "flynn_turn_first_output_seconds",
            "Time from a turn's start to its first output (text, thinking or a tool call): the model's latency plus Flynn's own work before the call.",
        );

        self.model_call_seconds.render(
            &mut out,
            "flynn_model_call_seconds",
            "Each model call of a conversation, from the request to the complete answer (fallbacks and retries included).",
        );
        self.overhead_seconds.render(
            &mut out,
            "flynn_turn_overhead_seconds",
            "Flynn's own work in a turn: its duration less model calls, tools and compaction.",
        );
        self.cancel_seconds.render(
            &mut out,
            "flynn_cancel_latency_seconds",
            "Time from a request to cancel a turn (/cancel, agent.cancel, a reset) to the turn's end.",
        );

        gauge(
            &mut out,
            "flynn_active_sessions",
            "Sessions with a lane (recently active).",
            now.active_sessions as f64,
        );
        gauge(
            &mut out,
            "flynn_running_turns",
            "Turns running now.",
            now.running_turns as f64,
        );
        gauge(
            &mut out,
            "flynn_pending_confirmations",
            "Tool calls waiting for a person.",
            now.pending_confirmations as f64,
        );
        gauge(
            &mut out,
            "flynn_resident_memory_bytes",
            "Resident set size of the daemon.",
            now.rss_bytes as f64,
        );
        gauge(
            &mut out,
            "flynn_runtime_tasks",
            "Asynchronous tasks alive in the daemon (a number that keeps growing is a leak).",
            now.tasks as f64,
        );
        gauge(
            &mut out,
            "flynn_open_fds",
            "File descriptors the daemon has open.",
            now.open_fds as f64,
        );
        gauge(
            &mut out,
            "flynn_uptime_seconds",
            "Seconds since the gateway started.",
            now.uptime_secs,
        );
        counter(
            &mut out,
            "flynn_gateway_rpc_calls_total",
            "JSON-RPC calls received.",
        );
        let _ = writeln!(
            out,
            "flynn_gateway_rpc_calls_total {}",
            self.rpc_calls.load(Ordering::Relaxed)
        );
        counter(
            &mut out,
            "flynn_gateway_http_requests_total",
            "HTTP requests received (all routes).",
        );
        let _ = writeln!(
            out,
            "flynn_gateway_http_requests_total {}",
            self.http_requests.load(Ordering::Relaxed)
        );
        counter(
            &mut out,
            "flynn_gateway_auth_failures_total",
            "Requests refused for a missing or wrong token or origin.",
        );
        let _ = writeln!(
            out,
            "flynn_gateway_auth_failures_total {}",
            self.auth_failures.load(Ordering::Relaxed)
        );
        counter(
            &mut out,
            "flynn_gateway_connections_refused_total",
            "Connections closed at once: over gateway.max_connections or max_connections_per_ip.",
        );
        let _ = writeln!(
            out,
            "flynn_gateway_connections_refused_total {}",
            self.connections_refused.load(Ordering::Relaxed)
        );
        out
    }
}

/// Values read at scrape time.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// Usage per tier; `None` when the store could not be read.
    pub tiers: Option<Vec<(String, flynn_sessions::UsageTotal)>>,
    pub active_sessions: usize,
    pub running_turns: usize,
    pub pending_confirmations: usize,
    pub rss_bytes: u64,
    pub tasks: usize,
    pub open_fds: usize,
    pub uptime_secs: f64,
}

/// The file descriptors this process has open, from `/proc/self/fd` (0
/// where there is no procfs).
pub fn open_fds() -> usize {
    // The directory being read holds one descriptor itself.
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count().saturating_sub(1))
}

/// The process's resident set size, from `/proc/self/statm` (0 where
/// there is no procfs).
pub fn rss_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}
