//! Scheduling for Flynn's automation: when cron jobs and heartbeat tasks
//! are due. The daemon drives it; this crate sends nothing and calls no
//! model.
//!
//! - [`Schedule`]: a cron expression (5 fields, or 6 with seconds first)
//!   read in an IANA time zone, with its next runs and a human
//!   description. Daylight saving follows the zone: a time the clock skips
//!   runs when the clock jumps past it, a time it repeats runs once.
//! - [`due`]: at start-up, what a job does about runs missed while Flynn
//!   was down, by its [`Missed`] policy (skip them, or run once).
//! - [`Scheduler`]: holds jobs (added and removed at run time, for the
//!   `cron.*` tools) and waits with `tokio::time::sleep_until` for the next
//!   one due, so a paused tokio clock drives it in tests ([`PausedClock`]).
//! - [`Heartbeat`]: reads `HEARTBEAT.md` and returns a message only when a
//!   task in it is due, so an idle heartbeat costs no model call.
//!
//! # `HEARTBEAT.md`
//!
//! Open markdown task items are tasks; everything else (headings, prose,
//! checked items `- [x]`) is ignored:
//!
//! ```markdown
//! # Heartbeat
//! - [ ] daily 08:00: summarise my unread mail
//! - [ ] every 2 hours: check that the build is green
//! - [ ] every 30 minutes: look at the alerts channel
//! - [ ] mon 09:30: plan the week from my calendar
//! - [x] daily 07:00: a task that is switched off
//! ```
//!
//! `<when>` is `daily HH:MM`, `every N min|mins|minute|minutes|hour|hours`
//! (periods counted from the Unix epoch in UTC: `every 2 hours` is due at
//! 00:00, 02:00… UTC) or a weekday (`mon`, `monday`…) and `HH:MM`. Times
//! are read in the heartbeat's time zone. A task is due on a beat when
//! one of its times falls after the previous beat and at or before this
//! one; several missed times make one mention. Lines that look like tasks
//! but do not parse are reported by [`Heartbeat::parse`] and never run.

mod error;
mod heartbeat;
mod missed;
mod schedule;
mod scheduler;

pub use error::{CRON_SHAPE, Result, ScheduleError};
pub use heartbeat::{Heartbeat, LineProblem, Parsed, TASK_SHAPE, Task, When};
pub use missed::{Due, MAX_COUNTED, Missed, due};
pub use schedule::Schedule;
pub use scheduler::{Clock, Entry, Fired, PausedClock, Scheduler, SystemClock};
