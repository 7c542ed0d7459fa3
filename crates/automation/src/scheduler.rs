//! The loop that waits for the next due job.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use crate::error::{Result, ScheduleError};
use crate::schedule::Schedule;

/// The wall clock the scheduler reads. Sleeping is always tokio's, so a
/// paused tokio clock (`tokio::time::pause`, `advance`) drives a
/// [`PausedClock`].
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A wall clock that moves with tokio's clock from a fixed start: under
/// `tokio::time::pause()` it moves only when tokio's time is advanced (or
/// auto-advances while every task sleeps).
#[derive(Debug, Clone, Copy)]
pub struct PausedClock {
    start: DateTime<Utc>,
    origin: Instant,
}

impl PausedClock {
    /// A clock that reads `start` now. Create it inside the runtime.
    pub fn starting_at(start: DateTime<Utc>) -> Self {
        PausedClock {
            start,
            origin: Instant::now(),
        }
    }
}

impl Clock for PausedClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = Instant::now().saturating_duration_since(self.origin);
        chrono::TimeDelta::from_std(elapsed)
            .ok()
            .and_then(|elapsed| self.start.checked_add_signed(elapsed))
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

/// A job the scheduler says is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    /// The job's name.
    pub job: String,
    /// The run it is due for (the clock may read a little later).
    pub scheduled_for: DateTime<Utc>,
}

/// A scheduled job as listed (`cron.list`).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The job's name.
    pub name: String,
    /// Its schedule.
    pub schedule: Schedule,
    /// Its next run; `None` when its pattern never matches again.
    pub next: Option<DateTime<Utc>>,
}

/// The longest single sleep: the wall clock is read again at least this
/// often, so a clock that jumps (NTP, suspend) delays a run by at most
/// this much.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Holds the jobs and waits for the next one due.
///
/// Each job's next run is computed from the clock when it is added and
/// from its last run after it fires. Runs missed while the process was
/// not running are [`crate::due`]'s business, not the scheduler's: when a
/// wait ends late (a suspended machine), the job fires once and its next
/// run is counted from the clock.
#[derive(Debug)]
pub struct Scheduler {
    clock: Arc<dyn Clock>,
    jobs: BTreeMap<String, (Schedule, Option<DateTime<Utc>>)>,
}

impl Scheduler {
    /// An empty scheduler reading `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Scheduler {
            clock,
            jobs: BTreeMap::new(),
        }
    }

    /// Adds a job; its first run is the schedule's next after now.
    /// Refuses a name already in use.
    pub fn add(
        &mut self,
        name: impl Into<String>,
        schedule: Schedule,
    ) -> Result<Option<DateTime<Utc>>> {
        let name = name.into();
        if self.jobs.contains_key(&name) {
            return Err(ScheduleError::DuplicateJob { name });
        }
        let next = schedule.next_after(self.clock.now());
        self.jobs.insert(name, (schedule, next));
        Ok(next)
    }

    /// Removes a job; whether it was there.
    pub fn remove(&mut self, name: &str) -> bool {
        self.jobs.remove(name).is_some()
    }

    /// The jobs by name, with their next runs.
    pub fn entries(&self) -> Vec<Entry> {
        self.jobs
            .iter()
            .map(|(name, (schedule, next))| Entry {
                name: name.clone(),
                schedule: schedule.clone(),
                next: *next,
            })
            .collect()
    }

    /// Whether no job is scheduled.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Waits until the earliest job is due and returns it; jobs due at the
    /// same time come one call after another, by name. Waits forever with
    /// no job to run.
    ///
    /// Cancel-safe: dropping the future (a `select!` that adds a job)
    /// loses nothing, since a job's state changes only when it is
    /// returned.
    pub async fn next_due(&mut self) -> Fired {
        loop {
            let earliest = self
                .jobs
                .iter()
                .filter_map(|(name, (_, next))| next.map(|at| (at, name)))
                .min();
            let Some((at, name)) = earliest else {
                std::future::pending::<()>().await;
                continue;
            };
            let now = self.clock.now();
            if at <= now {
                let name = name.clone();
                if let Some((schedule, next)) = self.jobs.get_mut(&name) {
                    *next = schedule.next_after(at.max(now));
                }
                return Fired {
                    job: name,
                    scheduled_for: at,
                };
            }
            let wait = (at - now).to_std().unwrap_or(Duration::ZERO).min(MAX_SLEEP);
            tokio::time::sleep_until(Instant::now() + wait).await;
        }
    }
}
