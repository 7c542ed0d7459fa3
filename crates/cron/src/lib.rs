//! Cron jobs and the heartbeat, run as turns of the agent runtime.
//!
//! [`Automation`] holds the jobs (the config file's `automation.jobs`, and
//! the ones agents create with `cron.add`, kept in the session store) and,
//! once the daemon [`start`](Automation::start)s it, a loop that owns a
//! [`flynn_automation::Scheduler`]. When a job is due, its message is
//! submitted to its agent in its session (`cron:<name>` unless the job
//! names one) through
//! [`SessionManager::submit`](flynn_orchestrator::SessionManager::submit),
//! the path a person's message takes, so events, usage, tools and the
//! tool gate all apply. Nobody is there to confirm a risky tool, so such
//! calls are denied. The final answer goes to `deliver_to`
//! (`<channel>:<peer>`) through the channel registry.
//!
//! Every run is recorded in the store (when it was due, when it ran, how
//! it ended and why), and at start-up each job's missed-run policy reads
//! that record: runs due after the last one (or, for a job that never
//! ran, after it was first scheduled) and before now were missed while
//! Flynn was down; `Missed::Skip` drops them, `Missed::RunOnce` makes
//! one catch-up run. A run that fails (a refused message, a model error,
//! a channel down) is logged and recorded, and the loop goes on.
//!
//! The heartbeat reads `HEARTBEAT.md` every `every_mins`; only when a task
//! in it is due is the agent called, so an idle heartbeat costs nothing.

mod automation;
mod gmail;
mod job;
mod run;
mod tools;

pub use automation::Automation;
pub use job::{JobError, JobInfo, JobOrigin, MIN_AGENT_INTERVAL, NewJob};

/// The name the heartbeat's runs are recorded under.
pub const HEARTBEAT_JOB: &str = "heartbeat";
/// The session the heartbeat's turns run in.
pub const HEARTBEAT_SESSION: &str = "heartbeat:main";
