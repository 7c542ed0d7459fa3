//! Socket Mode: `apps.connections.open` with the app token names a
//! single-use WebSocket URL; Slack says `hello`, then pushes envelopes
//! (`events_api`, `interactive`, `slash_commands`) that are acknowledged
//! with `{"envelope_id": …}` once the daemon stored what they carry, and
//! redelivered by Slack when they are not. A `disconnect` envelope asks
//! for a fresh connection, which is opened at once; so is one after a
//! dropped socket.
//!
//! Reading and acknowledging run in one loop that never waits for the
//! daemon (pings keep flowing while a delivery is being stored); the
//! deliveries run in order in a second loop beside it.

use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::SlackAdapter;
use super::api::{CHANNEL, unavailable};
use super::wire::Identity;
use crate::adapter::ChannelError;
use crate::inbound::Inbound;

/// How long the WebSocket handshake and Slack's `hello` may take.
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the adapter pings Slack.
const PING_EVERY: Duration = Duration::from_secs(30);
/// Silence after which a connection is taken for dead.
const SILENCE_MAX: Duration = Duration::from_secs(90);
/// A connection that held this long was a good one.
const STABLE: Duration = Duration::from_secs(60);
/// Connections lost this many times in a row, each soon after it opened,
/// end `connect` with an error (the registry then waits before trying
/// again).
const QUICK_DROPS_MAX: u32 = 3;
/// Envelopes waiting for the daemon; more are left unacknowledged for
/// Slack to redeliver.
const QUEUE: usize = 64;

/// One envelope for the delivery loop, and the connection to acknowledge
/// it on.
struct Work {
    envelope_id: String,
    kind: String,
    payload: Value,
    ack: mpsc::Sender<String>,
}

/// How one connection ended.
enum End {
    /// `stop` was cancelled.
    Stopped,
    /// Slack sent `disconnect`: open a new connection now.
    Refresh,
    /// The socket broke or went silent.
    Dropped { why: String, after_hello: bool },
}

impl SlackAdapter {
    /// Runs Socket Mode until `stop` is cancelled.
    pub(super) async fn run_socket(
        &self,
        app_token: &str,
        bot: &Identity,
        sink: &Inbound,
        stop: &CancellationToken,
    ) -> Result<(), ChannelError> {
        let (queue, work) = mpsc::channel(QUEUE);
        tokio::select! {
            result = self.sessions(app_token, bot, sink, &queue, stop) => result,
            () = self.deliver_in_order(work, bot, sink) => Ok(()),
        }
    }

    async fn sessions(
        &self,
        app_token: &str,
        bot: &Identity,
        sink: &Inbound,
        queue: &mpsc::Sender<Work>,
        stop: &CancellationToken,
    ) -> Result<(), ChannelError> {
        let mut quick_drops = 0;
        loop {
            let url = tokio::select! {
                () = stop.cancelled() => return Ok(()),
                url = self.open_connection(app_token) => url?,
            };
            let opened = Instant::now();
            match self.session(&url, bot, sink, queue, stop).await? {
                End::Stopped => return Ok(()),
                End::Refresh => {
                    tracing::info!(
                        channel = CHANNEL,
                        "Slack asked for a new Socket Mode connection"
                    );
                    quick_drops = 0;
                }
                End::Dropped { why, after_hello } => {
                    if !after_hello {
                        return Err(unavailable(format!(
                            "Socket Mode: {why} before Slack said hello"
                        )));
                    }
                    quick_drops = if opened.elapsed() < STABLE {
                        quick_drops + 1
                    } else {
                        0
                    };
                    if quick_drops >= QUICK_DROPS_MAX {
                        return Err(unavailable(format!(
                            "Socket Mode: {why} ({quick_drops} connections in a row lost within a minute)"
                        )));
                    }
                    tracing::warn!(
                        channel = CHANNEL,
                        why,
                        "Socket Mode connection lost; reconnecting"
                    );
                }
            }
        }
    }

    /// A fresh WebSocket URL from `apps.connections.open`.
    async fn open_connection(&self, app_token: &str) -> Result<String, ChannelError> {
        let answer = self
            .api
            .call("apps.connections.open", app_token, &json!({}))
            .await
            .map_err(|e| match e {
                ChannelError::Unauthorized { channel, detail } => ChannelError::Unauthorized {
                    channel,
                    detail: format!("app_token: {detail}"),
                },
                other => other,
            })?;
        answer
            .get("url")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| unavailable("apps.connections.open answered without a url"))
    }

    /// One WebSocket connection, from handshake to its end.
    async fn session(
        &self,
        url: &str,
        bot: &Identity,
        sink: &Inbound,
        queue: &mpsc::Sender<Work>,
        stop: &CancellationToken,
    ) -> Result<End, ChannelError> {
        let hello_by = Instant::now() + HELLO_TIMEOUT;
        let opening = tokio::time::timeout_at(hello_by, tokio_tungstenite::connect_async(url));
        let mut socket = tokio::select! {
            () = stop.cancelled() => return Ok(End::Stopped),
            opened = opening => match opened {
                Err(_) => return Err(unavailable("Socket Mode: the WebSocket did not open within 30 s")),
                Ok(Err(e)) => return Err(unavailable(format!("Socket Mode: cannot open the WebSocket: {e}"))),
                Ok(Ok((socket, _))) => socket,
            },
        };
        let (ack, mut acks) = mpsc::channel::<String>(QUEUE);
        let mut hello = false;
        let mut last_heard = Instant::now();
        let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
        let end = loop {
            tokio::select! {
                () = stop.cancelled() => break End::Stopped,
                Some(frame) = acks.recv() => {
                    if let Err(e) = socket.send(Message::Text(frame.into())).await {
                        break End::Dropped { why: format!("cannot acknowledge: {e}"), after_hello: hello };
                    }
                }
                _ = ping.tick() => {
                    if last_heard.elapsed() > SILENCE_MAX {
                        break End::Dropped { why: "silent for 90 s".to_owned(), after_hello: hello };
                    }
                    if let Err(e) = socket.send(Message::Ping(Bytes::new())).await {
                        break End::Dropped { why: format!("cannot ping: {e}"), after_hello: hello };
                    }
                }
                () = tokio::time::sleep_until(hello_by), if !hello => {
                    return Err(unavailable("Socket Mode: Slack did not say hello within 30 s"));
                }
                frame = socket.next() => {
                    last_heard = Instant::now();
                    let text = match frame {
                        Some(Ok(Message::Text(text))) => text,
                        Some(Ok(Message::Close(close))) => {
                            let why = close.map_or_else(String::new, |c| format!(": {} {}", u16::from(c.code), c.reason));
                            break End::Dropped { why: format!("Slack closed the connection{why}"), after_hello: hello };
                        }
                        Some(Ok(_)) => continue,
                        Some(Err(e)) => break End::Dropped { why: e.to_string(), after_hello: hello },
                        None => break End::Dropped { why: "the connection closed".to_owned(), after_hello: hello },
                    };
                    match self.on_frame(text.as_str(), bot, sink, queue, &ack, &mut hello) {
                        Ok(None) => {}
                        Ok(Some(end)) => break end,
                        Err(e) => {
                            let _ = socket.close(None).await;
                            return Err(e);
                        }
                    }
                }
            }
        };
        // Best effort: the peer may be gone already.
        let _ = tokio::time::timeout(Duration::from_secs(2), socket.close(None)).await;
        Ok(end)
    }

    /// Handles one text frame; `Some` ends the connection.
    fn on_frame(
        &self,
        text: &str,
        bot: &Identity,
        sink: &Inbound,
        queue: &mpsc::Sender<Work>,
        ack: &mpsc::Sender<String>,
        hello: &mut bool,
    ) -> Result<Option<End>, ChannelError> {
        let mut envelope: Value = match serde_json::from_str(text) {
            Ok(envelope) => envelope,
            Err(error) => {
                tracing::warn!(channel = CHANNEL, %error, "Socket Mode frame is not JSON; skipped");
                return Ok(None);
            }
        };
        let kind = envelope
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        match kind.as_str() {
            "hello" => {
                *hello = true;
                sink.connected(bot.detail());
            }
            "disconnect" => {
                let reason = envelope
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                match reason {
                    // Sent some seconds before `refresh_requested`.
                    "warning" => {
                        tracing::debug!(channel = CHANNEL, "Socket Mode will be refreshed soon")
                    }
                    "link_disabled" => {
                        return Err(ChannelError::Rejected {
                            channel: CHANNEL.to_owned(),
                            detail: "Socket Mode is turned off for this app (turn it on under Settings → Socket Mode, or set mode: events)".to_owned(),
                        });
                    }
                    _ => return Ok(Some(End::Refresh)),
                }
            }
            "events_api" | "interactive" | "slash_commands" => {
                let Some(envelope_id) = envelope
                    .get("envelope_id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                else {
                    tracing::warn!(
                        channel = CHANNEL,
                        kind,
                        "Socket Mode envelope without an envelope_id; skipped"
                    );
                    return Ok(None);
                };
                let work = Work {
                    envelope_id,
                    kind,
                    payload: envelope
                        .get_mut("payload")
                        .map(Value::take)
                        .unwrap_or_default(),
                    ack: ack.clone(),
                };
                match queue.try_send(work) {
                    Ok(()) => {}
                    Err(mpsc::error::TrySendError::Full(work)) => tracing::warn!(
                        channel = CHANNEL,
                        envelope_id = work.envelope_id,
                        "too many envelopes waiting; left for Slack to redeliver"
                    ),
                    Err(mpsc::error::TrySendError::Closed(_)) => {
                        return Err(unavailable("the delivery loop ended"));
                    }
                }
            }
            other => tracing::debug!(channel = CHANNEL, kind = other, "Socket Mode frame skipped"),
        }
        Ok(None)
    }

    /// Hands envelopes to the daemon one at a time, in the order Slack
    /// sent them, and acknowledges each once the daemon says so.
    async fn deliver_in_order(
        &self,
        mut work: mpsc::Receiver<Work>,
        bot: &Identity,
        sink: &Inbound,
    ) {
        while let Some(work) = work.recv().await {
            let event = match work.kind.as_str() {
                "events_api" => self.read_callback(&work.payload, bot).await,
                "interactive" => super::from_interaction(&work.payload),
                _ => super::from_command(&work.payload),
            };
            let acknowledge = match event {
                Some(event) => {
                    let disposition = sink.deliver(event).await;
                    if !disposition.acknowledge() {
                        tracing::debug!(
                            channel = CHANNEL,
                            envelope_id = work.envelope_id,
                            ?disposition,
                            "not acknowledged; Slack will redeliver"
                        );
                    }
                    disposition.acknowledge()
                }
                None => true,
            };
            if acknowledge {
                let frame = json!({"envelope_id": work.envelope_id}).to_string();
                if work.ack.send(frame).await.is_err() {
                    tracing::debug!(
                        channel = CHANNEL,
                        "the connection closed before the acknowledgement; Slack will redeliver"
                    );
                }
            }
        }
    }
}
