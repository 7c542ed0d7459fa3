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

/// Sliding-window counters keyed by (channel, sender).
#[derive(Debug)]
pub struct RateLimiter {
    messages: u32,
    window: Duration,
    senders: HashMap<(String, String), Window>,
}

#[derive(Debug, Default)]
struct Window {
    times: VecDeque<Instant>,
    warned: bool,
}

impl RateLimiter {
    /// `messages` per `window`; 0 messages lets everything through.
    pub fn new(messages: u32, window: Duration) -> Self {
        RateLimiter {
            messages,
            window,
            senders: HashMap::new(),
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
        if self.senders.len() > 10_000 {
            let window = self.window;
            self.senders.retain(|_, w| {
                w.times
                    .back()
                    .is_some_and(|last| now.duration_since(*last) < window)
            });
        }
        let entry = self
            .senders
            .entry((channel.to_owned(), sender.to_owned()))
            .or_default();
        while entry
            .times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= self.window)
        {
            entry.times.pop_front();
        }
        if entry.times.len() < self.messages as usize {
            entry.times.push_back(now);
            entry.warned = false;
            return Verdict::Allow;
        }
        let retry_in = entry.times.front().map_or(self.window, |t| {
            self.window.saturating_sub(now.duration_since(*t))
        });
        let first = !entry.warned;
        entry.warned = true;
        Verdict::Limited { first, retry_in }
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
    fn zero_turns_the_limit_off() {
        let mut limiter = RateLimiter::new(0, Duration::from_secs(1));
        for _ in 0..100 {
            assert_eq!(limiter.check("slack", "U1"), Verdict::Allow);
        }
    }
}
