//! The outbox: a chat message's answer stored just before the process
//! died is sent at the next start.
//!
//! The channel router marks a turn of a chat message delivered once its
//! outcome (the answer, the error, or the note of its interruption) was
//! handed to the chat. A turn that finished but was never marked was cut
//! off between the two; [`SessionManager::outbox`] finds those, with the
//! text to send, and the router sends them once the channel is up. The
//! window between the send and the mark is a few milliseconds, so an
//! answer can still reach a chat twice if the process dies exactly there;
//! losing one is no longer possible short of the send failing.

use std::collections::BTreeMap;
use std::time::Duration;

use flynn_protocol::{Role, SessionKey, TurnId};
use flynn_sessions::{TurnRecord, TurnStatus};

use crate::Result;
use crate::events::now_millis;
use crate::lane::preview;
use crate::runtime::SessionManager;

/// How old an unsent answer may be and still be sent at start-up: an
/// answer to a message from days ago, out of the blue, would confuse more
/// than help.
pub const OUTBOX_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// A finished turn of a chat message whose outcome never reached the
/// chat, and the text to send it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undelivered {
    pub session: SessionKey,
    pub turn: TurnId,
    pub text: String,
}

impl SessionManager {
    /// The outbox: what finished in the last [`OUTBOX_WINDOW`] without
    /// reaching its chat, oldest first. Read it before
    /// [`recover_turns`](Self::recover_turns): the turns recovery finishes
    /// are told by the recovery itself.
    pub async fn outbox(&self) -> Result<Vec<Undelivered>> {
        let window = i64::try_from(OUTBOX_WINDOW.as_millis()).unwrap_or(i64::MAX);
        let since = now_millis().saturating_sub(window);
        let turns = self.store().undelivered_turns(since).await?;
        self.undelivered(turns).await
    }

    /// In a cluster, the outbox of the nodes that are gone: answers a
    /// node stored and died before sending, which no other node sends of
    /// itself (a live node may be sending its own at this moment). Empty
    /// outside a cluster.
    pub async fn outbox_of_gone_nodes(&self) -> Result<Vec<Undelivered>> {
        let Some(cluster) = self.cluster() else {
            return Ok(Vec::new());
        };
        let window = i64::try_from(OUTBOX_WINDOW.as_millis()).unwrap_or(i64::MAX);
        let since = now_millis().saturating_sub(window);
        let turns = self.store().undelivered_turns(since).await?;
        if turns.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<TurnId> = turns.iter().map(|t| t.id).collect();
        let gone_owners = cluster.turns_of_gone_nodes(&ids).await?;
        let gone = turns
            .into_iter()
            .filter(|t| gone_owners.contains(&t.id))
            .collect();
        self.undelivered(gone).await
    }

    /// The text each of `turns` owes its chat.
    async fn undelivered(&self, turns: Vec<TurnRecord>) -> Result<Vec<Undelivered>> {
        let mut by_session: BTreeMap<SessionKey, Vec<TurnRecord>> = BTreeMap::new();
        for turn in turns {
            by_session
                .entry(turn.session.clone())
                .or_default()
                .push(turn);
        }
        let mut out = Vec::new();
        for (session, turns) in by_session {
            let history = self.store().history(&session).await?;
            for turn in turns {
                let answer = history
                    .iter()
                    .rev()
                    .filter(|m| m.turn == Some(turn.id) && m.message.role == Role::Assistant)
                    .map(|m| m.message.text())
                    .find(|text| !text.trim().is_empty());
                let text = match (turn.status, answer) {
                    (TurnStatus::Completed | TurnStatus::Interrupted, Some(text)) => text,
                    (TurnStatus::Completed, None) => "(no answer)".to_owned(),
                    (TurnStatus::Cancelled, _) => "_Cancelled._".to_owned(),
                    _ => format!(
                        "⚠️ Flynn restarted before it could send what became of \"{}\". Send the message again if you still want an answer.",
                        preview(&turn.content)
                    ),
                };
                out.push(Undelivered {
                    session: session.clone(),
                    turn: turn.id,
                    text,
                });
            }
        }
        out.sort_by_key(|u| u.turn);
        Ok(out)
    }

    /// Marks a chat message's turn as having reached its chat.
    pub async fn mark_delivered(&self, turn: TurnId) -> Result<()> {
        Ok(self.store().mark_delivered(turn).await?)
    }
}
