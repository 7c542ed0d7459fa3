//! The receiving side: one twilight shard, the dispatches it yields
//! handed to the sink one at a time (in order), and RESUME used as the
//! gateway's only way to have an event sent again.
//!
//! While a delivery waits for the daemon, the shard keeps being polled
//! (so heartbeats go out); dispatches arriving meanwhile queue up behind
//! it, at most [`MAX_QUEUED`]: past that a flood is dropped with a
//! warning rather than held in memory. Attachments are not downloaded
//! here (the daemon fetches them after its access checks), so one
//! message cannot hold the queue up for long.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use twilight_gateway::error::ReceiveMessageErrorType;
use twilight_gateway::{
    CloseFrame, ConfigBuilder, Intents, Message, Session, Shard, ShardId, ShardState,
};
use twilight_model::gateway::payload::outgoing::identify::IdentifyProperties;

use super::convert::{self, FileRef, Identity, Interacted, Skip};
use super::interaction::{Context, State};
use super::rest::Rest;
use super::{CHANNEL, COMMANDS, DiscordAdapter};
use crate::adapter::{Attachment, AttachmentKind, ChannelError, InboundEvent};
use crate::inbound::{Disposition, Inbound};

/// What the bot asks the gateway for: server and DM messages with their
/// text. `MESSAGE_CONTENT` is privileged: it must be switched on in the
/// Developer Portal, or Discord closes the connection with 4014.
pub(super) fn intents() -> Intents {
    Intents::GUILD_MESSAGES | Intents::DIRECT_MESSAGES | Intents::MESSAGE_CONTENT
}

/// The first wait before resuming to have a refused delivery sent again;
/// it doubles while deliveries keep being refused.
const FIRST_REDELIVERY_WAIT: Duration = Duration::from_millis(500);
const MAX_REDELIVERY_WAIT: Duration = Duration::from_secs(30);
/// Failed reconnects in a row (twilight waits 1, 2, 4 s between them)
/// before the registry takes over with a new session.
const MAX_RECONNECT_FAILURES: u32 = 4;
/// How long a closing handshake may take.
const CLOSE_WAIT: Duration = Duration::from_secs(3);
/// Dispatches waiting behind the one being delivered; more are dropped
/// (with a warning) until the queue drains.
const MAX_QUEUED: usize = 256;
/// A button press the daemon has not answered this long after it
/// arrived is answered by the adapter (Discord gives up at 3 s).
const PRESS_DEADLINE: Duration = Duration::from_millis(2500);

/// Where to pick a session up again.
struct Resume {
    session: Session,
    url: String,
}

/// How one shard's life ended.
enum Ended {
    /// `stop` was cancelled.
    Stopped,
    /// A delivery was refused: resume from the last accepted event.
    Redeliver(Resume),
}

/// What lasts across the shards of one `connect`.
struct Run {
    /// Whether the slash commands were registered.
    registered: bool,
    redeliver_wait: Duration,
}

/// One dispatch waiting its turn.
struct Dispatch {
    /// The gateway session it arrived in, and its sequence number there.
    session: String,
    seq: u64,
    kind: String,
    data: Value,
}

/// A dispatch's outcome.
struct Handled {
    session: String,
    seq: u64,
    /// The daemon could not take it: have it sent again.
    redeliver: bool,
}

/// The dispatches waiting behind the one being delivered, at most `max`:
/// past that, new ones are dropped with a warning (the first of a run,
/// then every hundredth) instead of growing memory without bound.
struct Backlog {
    waiting: VecDeque<Dispatch>,
    max: usize,
    /// Dropped since the backlog last had room.
    dropped: u64,
}

impl Backlog {
    fn new(max: usize) -> Self {
        Backlog {
            waiting: VecDeque::new(),
            max,
            dropped: 0,
        }
    }

    /// Queues `dispatch`; false when it was dropped.
    fn push(&mut self, dispatch: Dispatch) -> bool {
        if self.waiting.len() >= self.max {
            self.dropped += 1;
            if self.dropped == 1 || self.dropped.is_multiple_of(100) {
                tracing::warn!(
                    channel = CHANNEL,
                    seq = dispatch.seq,
                    dropped = self.dropped,
                    "the daemon is behind: more than {} gateway events wait; dropping a {}",
                    self.max,
                    dispatch.kind
                );
            }
            return false;
        }
        self.dropped = 0;
        self.waiting.push_back(dispatch);
        true
    }

    fn pop(&mut self) -> Option<Dispatch> {
        self.waiting.pop_front()
    }

    fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

type Handling<'a> = Pin<Box<dyn Future<Output = Handled> + Send + 'a>>;

/// The frame fields the adapter reads before handing `d` to twilight's
/// types.
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
        redeliver_wait: FIRST_REDELIVERY_WAIT,
    };
    let mut resume = None;
    loop {
        let shard = adapter.shard(resume.take());
        match drive(adapter, shard, &sink, &stop, &mut run).await? {
            Ended::Stopped => return Ok(()),
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
    /// A shard for the bot, resuming `resume` when given. Built inside the
    /// runtime: twilight's identify queue spawns a task.
    fn shard(&self, resume: Option<Resume>) -> Shard {
        let mut config = ConfigBuilder::new(self.token.clone(), intents()).identify_properties(
            IdentifyProperties::new("flynn", "flynn", std::env::consts::OS),
        );
        if let Some(url) = &self.gateway_url {
            config = config.proxy_url(url.clone());
        }
        if let Some(resume) = resume {
            config = config.session(resume.session).resume_url(resume.url);
        }
        Shard::with_config(ShardId::ONE, config.build())
    }
}

async fn next_handled(handling: &mut Option<Handling<'_>>) -> Handled {
    match handling {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

/// Closes the shard with `frame` and waits (briefly) for the gateway's
/// answer. Polling after that would reconnect.
async fn close(shard: &mut Shard, frame: CloseFrame<'static>) {
    shard.close(frame);
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        while let Some(message) = shard.next().await {
            match message {
                Ok(Message::Close(_)) => break,
                // Connected again: the connection ended without the
                // gateway's close frame. Leave before identifying.
                _ if !matches!(shard.state(), ShardState::Disconnected { .. }) => break,
                _ => {}
            }
        }
    })
    .await;
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

/// Runs one shard until `stop`, a refused delivery, or an error the
/// registry must handle.
async fn drive<'a>(
    adapter: &'a DiscordAdapter,
    mut shard: Shard,
    sink: &'a Inbound,
    stop: &CancellationToken,
    run: &mut Run,
) -> Result<Ended, ChannelError> {
    let mut queue = Backlog::new(MAX_QUEUED);
    let mut handling: Option<Handling<'a>> = None;
    // The last dispatch the daemon took (or that needed nothing from it):
    // where a resume to have the next one sent again starts.
    let mut accepted: Option<(String, u64)> =
        shard.session().map(|s| (s.id().to_owned(), s.sequence()));
    let mut reconnect_failures = 0u32;
    let mut connected = false;
    loop {
        if handling.is_none()
            && let Some(next) = queue.pop()
        {
            handling = Some(Box::pin(adapter.handle(next, sink)));
        }
        tokio::select! {
            biased;
            () = stop.cancelled() => {
                close(&mut shard, CloseFrame::NORMAL).await;
                return Ok(Ended::Stopped);
            }
            handled = next_handled(&mut handling) => {
                handling = None;
                if !handled.redeliver {
                    run.redeliver_wait = FIRST_REDELIVERY_WAIT;
                    // An event of a session that ended since says
                    // nothing about where the current one stands.
                    if shard.session().is_some_and(|s| s.id() == handled.session) {
                        accepted = Some((handled.session, handled.seq));
                    }
                    continue;
                }
                let resume_url = shard.resume_url().map(str::to_owned);
                match (accepted.take(), resume_url) {
                    (Some((session, seq)), Some(url)) if session == handled.session => {
                        close(&mut shard, CloseFrame::RESUME).await;
                        return Ok(Ended::Redeliver(Resume { session: Session::new(seq, session), url }));
                    }
                    (kept, _) => {
                        accepted = kept;
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
                        if matches!(error.kind(), ReceiveMessageErrorType::Reconnect) {
                            reconnect_failures += 1;
                            if !connected || reconnect_failures >= MAX_RECONNECT_FAILURES {
                                return Err(ChannelError::Unavailable {
                                    channel: CHANNEL.to_owned(),
                                    detail: format!("cannot connect to the gateway: {}", error_chain(&error)),
                                });
                            }
                            tracing::warn!(channel = CHANNEL, error = %error_chain(&error), "reconnecting to the gateway failed; trying again");
                        } else {
                            tracing::warn!(channel = CHANNEL, error = %error, "skipped a gateway message");
                        }
                        continue;
                    }
                    Some(Ok(message)) => message,
                };
                match message {
                    Message::Close(frame) => {
                        let (code, reason) = frame.map(|f| (f.code, f.reason.into_owned())).unwrap_or((1005, String::new()));
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
                        let (0, Some(seq), Some(kind)) = (frame.op, frame.s, frame.t) else {
                            continue;
                        };
                        let Some(session) = shard.session().map(|s| s.id().to_owned()) else {
                            continue;
                        };
                        match kind.as_str() {
                            "READY" => {
                                adapter.ready(&frame.d, sink, run).await?;
                                accepted = Some((session, seq));
                            }
                            "MESSAGE_CREATE" | "INTERACTION_CREATE" => {
                                queue.push(Dispatch { session, seq, kind, data: frame.d });
                            }
                            _ if handling.is_none() && queue.is_empty() => {
                                accepted = Some((session, seq));
                            }
                            // Kept only to move `accepted` in order.
                            _ => {
                                queue.push(Dispatch { session, seq, kind, data: Value::Null });
                            }
                        }
                    }
                }
            }
        }
    }
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
        let application = identity.application;
        self.set_identity(identity);
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
        let disposition = match dispatch.kind.as_str() {
            "MESSAGE_CREATE" => self.on_message(dispatch.data, sink).await,
            "INTERACTION_CREATE" => self.on_interaction(dispatch.data, sink).await,
            _ => None,
        };
        Handled {
            session: dispatch.session,
            seq: dispatch.seq,
            redeliver: disposition.is_some_and(|d| !d.acknowledge()),
        }
    }

    /// A message: converted (its files named), delivered. `None` when
    /// there was nothing to deliver.
    async fn on_message(&self, data: Value, sink: &Inbound) -> Option<Disposition> {
        let Some(identity) = self.identity() else {
            tracing::warn!(channel = CHANNEL, "a message arrived before READY; skipped");
            return None;
        };
        let message: twilight_model::channel::Message = match serde_json::from_value(data) {
            Ok(message) => message,
            Err(error) => {
                tracing::warn!(channel = CHANNEL, error = %error, "skipped a MESSAGE_CREATE that does not parse");
                return None;
            }
        };
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
        let interaction: twilight_model::application::interaction::Interaction =
            match serde_json::from_value(data) {
                Ok(interaction) => interaction,
                Err(error) => {
                    tracing::warn!(channel = CHANNEL, error = %error, "skipped an INTERACTION_CREATE that does not parse");
                    return None;
                }
            };
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
    fn the_backlog_drops_past_its_bound_and_takes_again_once_drained() {
        let dispatch = |seq| Dispatch {
            session: "s".to_owned(),
            seq,
            kind: "MESSAGE_CREATE".to_owned(),
            data: Value::Null,
        };
        let mut backlog = Backlog::new(2);
        let taken: Vec<bool> = (1..=4).map(|seq| backlog.push(dispatch(seq))).collect();
        assert_eq!(taken, vec![true, true, false, false]);
        assert_eq!(backlog.pop().map(|d| d.seq), Some(1));
        assert!(backlog.push(dispatch(5)));
        let left: Vec<u64> = std::iter::from_fn(|| backlog.pop().map(|d| d.seq)).collect();
        assert_eq!(left, vec![2, 5]);
        assert!(backlog.is_empty());
    }

    #[test]
    fn intents_are_messages_and_their_content() {
        assert_eq!(intents().bits(), (1 << 9) | (1 << 12) | (1 << 15));
    }
}
