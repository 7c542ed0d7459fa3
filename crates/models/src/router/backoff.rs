//! How long to wait before retrying a model: exponential backoff with full
//! jitter, from a small generator that tests can seed or turn off.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use flynn_protocol::config::RetryConfig;

/// How a retry delay is drawn below its cap (`initial_backoff_ms × 2^n`,
/// at most `max_backoff_ms`). Full jitter spreads the retries of many
/// callers hit by the same outage, so they do not return in lockstep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// Uniform between zero and the cap, seeded from the clock and the
    /// process's random hash keys. The default.
    #[default]
    Full,
    /// Uniform between zero and the cap, from this seed: the same seed gives
    /// the same sequence of delays.
    Seeded(u64),
    /// No jitter: always the cap. Makes waits exact in tests.
    Off,
}

/// The retry delays of one router.
#[derive(Debug)]
pub(crate) struct Backoff {
    initial_ms: u64,
    max_ms: u64,
    /// `None` when jitter is off.
    rng: Option<SplitMix64>,
}

impl Backoff {
    pub fn new(config: &RetryConfig, jitter: Jitter) -> Self {
        let rng = match jitter {
            Jitter::Full => Some(SplitMix64::new(clock_seed())),
            Jitter::Seeded(seed) => Some(SplitMix64::new(seed)),
            Jitter::Off => None,
        };
        Backoff {
            initial_ms: config.initial_backoff_ms,
            max_ms: config.max_backoff_ms,
            rng,
        }
    }

    /// The longest wait before retry number `retry` (0 for the first):
    /// `initial × 2^retry`, at most `max`.
    pub fn cap(&self, retry: u32) -> Duration {
        let factor = 1u64.checked_shl(retry).unwrap_or(u64::MAX);
        Duration::from_millis(self.initial_ms.saturating_mul(factor).min(self.max_ms))
    }

    /// The wait before retry number `retry`: uniform in `[0, cap]`, or the
    /// cap itself when jitter is off.
    pub fn delay(&self, retry: u32) -> Duration {
        let cap = self.cap(retry);
        match &self.rng {
            Some(rng) => {
                let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
                Duration::from_nanos(rng.up_to(nanos))
            }
            None => cap,
        }
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014): one atomic add and a mix per
/// number, so it is shared without a lock. Plenty for jitter; not for
/// anything that must be unpredictable.
#[derive(Debug)]
struct SplitMix64 {
    state: AtomicU64,
}

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

impl SplitMix64 {
    fn new(seed: u64) -> Self {
        SplitMix64 {
            state: AtomicU64::new(seed),
        }
    }

    fn next_u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(GOLDEN_GAMMA, Ordering::Relaxed)
            .wrapping_add(GOLDEN_GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, bound]` (Lemire's multiply-shift; the bias is below
    /// 2^-64 per value, far below anything a delay could show).
    fn up_to(&self, bound: u64) -> u64 {
        let wide = u128::from(self.next_u64()) * (u128::from(bound) + 1);
        u64::try_from(wide >> 64).unwrap_or(bound)
    }
}

/// A seed that differs between routers and processes: the time, hashed
/// with the process's random `HashMap` keys.
fn clock_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or_default();
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(nanos);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(initial_ms: u64, max_ms: u64) -> RetryConfig {
        RetryConfig {
            initial_backoff_ms: initial_ms,
            max_backoff_ms: max_ms,
            ..RetryConfig::default()
        }
    }

    #[test]
    fn the_cap_doubles_from_the_initial_backoff_up_to_the_maximum() {
        let backoff = Backoff::new(&retry(500, 8_000), Jitter::Off);
        let caps: Vec<u64> = [0, 1, 2, 3, 4, 5, 63, 64, u32::MAX]
            .map(|n| backoff.cap(n).as_millis() as u64)
            .to_vec();
        assert_eq!(
            caps,
            vec![500, 1_000, 2_000, 4_000, 8_000, 8_000, 8_000, 8_000, 8_000]
        );
        // Without jitter the delay is the cap.
        assert_eq!(backoff.delay(2), Duration::from_secs(2));
    }

    #[test]
    fn full_jitter_stays_below_the_cap_and_spreads_over_it() {
        let backoff = Backoff::new(&retry(1_000, 1_000), Jitter::Seeded(7));
        let delays: Vec<Duration> = (0..2_000).map(|_| backoff.delay(0)).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(1)));
        // Every tenth of the range is hit, none more than twice as often as
        // an even spread would.
        let mut buckets = [0u32; 10];
        for delay in &delays {
            let bucket = (delay.as_nanos() * 10 / 1_000_000_001) as usize;
            buckets[bucket] += 1;
        }
        assert!(
            buckets.iter().all(|n| (100..=400).contains(n)),
            "{buckets:?}"
        );
    }

    #[test]
    fn a_seed_gives_the_same_delays_and_different_seeds_differ() {
        let config = retry(500, 8_000);
        let run = |jitter| {
            let backoff = Backoff::new(&config, jitter);
            (0..5).map(|n| backoff.delay(n)).collect::<Vec<_>>()
        };
        assert_eq!(run(Jitter::Seeded(42)), run(Jitter::Seeded(42)));
        assert_ne!(run(Jitter::Seeded(42)), run(Jitter::Seeded(43)));
        assert_ne!(run(Jitter::Full), run(Jitter::Full));
    }

    #[test]
    fn splitmix_matches_the_reference_sequence() {
        // The first outputs for seed 0 of the reference implementation.
        let rng = SplitMix64::new(0);
        assert_eq!(
            [rng.next_u64(), rng.next_u64(), rng.next_u64()],
            [
                0xe220_a839_7b1d_cdaf,
                0x6e78_9e6a_a1b9_65f4,
                0x06c4_5d18_8009_454f
            ]
        );
        // A zero bound always gives zero.
        assert_eq!(rng.up_to(0), 0);
    }
}
