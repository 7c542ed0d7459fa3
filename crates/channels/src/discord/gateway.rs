//! The receiving side: one gateway shard (`shard.rs`), the dispatches it yields
//! handed to the sink one at a time (in order), and RESUME used as the
//! gateway's only way to have an event sent again.
//!
//! While a delivery waits for the daemon, the shard keeps being polled
//! (so heartbeats go out); dispatches arriving meanwhile queue up behind
//! it, at most [`MAX_QUEUED`]. Not reading the socket past that would
//! also stop the heartbeats (the shard sends them while polled) and have
//! Discord drop the connection, so instead what does not fit is not
//! kept: once the queue has drained, the session is RESUMEd from the
//! last dispatch the daemon took, and Discord sends the rest again.
//! Attachments are not downloaded here (the daemon fetches them after
//! its access checks), so one message cannot hold the queue up for long.
//!
//! Across restarts: the session (id, the sequence number of the last
//! dispatch the daemon took, `resume_gateway_url`) and the last message
//! taken per channel are kept (`saved.rs`). Stopping closes with
//! 4000, which leaves the session resumable; the next start RESUMEs it
//! and Discord replays what was missed. When Discord refuses (INVALID
//! SESSION, `d: false`: the session expired), the shard IDENTIFYs anew
//! and the channels' missed messages are read back over REST
//! (`GET /channels/{id}/messages?after=<last>`, bounded), ahead of the
//! new session's dispatches.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use futures::FutureExt;
use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::convert::{self, FileRef, Identity, Interacted, Skip};
use super::interaction::{Context, State};
use super::rest::Rest;
use super::shard::{self, CloseFrame, Message, Session, Shard, ShardError, ShardState};
use super::{CHANNEL, COMMANDS, DiscordAdapter, snowflake_of};
use crate::adapter::{Attachment, AttachmentKind, ChannelError, InboundEvent};
use crate::inbound::{Disposition, Inbound};

/// What the bot asks the gateway for: server and DM messages with their
/// text. `MESSAGE_CONTENT` is privileged: it must be switched on in the
/// Developer Portal, or Discord closes the connection with 4014.
pub(super) const INTENTS: u64 = GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT;
const GUILD_MESSAGES: u64 = 1 << 9;
const DIRECT_MESSAGES: u64 = 1 << 12;
const MESSAGE_CONTENT: u64 = 1 << 15;

/// The first wait before resuming to have a refused delivery sent again;
/// it doubles while deliveries keep being refused.
const FIRST_REDELIVERY_WAIT: Duration = Duration::from_millis(500);
const MAX_REDELIVERY_WAIT: Duration = Duration::from_secs(30);
/// Failed reconnects in a row (the shard waits 1, 2, 4 s between them)
/// before the registry takes over with a new session.
const MAX_RECONNECT_FAILURES: u32 = 4;
/// How long a closing handshake may take.
const CLOSE_WAIT: Duration = Duration::from_secs(3);
/// Dispatches waiting behind the one being delivered; what arrives past
/// that is sent again by Discord once the queue drained (a RESUME).
pub const MAX_QUEUED: usize = 256;
/// How long after a change the saved state is written (at the latest:
/// stopping writes it at once).
const SAVE_EVERY: Duration = Duration::from_secs(1);
/// Channels read back after a session was lost (the most recently
/// active first), messages per request, per channel and in all.
const BACKFILL_CHANNELS: usize = 20;
const BACKFILL_PAGE: usize = 100;
const BACKFILL_PER_CHANNEL: usize = 200;
const BACKFILL_TOTAL: usize = 500;
/// A button press the daemon has not answered this long after it
/// arrived is answered by the adapter (Discord gives up at 3 s).
const PRESS_DEADLINE: Duration = Duration::from_millis(2500);

/// Where to pick a session up again.
pub(super) struct Resume {
    pub session: Session,
    /// READY's `resume_gateway_url`; the configured gateway when `None`.
    pub url: Option<String>,
}

/// How one shard's life ended.
enum Ended {
    /// `stop` was cancelled.
    Stopped,
    /// A delivery was refused: resume from the last accepted event
    /// after a wait.
    Redeliver(Resume),
    /// More arrived than the backlog holds: resume from the last
    /// accepted event now, to have the rest sent again.
    Overflowed(Resume),
}

/// What lasts across the shards of one `connect`.
struct Run {
    /// Whether the slash commands were registered.
    registered: bool,
    /// Whether the sink heard the bot's name.
    announced: bool,
    redeliver_wait: Duration,
}

/// One dispatch waiting its turn.
struct Dispatch {
    /// The gateway session it arrived in, and its sequence number there
    /// (READY's for a message read back over REST).
    session: String,
    seq: u64,
    kind: String,
    data: Value,
    /// Read back over REST after a lost session.
    backfilled: bool,
}

/// A dispatch's outcome.
struct Handled {
    session: String,
    seq: u64,
    /// The daemon could not take it: have it sent again.
    redeliver: bool,
    backfilled: bool,
    /// A message taken: (channel, message, server).
    mark: Option<(u64, u64, Option<u64>)>,
}

/// The dispatches waiting behind the one being delivered, at most `max`
/// from the gateway. Past that nothing more is queued (each later one
/// would have to wait behind the ones not kept, to keep the order) until
/// the overflow is taken: the caller then resumes the session from the
/// last dispatch the daemon took, so Discord sends the rest again.
struct Backlog {
    waiting: VecDeque<Dispatch>,
    max: usize,
    /// The first dispatch not kept, and how many were not since.
    overflow: Option<(u64, u64)>,
}

impl Backlog {
    fn new(max: usize) -> Self {
        Backlog {
            waiting: VecDeque::new(),
            max,
            overflow: None,
        }
    }

    /// Queues `dispatch`; false when it was not kept.
    fn push(&mut self, dispatch: Dispatch) -> bool {
        if let Some((_, skipped)) = &mut self.overflow {
            *skipped += 1;
            return false;
        }
        if self.waiting.len() >= self.max {
            tracing::warn!(
                channel = CHANNEL,
                seq = dispatch.seq,
                "the daemon is behind: {} gateway events wait; the ones arriving now are left for Discord to send again once these are delivered",
                self.max
            );
            self.overflow = Some((dispatch.seq, 1));
            return false;
        }
        self.waiting.push_back(dispatch);
        true
    }

    /// Messages read back over REST go ahead of the gateway's (they are
    /// older); at most [`BACKFILL_TOTAL`], so not counted against `max`.
    fn put_first(&mut self, dispatches: Vec<Dispatch>) {
        for dispatch in dispatches.into_iter().rev() {
            self.waiting.push_front(dispatch);
        }
    }

    /// Drops the messages read back (to read them back again).
    fn drop_backfilled(&mut self) {
        self.waiting.retain(|d| !d.backfilled);
    }

    fn pop(&mut self) -> Option<Dispatch> {
        self.waiting.pop_front()
    }

    fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The first dispatch not kept and how many were not, once; the
    /// backlog takes dispatches again after.
    fn take_overflow(&mut self) -> Option<(u64, u64)> {
        self.overflow.take()
    }
}

type Handling<'a> = Pin<Box<dyn Future<Output = Handled> + Send + 'a>>;
type Backfilling<'a> = Pin<Box<dyn Future<Output = Vec<Dispatch>> + Send + 'a>>;

/// The last dispatch the daemon took, and when the saved state is due
/// to be written.
struct Progress {
    accepted: Option<(String, u64)>,
    save_due: Option<Instant>,
}

impl Progress {
    fn accept(
        &mut self,
        adapter: &DiscordAdapter,
        resume_url: Option<&str>,
        session: String,
        seq: u64,
    ) {
        adapter.remember_session(&session, seq, resume_url);
        self.accepted = Some((session, seq));
        self.changed();
    }

    fn changed(&mut self) {
        self.save_due
            .get_or_insert_with(|| Instant::now() + SAVE_EVERY);
    }
}

/// The frame fields the adapter reads before reading `d` as the
/// dispatch's type.
#[derive(Debug, Deserialize)]
struct Frame {
    op: u8,
    #[serde(default)]
    s: Option<u64>,
    #[serde(default)]
    t: Option<String>,
    #[serde(default)]
    d: Value,
}

pub(super) async fn run(
    adapter: &DiscordAdapter,
    sink: Inbound,
    stop: CancellationToken,
) -> Result<(), ChannelError> {
    let mut run = Run {
        registered: false,
        announced: false,
        redeliver_wait: FIRST_REDELIVERY_WAIT,
    };
    let mut resume = adapter.saved_resume();
    if let Some(saved) = &resume {
        tracing::info!(
            channel = CHANNEL,
            seq = saved.session.sequence(),
            "resuming the gateway session kept from the last run"
        );
    }
    loop {
        let shard = adapter.shard(resume.take());
        let ended = drive(adapter, shard, &sink, &stop, &mut run).await;
        adapter.save().await;
        match ended? {
            Ended::Stopped => return Ok(()),
            Ended::Overflowed(from) => resume = Some(from),
            Ended::Redeliver(from) => {
                tracing::info!(
                    channel = CHANNEL,
                    seq = from.session.sequence(),
                    wait_ms = run.redeliver_wait.as_millis() as u64,
                    "a delivery was refused; resuming the gateway session to have it sent again"
                );
                tokio::select! {
                    () = stop.cancelled() => return Ok(()),
                    () = tokio::time::sleep(run.redeliver_wait) => {}
                }
                run.redeliver_wait = (run.redeliver_wait * 2).min(MAX_REDELIVERY_WAIT);
                resume = Some(from);
            }
        }
    }
}

impl DiscordAdapter {
    /// A shard for the bot, resuming `resume` when given.
    fn shard(&self, resume: Option<Resume>) -> Shard {
        let (session, resume_url) = match resume {
            Some(resume) => (Some(resume.session), resume.url),
            None => (None, None),
        };
        Shard::new(shard::Config {
            token: self.token.clone(),
            intents: INTENTS,
            url: self
                .gateway_url
                .clone()
                .unwrap_or_else(|| super::DEFAULT_GATEWAY.to_owned()),
            session,
            resume_url,
        })
    }
}

async fn next_handled(handling: &mut Option<Handling<'_>>) -> Handled {
    match handling {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

async fn next_backfill(backfilling: &mut Option<Backfilling<'_>>) -> Vec<Dispatch> {
    match backfilling {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

/// Closes the shard with `code` and waits (briefly) for the gateway's
/// answer; the shard has ended then.
async fn close(shard: &mut Shard, code: u16) {
    shard.close(code);
    let _ = tokio::time::timeout(CLOSE_WAIT, async { while shard.next().await.is_some() {} }).await;
}

/// The error a close code stands for when it is the end (Discord does
/// not let these sessions reconnect).
fn fatal_close(code: u16, reason: &str) -> Option<ChannelError> {
    let channel = CHANNEL.to_owned();
    let why = |what: &str| {
        format!(
            "the gateway closed the connection with {code} ({what}{})",
            if reason.is_empty() {
                String::new()
            } else {
                format!(": {reason}")
            }
        )
    };
    match code {
        4004 => Some(ChannelError::Unauthorized {
            channel,
            detail: why("authentication failed: the bot token is wrong or was reset"),
        }),
        4013 => Some(ChannelError::Rejected {
            channel,
            detail: why("invalid intents"),
        }),
        4014 => Some(ChannelError::Rejected {
            channel,
            detail: why(
                "disallowed intents: switch on Message Content Intent in the Developer Portal, under Bot → Privileged Gateway Intents",
            ),
        }),
        4010..=4012 => Some(ChannelError::Rejected {
            channel,
            detail: why("invalid shard or API version"),
        }),
        _ => None,
    }
}

/// Runs one shard until `stop`, a refused delivery, an overflow, or an
/// error the registry must handle.
async fn drive<'a>(
    adapter: &'a DiscordAdapter,
    mut shard: Shard,
    sink: &'a Inbound,
    stop: &CancellationToken,
    run: &mut Run,
) -> Result<Ended, ChannelError> {
    let mut queue = Backlog::new(MAX_QUEUED);
    let mut handling: Option<Handling<'a>> = None;
    // Messages being read back after a lost session; nothing else is
    // handed on meanwhile (they go first).
    let mut backfilling: Option<Backfilling<'a>> = None;
    // The last dispatch the daemon took (or that needed nothing from it):
    // where a resume to have the next one sent again starts.
    let mut progress = Progress {
        accepted: shard.session().map(|s| (s.id().to_owned(), s.sequence())),
        save_due: None,
    };
    let mut reconnect_failures = 0u32;
    let mut connected = false;
    loop {
        if handling.is_none() && backfilling.is_none() {
            if let Some(next) = queue.pop() {
                handling = Some(Box::pin(adapter.handle(next, sink)));
            } else if let Some((first, skipped)) = queue.take_overflow() {
                let current = shard.session().map(|s| s.id().to_owned());
                match progress.accepted.clone() {
                    Some((session, seq)) if current.as_deref() == Some(session.as_str()) => {
                        tracing::info!(
                            channel = CHANNEL,
                            first,
                            skipped,
                            seq,
                            "the backlog drained; resuming the gateway session to have the events that did not fit sent again"
                        );
                        let url = shard.resume_url().map(str::to_owned);
                        close(&mut shard, CloseFrame::RESUME).await;
                        return Ok(Ended::Overflowed(Resume {
                            session: Session::new(seq, session),
                            url,
                        }));
                    }
                    _ => tracing::warn!(
                        channel = CHANNEL,
                        first,
                        skipped,
                        "{skipped} gateway events did not fit in the backlog and their session has ended: messages among them are read back on the next READY, the rest are lost"
                    ),
                }
            }
        }
        let save_at = progress.save_due.unwrap_or_else(Instant::now);
        tokio::select! {
            biased;
            () = stop.cancelled() => {
                // A delivery the daemon settled just now still counts, or
                // the next start would have it sent again.
                if let Some(handled) = handling.as_mut().and_then(|h| h.as_mut().now_or_never())
                    && !handled.redeliver
                {
                    took(adapter, &shard, &mut progress, handled);
                }
                // 4000, not 1000 / 1001: the session stays resumable, and
                // the next start RESUMEs it from the last dispatch taken.
                close(&mut shard, CloseFrame::RESUME).await;
                return Ok(Ended::Stopped);
            }
            () = tokio::time::sleep_until(save_at), if progress.save_due.is_some() => {
                progress.save_due = None;
                adapter.save().await;
            }
            found = next_backfill(&mut backfilling) => {
                backfilling = None;
                queue.put_first(found);
            }
            handled = next_handled(&mut handling) => {
                handling = None;
                if !handled.redeliver {
                    run.redeliver_wait = FIRST_REDELIVERY_WAIT;
                    took(adapter, &shard, &mut progress, handled);
                    continue;
                }
                if handled.backfilled {
                    // Read back again (from the marks, which did not move
                    // past it) after the wait; the gateway's dispatches
                    // keep waiting behind.
                    queue.drop_backfilled();
                    let wait = run.redeliver_wait;
                    run.redeliver_wait = (wait * 2).min(MAX_REDELIVERY_WAIT);
                    tracing::info!(channel = CHANNEL, wait_ms = wait.as_millis() as u64, "a message read back was refused; reading back again after a wait");
                    let (session, seq) = (handled.session, handled.seq);
                    backfilling = Some(Box::pin(async move {
                        tokio::time::sleep(wait).await;
                        adapter.backfill(session, seq).await
                    }));
                    continue;
                }
                let resume_url = shard.resume_url().map(str::to_owned);
                match progress.accepted.take() {
                    Some((session, seq)) if session == handled.session => {
                        close(&mut shard, CloseFrame::RESUME).await;
                        return Ok(Ended::Redeliver(Resume { session: Session::new(seq, session), url: resume_url }));
                    }
                    kept => {
                        progress.accepted = kept;
                        tracing::warn!(channel = CHANNEL, seq = handled.seq, "a refused delivery cannot be sent again: its gateway session has ended");
                    }
                }
            }
            message = shard.next() => {
                let message = match message {
                    None => {
                        return Err(ChannelError::Unavailable {
                            channel: CHANNEL.to_owned(),
                            detail: "the gateway ended the session".to_owned(),
                        });
                    }
                    Some(Err(error)) => {
                        if matches!(error, ShardError::Connect { .. }) {
                            // The shard drops the resume URL after a failed
                            // connect; so does the saved state, or the next
                            // start would try it again.
                            adapter.forget_resume_url();
                            reconnect_failures += 1;
                            if !connected || reconnect_failures >= MAX_RECONNECT_FAILURES {
                                return Err(ChannelError::Unavailable {
                                    channel: CHANNEL.to_owned(),
                                    detail: format!("cannot connect to the gateway: {error}"),
                                });
                            }
                            tracing::warn!(channel = CHANNEL, %error, "reconnecting to the gateway failed; trying again");
                        } else {
                            tracing::warn!(channel = CHANNEL, error = %error, "skipped a gateway message");
                        }
                        continue;
                    }
                    Some(Ok(message)) => message,
                };
                match message {
                    Message::Close(frame) => {
                        let (code, reason) = frame.map(|f| (f.code, f.reason)).unwrap_or((1005, String::new()));
                        if let Some(error) = fatal_close(code, &reason) {
                            return Err(error);
                        }
                        tracing::info!(channel = CHANNEL, code, reason, "the gateway connection closed; reconnecting");
                    }
                    Message::Text(text) => {
                        reconnect_failures = 0;
                        if shard.state() == ShardState::Active {
                            connected = true;
                        }
                        let Ok(frame) = serde_json::from_str::<Frame>(&text) else {
                            tracing::warn!(channel = CHANNEL, "skipped a gateway frame that is not JSON");
                            continue;
                        };
                        if frame.op == 9 && frame.d == Value::Bool(false) {
                            // The shard identifies anew; READY then reads
                            // back what the lost session would have sent.
                            tracing::info!(channel = CHANNEL, "the gateway did not resume the session (it ended or expired); identifying again and reading back the messages missed");
                            adapter.forget_session();
                            progress.accepted = None;
                            continue;
                        }
                        let (0, Some(seq), Some(kind)) = (frame.op, frame.s, frame.t) else {
                            continue;
                        };
                        let Some(session) = shard.session().map(|s| s.id().to_owned()) else {
                            continue;
                        };
                        if kind == "RESUMED" {
                            adapter.resumed(sink, run).await?;
                        }
                        match kind.as_str() {
                            "READY" => {
                                adapter.ready(&frame.d, sink, run).await?;
                                if let Some((first, skipped)) = queue.take_overflow() {
                                    tracing::warn!(channel = CHANNEL, first, skipped, "{skipped} gateway events of the previous session did not fit in the backlog: the messages among them are read back now, the rest are lost");
                                }
                                progress.accept(adapter, shard.resume_url(), session.clone(), seq);
                                backfilling = Some(Box::pin(adapter.backfill(session, seq)));
                            }
                            "MESSAGE_CREATE" | "INTERACTION_CREATE" => {
                                queue.push(Dispatch { session, seq, kind, data: frame.d, backfilled: false });
                            }
                            _ if handling.is_none() && backfilling.is_none() && queue.is_empty() => {
                                progress.accept(adapter, shard.resume_url(), session, seq);
                            }
                            // Kept only to move `accepted` in order.
                            _ => {
                                queue.push(Dispatch { session, seq, kind, data: Value::Null, backfilled: false });
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A dispatch the daemon took (or that needed nothing from it): its
/// message marked, and where a resume starts moved past it.
fn took(adapter: &DiscordAdapter, shard: &Shard, progress: &mut Progress, handled: Handled) {
    if let Some((channel, message, guild)) = handled.mark {
        adapter.mark(channel, message, guild);
        progress.changed();
    }
    // An event of a session that ended since says nothing about where
    // the current one stands.
    if shard.session().is_some_and(|s| s.id() == handled.session) {
        progress.accept(adapter, shard.resume_url(), handled.session, handled.seq);
    }
}

/// Sends an interaction's one callback, recording how it went; a
/// transient failure gives the claim back so a retry may send it.
pub(super) async fn callback(
    rest: &Rest,
    state: &State,
    context: &Context,
    body: &Value,
) -> Result<(), ChannelError> {
    let path = format!(
        "/interactions/{}/{}/callback",
        context.interaction, context.token
    );
    match rest.call(Method::POST, &path, Some(body), false).await {
        Ok(_) => {
            state.finish(true);
            Ok(())
        }
        Err(error) if error.is_transient() => {
            state.release();
            Err(error)
        }
        Err(error) => {
            state.finish(false);
            Err(error)
        }
    }
}

/// A file of a message as the daemon sees it: its CDN URL is where to
/// fetch it from.
fn attachment(file: FileRef) -> Attachment {
    let media_type = file
        .media_type
        .unwrap_or_else(|| "application/octet-stream".to_owned());
    let kind = if media_type.starts_with("image/") {
        AttachmentKind::Image
    } else {
        AttachmentKind::File
    };
    Attachment {
        kind,
        name: Some(file.name),
        media_type,
        size: Some(file.size),
        source: file.url,
    }
}

impl DiscordAdapter {
    /// READY: who the bot is; the commands, once per `connect`.
    async fn ready(&self, data: &Value, sink: &Inbound, run: &mut Run) -> Result<(), ChannelError> {
        let Some(identity) = Identity::from_ready(data) else {
            return Err(ChannelError::Unavailable {
                channel: CHANNEL.to_owned(),
                detail: "READY did not name the bot and its application".to_owned(),
            });
        };
        tracing::info!(channel = CHANNEL, bot = %identity.name, "connected to the gateway");
        sink.connected(identity.name.clone());
        run.announced = true;
        let application = identity.application;
        self.set_identity(identity);
        self.register_once(application, run).await
    }

    /// RESUMED: a session kept from the last run has no READY, so the
    /// bot is the one saved with it.
    async fn resumed(&self, sink: &Inbound, run: &mut Run) -> Result<(), ChannelError> {
        let Some(identity) = self.identity() else {
            // Nothing says who the bot is: start a new session instead.
            self.forget_session();
            return Err(ChannelError::Unavailable {
                channel: CHANNEL.to_owned(),
                detail: "resumed a gateway session without knowing the bot (its READY was not kept); identifying again".to_owned(),
            });
        };
        if !run.announced {
            tracing::info!(channel = CHANNEL, bot = %identity.name, "resumed the gateway session");
            sink.connected(identity.name.clone());
            run.announced = true;
        }
        self.register_once(identity.application, run).await
    }

    /// The slash commands, once per `connect`.
    async fn register_once(&self, application: u64, run: &mut Run) -> Result<(), ChannelError> {
        if !run.registered {
            match self.register_commands(application).await {
                Ok(()) => run.registered = true,
                Err(error @ ChannelError::Unauthorized { .. }) => return Err(error),
                Err(error) => {
                    tracing::warn!(channel = CHANNEL, error = %error, "registering the slash commands failed; they are tried again on the next connect");
                }
            }
        }
        Ok(())
    }

    /// After a session was lost: the messages of the channels the bot
    /// heard from (the most recently active first) that came after the
    /// last one taken there, oldest first, as dispatches of `session`
    /// at `seq` (READY's). Bounded; what is left out is logged.
    async fn backfill(&self, session: String, seq: u64) -> Vec<Dispatch> {
        let mut marks: Vec<(u64, super::saved::Mark)> = self
            .saved()
            .channels
            .iter()
            .map(|(channel, mark)| (*channel, *mark))
            .collect();
        if marks.is_empty() {
            return Vec::new();
        }
        marks.sort_by_key(|(_, mark)| std::cmp::Reverse(mark.last));
        if marks.len() > BACKFILL_CHANNELS {
            let left: Vec<u64> = marks[BACKFILL_CHANNELS..].iter().map(|(c, _)| *c).collect();
            tracing::warn!(
                channel = CHANNEL,
                ?left,
                "reading back the {BACKFILL_CHANNELS} most recently active channels only; messages missed in the {} others are not replayed",
                left.len()
            );
            marks.truncate(BACKFILL_CHANNELS);
        }
        tracing::info!(
            channel = CHANNEL,
            channels = marks.len(),
            "reading back the messages missed while no gateway session could be resumed; slash commands and button presses sent meanwhile, and messages in channels the bot had not heard from, cannot be replayed"
        );
        let mut found = Vec::new();
        for (index, (channel, mark)) in marks.iter().enumerate() {
            if found.len() >= BACKFILL_TOTAL {
                let left: Vec<u64> = marks[index..].iter().map(|(c, _)| *c).collect();
                tracing::warn!(
                    channel = CHANNEL,
                    ?left,
                    "read back {BACKFILL_TOTAL} messages; the ones missed in the remaining channels are not replayed"
                );
                break;
            }
            let mut after = mark.last;
            let mut taken = 0usize;
            loop {
                let path =
                    format!("/channels/{channel}/messages?after={after}&limit={BACKFILL_PAGE}");
                let page = match self.rest.call(Method::GET, &path, None, true).await {
                    Ok(Some(Value::Array(page))) => page,
                    Ok(other) => {
                        tracing::warn!(channel = CHANNEL, discord_channel = channel, answer = ?other.map(|v| v.to_string()), "reading back a channel got an answer that is not a list of messages; the messages missed there are not replayed");
                        break;
                    }
                    Err(error) => {
                        tracing::warn!(channel = CHANNEL, discord_channel = channel, error = %error, "reading back a channel failed; the messages missed there are not replayed");
                        break;
                    }
                };
                let full = page.len() >= BACKFILL_PAGE;
                let mut page: Vec<(u64, Value)> = page
                    .into_iter()
                    .filter_map(|message| Some((snowflake_of(&message["id"])?, message)))
                    .filter(|(id, _)| *id > after)
                    .collect();
                page.sort_by_key(|(id, _)| *id);
                let Some(newest) = page.last().map(|(id, _)| *id) else {
                    break;
                };
                after = newest;
                for (_, mut message) in page {
                    if let Some(guild) = mark.guild {
                        message["guild_id"] = Value::String(guild.to_string());
                    }
                    found.push(Dispatch {
                        session: session.clone(),
                        seq,
                        kind: "MESSAGE_CREATE".to_owned(),
                        data: message,
                        backfilled: true,
                    });
                    taken += 1;
                }
                if !full {
                    break;
                }
                if taken >= BACKFILL_PER_CHANNEL || found.len() >= BACKFILL_TOTAL {
                    tracing::warn!(
                        channel = CHANNEL,
                        discord_channel = channel,
                        taken,
                        after,
                        "more messages were missed in this channel than are read back; the ones after {after} are not replayed"
                    );
                    break;
                }
            }
        }
        tracing::info!(
            channel = CHANNEL,
            messages = found.len(),
            "read back the messages missed"
        );
        found
    }

    /// Replaces the application's global commands with Flynn's.
    async fn register_commands(&self, application: u64) -> Result<(), ChannelError> {
        let commands: Vec<Value> = COMMANDS
            .iter()
            .map(|(name, description)| {
                json!({
                    "name": name,
                    "description": description,
                    "type": 1,
                    // Servers and the bot's DMs; installed to servers.
                    "contexts": [0, 1],
                    "integration_types": [0],
                })
            })
            .collect();
        self.rest
            .call(
                Method::PUT,
                &format!("/applications/{application}/commands"),
                Some(&Value::Array(commands)),
                true,
            )
            .await?;
        Ok(())
    }

    /// Hands one dispatch to the daemon (and answers the platform).
    async fn handle(&self, dispatch: Dispatch, sink: &Inbound) -> Handled {
        let mut mark = None;
        let disposition = match dispatch.kind.as_str() {
            "MESSAGE_CREATE" => {
                let data = &dispatch.data;
                if let (Some(channel), Some(message)) =
                    (snowflake_of(&data["channel_id"]), snowflake_of(&data["id"]))
                {
                    mark = Some((channel, message, snowflake_of(&data["guild_id"])));
                }
                self.on_message(dispatch.data, sink).await
            }
            "INTERACTION_CREATE" => self.on_interaction(dispatch.data, sink).await,
            _ => None,
        };
        let redeliver = disposition.is_some_and(|d| !d.acknowledge());
        Handled {
            session: dispatch.session,
            seq: dispatch.seq,
            redeliver,
            backfilled: dispatch.backfilled,
            mark: mark.filter(|_| !redeliver),
        }
    }

    /// A message: converted (its files named), delivered. `None` when
    /// there was nothing to deliver.
    async fn on_message(&self, data: Value, sink: &Inbound) -> Option<Disposition> {
        let Some(identity) = self.identity() else {
            tracing::warn!(channel = CHANNEL, "a message arrived before READY; skipped");
            return None;
        };
        let message: super::model::Message = match serde_json::from_value(data) {
            Ok(message) => message,
            Err(error) => {
                tracing::warn!(channel = CHANNEL, error = %error, "skipped a MESSAGE_CREATE that does not parse");
                return None;
            }
        };
        if !self.guild_allowed(message.guild_id.map(|g| g.0)) {
            tracing::debug!(channel = CHANNEL, id = %message.id, "skipped a message from a server not in allowed_guild_ids");
            return None;
        }
        let (mut inbound, files) = match convert::message(&identity, &message) {
            Ok(converted) => converted,
            Err(skip) => {
                if skip != Skip::Own {
                    tracing::debug!(channel = CHANNEL, ?skip, id = %message.id, "skipped a message");
                }
                return None;
            }
        };
        // Named, not downloaded: the daemon asks for them (`download`)
        // once the sender passed its access checks.
        inbound.attachments = files.into_iter().map(attachment).collect();
        Some(sink.deliver(InboundEvent::Message(inbound)).await)
    }

    /// A slash command or a button press: delivered, then answered as
    /// Discord requires within 3 s.
    async fn on_interaction(&self, data: Value, sink: &Inbound) -> Option<Disposition> {
        let interaction: super::model::Interaction = match serde_json::from_value(data) {
            Ok(interaction) => interaction,
            Err(error) => {
                tracing::warn!(channel = CHANNEL, error = %error, "skipped an INTERACTION_CREATE that does not parse");
                return None;
            }
        };
        if !self.guild_allowed(interaction.guild_id.map(|g| g.0)) {
            tracing::debug!(
                channel = CHANNEL,
                "skipped a command from a server not in allowed_guild_ids"
            );
            // Answered, so Discord does not show the command as failed.
            let answered = convert::interaction(&interaction).map(|interacted| match interacted {
                Interacted::Command(_, context) => (
                    context,
                    json!({"type": 4, "data": {
                        "content": "Flynn does not answer in this server.",
                        "flags": super::EPHEMERAL | super::SUPPRESS_EMBEDS,
                        "allowed_mentions": {"parse": []},
                    }}),
                ),
                Interacted::Press(_, context) => (context, json!({"type": 6})),
            });
            if let Some((context, body)) = answered {
                let state = self.interactions.open(&context.interaction);
                if state.claim()
                    && let Err(error) = callback(&self.rest, &state, &context, &body).await
                {
                    tracing::debug!(channel = CHANNEL, error = %error, "answering a command from another server failed");
                }
            }
            return None;
        }
        match convert::interaction(&interaction)? {
            Interacted::Command(message, context) => {
                let state = self.interactions.open(&context.interaction);
                let disposition = sink.deliver(InboundEvent::Message(message)).await;
                if disposition.acknowledge() && state.claim() {
                    let body = match &disposition {
                        Disposition::Ignored(reason) => json!({"type": 4, "data": {
                            "content": format!("Flynn did not take this command: {reason}").chars().take(2000).collect::<String>(),
                            "flags": super::EPHEMERAL | super::SUPPRESS_EMBEDS,
                            "allowed_mentions": {"parse": []},
                        }}),
                        _ => json!({"type": 5}),
                    };
                    if let Err(error) = callback(&self.rest, &state, &context, &body).await {
                        // Answers go to the channel as plain messages then.
                        tracing::warn!(channel = CHANNEL, error = %error, "acknowledging a slash command failed");
                        state.finish(false);
                    }
                }
                Some(disposition)
            }
            Interacted::Press(action, context) => {
                let state = self.interactions.open(&context.interaction);
                let disposition = sink.deliver(InboundEvent::Action(action)).await;
                match &disposition {
                    Disposition::Accepted => {
                        // The daemon answers with `answer_action`; if it
                        // has not by the deadline, a deferred update
                        // keeps Discord from showing the press failed.
                        let rest = Arc::clone(&self.rest);
                        self.tasks.spawn(async move {
                            tokio::time::sleep_until((state.received() + PRESS_DEADLINE).into())
                                .await;
                            if state.claim() {
                                tracing::debug!(
                                    channel = CHANNEL,
                                    "answering a button press the daemon left unanswered"
                                );
                                let _ =
                                    callback(&rest, &state, &context, &json!({"type": 6})).await;
                            }
                        });
                    }
                    Disposition::Duplicate | Disposition::Ignored(_) => {
                        if state.claim()
                            && let Err(error) =
                                callback(&self.rest, &state, &context, &json!({"type": 6})).await
                        {
                            tracing::debug!(channel = CHANNEL, error = %error, "answering an ignored button press failed");
                        }
                    }
                    Disposition::Retry(_) => {}
                }
                Some(disposition)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_close_codes_say_what_to_fix() {
        assert!(matches!(
            fatal_close(4004, "Authentication failed."),
            Some(ChannelError::Unauthorized { .. })
        ));
        let Some(ChannelError::Rejected { detail, .. }) =
            fatal_close(4014, "Disallowed intent(s).")
        else {
            panic!("4014 is fatal");
        };
        assert!(detail.contains("Message Content Intent"), "{detail}");
        assert_eq!(fatal_close(4000, ""), None);
        assert_eq!(fatal_close(1006, ""), None);
        assert_eq!(fatal_close(4009, "Session timed out."), None);
    }

    #[test]
    fn the_backlog_keeps_nothing_past_its_bound_until_the_overflow_is_taken() {
        let dispatch = |seq, backfilled| Dispatch {
            session: "s".to_owned(),
            seq,
            kind: "MESSAGE_CREATE".to_owned(),
            data: Value::Null,
            backfilled,
        };
        let mut backlog = Backlog::new(2);
        let taken: Vec<bool> = (1..=4)
            .map(|seq| backlog.push(dispatch(seq, false)))
            .collect();
        assert_eq!(taken, vec![true, true, false, false]);
        assert_eq!(backlog.pop().map(|d| d.seq), Some(1));
        // Room again, but 5 would overtake 3 and 4: not kept either.
        assert!(!backlog.push(dispatch(5, false)));
        assert_eq!(backlog.pop().map(|d| d.seq), Some(2));
        assert!(backlog.is_empty());
        assert_eq!(backlog.take_overflow(), Some((3, 3)));
        assert_eq!(backlog.take_overflow(), None);
        assert!(backlog.push(dispatch(3, false)));
        // Messages read back go first, and can be dropped to read again.
        backlog.put_first(vec![dispatch(1, true), dispatch(2, true)]);
        let order: Vec<(u64, bool)> = backlog
            .waiting
            .iter()
            .map(|d| (d.seq, d.backfilled))
            .collect();
        assert_eq!(order, vec![(1, true), (2, true), (3, false)]);
        backlog.drop_backfilled();
        let left: Vec<u64> = std::iter::from_fn(|| backlog.pop().map(|d| d.seq)).collect();
        assert_eq!(left, vec![3]);
    }

    #[test]
    fn intents_are_messages_and_their_content() {
        assert_eq!(INTENTS, (1 << 9) | (1 << 12) | (1 << 15));
    }
}
