//! The wall clock as the stores and events record it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch: 0 for a clock set before 1970,
/// `i64::MAX` past the year 292 million.
pub fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_after_this_code_was_written() {
        // 2026-01-01T00:00:00Z
        assert!(now_millis() > 1_767_225_600_000);
    }
}
