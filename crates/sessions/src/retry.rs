//! Trying a write again when the database was busy.
//!
//! SQLite makes a writer wait up to the busy timeout ([`BUSY_TIMEOUT`]) for
//! another writer (a second process, say the CLI's `flynn sessions reset`)
//! and the pool makes a caller wait up to [`ACQUIRE_TIMEOUT`] for a free
//! connection; past those the store reports [`Error::Busy`](crate::Error::Busy). The writes
//! that must not be lost (accepting a message, starting and finishing a
//! turn, storing a paid answer and its usage, storing tool results) try
//! again then, after a pause that doubles from [`FIRST_PAUSE`] with
//! jitter, at most [`ATTEMPTS`] times in all. Each attempt may itself wait
//! out the busy timeout, so the whole budget is at most
//! `ATTEMPTS × 5 s + (0.1 + 0.2 + 0.4 + 0.8) s`, about 26.5 s, before the
//! error reaches the caller.

use std::future::Future;
use std::time::Duration;

use crate::Result;

/// How long SQLite waits for another writer before reporting busy.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a caller waits for one of the pool's connections.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// How many times a busy write is tried, the first time included.
pub const ATTEMPTS: u32 = 5;

/// The pause before the second attempt; it doubles before each next one.
pub const FIRST_PAUSE: Duration = Duration::from_millis(100);

/// Runs `op` until it succeeds, fails with an error other than
/// [`Error::Busy`], or has been tried [`ATTEMPTS`] times.
pub(crate) async fn on_busy<T, F, Fut>(mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut pause = FIRST_PAUSE;
    let mut attempt = 1;
    loop {
        match op().await {
            Err(error) if error.is_retryable() && attempt < ATTEMPTS => {
                attempt += 1;
                tokio::time::sleep(jittered(pause)).await;
                pause = pause.saturating_mul(2);
            }
            other => return other,
        }
    }
}

/// `pause` scaled by a random factor in [0.5, 1.5), so writers that were
/// refused together do not come back together.
fn jittered(pause: Duration) -> Duration {
    let mut byte = [0_u8; 1];
    // Without randomness the pause is simply not spread.
    let spread = match getrandom::fill(&mut byte) {
        Ok(()) => f64::from(byte[0]) / 256.0,
        Err(_) => 0.5,
    };
    pause.mul_f64(0.5 + spread)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::Error;

    fn busy() -> Error {
        Error::Busy {
            message: "database is locked".to_owned(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_write_is_tried_again_until_it_succeeds() {
        let calls = AtomicU32::new(0);
        let result = on_busy(|| async {
            if calls.fetch_add(1, Ordering::SeqCst) < 3 {
                Err(busy())
            } else {
                Ok(7)
            }
        })
        .await;
        assert_eq!((result.unwrap(), calls.load(Ordering::SeqCst)), (7, 4));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_busy_every_time_gives_up_after_the_budget() {
        let calls = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let result: Result<()> = on_busy(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(busy())
        })
        .await;
        assert!(matches!(result, Err(Error::Busy { .. })), "{result:?}");
        assert_eq!(calls.load(Ordering::SeqCst), ATTEMPTS);
        // Pauses of 100, 200, 400 and 800 ms, each scaled by 0.5 to 1.5.
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(750) && waited < Duration::from_millis(2250),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn other_errors_are_not_tried_again() {
        let calls = AtomicU32::new(0);
        let result: Result<()> = on_busy(|| async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Error::Backend {
                message: "disk I/O error".to_owned(),
            })
        })
        .await;
        assert!(matches!(result, Err(Error::Backend { .. })), "{result:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
