//! What to do at start-up about runs missed while Flynn was not running.

use chrono::{DateTime, Utc};
pub use flynn_protocol::config::Missed;

use crate::schedule::Schedule;

/// The most missed runs [`due`] counts; `skipped` saturates there.
pub const MAX_COUNTED: u32 = 100_000;

/// The decision [`due`] takes for one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// Run the job now: it is scheduled for exactly `now`, or it missed
    /// runs and its policy is [`Missed::RunOnce`].
    pub run_now: bool,
    /// Missed runs that will not happen.
    pub skipped: u32,
    /// The next scheduled run after `now`.
    pub next: Option<DateTime<Utc>>,
}

/// Decides whether a job runs now, given when it last ran.
///
/// The runs scheduled after `last_run` and before `now` are missed (the
/// daemon was down). A run scheduled for exactly `now` is on time and
/// always runs. Missed runs are dropped with [`Missed::Skip`]; with
/// [`Missed::RunOnce`] they make one catch-up run, however many there
/// were. `last_run: None` (the job never ran) misses nothing.
pub fn due(
    schedule: &Schedule,
    last_run: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    policy: Missed,
) -> Due {
    let mut missed: u32 = 0;
    let mut on_time = false;
    if let Some(last) = last_run {
        let mut from = last;
        while let Some(at) = schedule.next_after(from) {
            if at > now {
                break;
            }
            if at == now {
                on_time = true;
                break;
            }
            missed += 1;
            if missed >= MAX_COUNTED {
                break;
            }
            from = at;
        }
    } else if let Some(previous) = now.checked_sub_signed(chrono::TimeDelta::seconds(1)) {
        on_time = schedule.next_after(previous) == Some(now);
    }
    let (run_now, skipped) = match policy {
        Missed::Skip => (on_time, missed),
        Missed::RunOnce if on_time => (true, missed),
        Missed::RunOnce => (missed > 0, missed.saturating_sub(1)),
    };
    Due {
        run_now,
        skipped,
        next: schedule.next_after(now),
    }
}
