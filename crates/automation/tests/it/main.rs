//! Schedules, missed runs, the scheduler on paused time and the heartbeat.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod heartbeat;
mod missed;
mod schedule;
mod scheduler;

use chrono::{DateTime, Utc};

/// An instant from RFC 3339 text.
#[track_caller]
pub fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|error| panic!("{text}: {error}"))
}
