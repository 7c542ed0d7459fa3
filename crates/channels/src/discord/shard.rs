//! One connection to Discord's gateway, kept alive: the WebSocket
//! (tokio-tungstenite, the stack Slack's Socket Mode uses too), HELLO and
//! the heartbeats it asks for, IDENTIFY or RESUME, reconnecting when the
//! connection drops or Discord asks for it, and the session (id, last
//! sequence number, `resume_gateway_url`) that a reconnect resumes.
//!
//! [`Shard::next`] yields every text payload the gateway sends, after the
//! shard has acted on it, and every close frame; the caller reads the
//! dispatches. Everything the shard keeps lives in the struct, so `next`
//! can be dropped at any await (it is one arm of the adapter's `select!`)
//! without losing a frame.
//!
//! What Discord documents and the shard does:
//! - HELLO starts heartbeats every `heartbeat_interval`, the first after
//!   a random part of it; each carries the last sequence number. A
//!   heartbeat whose ACK has not arrived when the next one is due means
//!   the connection is dead: it is dropped and resumed.
//! - Op 1 from the gateway is answered with a heartbeat at once.
//! - IDENTIFY at most once per 5 s (the start limit of a bot with one
//!   shard), and 1 to 5 s (random) after an INVALID SESSION that cannot
//!   be resumed.
//! - RECONNECT (op 7) and INVALID SESSION with `d: true` close with 4000
//!   and RESUME; INVALID SESSION with `d: false` closes with 1000 (which
//!   ends the session) and IDENTIFYs anew.
//! - Close codes Discord does not let a bot reconnect after (4004, 4010
//!   to 4014) end the shard; after any other close or a dropped
//!   connection it reconnects (to `resume_gateway_url` when resuming),
//!   waiting 1, 2, 4 ... 32 s after connections that failed or ended
//!   before READY / RESUMED.
//!
//! Compression (`compress`, zlib or zstd transport) is not asked for:
//! the bot's intents bring little traffic, and plain JSON needs no
//! inflater in the binary.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use futures::{Sink, Stream};
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpStream;
use tokio::time::{Instant, Interval, MissedTickBehavior, Sleep};
use tokio_tungstenite::tungstenite::protocol::CloseFrame as WsCloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::CHANNEL;

/// The gateway API version and encoding asked for.
const QUERY: &str = "/?v=10&encoding=json";
/// How long opening a connection (TCP, TLS, WebSocket handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the gateway has to answer a close frame the shard sent
/// before the connection is dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// IDENTIFYs of one bot with one shard are at least this far apart.
const IDENTIFY_SPACING: Duration = Duration::from_secs(5);
/// The longest wait between reconnects.
const MAX_BACKOFF: Duration = Duration::from_secs(32);

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;
type Connecting = Pin<Box<dyn Future<Output = Result<Socket, ShardError>> + Send>>;

/// A gateway session: what RESUME needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Session {
    id: String,
    sequence: u64,
}

impl Session {
    pub fn new(sequence: u64, id: String) -> Self {
        Session { id, sequence }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The sequence number of the last dispatch received.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }
}

/// Where the shard is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ShardState {
    /// No usable connection; the next [`Shard::next`] (re)connects.
    /// The WebSocket may still be closing.
    Disconnected,
    /// Connected, waiting for HELLO or sending IDENTIFY.
    Identifying,
    /// RESUME sent; missed dispatches are being replayed.
    Resuming,
    /// READY or RESUMED arrived.
    Active,
    /// Closed with a code that does not allow reconnecting, or by
    /// [`Shard::close`].
    Ended,
}

/// A WebSocket close frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CloseFrame {
    pub code: u16,
    pub reason: String,
}

impl CloseFrame {
    /// Closes so that the session can be resumed.
    pub const RESUME: u16 = 4000;
    /// Closes and ends the session.
    pub const NORMAL: u16 = 1000;

    pub fn new(code: u16) -> Self {
        CloseFrame {
            code,
            reason: String::new(),
        }
    }
}

/// What [`Shard::next`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Message {
    /// A gateway payload (JSON), already acted on by the shard.
    Text(String),
    /// The connection closed: the gateway's close frame, 1006 when the
    /// connection dropped without one.
    Close(Option<CloseFrame>),
}

/// What went wrong on the way to the next message; the shard goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ShardError {
    /// Opening a connection failed; the next call tries again after a
    /// wait.
    Connect { url: String, reason: String },
    /// A payload that is not what Discord sends.
    Payload { reason: String, payload: String },
}

impl fmt::Display for ShardError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardError::Connect { url, reason } => write!(f, "cannot connect to {url}: {reason}"),
            ShardError::Payload { reason, payload } => {
                let shown: String = payload.chars().take(200).collect();
                write!(f, "a gateway payload Flynn cannot read ({reason}): {shown}")
            }
        }
    }
}

impl std::error::Error for ShardError {}

/// Who ended a connection.
enum Initiator {
    /// The gateway's close frame, with its code.
    Gateway(Option<u16>),
    /// The shard, with this close frame.
    Shard(CloseFrame),
    /// The transport failed (or stopped answering heartbeats).
    Transport,
}

/// How the shard identifies.
#[derive(Debug, Clone)]
pub(super) struct Config {
    pub token: String,
    pub intents: u64,
    /// Where to connect without a session (`QUERY` is appended).
    pub url: String,
    /// A session to resume, and where.
    pub session: Option<Session>,
    pub resume_url: Option<String>,
}

/// One gateway connection and the session it carries.
pub(super) struct Shard {
    token: String,
    intents: u64,
    url: String,
    session: Option<Session>,
    resume_url: Option<String>,
    state: ShardState,
    socket: Option<Socket>,
    connecting: Option<Connecting>,
    /// Frames to send, in order.
    outbox: VecDeque<WsMessage>,
    /// Whether frames were started but not flushed.
    unflushed: bool,
    heartbeat: Option<Interval>,
    /// A heartbeat went out and its ACK has not come back.
    awaiting_ack: bool,
    /// When IDENTIFY is to be sent on this connection.
    identify_at: Option<Pin<Box<Sleep>>>,
    last_identify: Option<Instant>,
    /// The session was refused: the next IDENTIFY waits 1 to 5 s.
    invalidated: bool,
    /// The close frame the shard sent is unanswered until then.
    closing_by: Option<Pin<Box<Sleep>>>,
    /// Connections in a row that failed or ended before READY / RESUMED.
    failures: u32,
    /// [`Shard::close`] was called: no reconnecting.
    ending: bool,
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shard")
            .field("url", &self.url)
            .field("session", &self.session)
            .field("resume_url", &self.resume_url)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Shard {
    /// A shard that connects on the first [`next`](Self::next).
    pub fn new(config: Config) -> Self {
        Shard {
            token: config.token,
            intents: config.intents,
            url: config.url,
            session: config.session,
            resume_url: config.resume_url,
            state: ShardState::Disconnected,
            socket: None,
            connecting: None,
            outbox: VecDeque::new(),
            unflushed: false,
            heartbeat: None,
            awaiting_ack: false,
            identify_at: None,
            last_identify: None,
            invalidated: false,
            closing_by: None,
            failures: 0,
            ending: false,
        }
    }

    pub fn state(&self) -> ShardState {
        self.state
    }

    pub fn session(&self) -> Option<&Session> {
        self.session.as_ref()
    }

    /// READY's `resume_gateway_url`, until a connection to it fails.
    pub fn resume_url(&self) -> Option<&str> {
        self.resume_url.as_deref()
    }

    /// Closes the connection with `code` and ends the shard: `next`
    /// yields the gateway's answer, then `None`. 4000 leaves the session
    /// resumable; 1000 and 1001 end it.
    pub fn close(&mut self, code: u16) {
        self.ending = true;
        self.connecting = None;
        if self.socket.is_some() && self.state != ShardState::Disconnected {
            self.disconnect(Initiator::Shard(CloseFrame::new(code)));
        }
        self.state = ShardState::Ended;
    }

    /// The next gateway payload or close, connecting first when needed;
    /// `None` once the shard ended. Cancel-safe.
    pub async fn next(&mut self) -> Option<Result<Message, ShardError>> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Message, ShardError>>> {
        loop {
            if self.socket.is_none() {
                if self.ending || self.state == ShardState::Ended {
                    return Poll::Ready(None);
                }
                if let Err(error) = ready!(self.poll_connect(cx)) {
                    return Poll::Ready(Some(Err(error)));
                }
            }
            if let Some(deadline) = self.closing_by.as_mut()
                && deadline.as_mut().poll(cx).is_ready()
            {
                tracing::debug!(
                    channel = CHANNEL,
                    "the gateway did not answer the close frame; dropping the connection"
                );
                self.drop_socket();
                continue;
            }
            if let Err(error) = ready!(self.poll_send(cx)) {
                match self.failed(&error) {
                    Some(closed) => return Poll::Ready(Some(Ok(closed))),
                    None => continue,
                }
            }
            let Some(socket) = self.socket.as_mut() else {
                continue;
            };
            let received = match ready!(Pin::new(socket).poll_next(cx)) {
                Some(Ok(message)) => message,
                Some(Err(error)) => match self.failed(&error) {
                    Some(closed) => return Poll::Ready(Some(Ok(closed))),
                    None => continue,
                },
                None => {
                    self.drop_socket();
                    if self.is_live() {
                        self.disconnect(Initiator::Transport);
                    }
                    continue;
                }
            };
            match received {
                WsMessage::Text(text) => {
                    let text = text.as_str().to_owned();
                    if let Err(error) = self.process(&text) {
                        return Poll::Ready(Some(Err(error)));
                    }
                    return Poll::Ready(Some(Ok(Message::Text(text))));
                }
                WsMessage::Close(frame) => {
                    let frame = frame.map(|f| CloseFrame {
                        code: u16::from(f.code),
                        reason: f.reason.as_str().to_owned(),
                    });
                    if self.is_live() {
                        self.disconnect(Initiator::Gateway(frame.as_ref().map(|f| f.code)));
                    }
                    return Poll::Ready(Some(Ok(Message::Close(frame))));
                }
                WsMessage::Binary(bytes) => {
                    return Poll::Ready(Some(Err(ShardError::Payload {
                        reason: "a binary frame, but no compression was asked for".to_owned(),
                        payload: format!("{} bytes", bytes.len()),
                    })));
                }
                // tungstenite answers pings itself.
                WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_) => {}
            }
        }
    }

    /// Opens a connection (after the backoff its failures earned).
    fn poll_connect(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ShardError>> {
        let connecting = self.connecting.get_or_insert_with(|| {
            let wait = backoff(self.failures);
            let base = self.resume_url.as_deref().unwrap_or(&self.url).to_owned();
            let url = format!("{base}{QUERY}");
            Box::pin(async move {
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
                tracing::debug!(channel = CHANNEL, url = %base, "connecting to the gateway");
                match tokio::time::timeout(CONNECT_TIMEOUT, tokio_tungstenite::connect_async(url))
                    .await
                {
                    Ok(Ok((socket, _))) => Ok(socket),
                    Ok(Err(error)) => Err(ShardError::Connect {
                        url: base,
                        reason: error_chain(&error),
                    }),
                    Err(_) => Err(ShardError::Connect {
                        url: base,
                        reason: format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
                    }),
                }
            })
        });
        let opened = ready!(connecting.as_mut().poll(cx));
        self.connecting = None;
        match opened {
            Ok(socket) => {
                self.socket = Some(socket);
                self.state = ShardState::Identifying;
                Poll::Ready(Ok(()))
            }
            Err(error) => {
                // A resume URL that cannot be reached is not tried again.
                self.resume_url = None;
                self.failures = self.failures.saturating_add(1);
                Poll::Ready(Err(error))
            }
        }
    }

    /// Sends what is due: queued frames, a heartbeat, IDENTIFY.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), tungstenite::Error>> {
        loop {
            let Some(socket) = self.socket.as_mut() else {
                return Poll::Ready(Ok(()));
            };
            if !self.outbox.is_empty() {
                ready!(Pin::new(&mut *socket).poll_ready(cx))?;
                if let Some(frame) = self.outbox.pop_front() {
                    Pin::new(&mut *socket).start_send(frame)?;
                    self.unflushed = true;
                }
                continue;
            }
            if self.unflushed {
                ready!(Pin::new(&mut *socket).poll_flush(cx))?;
                self.unflushed = false;
            }
            if let Some(heartbeat) = self.heartbeat.as_mut()
                && heartbeat.poll_tick(cx).is_ready()
            {
                if self.awaiting_ack {
                    tracing::info!(
                        channel = CHANNEL,
                        "the gateway did not acknowledge the last heartbeat; reconnecting"
                    );
                    return Poll::Ready(Err(tungstenite::Error::Io(
                        std::io::ErrorKind::TimedOut.into(),
                    )));
                }
                self.send_heartbeat();
                continue;
            }
            if let Some(at) = self.identify_at.as_mut()
                && at.as_mut().poll(cx).is_ready()
            {
                self.identify_at = None;
                self.last_identify = Some(Instant::now());
                let identify = json!({"op": 2, "d": {
                    "token": self.token,
                    "intents": self.intents,
                    "properties": {"os": std::env::consts::OS, "browser": "flynn", "device": "flynn"},
                }});
                self.outbox.push_back(text(&identify));
                continue;
            }
            return Poll::Ready(Ok(()));
        }
    }

    fn send_heartbeat(&mut self) {
        let seq = self.session.as_ref().map(Session::sequence);
        self.outbox.push_back(text(&json!({"op": 1, "d": seq})));
        self.awaiting_ack = true;
    }

    /// Acts on one payload from the gateway.
    fn process(&mut self, payload: &str) -> Result<(), ShardError> {
        let bad = |reason: &str| ShardError::Payload {
            reason: reason.to_owned(),
            payload: payload.to_owned(),
        };
        let header: Header = serde_json::from_str(payload).map_err(|e| bad(&e.to_string()))?;
        match header.op {
            0 => {
                let (Some(seq), Some(kind)) = (header.s, header.t) else {
                    return Err(bad("a dispatch without its sequence number or type"));
                };
                match kind.as_str() {
                    "READY" => {
                        let ready: Payload<Ready> =
                            serde_json::from_str(payload).map_err(|e| bad(&e.to_string()))?;
                        self.session = Some(Session::new(seq, ready.d.session_id));
                        self.resume_url = Some(ready.d.resume_gateway_url);
                        self.state = ShardState::Active;
                        self.failures = 0;
                    }
                    "RESUMED" => {
                        self.state = ShardState::Active;
                        self.failures = 0;
                    }
                    _ => {}
                }
                if let Some(session) = self.session.as_mut() {
                    session.sequence = seq;
                }
            }
            1 => {
                // Not after the shard's own close frame: nothing may follow it.
                if self.is_live() {
                    self.send_heartbeat();
                }
            }
            7 => {
                tracing::debug!(channel = CHANNEL, "the gateway asked for a reconnect");
                self.disconnect(Initiator::Shard(CloseFrame::new(CloseFrame::RESUME)));
            }
            9 => {
                let invalid: Payload<bool> =
                    serde_json::from_str(payload).map_err(|e| bad(&e.to_string()))?;
                if invalid.d {
                    self.disconnect(Initiator::Shard(CloseFrame::new(CloseFrame::RESUME)));
                } else {
                    self.invalidated = true;
                    self.disconnect(Initiator::Shard(CloseFrame::new(CloseFrame::NORMAL)));
                }
            }
            10 => {
                let hello: Payload<Hello> =
                    serde_json::from_str(payload).map_err(|e| bad(&e.to_string()))?;
                self.hello(Duration::from_millis(hello.d.heartbeat_interval.max(1)));
            }
            11 => self.awaiting_ack = false,
            op => tracing::debug!(channel = CHANNEL, op, "an opcode the shard does not use"),
        }
        Ok(())
    }

    /// HELLO: heartbeats start; RESUME goes out, or IDENTIFY is planned.
    fn hello(&mut self, interval: Duration) {
        let first = Instant::now() + interval.mul_f64(random_fraction());
        let mut heartbeat = tokio::time::interval_at(first, interval);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        self.heartbeat = Some(heartbeat);
        self.awaiting_ack = false;
        if let Some(session) = &self.session {
            let resume = json!({"op": 6, "d": {
                "token": self.token,
                "session_id": session.id,
                "seq": session.sequence,
            }});
            self.outbox.push_back(text(&resume));
            self.state = ShardState::Resuming;
            return;
        }
        let now = Instant::now();
        let mut at = self
            .last_identify
            .map_or(now, |last| (last + IDENTIFY_SPACING).max(now));
        if std::mem::take(&mut self.invalidated) {
            let wait = Duration::from_secs(1).mul_f64(1.0 + 4.0 * random_fraction());
            at = at.max(now + wait);
        }
        self.identify_at = Some(Box::pin(tokio::time::sleep_until(at)));
    }

    /// The connection is over: nothing more is sent on it but the
    /// shard's close frame, and the next `next` reconnects.
    fn disconnect(&mut self, initiator: Initiator) {
        self.heartbeat = None;
        self.awaiting_ack = false;
        self.identify_at = None;
        self.outbox.clear();
        if !matches!(self.state, ShardState::Active | ShardState::Resuming)
            && !matches!(initiator, Initiator::Shard(_))
        {
            self.failures = self.failures.saturating_add(1);
        }
        self.state = match initiator {
            Initiator::Gateway(Some(code)) if is_fatal(code) => ShardState::Ended,
            _ => ShardState::Disconnected,
        };
        if let Initiator::Shard(frame) = initiator {
            if matches!(frame.code, 1000 | 1001) {
                self.session = None;
                self.resume_url = None;
            }
            self.outbox.push_back(WsMessage::Close(Some(WsCloseFrame {
                code: CloseCode::from(frame.code),
                reason: frame.reason.into(),
            })));
            self.closing_by = Some(Box::pin(tokio::time::sleep(CLOSE_TIMEOUT)));
        }
    }

    /// Whether the connection is in use: not closing and not ended.
    fn is_live(&self) -> bool {
        !matches!(self.state, ShardState::Disconnected | ShardState::Ended)
    }

    /// The connection failed while sending or reading: dropped. A live
    /// one is reported as closed abnormally (1006); one that was closing
    /// anyway is not reported.
    fn failed(&mut self, error: &tungstenite::Error) -> Option<Message> {
        let live = self.is_live();
        self.drop_socket();
        if !live {
            return None;
        }
        tracing::debug!(channel = CHANNEL, %error, "the gateway connection failed");
        self.disconnect(Initiator::Transport);
        Some(Message::Close(Some(CloseFrame::new(1006))))
    }

    fn drop_socket(&mut self) {
        self.socket = None;
        self.closing_by = None;
        self.outbox.clear();
        self.unflushed = false;
    }
}

/// Close codes after which Discord does not let a bot reconnect.
fn is_fatal(code: u16) -> bool {
    matches!(code, 4004 | 4010..=4014)
}

/// The wait before a connection after `failures` failed ones.
fn backoff(failures: u32) -> Duration {
    match failures {
        0 => Duration::ZERO,
        n => Duration::from_secs(1 << (n - 1).min(5)).min(MAX_BACKOFF),
    }
}

/// A number in [0, 1) for jitter.
fn random_fraction() -> f64 {
    let bits = getrandom::u64().unwrap_or(0) >> 11;
    bits as f64 / (1u64 << 53) as f64
}

fn text(value: &serde_json::Value) -> WsMessage {
    WsMessage::text(value.to_string())
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// The fields of every payload the shard reads first (`d` is skipped).
#[derive(Deserialize)]
struct Header {
    op: u8,
    #[serde(default)]
    s: Option<u64>,
    #[serde(default)]
    t: Option<String>,
}

#[derive(Deserialize)]
struct Payload<T> {
    d: T,
}

#[derive(Deserialize)]
struct Hello {
    heartbeat_interval: u64,
}

#[derive(Deserialize)]
struct Ready {
    session_id: String,
    resume_gateway_url: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_codes_discord_forbids_reconnecting_after_are_fatal() {
        let fatal: Vec<u16> = (4000..=4014).filter(|c| is_fatal(*c)).collect();
        assert_eq!(fatal, vec![4004, 4010, 4011, 4012, 4013, 4014]);
        assert!(!is_fatal(1000) && !is_fatal(1006));
    }

    #[test]
    fn reconnects_back_off_to_a_bound() {
        let waits: Vec<u64> = (0..9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, vec![0, 1, 2, 4, 8, 16, 32, 32, 32]);
    }

    #[test]
    fn jitter_is_a_fraction() {
        assert!(
            (0..100)
                .map(|_| random_fraction())
                .all(|f| (0.0..1.0).contains(&f))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn identify_waits_out_the_spacing_and_a_refused_session() {
        let mut shard = Shard::new(Config {
            token: "t".to_owned(),
            intents: 1,
            url: "ws://127.0.0.1:9".to_owned(),
            session: None,
            resume_url: None,
        });
        let start = Instant::now();
        shard.hello(Duration::from_secs(40));
        let first = shard.identify_at.as_ref().map(|s| s.deadline());
        assert_eq!(first, Some(start));
        shard.last_identify = Some(start);
        shard.hello(Duration::from_secs(40));
        let spaced = shard.identify_at.as_ref().map(|s| s.deadline());
        assert_eq!(spaced, Some(start + IDENTIFY_SPACING));
        shard.last_identify = None;
        shard.invalidated = true;
        shard.hello(Duration::from_secs(40));
        let waited = shard
            .identify_at
            .as_ref()
            .map(|s| s.deadline() - start)
            .unwrap_or_default();
        assert!(
            (Duration::from_secs(1)..=Duration::from_secs(5)).contains(&waited),
            "{waited:?}"
        );
        // With a session, HELLO resumes at once.
        shard.session = Some(Session::new(7, "abc".to_owned()));
        shard.identify_at = None;
        shard.hello(Duration::from_secs(40));
        assert!(shard.identify_at.is_none());
        assert_eq!(shard.state, ShardState::Resuming);
        let resume: Vec<String> = shard
            .outbox
            .iter()
            .filter_map(|m| m.to_text().ok().map(str::to_owned))
            .collect();
        assert_eq!(
            resume
                .iter()
                .map(|t| serde_json::from_str::<serde_json::Value>(t).unwrap_or_default())
                .collect::<Vec<_>>(),
            vec![json!({"op": 6, "d": {"token": "t", "session_id": "abc", "seq": 7}})]
        );
    }

    #[tokio::test]
    async fn dispatches_move_the_session_and_ready_starts_it() {
        let mut shard = Shard::new(Config {
            token: "t".to_owned(),
            intents: 1,
            url: "ws://127.0.0.1:9".to_owned(),
            session: None,
            resume_url: None,
        });
        let ready = json!({"op": 0, "s": 1, "t": "READY", "d": {
            "session_id": "s1", "resume_gateway_url": "wss://resume.example", "v": 10
        }});
        assert_eq!(shard.process(&ready.to_string()), Ok(()));
        assert_eq!(shard.session(), Some(&Session::new(1, "s1".to_owned())));
        assert_eq!(shard.resume_url(), Some("wss://resume.example"));
        assert_eq!(shard.state(), ShardState::Active);
        let message = json!({"op": 0, "s": 5, "t": "MESSAGE_CREATE", "d": {"id": "1"}});
        assert_eq!(shard.process(&message.to_string()), Ok(()));
        assert_eq!(shard.session().map(Session::sequence), Some(5));
        // A refused session ends it: no RESUME with it again.
        let invalid = json!({"op": 9, "s": null, "t": null, "d": false});
        assert_eq!(shard.process(&invalid.to_string()), Ok(()));
        assert_eq!((shard.session(), shard.resume_url()), (None, None));
        assert_eq!(shard.state(), ShardState::Disconnected);
        // The close frame is the last thing queued, even if the gateway
        // asks for a heartbeat meanwhile.
        let queued = shard.outbox.len();
        let beat = json!({"op": 1, "s": null, "t": null, "d": null});
        assert_eq!(shard.process(&beat.to_string()), Ok(()));
        assert_eq!(shard.outbox.len(), queued);
        assert!(matches!(shard.outbox.back(), Some(WsMessage::Close(_))));
        let broken = shard.process(r#"{"op": 0, "t": "MESSAGE_CREATE", "d": {}}"#);
        assert!(
            matches!(&broken, Err(ShardError::Payload { reason, .. }) if reason.contains("sequence")),
            "{broken:?}"
        );
        assert!(shard.process("not json").is_err());
    }
}
