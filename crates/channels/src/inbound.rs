//! The way in: adapters hand what they receive to an [`Inbound`] sink
//! and learn whether it is safe to acknowledge it to the platform.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::adapter::InboundEvent;
use crate::registry::StatusCell;

/// The longest [`Inbound::deliver`] waits for the daemon's verdict; then
/// the delivery is left for the platform to deliver again
/// ([`Disposition::Retry`]).
pub const DELIVER_TIMEOUT: Duration = Duration::from_secs(60);

/// What the daemon did with a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// Stored durably (a message) or handled (a button press).
    Accepted,
    /// Delivered before and handled then: acknowledge, do nothing more.
    Duplicate,
    /// Deliberately dropped (a group message without a mention, a sender
    /// not allowed, over the rate limit): acknowledge so the platform
    /// does not redeliver it.
    Ignored(String),
    /// Could not be stored now (shutting down, storage failure): do not
    /// acknowledge, so the platform delivers it again later.
    Retry(String),
}

impl Disposition {
    /// Whether the platform may be told the delivery arrived.
    pub fn acknowledge(&self) -> bool {
        !matches!(self, Disposition::Retry(_))
    }
}

/// One delivery waiting for the daemon's verdict.
#[derive(Debug)]
pub struct Delivery {
    /// The channel's name.
    pub channel: String,
    pub event: InboundEvent,
    verdict: oneshot::Sender<Disposition>,
}

impl Delivery {
    /// Answers the adapter waiting in [`Inbound::deliver`].
    pub fn settle(self, disposition: Disposition) {
        // The adapter may have given up waiting (its connection dropped);
        // then there is nobody to tell.
        let _ = self.verdict.send(disposition);
    }
}

/// Where an adapter puts what it receives. Cheap to clone.
#[derive(Clone)]
pub struct Inbound {
    channel: Arc<str>,
    tx: mpsc::Sender<Delivery>,
    status: Arc<StatusCell>,
}

impl std::fmt::Debug for Inbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbound")
            .field("channel", &self.channel)
            .finish_non_exhaustive()
    }
}

impl Inbound {
    pub(crate) fn new(channel: &str, tx: mpsc::Sender<Delivery>, status: Arc<StatusCell>) -> Self {
        Inbound {
            channel: Arc::from(channel),
            tx,
            status,
        }
    }

    /// A sink whose deliveries arrive on the returned receiver, for
    /// driving an adapter without a registry (tests, tools).
    pub fn detached(channel: &str) -> (Inbound, mpsc::Receiver<Delivery>) {
        let (tx, rx) = mpsc::channel(64);
        let status = Arc::new(StatusCell::new(channel));
        (Inbound::new(channel, tx, status), rx)
    }

    /// Hands one event to the daemon and waits until it is stored (or
    /// refused). Acknowledge the delivery to the platform only when the
    /// answer says so.
    pub async fn deliver(&self, event: InboundEvent) -> Disposition {
        self.status.received();
        let (verdict, answer) = oneshot::channel();
        let delivery = Delivery {
            channel: self.channel.to_string(),
            event,
            verdict,
        };
        let waited = async {
            if self.tx.send(delivery).await.is_err() {
                return Disposition::Retry("the daemon is shutting down".to_owned());
            }
            answer.await.unwrap_or_else(|_| {
                Disposition::Retry("the daemon dropped the delivery".to_owned())
            })
        };
        tokio::time::timeout(DELIVER_TIMEOUT, waited)
            .await
            .unwrap_or_else(|_| {
                Disposition::Retry(format!(
                    "the daemon gave no verdict within {} s; the platform delivers it again (a message stored meanwhile is answered once)",
                    DELIVER_TIMEOUT.as_secs()
                ))
            })
    }

    /// Reports that the platform accepted the credentials and events
    /// flow; `detail` names the bot as the platform knows it (`@flynn_bot`).
    pub fn connected(&self, detail: impl Into<String>) {
        self.status.connected(detail.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::{Action, Conversation, Sender};

    #[tokio::test(start_paused = true)]
    async fn a_delivery_nobody_decides_is_left_to_the_platform_after_the_timeout() {
        let (inbound, mut deliveries) = Inbound::detached("test");
        // The daemon takes the delivery but never settles it.
        let held = tokio::spawn(async move {
            let delivery = deliveries.recv().await;
            std::future::pending::<()>().await;
            drop(delivery);
        });
        let press = InboundEvent::Action(Action {
            id: "a1".into(),
            sender: Sender {
                id: "1".into(),
                name: None,
            },
            conversation: Conversation::direct("1"),
            message: None,
            data: "y:t".into(),
            reply: None,
        });
        let started = tokio::time::Instant::now();
        let disposition = inbound.deliver(press).await;
        assert_eq!(started.elapsed(), DELIVER_TIMEOUT);
        assert!(
            matches!(&disposition, Disposition::Retry(why) if why.contains("no verdict within 60 s")),
            "{disposition:?}"
        );
        held.abort();
    }
}
