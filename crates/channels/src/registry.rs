//! The registry: starts adapters, keeps them running and reports on them.
//!
//! Each adapter runs in its own task under a supervisor. When `connect`
//! fails, returns early or panics, the supervisor records why, waits
//! (1 s doubling to 60 s, the wait reset once a connection held for a
//! minute; 5 minutes after refused credentials) and connects again. One
//! adapter failing never touches the others or the daemon.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::adapter::{ChannelAdapter, ChannelError, WebhookRequest, WebhookResponse};
use crate::inbound::{Delivery, Inbound};
pub(crate) use flynn_protocol::clock::now_millis;

/// Where an adapter is in its life.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChannelState {
    /// Connecting (or reconnecting) now.
    Connecting,
    /// The platform accepted the credentials; events flow.
    Connected,
    /// The last attempt failed; the next one is scheduled.
    Retrying,
    /// Stopped on purpose.
    Stopped,
    /// Configured, but it cannot run (this build lacks its cargo feature,
    /// or its settings are unusable); `last_error` says why.
    Unavailable,
    /// Another node of the cluster holds the connection; this one takes
    /// it over if that node stops (`detail` names the holder). Webhooks
    /// and answers still go through this node.
    Standby,
}

/// Decides when this process may hold a channel's connection: in a
/// cluster of daemons, one node per channel at a time (a chat platform
/// allows one long poll or gateway session per bot).
#[async_trait::async_trait]
pub trait ConnectGate: Send + Sync {
    /// Waits until this process may connect `channel`, telling `standby`
    /// who holds it meanwhile; returns a token cancelled once it may hold
    /// it no longer, or `None` when `stop` was cancelled first.
    async fn admit(
        &self,
        channel: &str,
        standby: &(dyn Fn(String) + Send + Sync),
        stop: &CancellationToken,
    ) -> Option<CancellationToken>;
}

/// One channel's health, for `flynn doctor`, the dashboard and
/// `channels.status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChannelStatus {
    pub name: String,
    pub state: ChannelState,
    /// The bot as the platform names it, once connected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Why the last connection ended, if it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Whether the last failure was refused credentials.
    pub unauthorized: bool,
    /// Unix milliseconds of the last state change.
    pub since: i64,
    /// Times the adapter was reconnected after a failure.
    pub restarts: u64,
    /// Deliveries received since the daemon started.
    pub received: u64,
    /// Milliseconds until the next attempt, while retrying.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_in_ms: Option<u64>,
}

/// A channel's live status, shared by its supervisor and its sink.
#[derive(Debug)]
pub(crate) struct StatusCell {
    inner: Mutex<ChannelStatus>,
    received: AtomicU64,
    retry_at: Mutex<Option<Instant>>,
}

impl StatusCell {
    pub(crate) fn new(name: &str) -> Self {
        StatusCell {
            inner: Mutex::new(ChannelStatus {
                name: name.to_owned(),
                state: ChannelState::Connecting,
                detail: None,
                last_error: None,
                unauthorized: false,
                since: now_millis(),
                restarts: 0,
                received: 0,
                retry_in_ms: None,
            }),
            received: AtomicU64::new(0),
            retry_at: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ChannelStatus> {
        flynn_protocol::sync::lock(&self.inner)
    }

    pub(crate) fn received(&self) {
        self.received.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn connected(&self, detail: String) {
        let mut status = self.lock();
        status.state = ChannelState::Connected;
        status.detail = Some(detail);
        status.since = now_millis();
    }

    fn set(&self, state: ChannelState) {
        let mut status = self.lock();
        if status.state != state {
            status.state = state;
            status.since = now_millis();
        }
    }

    fn standby(&self, holder: String) {
        let mut status = self.lock();
        if status.state != ChannelState::Standby {
            status.state = ChannelState::Standby;
            status.since = now_millis();
        }
        status.detail = Some(holder);
    }

    fn failed(&self, error: &str, unauthorized: bool, retry_in: Duration) {
        {
            let mut status = self.lock();
            status.state = ChannelState::Retrying;
            status.last_error = Some(error.to_owned());
            status.unauthorized = unauthorized;
            status.since = now_millis();
            status.restarts += 1;
        }
        *flynn_protocol::sync::lock(&self.retry_at) = Some(Instant::now() + retry_in);
    }

    pub(crate) fn snapshot(&self) -> ChannelStatus {
        let mut status = self.lock().clone();
        status.received = self.received.load(Ordering::Relaxed);
        if status.state == ChannelState::Retrying {
            let retry_at = *flynn_protocol::sync::lock(&self.retry_at);
            status.retry_in_ms = retry_at.map(|at| {
                u64::try_from(at.saturating_duration_since(Instant::now()).as_millis())
                    .unwrap_or(u64::MAX)
            });
        }
        status
    }
}

/// Reconnection waits.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub first: Duration,
    pub max: Duration,
    /// A connection that held this long resets the wait to `first`.
    pub stable_after: Duration,
    /// The wait after refused credentials.
    pub unauthorized: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            first: Duration::from_secs(1),
            max: Duration::from_secs(60),
            stable_after: Duration::from_secs(60),
            unauthorized: Duration::from_secs(300),
        }
    }
}

struct Running {
    adapter: Arc<dyn ChannelAdapter>,
    status: Arc<StatusCell>,
    sink: Inbound,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The channels a daemon runs. Cheap to clone.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    running: Mutex<BTreeMap<String, Running>>,
    unavailable: Mutex<BTreeMap<String, ChannelStatus>>,
    tx: mpsc::Sender<Delivery>,
    backoff: Backoff,
    gate: Mutex<Option<Arc<dyn ConnectGate>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("channels", &self.names())
            .finish()
    }
}

impl Registry {
    /// A registry, and the receiver every adapter's deliveries arrive on.
    pub fn new(backoff: Backoff) -> (Registry, mpsc::Receiver<Delivery>) {
        let (tx, rx) = mpsc::channel(256);
        let registry = Registry {
            inner: Arc::new(Inner {
                running: Mutex::new(BTreeMap::new()),
                unavailable: Mutex::new(BTreeMap::new()),
                tx,
                backoff,
                gate: Mutex::new(None),
            }),
        };
        (registry, rx)
    }

    /// Adapters started from now on connect only when `gate` admits them.
    pub fn set_gate(&self, gate: Arc<dyn ConnectGate>) {
        *flynn_protocol::sync::lock(&self.inner.gate) = Some(gate);
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Running>> {
        flynn_protocol::sync::lock(&self.inner.running)
    }

    /// Starts an adapter under supervision, replacing (and stopping) a
    /// running one of the same name.
    pub async fn start(&self, adapter: Arc<dyn ChannelAdapter>) {
        let name = adapter.name().to_owned();
        self.stop(&name).await;
        let status = Arc::new(StatusCell::new(&name));
        let sink = Inbound::new(&name, self.inner.tx.clone(), status.clone());
        let stop = CancellationToken::new();
        let gate = flynn_protocol::sync::lock(&self.inner.gate).clone();
        let task = tokio::spawn(supervise(
            adapter.clone(),
            sink.clone(),
            status.clone(),
            stop.clone(),
            self.inner.backoff,
            gate,
        ));
        self.lock().insert(
            name,
            Running {
                adapter,
                status,
                sink,
                stop,
                task,
            },
        );
    }

    /// Stops one adapter and waits for it to leave. Returns whether it
    /// was running.
    pub async fn stop(&self, name: &str) -> bool {
        let Some(running) = self.lock().remove(name) else {
            return false;
        };
        running.stop.cancel();
        let mut task = running.task;
        if tokio::time::timeout(Duration::from_secs(10), &mut task)
            .await
            .is_err()
        {
            tracing::warn!(channel = name, "did not stop within 10 s; abandoned");
            task.abort();
        }
        true
    }

    /// Stops every adapter, all at once: the whole takes at most the 10 s
    /// one adapter may take, however many there are.
    pub async fn shutdown(&self) {
        let names = self.names();
        futures::future::join_all(names.iter().map(|name| self.stop(name))).await;
    }

    pub fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// A running adapter, for sending.
    pub fn get(&self, name: &str) -> Option<Arc<dyn ChannelAdapter>> {
        self.lock().get(name).map(|r| r.adapter.clone())
    }

    /// Records a configured channel that cannot run, so its status says
    /// why instead of leaving it out.
    pub fn mark_unavailable(&self, name: &str, reason: impl Into<String>) {
        let reason = reason.into();
        tracing::warn!(channel = name, reason = %reason, "channel unavailable");
        flynn_protocol::sync::lock(&self.inner.unavailable).insert(
            name.to_owned(),
            ChannelStatus {
                name: name.to_owned(),
                state: ChannelState::Unavailable,
                detail: None,
                last_error: Some(reason),
                unauthorized: false,
                since: now_millis(),
                restarts: 0,
                received: 0,
                retry_in_ms: None,
            },
        );
    }

    /// Every channel's health, by name.
    pub fn status(&self) -> Vec<ChannelStatus> {
        let mut all: BTreeMap<String, ChannelStatus> =
            flynn_protocol::sync::lock(&self.inner.unavailable).clone();
        for (name, running) in self.lock().iter() {
            all.insert(name.clone(), running.status.snapshot());
        }
        all.into_values().collect()
    }

    /// Hands a gateway request to the named channel; `None` when no such
    /// channel runs.
    pub async fn webhook(&self, name: &str, request: WebhookRequest) -> Option<WebhookResponse> {
        let (adapter, sink) = {
            let running = self.lock();
            let running = running.get(name)?;
            (running.adapter.clone(), running.sink.clone())
        };
        // A panicking handler answers 500 instead of taking the
        // connection task (and its neighbours) with it.
        let handled = std::panic::AssertUnwindSafe(adapter.webhook(request, &sink))
            .catch_unwind()
            .await;
        Some(handled.unwrap_or_else(|panic| {
            let message = flynn_protocol::fault::panic_message(panic.as_ref());
            tracing::error!(channel = name, panic = message, "webhook handler panicked");
            WebhookResponse::text(500, "the channel failed on this request")
        }))
    }
}

async fn supervise(
    adapter: Arc<dyn ChannelAdapter>,
    sink: Inbound,
    status: Arc<StatusCell>,
    stop: CancellationToken,
    backoff: Backoff,
    gate: Option<Arc<dyn ConnectGate>>,
) {
    let name = adapter.name().to_owned();
    let mut wait = backoff.first;
    loop {
        let admitted = match &gate {
            Some(gate) => {
                let standby = |holder: String| status.standby(holder);
                match gate.admit(&name, &standby, &stop).await {
                    Some(admitted) => Some(admitted),
                    None => {
                        status.set(ChannelState::Stopped);
                        return;
                    }
                }
            }
            None => None,
        };
        status.set(ChannelState::Connecting);
        let started = Instant::now();
        let connection = stop.child_token();
        // The connection ends once this process may hold it no longer.
        let revoked = admitted.clone().map(|admitted| {
            let connection = connection.clone();
            tokio::spawn(async move {
                admitted.cancelled().await;
                connection.cancel();
            })
        });
        let connecting = async {
            flynn_protocol::fault::point("adapter.connect");
            adapter.connect(sink.clone(), connection.clone()).await
        };
        let outcome = std::panic::AssertUnwindSafe(connecting)
            .catch_unwind()
            .await;
        if let Some(revoked) = revoked {
            revoked.abort();
        }
        adapter.disconnect().await;
        if stop.is_cancelled() {
            status.set(ChannelState::Stopped);
            tracing::info!(channel = %name, "stopped");
            return;
        }
        if admitted.is_some_and(|admitted| admitted.is_cancelled()) {
            tracing::warn!(channel = %name, "another node holds the channel's connection now; standing by");
            continue;
        }
        if started.elapsed() >= backoff.stable_after {
            wait = backoff.first;
        }
        let (error, unauthorized) = match outcome {
            Ok(Ok(())) => ("the connection ended".to_owned(), false),
            Ok(Err(e)) => {
                let unauthorized = matches!(e, ChannelError::Unauthorized { .. });
                (e.to_string(), unauthorized)
            }
            Err(panic) => {
                let message = flynn_protocol::fault::panic_message(panic.as_ref());
                tracing::error!(channel = %name, panic = message, "the adapter panicked; restarting it");
                (format!("the adapter panicked: {message}"), false)
            }
        };
        let delay = if unauthorized {
            backoff.unauthorized
        } else {
            jitter(wait)
        };
        tracing::warn!(channel = %name, error = %error, retry_in_ms = delay.as_millis() as u64, "channel disconnected");
        status.failed(&error, unauthorized, delay);
        tokio::select! {
            () = stop.cancelled() => {
                status.set(ChannelState::Stopped);
                return;
            }
            () = tokio::time::sleep(delay) => {}
        }
        wait = (wait * 2).min(backoff.max);
    }
}

/// Up to a quarter less, so channels failing together do not reconnect
/// in lockstep.
fn jitter(wait: Duration) -> Duration {
    let mut byte = [0u8; 1];
    if getrandom::fill(&mut byte).is_err() {
        return wait;
    }
    let cut = wait.mul_f64(f64::from(byte[0]) / 255.0 / 4.0);
    wait.saturating_sub(cut)
}
