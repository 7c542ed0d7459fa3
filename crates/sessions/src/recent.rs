//! The histories read lately, kept decoded.
//!
//! A turn reads its session's whole history, and a chat is one long
//! session: decoding every message's JSON again on every turn made a
//! turn's cost grow with the conversation. The store keeps the last few
//! histories it read; the next read of one fetches only the messages
//! stored after it, and checks that nothing else changed (see
//! [`Recent::extend`]). Whatever does not check out is read whole again.

use std::collections::VecDeque;
use std::sync::Mutex;

use flynn_protocol::SessionKey;

use crate::StoredMessage;

/// Histories kept at most.
const SESSIONS: usize = 32;

/// Bytes of stored JSON kept at most, over every history (a history over
/// this is not kept at all).
const BYTES: usize = 8 << 20;

/// One history as last read.
#[derive(Debug)]
struct Entry {
    key: SessionKey,
    messages: Vec<StoredMessage>,
    /// The stored JSON's bytes, to bound the cache.
    bytes: usize,
}

/// What a history read finds when the session's history was kept.
#[derive(Debug)]
pub(crate) struct Kept {
    pub(crate) messages: Vec<StoredMessage>,
    pub(crate) bytes: usize,
}

impl Kept {
    /// The largest sequence number kept, which every newer message
    /// exceeds. Not the last message's: a compaction's summary has a new
    /// number at an old position.
    pub(crate) fn last_seq(&self) -> u64 {
        self.messages.iter().map(|m| m.seq).max().unwrap_or(0)
    }
}

/// A message read after the kept ones, with its position.
#[derive(Debug)]
pub(crate) struct Newer {
    pub(crate) pos: i64,
    pub(crate) bytes: usize,
    pub(crate) message: StoredMessage,
}

/// The most recently read histories, the latest last.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    entries: Mutex<VecDeque<Entry>>,
}

impl Recent {
    /// Takes the history kept for `key`, if any (it is put back, brought
    /// up to date, once checked).
    pub(crate) fn take(&self, key: &SessionKey) -> Option<Kept> {
        let mut entries = self.lock();
        let at = entries.iter().position(|e| &e.key == key)?;
        entries.remove(at).map(|e| Kept {
            messages: e.messages,
            bytes: e.bytes,
        })
    }

    /// `kept` followed by `newer`, when that is the session's history: the
    /// newer messages are appends (an append's position is its sequence
    /// number; what compaction writes has a new number at an old
    /// position), and the session holds `count` messages, so none of the
    /// kept ones was removed. `None` when the history must be read whole.
    pub(crate) fn extend(kept: Kept, newer: Vec<Newer>, count: u64) -> Option<Kept> {
        let appended = newer
            .iter()
            .all(|n| u64::try_from(n.pos).is_ok_and(|pos| pos == n.message.seq));
        let total = kept.messages.len() as u64 + newer.len() as u64;
        if !appended || total != count {
            return None;
        }
        let mut kept = kept;
        for newer in newer {
            kept.bytes += newer.bytes;
            kept.messages.push(newer.message);
        }
        Some(kept)
    }

    /// Keeps `messages` as `key`'s history, the most recent of all; the
    /// oldest histories go when there are too many or they are too big.
    pub(crate) fn put(&self, key: &SessionKey, kept: Kept) {
        let mut entries = self.lock();
        entries.retain(|e| &e.key != key);
        if kept.bytes > BYTES {
            return;
        }
        entries.push_back(Entry {
            key: key.clone(),
            messages: kept.messages,
            bytes: kept.bytes,
        });
        let mut total: usize = entries.iter().map(|e| e.bytes).sum();
        while entries.len() > SESSIONS || total > BYTES {
            match entries.pop_front() {
                Some(oldest) => total -= oldest.bytes,
                None => break,
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
