//! A job: its checked form, why one is refused, and what lists show.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use flynn_automation::{Schedule, ScheduleError};
use flynn_protocol::config::{CronJobConfig, Missed};
use flynn_protocol::{JobName, JobNameError, SessionKey};
use flynn_sessions::LastRun;

/// Why a job could not be added, removed or listed. The messages name the
/// field, what was wrong and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// The name cannot name a job.
    #[error("{0}")]
    BadName(#[from] JobNameError),
    /// Another job has the name.
    #[error(
        "a job named '{name}' already exists ({origin}): choose another name, or remove it first"
    )]
    Duplicate { name: String, origin: String },
    /// The schedule or its zone does not parse.
    #[error("{0}")]
    Schedule(#[from] ScheduleError),
    /// The schedule parses but never matches again (`0 0 30 2 *`).
    #[error(
        "schedule '{expr}' never runs after now (a date that does not exist, such as 30 February?); expected a time that comes round, such as `30 7 * * *`"
    )]
    NeverRuns { expr: String },
    /// `cron.add` asked for a schedule more frequent than jobs added from
    /// a turn may run (a seconds field, or runs closer than
    /// [`MIN_AGENT_INTERVAL`]).
    #[error(
        "schedule '{expr}' {reason}; jobs added with cron.add run at most once a minute: use 5 fields `minute hour day-of-month month day-of-week` (`*/5 * * * *` for every 5 minutes), or put the job in automation.jobs in the config file"
    )]
    TooFrequent { expr: String, reason: String },
    /// The message is empty.
    #[error("message: empty; expected what the agent should do at each run")]
    EmptyMessage,
    /// No agent of that name.
    #[error("agent: unknown agent '{name}' (agents: {available})")]
    UnknownAgent { name: String, available: String },
    /// `deliver_to` or `session` is not a session key, or `here` outside a
    /// chat.
    #[error("{field}: '{value}' {reason}; expected `<channel>:<peer>` (`telegram:123456789`)")]
    BadSessionKey {
        field: &'static str,
        value: String,
        reason: String,
    },
    /// `deliver_to` names a channel that is not configured.
    #[error(
        "deliver_to: '{value}' names the channel '{channel}', which is not configured (chat channels: {configured}); deliver to one of them, or leave deliver_to out to keep the answers in the job's session"
    )]
    UnknownChannel {
        value: String,
        channel: String,
        configured: String,
    },
    /// No job of that name.
    #[error("there is no cron job named '{name}' (jobs: {available})")]
    UnknownJob { name: String, available: String },
    /// Config jobs are removed in the config file.
    #[error(
        "cron job '{name}' comes from the config file (automation.jobs); only jobs added with cron.add can be removed here: remove it from the file instead"
    )]
    FromConfig { name: String },
    /// A guest's turn asked to schedule or remove a job.
    #[error(
        "scheduling is the owner's: this conversation is with a guest, whose turns cannot add or remove cron jobs"
    )]
    Guest,
    /// A turn asked for a job of another agent.
    #[error(
        "agent: a job added here runs as this agent ('{caller}'), not '{asked}'; leave agent out, or ask the owner to add it to the config"
    )]
    OtherAgent { caller: String, asked: String },
    /// The runtime is not composed yet, or the loop cannot start.
    #[error("automation is not available: {0}")]
    NotReady(&'static str),
    /// The session store failed.
    #[error(transparent)]
    Storage(#[from] flynn_sessions::Error),
}

impl JobError {
    /// Whether the caller's input was wrong (as opposed to the runtime).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, JobError::NotReady(_) | JobError::Storage(_))
    }
}

/// Where a job comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOrigin {
    /// `automation.jobs` in the config file: removed only there.
    Config,
    /// Added with `cron.add` from a turn of this session.
    Agent { created_by: SessionKey },
}

/// A job as listed (`cron.list`).
#[derive(Debug, Clone, PartialEq)]
pub struct JobInfo {
    pub name: String,
    pub schedule: Schedule,
    pub message: String,
    pub origin: JobOrigin,
    /// Off in the config file: listed, never run.
    pub enabled: bool,
    /// The agent that answers.
    pub agent: String,
    /// The session its turns run in.
    pub session: SessionKey,
    /// Where its answers go.
    pub deliver_to: Option<SessionKey>,
    pub missed: Missed,
    /// Its next run; `None` when it is off or never matches again.
    pub next: Option<DateTime<Utc>>,
    /// Its last run; `None` when it never ran.
    pub last: Option<LastRun>,
}

/// A cron job to add (`cron.add`).
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub name: String,
    pub schedule: String,
    /// `UTC` when absent.
    pub timezone: Option<String>,
    pub message: String,
    /// `<channel>:<peer>`, or `here` for the calling session.
    pub deliver_to: Option<String>,
    /// The calling agent when absent.
    pub agent: Option<String>,
    pub missed: Option<Missed>,
}

/// One job, parsed.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) config: CronJobConfig,
    pub(crate) schedule: Schedule,
    pub(crate) session: SessionKey,
    pub(crate) deliver_to: Option<SessionKey>,
    pub(crate) origin: JobOrigin,
}

impl Job {
    /// Checks a job's own fields (not its agent or channel).
    pub(crate) fn parse(config: CronJobConfig, origin: JobOrigin) -> Result<Job, JobError> {
        check_name(&config.name)?;
        let schedule = Schedule::parse(&config.schedule, &config.timezone)?;
        if config.message.trim().is_empty() {
            return Err(JobError::EmptyMessage);
        }
        let session = session_key("session", &config.session_key())?;
        let deliver_to = config
            .deliver_to
            .as_deref()
            .map(|to| session_key("deliver_to", to))
            .transpose()?;
        Ok(Job {
            config,
            schedule,
            session,
            deliver_to,
            origin,
        })
    }
}

pub(crate) fn check_name(name: &str) -> Result<(), JobError> {
    JobName::new(name)?;
    Ok(())
}

pub(crate) fn session_key(field: &'static str, value: &str) -> Result<SessionKey, JobError> {
    value
        .parse::<SessionKey>()
        .map_err(|error| JobError::BadSessionKey {
            field,
            value: value.to_owned(),
            reason: format!("is not a session key: {}", error.reason),
        })
}

pub(crate) fn names(jobs: &BTreeMap<String, Job>) -> String {
    if jobs.is_empty() {
        "none".to_owned()
    } else {
        jobs.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

pub(crate) fn describe_origin(origin: &JobOrigin) -> String {
    match origin {
        JobOrigin::Config => "in the config file".to_owned(),
        JobOrigin::Agent { created_by } => format!("added with cron.add from {created_by}"),
    }
}

pub(crate) fn check_channel(channels: &[String], to: &SessionKey) -> Result<(), JobError> {
    if channels.iter().any(|c| c == to.channel()) {
        return Ok(());
    }
    Err(JobError::UnknownChannel {
        value: to.to_string(),
        channel: to.channel().to_owned(),
        configured: if channels.is_empty() {
            "none".to_owned()
        } else {
            channels.join(", ")
        },
    })
}

/// The shortest gap between two runs of a job added with `cron.add`
/// (config-file jobs may run every second: the owner wrote them).
pub const MIN_AGENT_INTERVAL: Duration = Duration::from_secs(60);

/// Refuses a schedule an agent may not set: a seconds field, or runs
/// closer together than [`MIN_AGENT_INTERVAL`] (checked over the next
/// runs).
pub(crate) fn check_frequency(schedule: &Schedule, now: DateTime<Utc>) -> Result<(), JobError> {
    let expr = schedule.expression();
    if expr.split_whitespace().count() == 6 {
        return Err(JobError::TooFrequent {
            expr: expr.to_owned(),
            reason: "has a seconds field".to_owned(),
        });
    }
    let runs = schedule.upcoming(now, 16);
    let closest = runs
        .windows(2)
        .filter_map(|pair| (pair[1] - pair[0]).to_std().ok())
        .min();
    match closest {
        Some(gap) if gap < MIN_AGENT_INTERVAL => Err(JobError::TooFrequent {
            expr: expr.to_owned(),
            reason: format!("runs {} s apart", gap.as_secs()),
        }),
        _ => Ok(()),
    }
}
