//! Interactions (slash commands and button presses): the context an
//! answer carries in [`Target::reply`](crate::Target::reply) /
//! [`Action::reply`](crate::Action::reply), and what has been done with
//! each interaction so far.
//!
//! Discord wants one callback per interaction within 3 seconds; after it,
//! the interaction's token edits the original response and sends
//! followups for 15 minutes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flynn_protocol::sync::lock;
use tokio::sync::watch;

/// How long an interaction token works.
const TOKEN_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// Stop using a token this long before it expires: a long answer may
/// still be editing when it does.
const TOKEN_MARGIN: Duration = Duration::from_secs(60);

/// Which kind of interaction a context belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A slash command: answered by a deferred response (type 5), then by
    /// editing `@original` and followups.
    Command,
    /// A button press: answered by a deferred update (type 6) or an
    /// ephemeral message (type 4).
    Component,
}

/// What answering an interaction needs: its id and token, and the
/// application that received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Context {
    pub kind: Kind,
    pub application: String,
    pub interaction: String,
    pub token: String,
}

const PREFIX: &str = "discord-interaction";

impl Context {
    /// `discord-interaction:<command|component>:<application>:<id>:<token>`.
    pub fn encode(&self) -> String {
        let kind = match self.kind {
            Kind::Command => "command",
            Kind::Component => "component",
        };
        format!(
            "{PREFIX}:{kind}:{}:{}:{}",
            self.application, self.interaction, self.token
        )
    }

    /// The context [`encode`](Self::encode) wrote; `None` for anything else.
    pub fn decode(text: &str) -> Option<Context> {
        let mut parts = text.splitn(5, ':');
        if parts.next()? != PREFIX {
            return None;
        }
        let kind = match parts.next()? {
            "command" => Kind::Command,
            "component" => Kind::Component,
            _ => return None,
        };
        let application = parts.next()?;
        let interaction = parts.next()?;
        let token = parts.next()?;
        let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !numeric(application) || !numeric(interaction) || token.is_empty() {
            return None;
        }
        Some(Context {
            kind,
            application: application.to_owned(),
            interaction: interaction.to_owned(),
            token: token.to_owned(),
        })
    }
}

/// Where an interaction's one callback is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ack {
    /// Not sent yet.
    Pending,
    /// Being sent.
    Sending,
    /// Discord accepted it: the token now edits and follows up.
    Done,
    /// Discord refused it (too late, already answered).
    Failed,
}

/// What has been done with one interaction.
#[derive(Debug)]
pub(super) struct State {
    received: Instant,
    ack: watch::Sender<Ack>,
    /// Whether `@original` was filled with an answer (later answers are
    /// followups).
    original: Mutex<Option<String>>,
    /// Messages sent through the interaction's webhook (`@original`
    /// included), which are edited through it too.
    webhook_messages: Mutex<HashSet<String>>,
}

impl State {
    fn new() -> Self {
        State {
            received: Instant::now(),
            ack: watch::Sender::new(Ack::Pending),
            original: Mutex::new(None),
            webhook_messages: Mutex::new(HashSet::new()),
        }
    }

    /// Takes the right to send the callback; false when it was taken.
    pub fn claim(&self) -> bool {
        self.ack.send_if_modified(|ack| {
            if *ack == Ack::Pending {
                *ack = Ack::Sending;
                true
            } else {
                false
            }
        })
    }

    /// Records how the callback went.
    pub fn finish(&self, accepted: bool) {
        self.ack
            .send_replace(if accepted { Ack::Done } else { Ack::Failed });
    }

    /// Gives the claim back (the callback was never sent: the delivery is
    /// to be redelivered).
    pub fn release(&self) {
        self.ack.send_if_modified(|ack| {
            if *ack == Ack::Sending {
                *ack = Ack::Pending;
                true
            } else {
                false
            }
        });
    }

    /// The callback's outcome, waiting up to `within` while it is pending
    /// or being sent.
    pub async fn settled(&self, within: Duration) -> Ack {
        let mut rx = self.ack.subscribe();
        let waited = tokio::time::timeout(
            within,
            rx.wait_for(|ack| matches!(ack, Ack::Done | Ack::Failed)),
        )
        .await;
        match waited {
            Ok(Ok(ack)) => *ack,
            _ => *self.ack.borrow(),
        }
    }

    /// Whether the token still works (with a margin).
    pub fn token_usable(&self) -> bool {
        self.received.elapsed() + TOKEN_MARGIN < TOKEN_LIFETIME
    }

    /// When the interaction arrived.
    pub fn received(&self) -> Instant {
        self.received
    }

    /// The message `@original` shows, once an answer filled it.
    pub fn original(&self) -> Option<String> {
        lock(&self.original).clone()
    }

    pub fn set_original(&self, message: &str) {
        *lock(&self.original) = Some(message.to_owned());
        self.sent_through_webhook(message);
    }

    pub fn sent_through_webhook(&self, message: &str) {
        lock(&self.webhook_messages).insert(message.to_owned());
    }

    pub fn is_webhook_message(&self, message: &str) -> bool {
        lock(&self.webhook_messages).contains(message)
    }
}

/// Every interaction whose token may still be used, by interaction id.
#[derive(Debug, Default)]
pub(super) struct Interactions {
    map: Mutex<HashMap<String, Arc<State>>>,
}

impl Interactions {
    /// The state of an interaction that just arrived; a redelivered one
    /// keeps its state (and its 15 minutes). Forgets expired ones.
    pub fn open(&self, id: &str) -> Arc<State> {
        let mut map = lock(&self.map);
        map.retain(|_, state| state.received.elapsed() < TOKEN_LIFETIME);
        Arc::clone(
            map.entry(id.to_owned())
                .or_insert_with(|| Arc::new(State::new())),
        )
    }

    pub fn get(&self, id: &str) -> Option<Arc<State>> {
        lock(&self.map).get(id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_round_trip_and_foreign_text_is_refused() {
        let context = Context {
            kind: Kind::Command,
            application: "11".into(),
            interaction: "22".into(),
            token: "aW50:ZXJ".into(),
        };
        let text = context.encode();
        assert_eq!(text, "discord-interaction:command:11:22:aW50:ZXJ");
        assert_eq!(Context::decode(&text), Some(context));
        assert_eq!(Context::decode("telegram:1"), None);
        assert_eq!(Context::decode("discord-interaction:command:x:22:t"), None);
        assert_eq!(Context::decode("discord-interaction:modal:1:2:t"), None);
        assert_eq!(Context::decode("discord-interaction:command:1:2:"), None);
    }

    #[tokio::test]
    async fn one_claim_per_interaction_and_waiters_see_the_outcome() {
        let interactions = Interactions::default();
        let state = interactions.open("1");
        assert!(state.claim());
        assert!(!interactions.open("1").claim());
        state.release();
        assert!(state.claim());
        let waiter = {
            let state = Arc::clone(&state);
            tokio::spawn(async move { state.settled(Duration::from_secs(5)).await })
        };
        state.finish(true);
        assert_eq!(waiter.await.ok(), Some(Ack::Done));
        assert_eq!(state.settled(Duration::from_millis(1)).await, Ack::Done);
    }
}
