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
//!
//! Files a turn sent ([`Files`](flynn_sessions::Files)) are marked one by
//! one as the router hands them to the chat; the outbox holds those never
//! marked too, with their turn's text when that did not reach the chat
//! either.

use std::collections::BTreeMap;
use std::time::Duration;

use flynn_protocol::{MediaFile, Role, SessionKey, TurnId};
use flynn_sessions::{StoredFile, TurnRecord, TurnStatus};

use crate::Result;
use crate::events::now_millis;
use crate::lane::preview;
use crate::runtime::SessionManager;

/// How old an unsent answer may be and still be sent at start-up: an
/// answer to a message from days ago, out of the blue, would confuse more
/// than help.
pub const OUTBOX_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// A turn of a chat message whose outcome, or some of the files it sent,
/// never reached the chat: what to send it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undelivered {
    pub session: SessionKey,
    pub turn: TurnId,
    /// The outcome's text; `None` when it reached the chat and only files
    /// did not.
    pub text: Option<String>,
    /// The files the turn sent that never reached the chat, oldest first.
    pub files: Vec<MediaFile>,
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
        let files = self.store().unsent_files(since).await?;
        self.undelivered(turns, files).await
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
        let files = self.store().unsent_files(since).await?;
        if turns.is_empty() && files.is_empty() {
            return Ok(Vec::new());
        }
        let mut ids: Vec<TurnId> = turns.iter().map(|t| t.id).collect();
        ids.extend(files.iter().filter_map(|f| f.turn));
        ids.sort_unstable();
        ids.dedup();
        let gone_owners = cluster.turns_of_gone_nodes(&ids).await?;
        let turns = turns
            .into_iter()
            .filter(|t| gone_owners.contains(&t.id))
            .collect();
        let files = files
            .into_iter()
            .filter(|f| f.turn.is_some_and(|turn| gone_owners.contains(&turn)))
            .collect();
        self.undelivered(turns, files).await
    }

    /// The text each of `turns` owes its chat, and the `files` of those
    /// and other turns.
    async fn undelivered(
        &self,
        turns: Vec<TurnRecord>,
        files: Vec<StoredFile>,
    ) -> Result<Vec<Undelivered>> {
        let mut files_of: BTreeMap<(SessionKey, TurnId), Vec<MediaFile>> = BTreeMap::new();
        for stored in files {
            if let Some(turn) = stored.turn {
                files_of
                    .entry((stored.session, turn))
                    .or_default()
                    .push(stored.file);
            }
        }
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
                    text: Some(text),
                    files: files_of
                        .remove(&(session.clone(), turn.id))
                        .unwrap_or_default(),
                });
            }
        }
        // Turns whose answer reached the chat, but not every file.
        for ((session, turn), files) in files_of {
            out.push(Undelivered {
                session,
                turn,
                text: None,
                files,
            });
        }
        out.sort_by_key(|u| u.turn);
        Ok(out)
    }

    /// Marks a chat message's turn as having reached its chat.
    pub async fn mark_delivered(&self, turn: TurnId) -> Result<()> {
        Ok(self.store().mark_delivered(turn).await?)
    }
}
