//! Following one turn to its end: "subscribe, submit, hand on my turn's
//! events until it ends, then its outcome", written once for every client
//! (the embedded API, the gateway's `agent.send` and OpenAI endpoint, the
//! channel router).

use flynn_protocol::{AgentEvent, EventEnvelope, Lagged, SessionKey, TurnId, TurnOutcome};
use futures::FutureExt;
use tokio::sync::oneshot;

use crate::events::EventStream;
use crate::runtime::{SessionManager, Submitted, TurnHandle, TurnRequest};
use crate::{Error, Result};

/// What [`SessionManager::submit_and_follow`] led to.
#[derive(Debug)]
pub enum Followed {
    /// A chat command, answered by the lane. `event` is the reply as the
    /// lane published it to the session's subscribers (with its sequence
    /// number), when it was published.
    Command {
        name: String,
        reply: String,
        event: Option<EventEnvelope>,
    },
    /// The message was accepted as a turn.
    Turn(TurnEvents),
}

/// One turn's events from its first, then its outcome.
///
/// [`next`](Self::next) hands on the events of this turn, the reports
/// about earlier turns of the session that were interrupted
/// ([`AgentEvent::Interrupted`]), and a [`Lagged`] notice where the
/// subscriber fell behind; it ends after the turn's terminal
/// [`RunState`](AgentEvent::RunState), or, when that was lost to lag,
/// after the turn ended and every event published before the end was
/// handed on. [`outcome`](Self::outcome) then says how it ended.
///
/// `next` is cancel-safe: it may be one branch of a `select!`.
#[derive(Debug)]
pub struct TurnEvents {
    turn: TurnId,
    session: SessionKey,
    events: EventStream,
    outcome: oneshot::Receiver<Result<TurnOutcome>>,
    /// The outcome, once it came.
    result: Option<Result<TurnOutcome>>,
    /// The session's event stream ended (its lane and runtime are gone).
    events_closed: bool,
    /// Nothing more comes from `next`.
    finished: bool,
    /// The terminal `RunState` went through `next`.
    end_seen: bool,
}

impl TurnHandle {
    /// Follows this turn through `events`, a subscription to its session
    /// taken before the turn could publish anything (before submitting,
    /// or before the lane could start a recovered turn).
    pub fn follow(self, events: EventStream) -> TurnEvents {
        TurnEvents {
            turn: self.turn,
            session: self.session,
            events,
            outcome: self.outcome,
            result: None,
            events_closed: false,
            finished: false,
            end_seen: false,
        }
    }
}

impl SessionManager {
    /// Submits a message and follows what it leads to: the session is
    /// subscribed to first, so no event of the turn is missed.
    pub async fn submit_and_follow(&self, request: TurnRequest) -> Result<Followed> {
        let mut events = self.subscribe(&request.session);
        match self.submit(request).await? {
            Submitted::Turn(handle) => Ok(Followed::Turn(handle.follow(events))),
            Submitted::Command { name, reply } => {
                // The lane publishes a command's reply before answering:
                // it is in the buffer now, if it was published.
                let mut event = None;
                while let Some(Some(item)) = events.next().now_or_never() {
                    if let Ok(envelope) = item
                        && envelope.turn.is_none()
                        && matches!(envelope.event, AgentEvent::Command { .. })
                    {
                        event = Some(envelope);
                        break;
                    }
                }
                Ok(Followed::Command { name, reply, event })
            }
        }
    }
}

impl TurnEvents {
    /// The turn followed.
    pub fn turn(&self) -> TurnId {
        self.turn
    }

    /// The session it runs in.
    pub fn session(&self) -> &SessionKey {
        &self.session
    }

    /// Whether the turn's terminal `RunState` event was handed on. When
    /// [`next`](Self::next) has ended without it, it was lost to lag and
    /// a client that shows the end must make it from the outcome.
    pub fn end_seen(&self) -> bool {
        self.end_seen
    }

    /// The next event of the turn (see [`TurnEvents`]); `None` once the
    /// turn has ended.
    pub async fn next(&mut self) -> Option<std::result::Result<EventEnvelope, Lagged>> {
        loop {
            if self.finished {
                return None;
            }
            let item = if self.result.is_some() {
                // The outcome is in: what is still buffered was published
                // before it. Nothing more comes after.
                match self.events.next().now_or_never() {
                    Some(Some(item)) => item,
                    _ => {
                        self.finished = true;
                        return None;
                    }
                }
            } else if self.events_closed {
                let result = settle(&mut self.outcome).await;
                self.result = Some(result);
                self.finished = true;
                return None;
            } else {
                tokio::select! {
                    biased;
                    item = self.events.next() => match item {
                        Some(item) => item,
                        None => {
                            self.events_closed = true;
                            continue;
                        }
                    },
                    result = &mut self.outcome => {
                        self.result = Some(flatten(result));
                        continue;
                    }
                }
            };
            let envelope = match item {
                Ok(envelope) => envelope,
                Err(lagged) => return Some(Err(lagged)),
            };
            let ours = envelope.turn == Some(self.turn);
            if ours
                && let AgentEvent::RunState { state } = &envelope.event
                && state.is_terminal()
            {
                self.finished = true;
                self.end_seen = true;
                return Some(Ok(envelope));
            }
            if ours || matches!(envelope.event, AgentEvent::Interrupted { .. }) {
                return Some(Ok(envelope));
            }
        }
    }

    /// How the turn ended; waits for it if it has not.
    pub async fn outcome(mut self) -> Result<TurnOutcome> {
        match self.result.take() {
            Some(result) => result,
            None => settle(&mut self.outcome).await,
        }
    }
}

async fn settle(outcome: &mut oneshot::Receiver<Result<TurnOutcome>>) -> Result<TurnOutcome> {
    flatten(outcome.await)
}

pub(crate) fn flatten(
    received: std::result::Result<Result<TurnOutcome>, oneshot::error::RecvError>,
) -> Result<TurnOutcome> {
    received.unwrap_or_else(|_| Err(Error::Lost("its lane stopped".to_owned())))
}
