//! Events out: one broadcast per session plus a global one.
//!
//! Policy for a slow subscriber: events are broadcast into bounded ring
//! buffers ([`SESSION_CAPACITY`], [`GLOBAL_CAPACITY`]); publishing never
//! waits. A subscriber that falls further behind than the buffer loses the
//! oldest events and receives one `Err(Lagged { skipped })` in their place,
//! then continues with the oldest event still buffered. A turn is never
//! stalled by a subscriber.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

pub(crate) use flynn_protocol::clock::now_millis;
use flynn_protocol::{AgentEvent, EventEnvelope, Lagged, SessionKey, TurnId};
use futures::Stream;
use tokio::sync::{broadcast, mpsc};

/// Events one session's subscribers may fall behind by before they lag.
/// Every session's ring is allocated whole when the session is first
/// used, so this is kept modest (and the slots hold `Arc`s).
pub const SESSION_CAPACITY: usize = 1024;
/// Events the global subscribers may fall behind by before they lag.
pub const GLOBAL_CAPACITY: usize = 16_384;

/// A stream of events: `Ok` for each event, `Err(Lagged)` when the
/// subscriber fell behind and events were skipped. Ends when the runtime
/// (or, for a session stream, the session's lane and runtime) is gone.
pub struct EventStream {
    inner: Pin<Box<dyn Stream<Item = Result<EventEnvelope, Lagged>> + Send>>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}

impl EventStream {
    pub(crate) fn new(mut receiver: broadcast::Receiver<Arc<EventEnvelope>>) -> Self {
        let inner = async_stream::stream! {
            loop {
                match receiver.recv().await {
                    Ok(event) => yield Ok(Arc::unwrap_or_clone(event)),
                    Err(broadcast::error::RecvError::Lagged(skipped)) => yield Err(Lagged { skipped }),
                    Err(broadcast::error::RecvError::Closed) => break,
                }
            }
        };
        EventStream {
            inner: Box::pin(inner),
        }
    }

    /// The next event; `None` when the stream has ended.
    pub async fn next(&mut self) -> Option<Result<EventEnvelope, Lagged>> {
        futures::StreamExt::next(self).await
    }
}

impl Stream for EventStream {
    type Item = Result<EventEnvelope, Lagged>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// The global event channel of a runtime.
#[derive(Debug, Clone)]
pub(crate) struct EventBus {
    global: broadcast::Sender<Arc<EventEnvelope>>,
    /// In a cluster: where this node's own events go to be sent to the
    /// other nodes (see [`crate::cluster`]).
    outbox: Option<mpsc::Sender<Arc<EventEnvelope>>>,
}

impl EventBus {
    pub(crate) fn new(outbox: Option<mpsc::Sender<Arc<EventEnvelope>>>) -> Self {
        EventBus {
            global: broadcast::channel(GLOBAL_CAPACITY).0,
            outbox,
        }
    }

    /// An event from another node, for the global subscribers only (no
    /// lane of this node follows its session).
    pub(crate) fn publish_remote(&self, envelope: Arc<EventEnvelope>) {
        if self.global.receiver_count() > 0 {
            let _ = self.global.send(envelope);
        }
    }

    pub(crate) fn subscribe(&self) -> EventStream {
        EventStream::new(self.global.subscribe())
    }

    /// A channel for one session's events.
    pub(crate) fn session(&self, key: SessionKey) -> Arc<SessionEvents> {
        Arc::new(SessionEvents {
            key,
            seq: AtomicU64::new(0),
            local: broadcast::channel(SESSION_CAPACITY).0,
            global: self.global.clone(),
            outbox: self.outbox.clone(),
        })
    }
}

/// One session's event channel: numbers events and sends them to the
/// session's subscribers and the global ones.
#[derive(Debug)]
pub(crate) struct SessionEvents {
    key: SessionKey,
    seq: AtomicU64,
    local: broadcast::Sender<Arc<EventEnvelope>>,
    global: broadcast::Sender<Arc<EventEnvelope>>,
    outbox: Option<mpsc::Sender<Arc<EventEnvelope>>>,
}

impl SessionEvents {
    pub(crate) fn subscribe(&self) -> EventStream {
        EventStream::new(self.local.subscribe())
    }

    /// Subscribers of this session (not counting global ones).
    pub(crate) fn subscribers(&self) -> usize {
        self.local.receiver_count()
    }

    /// Publishes one event; never waits.
    pub(crate) fn publish(&self, turn: Option<TurnId>, event: AgentEvent) {
        // One allocation shared by every subscriber's ring slot.
        let envelope = Arc::new(EventEnvelope {
            session: self.key.clone(),
            turn,
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            time_ms: now_millis(),
            event,
        });
        if let Some(outbox) = &self.outbox {
            // Full: the other nodes miss it rather than the turn waiting.
            let _ = outbox.try_send(envelope.clone());
        }
        self.send(envelope);
    }

    /// An event of this session from another node, numbered in this
    /// session's sequence like its own events, so a subscriber here sees
    /// one sequence. (Each node's sequence holds the other nodes' events
    /// too, so a sender's numbering says nothing about what this node
    /// missed; events the sender dropped when its outbox was full leave
    /// no gap here.) Not sent on to other nodes.
    pub(crate) fn publish_remote(&self, mut envelope: EventEnvelope) {
        envelope.seq = self.seq.fetch_add(1, Ordering::Relaxed);
        self.send(Arc::new(envelope));
    }

    fn send(&self, envelope: Arc<EventEnvelope>) {
        // No subscribers is not an error: nobody is listening.
        if self.global.receiver_count() > 0 {
            let _ = self.global.send(envelope.clone());
        }
        let _ = self.local.send(envelope);
    }
}

/// Publishes the events of one turn.
#[derive(Debug, Clone)]
pub(crate) struct TurnPublisher {
    pub(crate) channel: Arc<SessionEvents>,
    pub(crate) turn: TurnId,
}

impl TurnPublisher {
    pub(crate) fn publish(&self, event: AgentEvent) {
        self.channel.publish(Some(self.turn), event);
    }
}
