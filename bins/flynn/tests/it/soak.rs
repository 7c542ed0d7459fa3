//! Soak: mixed traffic through the real daemon for a while (Telegram
//! polling, WhatsApp webhooks, the gateway's OpenAI-compatible endpoint,
//! `/compact` in the chats, a cron job every 15 seconds), sampling the
//! daemon's resident memory, tasks, file descriptors and threads. At the
//! end every message is answered, and once the traffic stops the daemon
//! holds no more tasks or descriptors than it did after warming up.
//!
//! `FLYNN_SOAK_SECONDS` (default 20) is the length of the traffic;
//! `cargo xtask soak` runs 30 minutes against the release build and checks
//! that the resident memory stays within 10 % after warm-up (a fifth of
//! the run), which only a run of five minutes or more can show.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use flynn_testkit::telegram::{FakeTelegram, Incoming, TgUser};
use flynn_testkit::whatsapp::{FakeWhatsApp, Signing};
use flynn_testkit::{FakeOpenAi, Reply};

use crate::Env;
use crate::daemon::Daemon;
use crate::setup::{TestConfig, owners};

const TOKEN: &str = "soak-gateway-token-0123456789abcdef";
const TELEGRAM_CHATS: [i64; 3] = [4242, 4243, 4244];
const WHATSAPP_NUMBERS: [&str; 3] = ["15550000001", "15550000002", "15550000003"];
/// Gateway sessions: `openai:user-<n>`.
const GATEWAY_USERS: usize = 6;
/// Every this many messages a chat is compacted instead.
const COMPACT_EVERY: usize = 15;

fn config(model: &FakeOpenAi, telegram: &FakeTelegram, whatsapp: &FakeWhatsApp) -> TestConfig {
    let unlimited = "rate_limit: {messages: 0}";
    TestConfig::new(model)
        .section("gateway:\n  rate_limit_per_minute: 100000")
        .telegram(
            telegram,
            &format!("{}\n{unlimited}", owners(TELEGRAM_CHATS)),
        )
        .whatsapp(
            whatsapp,
            &format!("{}\n{unlimited}", owners(WHATSAPP_NUMBERS)),
        )
        .section(
            "automation:
  jobs:
    - name: pulse
      schedule: \"*/15 * * * * *\"
      message: Check the pulse",
        )
}

/// One reading of the daemon.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Duration,
    rss_bytes: f64,
    /// The resident memory's parts (`/proc/<pid>/status`): anonymous
    /// (heap, stacks) and file-backed (the binary's pages read in).
    anon_bytes: f64,
    file_bytes: f64,
    tasks: f64,
    fds: f64,
    threads: u64,
    messages: usize,
}

async fn sample(
    http: &reqwest::Client,
    daemon: &Daemon,
    started: Instant,
    messages: usize,
) -> Sample {
    let text = http
        .get(format!("{}/metrics", daemon.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .unwrap_or_else(|e| panic!("cannot scrape /metrics: {e}\n{}", daemon.log()))
        .text()
        .await
        .unwrap();
    let gauge = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
    };
    let status = std::fs::read_to_string(format!("/proc/{}/status", daemon.pid())).unwrap();
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let kib = |field: &str| -> f64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |k| k * 1024.0)
    };
    Sample {
        at: started.elapsed(),
        rss_bytes: gauge("flynn_resident_memory_bytes"),
        anon_bytes: kib("RssAnon:"),
        file_bytes: kib("RssFile:"),
        tasks: gauge("flynn_runtime_tasks"),
        fds: gauge("flynn_open_fds"),
        threads,
        messages,
    }
}

fn print(label: &str, s: &Sample) {
    eprintln!(
        "soak: {label:>9} {:>6.0} s  rss {:>6.1} MB (anon {:>5.1}, file {:>5.1})  tasks {:>4}  fds {:>4}  threads {:>3}  messages {:>6}",
        s.at.as_secs_f64(),
        s.rss_bytes / 1e6,
        s.anon_bytes / 1e6,
        s.file_bytes / 1e6,
        s.tasks,
        s.fds,
        s.threads,
        s.messages
    );
}

/// A whole answer of the model (`soak answer <n>`, not a streamed draft)
/// or the reply to `/compact`.
fn is_answer(text: &str) -> bool {
    text.strip_prefix("soak answer ")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        || text.starts_with("Compacted ")
        || text.starts_with("Nothing to compact")
}

/// Answers each chat got.
fn answered(telegram: &FakeTelegram, whatsapp: &FakeWhatsApp) -> BTreeMap<String, usize> {
    let mut got: BTreeMap<String, usize> = BTreeMap::new();
    for m in telegram.sent() {
        if is_answer(&m.plain) {
            *got.entry(format!("telegram:{}", m.chat_id)).or_default() += 1;
        }
    }
    for m in whatsapp.sent() {
        if is_answer(m.text()) {
            *got.entry(format!("whatsapp:{}", m.to)).or_default() += 1;
        }
    }
    got
}

/// Every [`COMPACT_EVERY`]th message of a conversation is `/compact`.
fn text_for(count: usize, n: usize) -> String {
    if count % COMPACT_EVERY == COMPACT_EVERY - 1 {
        "/compact".to_owned()
    } else {
        format!("soak message {n}")
    }
}

/// Takes the requests that are done out of `requests`, failing the test
/// with the first one that failed.
async fn finish(requests: &mut Vec<tokio::task::JoinHandle<()>>) {
    let (done, open): (Vec<_>, Vec<_>) = requests.drain(..).partition(|r| r.is_finished());
    *requests = open;
    for request in done {
        match request.await {
            Ok(()) => {}
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("a request task ended: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mixed_traffic_leaves_memory_tasks_and_descriptors_flat() {
    let seconds = std::env::var("FLYNN_SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20u64);
    let length = Duration::from_secs(seconds);
    let every = if seconds >= 300 {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(2)
    };
    let model = FakeOpenAi::start().await;
    let telegram = FakeTelegram::start().await;
    let whatsapp = Arc::new(FakeWhatsApp::start().await);
    for number in WHATSAPP_NUMBERS {
        whatsapp.customer_wrote(number);
    }
    let env = Env::new()
        .with_config(&config(&model, &telegram, &whatsapp))
        .var("FLYNN_GATEWAY_TOKEN", TOKEN);
    // Enough answers for every message, compaction and cron run, kept
    // topped up below.
    let pushed = Arc::new(AtomicUsize::new(0));
    let top_up = |wanted: usize| {
        while pushed.load(Ordering::Relaxed) < wanted {
            let n = pushed.fetch_add(1, Ordering::Relaxed);
            model.push(Reply::Text(format!("soak answer {n}")));
        }
    };
    top_up(200);
    let daemon = Daemon::start(&env);
    let hook = format!("{}/channels/whatsapp/webhook", daemon.url);
    // The gateway closes a keep-alive connection idle for
    // `gateway.header_timeout_secs` (10 s); a client keeps its idle ones
    // for less, or a request can go out on one as it is being closed.
    let http = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = Instant::now();

    let mut sent: BTreeMap<String, usize> = BTreeMap::new();
    let gateway_ok = Arc::new(AtomicUsize::new(0));
    let mut gateway_sent = 0usize;
    let mut requests = Vec::new();
    let mut samples: Vec<Sample> = Vec::new();
    let mut next_sample = Instant::now();
    let mut n = 0usize;
    while started.elapsed() < length {
        let total: usize = sent.values().sum::<usize>() + gateway_sent;
        top_up(total * 3 + 200);
        match n % 3 {
            0 => {
                let chat = TELEGRAM_CHATS[n / 3 % TELEGRAM_CHATS.len()];
                let count = sent.entry(format!("telegram:{chat}")).or_default();
                let text = text_for(*count, n);
                *count += 1;
                telegram.push(Incoming::private(&TgUser::new(chat, "Owner"), &text));
            }
            1 => {
                let number = WHATSAPP_NUMBERS[n / 3 % WHATSAPP_NUMBERS.len()];
                let count = sent.entry(format!("whatsapp:{number}")).or_default();
                let text = text_for(*count, n);
                *count += 1;
                let notification = whatsapp.text_message(number, "Owner", &text);
                let (whatsapp, hook) = (whatsapp.clone(), hook.clone());
                requests.push(tokio::spawn(async move {
                    let answer = whatsapp
                        .post(&hook, &notification, Signing::AppSecret)
                        .await;
                    assert_eq!(answer.status, 200, "a WhatsApp delivery was refused");
                }));
            }
            _ => {
                let user = n / 3 % GATEWAY_USERS;
                let text = text_for(gateway_sent / GATEWAY_USERS, n);
                gateway_sent += 1;
                let body = serde_json::json!({
                    "model": "default",
                    "user": format!("user-{user}"),
                    "messages": [{"role": "user", "content": text}],
                });
                let (http, url, ok) = (
                    http.clone(),
                    format!("{}/v1/chat/completions", daemon.url),
                    gateway_ok.clone(),
                );
                requests.push(tokio::spawn(async move {
                    let answer = http
                        .post(url)
                        .bearer_auth(TOKEN)
                        .json(&body)
                        .timeout(Duration::from_secs(120))
                        .send()
                        .await
                        .unwrap();
                    let status = answer.status();
                    let text = answer.text().await.unwrap_or_default();
                    assert!(
                        status.is_success()
                            && (text.contains("soak answer") || text.contains("ompact")),
                        "the gateway answered {status}: {text}"
                    );
                    ok.fetch_add(1, Ordering::Relaxed);
                }));
            }
        }
        n += 1;
        finish(&mut requests).await;
        if Instant::now() >= next_sample {
            let s = sample(&http, &daemon, started, n).await;
            print("traffic", &s);
            samples.push(s);
            next_sample += every;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }

    // Every message answered, then the daemon idle.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        finish(&mut requests).await;
        let got = answered(&telegram, &whatsapp);
        let done = requests.is_empty()
            && sent
                .iter()
                .all(|(chat, n)| got.get(chat).is_some_and(|g| g >= n));
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every message was answered: sent {sent:?}, answered {got:?}, {} requests open\n{}",
            requests.len(),
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for r in requests.drain(..) {
        r.await.unwrap();
    }
    assert_eq!(gateway_ok.load(Ordering::Relaxed), gateway_sent);
    let idle = sample(&http, &daemon, started, n).await;
    print("idle", &idle);

    // After warm-up (a fifth of the run, at least one sample), measured
    // under traffic: the first sample against the rest.
    let warm = (samples.len() / 5).max(1);
    assert!(
        samples.len() > warm,
        "too few samples ({}) for a {seconds} s run",
        samples.len()
    );
    let base = samples[warm];
    let peak_rss = samples[warm..]
        .iter()
        .map(|s| s.rss_bytes)
        .fold(0.0, f64::max);
    let growth = peak_rss / base.rss_bytes - 1.0;
    let last = samples.last().copied().unwrap_or(base);
    eprintln!(
        "soak: from the end of warm-up to the last sample: anonymous {:.1} -> {:.1} MB, file-backed {:.1} -> {:.1} MB",
        base.anon_bytes / 1e6,
        last.anon_bytes / 1e6,
        base.file_bytes / 1e6,
        last.file_bytes / 1e6,
    );
    eprintln!(
        "soak: {n} messages in {seconds} s; resident memory after warm-up {:.1} MB, peak {:.1} MB ({:+.1} %); tasks {} then {} idle; descriptors {} then {} idle",
        base.rss_bytes / 1e6,
        peak_rss / 1e6,
        growth * 100.0,
        base.tasks,
        idle.tasks,
        base.fds,
        idle.fds,
    );
    // Idle, the daemon holds what it held under traffic after warm-up,
    // less the requests then in flight.
    assert!(
        idle.tasks <= base.tasks + 8.0,
        "tasks grew: {} after warm-up, {} idle at the end",
        base.tasks,
        idle.tasks
    );
    assert!(
        idle.fds <= base.fds + 8.0,
        "file descriptors grew: {} after warm-up, {} idle at the end",
        base.fds,
        idle.fds
    );
    if seconds >= 300 {
        assert!(
            growth <= 0.10,
            "resident memory grew {:.1} % after warm-up: {samples:#?}",
            growth * 100.0
        );
    }
    assert_eq!(telegram.violations(), Vec::<String>::new());
    assert_eq!(whatsapp.violations(), Vec::<String>::new());
    assert_eq!(model.violations(), Vec::<String>::new());
}
