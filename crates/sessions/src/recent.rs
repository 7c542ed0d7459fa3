//! The histories read lately, kept decoded.
//!
//! A turn reads its session's whole history, and a chat is one long
//! session: decoding every message's JSON again on every turn made a
//! turn's cost grow with the conversation. The store keeps the last few
//! histories it read; the next read of one fetches only the messages
//! stored after it, and checks that nothing else changed (see
//! [`Recent::extend`]). Whatever does not check out is read whole again.

use std::collections::HashMap;
use std::sync::Mutex;

use flynn_protocol::SessionKey;

use crate::StoredMessage;

/// Histories kept at most: enough for every session of a busy daemon
/// (a thousand chats at once) to find its own on its next turn. Fewer,
/// and sessions taking turns in a round wider than the cache would each
/// evict the next one's history before it came back.
const SESSIONS: usize = 1024;

/// Bytes of stored JSON kept at most, over every history (a history over
/// this is not kept at all).
const BYTES: usize = 8 << 20;

/// One history as last read.
#[derive(Debug)]
struct Entry {
    messages: Vec<StoredMessage>,
    /// The stored JSON's bytes, to bound the cache.
    bytes: usize,
    /// When it was last put, on [`Histories::clock`].
    used: u64,
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

/// The most recently read histories.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    histories: Mutex<Histories>,
}

#[derive(Debug, Default)]
struct Histories {
    entries: HashMap<SessionKey, Entry>,
    /// The sum of the entries' bytes.
    bytes: usize,
    /// Ticks once per put: the least recently put entry goes first.
    clock: u64,
}

impl Recent {
    /// Takes the history kept for `key`, if any (it is put back, brought
    /// up to date, once checked).
    pub(crate) fn take(&self, key: &SessionKey) -> Option<Kept> {
        let mut histories = self.lock();
        let entry = histories.entries.remove(key)?;
        histories.bytes -= entry.bytes;
        Some(Kept {
            messages: entry.messages,
            bytes: entry.bytes,
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
    /// least recently used histories go when there are too many or they
    /// are too big.
    pub(crate) fn put(&self, key: &SessionKey, kept: Kept) {
        let mut histories = self.lock();
        let histories = &mut *histories;
        if let Some(old) = histories.entries.remove(key) {
            histories.bytes -= old.bytes;
        }
        if kept.bytes > BYTES {
            return;
        }
        histories.clock += 1;
        histories.bytes += kept.bytes;
        histories.entries.insert(
            key.clone(),
            Entry {
                messages: kept.messages,
                bytes: kept.bytes,
                used: histories.clock,
            },
        );
        while histories.entries.len() > SESSIONS || histories.bytes > BYTES {
            let Some(oldest) = histories
                .entries
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(key, _)| key.clone())
            else {
                break;
            };
            if let Some(gone) = histories.entries.remove(&oldest) {
                histories.bytes -= gone.bytes;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Histories> {
        self.histories
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(n: usize) -> SessionKey {
        SessionKey::new("cli", &format!("s{n}")).unwrap()
    }

    fn kept(bytes: usize) -> Kept {
        Kept {
            messages: Vec::new(),
            bytes,
        }
    }

    #[test]
    fn every_session_of_a_wide_round_finds_its_history() {
        let recent = Recent::default();
        // Sessions taking turns in order, twice round: each finds the
        // history its previous turn left.
        for round in 0..2 {
            for n in 0..SESSIONS {
                let found = recent.take(&key(n));
                assert_eq!(found.is_some(), round == 1, "session {n}, round {round}");
                recent.put(&key(n), kept(10));
            }
        }
    }

    #[test]
    fn the_least_recently_used_history_goes_first() {
        let recent = Recent::default();
        for n in 0..SESSIONS {
            recent.put(&key(n), kept(10));
        }
        // Session 0 is used again, so session 1 is now the oldest.
        let zero = recent.take(&key(0)).unwrap();
        recent.put(&key(0), zero);
        recent.put(&key(SESSIONS), kept(10));
        assert!(recent.take(&key(1)).is_none());
        assert!(recent.take(&key(0)).is_some());
        assert!(recent.take(&key(2)).is_some());
        assert!(recent.take(&key(SESSIONS)).is_some());
    }

    #[test]
    fn the_bytes_kept_stay_within_the_bound() {
        let recent = Recent::default();
        recent.put(&key(0), kept(BYTES / 2));
        recent.put(&key(1), kept(BYTES / 2));
        // Over the bound: the oldest goes.
        recent.put(&key(2), kept(1));
        assert!(recent.take(&key(0)).is_none());
        assert_eq!(recent.take(&key(1)).unwrap().bytes, BYTES / 2);
        // A history bigger than the bound is not kept, nor is the one it
        // replaces.
        recent.put(&key(3), kept(10));
        recent.put(&key(3), kept(BYTES + 1));
        assert!(recent.take(&key(3)).is_none());
        assert_eq!(recent.lock().bytes, 1);
    }
}
