//! What automation keeps across restarts: the cron jobs agents created
//! (`cron.add`; the config file's jobs stay in the file) and, for every
//! job and the heartbeat, since when its runs count and how its last run
//! went. At start-up the runs scheduled after a job's last run (or, when
//! it never ran, after it was first scheduled) and before now are the
//! ones missed while Flynn was down.

use flynn_protocol::config::{CronJobConfig, Missed};
use flynn_protocol::{SessionKey, TurnId};
use serde::Serialize;

/// Which kind of automation a run record belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum JobKind {
    /// A cron job, from the config file or created by an agent.
    Cron,
    /// The heartbeat (`HEARTBEAT.md`).
    Heartbeat,
    /// A Gmail watch (`automation.gmail`).
    Gmail,
}

impl JobKind {
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Cron => "cron",
            JobKind::Heartbeat => "heartbeat",
            JobKind::Gmail => "gmail",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<JobKind> {
        match text {
            "cron" => Some(JobKind::Cron),
            "heartbeat" => Some(JobKind::Heartbeat),
            "gmail" => Some(JobKind::Gmail),
            _ => None,
        }
    }
}

/// How a run went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// Its message was accepted and its turn has not ended.
    Running,
    /// The agent answered, and the answer was delivered where asked.
    Ok,
    /// The message was refused or the turn failed (the error says why).
    Failed,
    /// The agent answered but the answer could not be delivered.
    Undelivered,
    /// Flynn stopped while the run was going on.
    Interrupted,
}

impl RunOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Running => "running",
            RunOutcome::Ok => "ok",
            RunOutcome::Failed => "failed",
            RunOutcome::Undelivered => "undelivered",
            RunOutcome::Interrupted => "interrupted",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<RunOutcome> {
        match text {
            "running" => Some(RunOutcome::Running),
            "ok" => Some(RunOutcome::Ok),
            "failed" => Some(RunOutcome::Failed),
            "undelivered" => Some(RunOutcome::Undelivered),
            "interrupted" => Some(RunOutcome::Interrupted),
            _ => None,
        }
    }
}

/// A job's latest run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LastRun {
    /// The time the run was due (Unix ms): what the missed-run policy
    /// counts from.
    pub scheduled_for: i64,
    /// Unix ms.
    pub started_at: i64,
    /// Unix ms; `None` while it runs.
    pub finished_at: Option<i64>,
    pub outcome: RunOutcome,
    /// Why it failed or was not delivered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The session its turn ran in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionKey>,
    /// Its turn, once its message was accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn: Option<TurnId>,
}

/// What is kept about one job's runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobRuns {
    pub kind: JobKind,
    pub name: String,
    /// Runs scheduled after this time (Unix ms) count: when the job was
    /// first scheduled.
    pub since: i64,
    /// `None` until it first ran.
    pub last: Option<LastRun>,
}

impl JobRuns {
    /// The time missed runs are counted from: the last run's, else when
    /// the job was first scheduled.
    pub fn counted_from(&self) -> i64 {
        self.last
            .as_ref()
            .map_or(self.since, |last| last.scheduled_for.max(self.since))
    }
}

/// A cron job an agent created.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredCronJob {
    pub job: CronJobConfig,
    /// The session whose turn created it.
    pub created_by: SessionKey,
    /// Unix ms; its runs count from then.
    pub created_at: i64,
}

pub(crate) fn missed_as_str(missed: Missed) -> &'static str {
    match missed {
        Missed::Skip => "skip",
        Missed::RunOnce => "run_once",
    }
}

pub(crate) fn missed_from(text: &str) -> Missed {
    match text {
        "run_once" => Missed::RunOnce,
        // "skip"; the table's CHECK constraint admits nothing else.
        _ => Missed::Skip,
    }
}
