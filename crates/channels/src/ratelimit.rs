//! Per-sender message budgets: a sender over the budget is told once to
//! slow down, then ignored until the window lets them in again.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

/// What a sender's next message gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Over the budget; `first` is true for the first refused message of
    /// a run (the one worth answering), with the wait until the next one
    /// is let in.
    Limited {
        first: bool,
        retry_in: Duration,
    },
}

/// The most senders a limiter keeps; past that, the one heard from least
/// recently is forgotten (its budget starts afresh if it comes back).
pub const MAX_SENDERS: usize = 10_000;

type Key = (String, String);

/// Sliding-window counters keyed by (channel, sender), at most
/// [`MAX_SENDERS`] of them. Each message costs O(1) amortised: senders
/// are kept in the order they were last heard from, so the ones idle for
/// a whole window (whose budget is whole again) and, past the bound, the
/// least recent are dropped from the front of that order.
#[derive(Debug)]
pub struct RateLimiter {
    messages: u32,
    window: Duration,
    senders: HashMap<Key, Window>,
    /// Senders from least to most recently heard from, each with the
    /// stamp of that message. An entry whose stamp is not its sender's
    /// latest is a leftover, skipped (and compacted away now and then).
    recency: VecDeque<(Key, u64)>,
    /// Counts messages; the stamp of the latest.
    stamp: u64,
}

#[derive(Debug)]
struct Window {
    times: VecDeque<Instant>,
    warned: bool,
    /// The sender's latest message: its stamp and time.
    stamp: u64,
    last: Instant,
}

impl RateLimiter {
    /// `messages` per `window`; 0 messages lets everything through.
    pub fn new(messages: u32, window: Duration) -> Self {
        RateLimiter {
            messages,
            window,
            senders: HashMap::new(),
            recency: VecDeque::new(),
            stamp: 0,
        }
    }

    /// Counts one message from `sender` on `channel`.
    pub fn check(&mut self, channel: &str, sender: &str) -> Verdict {
        self.check_at(channel, sender, Instant::now())
    }

    fn check_at(&mut self, channel: &str, sender: &str, now: Instant) -> Verdict {
        if self.messages == 0 {
            return Verdict::Allow;
        }
        let key = (channel.to_owned(), sender.to_owned());
        let known = self.senders.contains_key(&key);
        self.forget(now, if known { 0 } else { 1 });
        if self.recency.len() > 2 * self.senders.len() + 64 {
            // Mostly leftovers: keep each sender's latest entry only.
            let senders = &self.senders;
            self.recency
                .retain(|(key, stamp)| senders.get(key).is_some_and(|w| w.stamp == *stamp));
        }
        self.stamp += 1;
        let stamp = self.stamp;
        self.recency.push_back((key.clone(), stamp));
        let window = self.window;
        let entry = self.senders.entry(key).or_insert_with(|| Window {
            times: VecDeque::new(),
            warned: false,
            stamp,
            last: now,
        });
        entry.stamp = stamp;
        entry.last = now;
        while entry
            .times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= window)
        {
            entry.times.pop_front();
        }
        if entry.times.len() < self.messages as usize {
            entry.times.push_back(now);
            entry.warned = false;
            return Verdict::Allow;
        }
        let retry_in = entry
            .times
            .front()
            .map_or(window, |t| window.saturating_sub(now.duration_since(*t)));
        let first = !entry.warned;
        entry.warned = true;
        Verdict::Limited { first, retry_in }
    }

    /// Drops, from the least recently heard from: leftovers, senders idle
    /// for a whole window, and while `room` more would not fit under
    /// [`MAX_SENDERS`], the least recent sender.
    fn forget(&mut self, now: Instant, room: usize) {
        while let Some((key, stamp)) = self.recency.front() {
            let full = self.senders.len() + room > MAX_SENDERS;
            match self.senders.get(key) {
                Some(w) if w.stamp != *stamp => {}
                Some(w) if full || now.duration_since(w.last) >= self.window => {
                    self.senders.remove(key);
                }
                Some(_) => break,
                None => {}
            }
            self.recency.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sender_over_budget_is_warned_once_then_let_in_when_the_window_moves() {
        let mut limiter = RateLimiter::new(2, Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(limiter.check_at("telegram", "1", t0), Verdict::Allow);
        assert_eq!(limiter.check_at("telegram", "1", t0), Verdict::Allow);
        assert_eq!(
            limiter.check_at("telegram", "1", t0 + Duration::from_secs(1)),
            Verdict::Limited {
                first: true,
                retry_in: Duration::from_secs(9)
            }
        );
        assert!(matches!(
            limiter.check_at("telegram", "1", t0 + Duration::from_secs(2)),
            Verdict::Limited { first: false, .. }
        ));
        // Another sender and another channel have their own budgets.
        assert_eq!(limiter.check_at("telegram", "2", t0), Verdict::Allow);
        assert_eq!(limiter.check_at("discord", "1", t0), Verdict::Allow);
        assert_eq!(
            limiter.check_at("telegram", "1", t0 + Duration::from_secs(10)),
            Verdict::Allow
        );
    }

    #[test]
    fn a_flood_of_new_senders_stays_bounded_and_real_senders_stay_limited() {
        let mut limiter = RateLimiter::new(2, Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(limiter.check_at("telegram", "alice", t0), Verdict::Allow);
        assert_eq!(limiter.check_at("telegram", "alice", t0), Verdict::Allow);
        let mut refused = Vec::new();
        // 30,000 senders, each new, all within one window.
        for i in 0..30_000u64 {
            let now = t0 + Duration::from_millis(i);
            limiter.check_at("telegram", &format!("flood-{i}"), now);
            assert!(
                limiter.senders.len() <= MAX_SENDERS,
                "{} senders kept after {i} new ones",
                limiter.senders.len()
            );
            assert!(limiter.recency.len() <= 2 * MAX_SENDERS + 65);
            if i % 1000 == 999 {
                refused.push(limiter.check_at("telegram", "alice", now));
            }
        }
        // Alice stayed over her budget all along (told once).
        assert_eq!(refused.len(), 30);
        assert!(
            refused.iter().all(|v| matches!(v, Verdict::Limited { .. })),
            "{refused:?}"
        );
        assert!(matches!(refused[0], Verdict::Limited { first: true, .. }));
        assert!(matches!(refused[29], Verdict::Limited { first: false, .. }));
        // Once her window has moved on, she is let in again.
        assert_eq!(
            limiter.check_at("telegram", "alice", t0 + Duration::from_secs(60)),
            Verdict::Allow
        );
        // An hour later, the flood is forgotten.
        limiter.check_at("telegram", "late", t0 + Duration::from_secs(3600));
        assert_eq!(limiter.senders.len(), 1);
    }

    #[test]
    fn zero_turns_the_limit_off() {
        let mut limiter = RateLimiter::new(0, Duration::from_secs(1));
        for _ in 0..100 {
            assert_eq!(limiter.check("slack", "U1"), Verdict::Allow);
        }
    }
}
