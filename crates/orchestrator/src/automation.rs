//! Automation in the runtime: cron jobs and the heartbeat.
//!
//! [`Automation`] holds the jobs (the config file's `automation.jobs`, and
//! the ones agents create with `cron.add`, kept in the session store) and,
//! once the daemon [`start`](Automation::start)s it, a loop that owns a
//! [`flynn_automation::Scheduler`]. When a job is due, its message is
//! submitted to its agent in its session (`cron:<name>` unless the job
//! names one) through [`SessionManager::submit`], the path a person's
//! message takes, so events, usage, tools and the tool gate all apply.
//! Nobody is there to confirm a risky tool, so such calls are denied. The
//! final answer goes to `deliver_to` (`<channel>:<peer>`) through the
//! channel registry.
//!
//! Every run is recorded in the store (when it was due, when it ran, how
//! it ended and why), and at start-up each job's missed-run policy reads
//! that record: runs due after the last one (or, for a job that never
//! ran, after it was first scheduled) and before now were missed while
//! Flynn was down; [`Missed::Skip`] drops them, [`Missed::RunOnce`] makes
//! one catch-up run. A run that fails (a refused message, a model error,
//! a channel down) is logged and recorded, and the loop goes on.
//!
//! The heartbeat reads `HEARTBEAT.md` every `every_mins`; only when a task
//! in it is due is the agent called, so an idle heartbeat costs nothing.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use flynn_automation::{Clock, Heartbeat, LineProblem, Schedule, ScheduleError, Scheduler, due};
use flynn_channels::{ChatKind, Conversation, Registry, Target, outbound};
use flynn_protocol::config::{AutomationConfig, ChannelsConfig, CronJobConfig, Missed};
use flynn_protocol::{JobName, JobNameError, Principal, SessionKey, ToolEffect, TurnId};
use flynn_sessions::{JobKind, JobRuns, LastRun, RunOutcome, StoredCronJob};
use flynn_tools::{DenyAll, Tool, ToolContext, ToolError, TypedTool};
use futures::FutureExt;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::Error;
use crate::runtime::{SessionManager, Submitted, TurnRequest};
use flynn_protocol::sync::lock;

/// The name the heartbeat's runs are recorded under.
pub const HEARTBEAT_JOB: &str = "heartbeat";
/// The session the heartbeat's turns run in.
pub const HEARTBEAT_SESSION: &str = "heartbeat:main";
/// What `deliver_to` may say instead of a session key in `cron.add`.
const HERE: &str = "here";
/// How long a stopping daemon waits for runs it cancelled to record how
/// they ended.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

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
struct Job {
    config: CronJobConfig,
    schedule: Schedule,
    session: SessionKey,
    deliver_to: Option<SessionKey>,
    origin: JobOrigin,
}

impl Job {
    /// Checks a job's own fields (not its agent or channel).
    fn parse(config: CronJobConfig, origin: JobOrigin) -> Result<Job, JobError> {
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

fn check_name(name: &str) -> Result<(), JobError> {
    JobName::new(name)?;
    Ok(())
}

fn session_key(field: &'static str, value: &str) -> Result<SessionKey, JobError> {
    value
        .parse::<SessionKey>()
        .map_err(|error| JobError::BadSessionKey {
            field,
            value: value.to_owned(),
            reason: format!("is not a session key: {}", error.reason),
        })
}

/// The heartbeat's settings, checked.
#[derive(Debug, Clone)]
struct HeartbeatSettings {
    heartbeat: Heartbeat,
    every: Duration,
    file: Option<PathBuf>,
    deliver_to: Option<SessionKey>,
}

/// A run's turn, while it runs.
type InFlight = HashMap<(JobKind, String), Option<(SessionKey, TurnId)>>;

/// The jobs and the loop that runs them. Cheap to clone; every clone is
/// the same automation.
#[derive(Clone)]
pub struct Automation {
    inner: Arc<Inner>,
}

struct Inner {
    clock: Arc<dyn Clock>,
    heartbeat: Option<HeartbeatSettings>,
    /// Configured chat channels, for `deliver_to`.
    channels: Vec<String>,
    jobs: Mutex<BTreeMap<String, Job>>,
    manager: OnceLock<SessionManager>,
    /// Where answers are delivered; set by `start`.
    registry: OnceLock<Option<Registry>>,
    /// The jobs changed: the loop brings its scheduler in line.
    changed: Notify,
    in_flight: Mutex<InFlight>,
    /// Where the next heartbeat looks back from when a due task's message
    /// was refused (a busy database, a full queue): the task is due again.
    heartbeat_retry: Mutex<Option<DateTime<Utc>>>,
    runner: Mutex<Option<JoinHandle<()>>>,
    tasks: TaskTracker,
    stop: CancellationToken,
}

impl std::fmt::Debug for Automation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Automation")
            .field("jobs", &lock(&self.inner.jobs).keys().collect::<Vec<_>>())
            .field("heartbeat", &self.inner.heartbeat.is_some())
            .field("running", &self.is_running())
            .finish_non_exhaustive()
    }
}

fn millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

fn from_millis(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

impl Automation {
    /// The config file's jobs and heartbeat, read on `clock` (the system
    /// clock, or a paused one in tests). Refuses a job or heartbeat that
    /// could never run (a bad name, schedule, zone or session key, a
    /// `deliver_to` on a channel `channels` does not configure).
    pub fn new(
        config: &AutomationConfig,
        channels: &ChannelsConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, Error> {
        let channels: Vec<String> = channels
            .access()
            .into_iter()
            .map(|(name, _)| name.to_owned())
            .collect();
        let mut jobs = BTreeMap::new();
        for (index, job) in config.jobs.iter().enumerate() {
            let at = |e: JobError| {
                Error::Config(format!("automation.jobs[{index}] '{}': {e}", job.name))
            };
            let parsed = Job::parse(job.clone(), JobOrigin::Config).map_err(at)?;
            if let Some(to) = &parsed.deliver_to {
                check_channel(&channels, to).map_err(at)?;
            }
            if jobs.insert(job.name.clone(), parsed).is_some() {
                return Err(at(JobError::Duplicate {
                    name: job.name.clone(),
                    origin: "twice in the config file".to_owned(),
                }));
            }
        }
        let settings = &config.heartbeat;
        let heartbeat = if settings.enabled {
            let at = |message: String| Error::Config(format!("automation.heartbeat: {message}"));
            let heartbeat = Heartbeat::new(&settings.timezone).ok_or_else(|| {
                at(ScheduleError::UnknownTimeZone {
                    name: settings.timezone.clone(),
                }
                .to_string())
            })?;
            if settings.every_mins < 1 {
                return Err(at(
                    "every_mins is 0, expected at least 1 (minutes between two looks at the file)"
                        .to_owned(),
                ));
            }
            let deliver_to = settings
                .deliver_to
                .as_deref()
                .map(|to| {
                    let key = session_key("deliver_to", to)?;
                    check_channel(&channels, &key)?;
                    Ok::<_, JobError>(key)
                })
                .transpose()
                .map_err(|e| at(e.to_string()))?;
            Some(HeartbeatSettings {
                heartbeat,
                every: Duration::from_secs(u64::from(settings.every_mins) * 60),
                file: settings.file.clone(),
                deliver_to,
            })
        } else {
            None
        };
        Ok(Automation {
            inner: Arc::new(Inner {
                clock,
                heartbeat,
                channels,
                jobs: Mutex::new(jobs),
                manager: OnceLock::new(),
                registry: OnceLock::new(),
                changed: Notify::new(),
                in_flight: Mutex::new(HashMap::new()),
                heartbeat_retry: Mutex::new(None),
                runner: Mutex::new(None),
                tasks: TaskTracker::new(),
                stop: CancellationToken::new(),
            }),
        })
    }

    /// The `cron.add`, `cron.list` and `cron.remove` tools. They work once
    /// [`bind`](Self::bind) gave the runtime.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![
            flynn_tools::into_dyn(CronAdd(self.clone())),
            flynn_tools::into_dyn(CronList(self.clone())),
            flynn_tools::into_dyn(CronRemove(self.clone())),
        ]
    }

    /// Gives the runtime jobs run in: checks that the config's jobs name
    /// agents it has, and loads the jobs agents added earlier (kept in its
    /// store). A stored job whose schedule no longer parses is left out
    /// with a warning; one shadowed by a config job of the same name too.
    pub async fn bind(&self, manager: SessionManager) -> Result<(), Error> {
        let inner = &self.inner;
        if inner.manager.get().is_some() {
            return Err(Error::Config(
                "automation is already bound to a runtime".to_owned(),
            ));
        }
        for job in lock(&inner.jobs).values() {
            if let Some(agent) = &job.config.agent {
                manager
                    .agents()
                    .lookup(agent, &format!("automation.jobs '{}'", job.config.name))?;
            }
        }
        let stored = manager.store().cron_jobs().await?;
        {
            let mut jobs = lock(&inner.jobs);
            for stored in stored {
                let name = stored.job.name.clone();
                if jobs.contains_key(&name) {
                    tracing::warn!(job = %name, "a cron job added with cron.add has the name of a job in the config file; the config file's runs");
                    continue;
                }
                let origin = JobOrigin::Agent {
                    created_by: stored.created_by,
                };
                match Job::parse(stored.job, origin) {
                    Ok(job) => {
                        jobs.insert(name, job);
                    }
                    Err(error) => {
                        tracing::warn!(job = %name, %error, "a stored cron job cannot run; remove it with cron.remove");
                    }
                }
            }
        }
        let _ = inner.manager.set(manager);
        Ok(())
    }

    fn manager(&self) -> Result<&SessionManager, JobError> {
        self.inner
            .manager
            .get()
            .ok_or(JobError::NotReady("the runtime is not composed yet"))
    }

    /// Whether the loop runs in this process.
    pub fn is_running(&self) -> bool {
        lock(&self.inner.runner).is_some() && !self.inner.stop.is_cancelled()
    }

    /// Starts running the jobs (the daemon does this after the runtime and
    /// the chat channels, whose `registry` delivers answers). First, runs
    /// a previous process left running are recorded as interrupted, and
    /// each job's missed-run policy decides whether it runs once now for
    /// the runs missed while Flynn was down.
    pub async fn start(&self, registry: Option<Registry>) -> Result<(), JobError> {
        let inner = &self.inner;
        let manager = self.manager()?.clone();
        if lock(&inner.runner).is_some() || inner.stop.is_cancelled() {
            return Err(JobError::NotReady("it was started already"));
        }
        let store = manager.store().clone();
        let now = inner.clock.now();
        let runs: HashMap<(JobKind, String), JobRuns> = store
            .job_runs()
            .await?
            .into_iter()
            .map(|runs| ((runs.kind, runs.name.clone()), runs))
            .collect();
        for runs in runs.values() {
            if let Some(last) = runs
                .last
                .as_ref()
                .filter(|l| l.outcome == RunOutcome::Running)
            {
                let mut last = last.clone();
                last.outcome = RunOutcome::Interrupted;
                last.error = Some("Flynn stopped while it ran".to_owned());
                store.record_run(runs.kind, &runs.name, &last).await?;
            }
        }

        let mut scheduler = Scheduler::new(inner.clock.clone());
        let mut catch_up = Vec::new();
        let jobs: Vec<Job> = lock(&inner.jobs).values().cloned().collect();
        for job in jobs.iter().filter(|job| job.config.enabled) {
            let name = &job.config.name;
            let runs = match runs.get(&(JobKind::Cron, name.clone())) {
                Some(runs) => runs.clone(),
                None => store.track_job(JobKind::Cron, name, millis(now)).await?,
            };
            let decision = due(
                &job.schedule,
                Some(from_millis(runs.counted_from())),
                now,
                job.config.missed,
            );
            if decision.skipped > 0 {
                tracing::info!(
                    job = %name,
                    skipped = decision.skipped,
                    "runs missed while Flynn was down are skipped (missed: {})",
                    match job.config.missed {
                        Missed::Skip => "skip",
                        Missed::RunOnce => "run_once",
                    }
                );
            }
            if decision.run_now {
                catch_up.push(name.clone());
            }
            if let Err(error) = scheduler.add(name.clone(), job.schedule.clone()) {
                tracing::warn!(job = %name, %error, "cron job not scheduled");
            }
        }
        let beat = match &inner.heartbeat {
            Some(settings) => {
                store
                    .track_job(JobKind::Heartbeat, HEARTBEAT_JOB, millis(now))
                    .await?;
                let workspace = manager.agents().default_agent().workspace().to_path_buf();
                let path = match &settings.file {
                    Some(file) if file.is_absolute() => file.clone(),
                    Some(file) => workspace.join(file),
                    None => workspace.join("HEARTBEAT.md"),
                };
                Some(Beat {
                    settings: settings.clone(),
                    path,
                    last: now,
                    problems: Vec::new(),
                    told_missing: false,
                })
            }
            None => None,
        };

        if inner.registry.set(registry).is_err() {
            return Err(JobError::NotReady("it was started already"));
        }
        let runner = tokio::spawn(inner.clone().run(scheduler, beat));
        *lock(&inner.runner) = Some(runner);
        for name in catch_up {
            tracing::info!(job = %name, "running once for the runs missed while Flynn was down");
            inner.spawn_job(&name, now);
        }
        Ok(())
    }

    /// Stops the loop, gives the runs going on up to `grace` to finish
    /// (and deliver), then cancels the rest, which are recorded as
    /// interrupted. Safe to call more than once.
    pub async fn shutdown(&self, grace: Duration) {
        let inner = &self.inner;
        inner.stop.cancel();
        let runner = lock(&inner.runner).take();
        if let Some(runner) = runner
            && let Err(error) = runner.await
        {
            tracing::error!(%error, "the automation loop failed");
        }
        inner.tasks.close();
        if tokio::time::timeout(grace, inner.tasks.wait())
            .await
            .is_ok()
        {
            return;
        }
        let turns: Vec<(SessionKey, TurnId)> =
            lock(&inner.in_flight).values().flatten().cloned().collect();
        if let Some(manager) = inner.manager.get() {
            for (session, turn) in turns {
                manager.cancel_turn(&session, turn).await;
            }
        }
        if tokio::time::timeout(CANCEL_WAIT, inner.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("automation runs did not stop in time");
        }
    }

    /// Every job by name, with its next and last run.
    pub async fn jobs(&self) -> Result<Vec<JobInfo>, JobError> {
        let manager = self.manager()?;
        let runs: HashMap<String, LastRun> = manager
            .store()
            .job_runs()
            .await?
            .into_iter()
            .filter(|runs| runs.kind == JobKind::Cron)
            .filter_map(|runs| Some((runs.name, runs.last?)))
            .collect();
        let jobs = lock(&self.inner.jobs);
        Ok(jobs
            .values()
            .map(|job| self.info(manager, job, runs.get(&job.config.name).cloned()))
            .collect())
    }

    fn info(&self, manager: &SessionManager, job: &Job, last: Option<LastRun>) -> JobInfo {
        let now = self.inner.clock.now();
        JobInfo {
            name: job.config.name.clone(),
            schedule: job.schedule.clone(),
            message: job.config.message.clone(),
            origin: job.origin.clone(),
            enabled: job.config.enabled,
            agent: job
                .config
                .agent
                .clone()
                .unwrap_or_else(|| manager.agents().default_agent().name.clone()),
            session: job.session.clone(),
            deliver_to: job.deliver_to.clone(),
            missed: job.config.missed,
            next: job
                .config
                .enabled
                .then(|| job.schedule.next_after(now))
                .flatten(),
            last,
        }
    }

    /// The heartbeat's last run, when it is on and ran.
    async fn heartbeat_last(&self) -> Result<Option<LastRun>, JobError> {
        let manager = self.manager()?;
        Ok(manager
            .store()
            .job_runs()
            .await?
            .into_iter()
            .find(|runs| runs.kind == JobKind::Heartbeat && runs.name == HEARTBEAT_JOB)
            .and_then(|runs| runs.last))
    }

    /// Adds a job for `caller` (the agent and session of the turn that
    /// asks): checked, stored, and scheduled at once when the loop runs.
    pub async fn add(&self, new: NewJob, caller: &ToolContext) -> Result<JobInfo, JobError> {
        let manager = self.manager()?;
        check_name(&new.name)?;
        if let Some(existing) = lock(&self.inner.jobs).get(&new.name) {
            return Err(JobError::Duplicate {
                name: new.name,
                origin: describe_origin(&existing.origin),
            });
        }
        if caller.principal.is_guest() {
            return Err(JobError::Guest);
        }
        // A turn schedules work for itself only: a job runs as the agent
        // that added it, never a more capable one.
        let agent = new.agent.unwrap_or_else(|| caller.agent.clone());
        if agent != caller.agent {
            return Err(JobError::OtherAgent {
                caller: caller.agent.clone(),
                asked: agent,
            });
        }
        if manager.agents().get(&agent).is_none() {
            return Err(JobError::UnknownAgent {
                name: agent,
                available: manager.agents().names().collect::<Vec<_>>().join(", "),
            });
        }
        let deliver_to = match new.deliver_to.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(HERE) => {
                if !self
                    .inner
                    .channels
                    .iter()
                    .any(|c| c == caller.session.channel())
                {
                    return Err(JobError::BadSessionKey {
                        field: "deliver_to",
                        value: HERE.to_owned(),
                        reason: format!(
                            "means this conversation, {}, which is not a chat channel",
                            caller.session
                        ),
                    });
                }
                Some(caller.session.clone())
            }
            Some(to) => {
                let key = session_key("deliver_to", to)?;
                check_channel(&self.inner.channels, &key)?;
                Some(key)
            }
        };
        let config = CronJobConfig {
            name: new.name.clone(),
            schedule: new.schedule.trim().to_owned(),
            timezone: new
                .timezone
                .map(|tz| tz.trim().to_owned())
                .filter(|tz| !tz.is_empty())
                .unwrap_or_else(|| "UTC".to_owned()),
            message: new.message.trim().to_owned(),
            agent: Some(agent),
            session: None,
            deliver_to: deliver_to.map(String::from),
            missed: new.missed.unwrap_or_default(),
            enabled: true,
        };
        let job = Job::parse(
            config.clone(),
            JobOrigin::Agent {
                created_by: caller.session.clone(),
            },
        )?;
        let now = self.inner.clock.now();
        if job.schedule.next_after(now).is_none() {
            return Err(JobError::NeverRuns {
                expr: config.schedule,
            });
        }
        check_frequency(&job.schedule, now)?;
        let stored = StoredCronJob {
            job: config,
            created_by: caller.session.clone(),
            created_at: millis(now),
        };
        if !manager.store().add_cron_job(&stored).await? {
            return Err(JobError::Duplicate {
                name: new.name,
                origin: "already in the session database".to_owned(),
            });
        }
        let info = self.info(manager, &job, None);
        lock(&self.inner.jobs).insert(new.name.clone(), job);
        self.inner.changed.notify_one();
        tracing::info!(job = %new.name, by = %caller.session, "cron job added");
        Ok(info)
    }

    /// Removes a job agents added; config jobs are refused.
    pub async fn remove(&self, name: &str) -> Result<(), JobError> {
        let manager = self.manager()?;
        let origin = {
            let jobs = lock(&self.inner.jobs);
            match jobs.get(name) {
                Some(job) => job.origin.clone(),
                None => {
                    return Err(JobError::UnknownJob {
                        name: name.to_owned(),
                        available: names(&jobs),
                    });
                }
            }
        };
        if origin == JobOrigin::Config {
            return Err(JobError::FromConfig {
                name: name.to_owned(),
            });
        }
        manager.store().remove_cron_job(name).await?;
        lock(&self.inner.jobs).remove(name);
        self.inner.changed.notify_one();
        tracing::info!(job = %name, "cron job removed");
        Ok(())
    }
}

fn names(jobs: &BTreeMap<String, Job>) -> String {
    if jobs.is_empty() {
        "none".to_owned()
    } else {
        jobs.keys().cloned().collect::<Vec<_>>().join(", ")
    }
}

fn describe_origin(origin: &JobOrigin) -> String {
    match origin {
        JobOrigin::Config => "in the config file".to_owned(),
        JobOrigin::Agent { created_by } => format!("added with cron.add from {created_by}"),
    }
}

fn check_channel(channels: &[String], to: &SessionKey) -> Result<(), JobError> {
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

/// Where a `<channel>:<peer>` key's messages go: the peer's chat, and its
/// thread after a second `:` (as the channel router names sessions).
pub(crate) fn target_of(key: &SessionKey) -> Target {
    let (chat, thread) = match key.peer().split_once(':') {
        Some((chat, thread)) => (chat.to_owned(), Some(thread.to_owned())),
        None => (key.peer().to_owned(), None),
    };
    let kind = if thread.is_some() {
        ChatKind::Group
    } else {
        ChatKind::Direct
    };
    Target {
        conversation: Conversation { chat, thread, kind },
        reply: None,
    }
}

/// One run to make.
struct RunSpec {
    kind: JobKind,
    name: String,
    /// "cron job 'x'" or "the heartbeat", for messages.
    what: String,
    message: String,
    agent: String,
    session: SessionKey,
    deliver_to: Option<SessionKey>,
    /// The heartbeat's: where the next beat looks back from if this
    /// run's message is refused.
    retry_from: Option<DateTime<Utc>>,
}

/// The heartbeat's state in the loop.
struct Beat {
    settings: HeartbeatSettings,
    path: PathBuf,
    /// The previous beat: tasks due after it and by now are due.
    last: DateTime<Utc>,
    /// The file's task lines not understood, as last reported.
    problems: Vec<LineProblem>,
    told_missing: bool,
}

/// Takes a run off the in-flight list when it ends, however it ends.
struct Running {
    inner: Arc<Inner>,
    key: (JobKind, String),
}

impl Drop for Running {
    fn drop(&mut self) {
        lock(&self.inner.in_flight).remove(&self.key);
    }
}

impl Inner {
    /// The loop: jobs as they fall due, changes to the jobs, heartbeats.
    async fn run(self: Arc<Self>, mut scheduler: Scheduler, mut beat: Option<Beat>) {
        let mut ticks = beat.as_ref().map(|beat| {
            let every = beat.settings.every;
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks
        });
        loop {
            tokio::select! {
                biased;
                () = self.stop.cancelled() => break,
                () = self.changed.notified() => {
                    survive("scheduling the cron jobs", || self.sync(&mut scheduler));
                }
                fired = scheduler.next_due() => survive(&format!("starting cron job '{}'", fired.job), || {
                    flynn_protocol::fault::point("automation");
                    self.spawn_job(&fired.job, fired.scheduled_for);
                }),
                () = tick(&mut ticks) => {
                    if let Some(beat) = beat.as_mut() {
                        // A panic in one beat is logged and the next beat
                        // comes as usual: the loop outlives its bugs.
                        let beating = std::panic::AssertUnwindSafe(self.beat(beat)).catch_unwind();
                        if let Err(panic) = beating.await {
                            let message = flynn_protocol::fault::panic_message(panic.as_ref());
                            tracing::error!(panic = message, "the heartbeat panicked; it runs again at the next beat");
                        }
                    }
                }
            }
        }
    }

    /// Brings the scheduler in line with the jobs (added, removed, or
    /// replaced under the same name).
    fn sync(&self, scheduler: &mut Scheduler) {
        let wanted: BTreeMap<String, Schedule> = lock(&self.jobs)
            .values()
            .filter(|job| job.config.enabled)
            .map(|job| (job.config.name.clone(), job.schedule.clone()))
            .collect();
        for entry in scheduler.entries() {
            if wanted.get(&entry.name) != Some(&entry.schedule) {
                scheduler.remove(&entry.name);
            }
        }
        for (name, schedule) in wanted {
            if scheduler.entries().iter().all(|entry| entry.name != name)
                && let Err(error) = scheduler.add(name.clone(), schedule)
            {
                tracing::warn!(job = %name, %error, "cron job not scheduled");
            }
        }
    }

    /// Starts a cron job's run due at `scheduled_for`.
    fn spawn_job(self: &Arc<Self>, name: &str, scheduled_for: DateTime<Utc>) {
        let Some(manager) = self.manager.get() else {
            return;
        };
        let Some(job) = lock(&self.jobs)
            .get(name)
            .filter(|job| job.config.enabled)
            .cloned()
        else {
            return;
        };
        let spec = RunSpec {
            kind: JobKind::Cron,
            name: name.to_owned(),
            what: format!("cron job '{name}'"),
            message: job.config.message.clone(),
            agent: job
                .config
                .agent
                .clone()
                .unwrap_or_else(|| manager.agents().default_agent().name.clone()),
            session: job.session.clone(),
            deliver_to: job.deliver_to.clone(),
            retry_from: None,
        };
        self.tasks.spawn(self.clone().run_once(spec, scheduled_for));
    }

    /// One heartbeat: reads the file, and only when a task in it is due
    /// asks the agent.
    async fn beat(self: &Arc<Self>, beat: &mut Beat) {
        let now = self.clock.now();
        let key = (JobKind::Heartbeat, HEARTBEAT_JOB.to_owned());
        if lock(&self.in_flight).contains_key(&key) {
            // Looked at again next beat, from the same point, so nothing
            // due meanwhile is lost.
            tracing::debug!("the previous heartbeat run is still going");
            return;
        }
        let contents = match tokio::fs::read_to_string(&beat.path).await {
            Ok(contents) => {
                beat.told_missing = false;
                contents
            }
            Err(error) => {
                if error.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(file = %beat.path.display(), %error, "cannot read the heartbeat file");
                } else if !beat.told_missing {
                    tracing::info!(file = %beat.path.display(), "no heartbeat file: the heartbeat has nothing to do until it exists");
                    beat.told_missing = true;
                }
                beat.last = now;
                return;
            }
        };
        let problems = Heartbeat::parse(&contents).problems;
        if problems != beat.problems {
            for problem in &problems {
                tracing::warn!(
                    file = %beat.path.display(),
                    line = problem.line,
                    "heartbeat task not understood, so it never runs: {}",
                    problem.message
                );
            }
            beat.problems = problems;
        }
        // A refused run is looked for again from where it was due.
        let since = match lock(&self.heartbeat_retry).take() {
            Some(retry) => retry.min(beat.last),
            None => beat.last,
        };
        let message = beat.settings.heartbeat.check(&contents, now, Some(since));
        beat.last = now;
        let (Some(message), Some(manager)) = (message, self.manager.get()) else {
            return;
        };
        let session = match HEARTBEAT_SESSION.parse::<SessionKey>() {
            Ok(session) => session,
            Err(_) => unreachable!("`heartbeat:main` is a valid session key"),
        };
        let spec = RunSpec {
            kind: JobKind::Heartbeat,
            name: HEARTBEAT_JOB.to_owned(),
            what: "the heartbeat".to_owned(),
            message,
            agent: manager.agents().default_agent().name.clone(),
            session,
            deliver_to: beat.settings.deliver_to.clone(),
            retry_from: Some(since),
        };
        // Marked in flight before the task starts, so the next beat waits.
        lock(&self.in_flight).insert(key, None);
        self.tasks.spawn(self.clone().run_marked(spec, now));
    }

    /// One run of a cron job, unless its previous run still goes on.
    async fn run_once(self: Arc<Self>, spec: RunSpec, scheduled_for: DateTime<Utc>) {
        {
            let mut in_flight = lock(&self.in_flight);
            let key = (spec.kind, spec.name.clone());
            if in_flight.contains_key(&key) {
                tracing::warn!(
                    job = %spec.name,
                    "its previous run is still going, so the run due at {scheduled_for} is skipped"
                );
                return;
            }
            in_flight.insert(key, None);
        }
        self.run_marked(spec, scheduled_for).await;
    }

    /// One run, already marked in flight: submit, wait, deliver, record.
    async fn run_marked(self: Arc<Self>, spec: RunSpec, scheduled_for: DateTime<Utc>) {
        let _running = Running {
            inner: self.clone(),
            key: (spec.kind, spec.name.clone()),
        };
        let Some(manager) = self.manager.get().cloned() else {
            return;
        };
        let mut request = TurnRequest::text(spec.session.clone(), spec.message.clone());
        request.agent = Some(spec.agent.clone());
        request.principal = Principal::automation(match spec.kind {
            JobKind::Cron => format!("cron:{}", spec.name),
            JobKind::Heartbeat => "heartbeat".to_owned(),
        });
        request.approver = Some(Arc::new(DenyAll::new(format!(
            "{} runs unattended, so nobody can confirm it; do without it, or the owner can allow the tool with a `tools.hooks` rule",
            spec.what
        ))));
        let mut run = LastRun {
            scheduled_for: millis(scheduled_for),
            started_at: millis(self.clock.now()),
            finished_at: None,
            outcome: RunOutcome::Running,
            error: None,
            session: Some(spec.session.clone()),
            turn: None,
        };
        // Recorded as running before the message is submitted: a crash
        // right after it is accepted leaves a run interrupted (its turn
        // recovered with the session), not a missed one to run again.
        let previous = self.last_run(&spec).await;
        self.record(&spec, &run).await;
        let answer = match manager.submit(request).await {
            Ok(Submitted::Command { reply, .. }) => Ok(reply),
            Ok(Submitted::Turn(handle)) => {
                run.turn = Some(handle.turn);
                lock(&self.in_flight).insert(
                    (spec.kind, spec.name.clone()),
                    Some((spec.session.clone(), handle.turn)),
                );
                self.record(&spec, &run).await;
                handle.outcome().await.map(|outcome| match outcome.warning {
                    Some(warning) => format!("{}\n\n_⚠️ {warning}_", outcome.reply),
                    None => outcome.reply,
                })
            }
            Err(Error::ShuttingDown) => {
                // Not accepted: the run before it is the last again, so
                // the missed-run policy sees this one at the next start.
                tracing::info!(job = %spec.name, "not run: Flynn is shutting down");
                run.finished_at = Some(millis(self.clock.now()));
                run.outcome = RunOutcome::Interrupted;
                run.error = Some("Flynn was shutting down".to_owned());
                self.record(&spec, previous.as_ref().unwrap_or(&run)).await;
                return;
            }
            Err(error) => {
                // Not accepted: the heartbeat's task is due again.
                if let Some(retry_from) = spec.retry_from {
                    let mut retry = lock(&self.heartbeat_retry);
                    *retry = Some(retry.map_or(retry_from, |r| r.min(retry_from)));
                }
                Err(error)
            }
        };
        run.finished_at = Some(millis(self.clock.now()));
        match answer {
            Ok(text) => {
                run.outcome = RunOutcome::Ok;
                match &spec.deliver_to {
                    Some(to) if !text.trim().is_empty() => {
                        if let Err(error) = self.deliver(to, &text).await {
                            tracing::warn!(job = %spec.name, to = %to, %error, "the answer could not be delivered");
                            run.outcome = RunOutcome::Undelivered;
                            run.error = Some(error);
                        }
                    }
                    _ => {}
                }
                if run.outcome == RunOutcome::Ok {
                    tracing::info!(job = %spec.name, session = %spec.session, "ran");
                }
            }
            Err(Error::Cancelled) if self.stop.is_cancelled() || manager.is_draining() => {
                run.outcome = RunOutcome::Interrupted;
                run.error = Some("Flynn stopped while it ran".to_owned());
            }
            Err(error) => {
                tracing::warn!(job = %spec.name, %error, "run failed");
                run.outcome = RunOutcome::Failed;
                run.error = Some(error.to_string());
                if let Some(to) = &spec.deliver_to {
                    let notice = format!("⚠️ {} failed: {error}", spec.what);
                    if let Err(undelivered) = self.deliver(to, &notice).await {
                        run.error =
                            Some(format!("{error}; telling {to} failed too: {undelivered}"));
                    }
                }
            }
        }
        self.record(&spec, &run).await;
    }

    /// The job's last recorded run, if any (and readable).
    async fn last_run(&self, spec: &RunSpec) -> Option<LastRun> {
        let manager = self.manager.get()?;
        match manager.store().job_runs().await {
            Ok(runs) => runs
                .into_iter()
                .find(|runs| runs.kind == spec.kind && runs.name == spec.name)
                .and_then(|runs| runs.last),
            Err(error) => {
                tracing::warn!(job = %spec.name, %error, "cannot read the job's last run");
                None
            }
        }
    }

    async fn record(&self, spec: &RunSpec, run: &LastRun) {
        let Some(manager) = self.manager.get() else {
            return;
        };
        if let Err(error) = manager.store().record_run(spec.kind, &spec.name, run).await {
            tracing::error!(job = %spec.name, %error, "cannot record the run");
        }
    }

    /// Sends `text` to the chat `to` names.
    async fn deliver(&self, to: &SessionKey, text: &str) -> Result<(), String> {
        let registry = self.registry.get().and_then(Option::as_ref);
        let Some(adapter) = registry.and_then(|r| r.get(to.channel())) else {
            return Err(format!(
                "the channel '{}' is not running (see `flynn doctor`)",
                to.channel()
            ));
        };
        let target = target_of(to);
        adapter
            .can_send(&target)
            .map_err(|error| error.to_string())?;
        outbound::send(adapter.as_ref(), &target, text, &[])
            .await
            .map(|_| ())
            .map_err(|error| error.to_string())
    }
}

/// The next heartbeat tick; never, without a heartbeat.
/// Runs one step of the automation loop; a panic in it (a bug) is logged
/// with `what` it was doing, and the loop goes on with the next step.
fn survive(what: &str, step: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(step)) {
        let message = flynn_protocol::fault::panic_message(panic.as_ref());
        tracing::error!(
            panic = message,
            "the automation loop panicked {what}; it carries on"
        );
    }
}

async fn tick(ticks: &mut Option<tokio::time::Interval>) {
    match ticks {
        Some(ticks) => {
            ticks.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// The shortest gap between two runs of a job added with `cron.add`
/// (config-file jobs may run every second: the owner wrote them).
pub const MIN_AGENT_INTERVAL: Duration = Duration::from_secs(60);

/// Refuses a schedule an agent may not set: a seconds field, or runs
/// closer together than [`MIN_AGENT_INTERVAL`] (checked over the next
/// runs).
fn check_frequency(schedule: &Schedule, now: DateTime<Utc>) -> Result<(), JobError> {
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

// --- the tools -----------------------------------------------------------

struct CronAdd(Automation);
struct CronList(Automation);
struct CronRemove(Automation);

/// Arguments of `cron.add`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AddArgs {
    /// Unique name: letters, digits, `-`, `_`, `.` (`morning-brief`).
    name: String,
    /// Cron expression, `minute hour day-of-month month day-of-week`
    /// (`30 7 * * MON-FRI`); at most once a minute.
    schedule: String,
    /// IANA time zone the schedule is read in (`Europe/Berlin`); UTC when
    /// absent.
    #[serde(default)]
    timezone: Option<String>,
    /// What the agent is asked at each run, as you would ask a person.
    message: String,
    /// Where each answer is sent: `here` (this chat) or `<channel>:<peer>`;
    /// kept in the job's session when absent.
    #[serde(default)]
    deliver_to: Option<String>,
    /// The agent that answers; you when absent.
    #[serde(default)]
    agent: Option<String>,
    /// Runs missed while Flynn was down: `skip` (default) or `run_once`.
    #[serde(default)]
    missed: Option<Missed>,
}

/// Arguments of `cron.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {}

/// Arguments of `cron.remove`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RemoveArgs {
    /// The job's name, as cron.list shows it.
    name: String,
}

fn tool_error(tool: &str, error: JobError) -> ToolError {
    if error.is_bad_input() {
        ToolError::InvalidArguments {
            tool: tool.to_owned(),
            message: error.to_string(),
        }
    } else {
        ToolError::failed(error.to_string())
    }
}

#[async_trait]
impl TypedTool for CronAdd {
    type Args = AddArgs;

    fn name(&self) -> &str {
        "cron.add"
    }

    fn description(&self) -> &str {
        "Schedule a recurring task (a reminder, a daily report): at each time of a cron schedule the agent is sent `message` in the job's own session, and the answer goes to `deliver_to` (`here` for this chat)."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    /// It makes Flynn send messages on its own from now on.
    fn effect(&self) -> ToolEffect {
        ToolEffect::SendsMessages
    }

    async fn run(&self, args: AddArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let new = NewJob {
            name: args.name.trim().to_owned(),
            schedule: args.schedule,
            timezone: args.timezone,
            message: args.message,
            deliver_to: args.deliver_to,
            agent: args.agent,
            missed: args.missed,
        };
        let info = self
            .0
            .add(new, ctx)
            .await
            .map_err(|e| tool_error("cron.add", e))?;
        let mut text = format!(
            "Added cron job '{}': {}.\n{}",
            info.name,
            info.schedule.describe(),
            details(&info)
        );
        if !self.0.is_running() {
            text.push_str(
                "\nThis Flynn process does not run schedules; the daemon runs the job from its next start.",
            );
        }
        Ok(text)
    }
}

#[async_trait]
impl TypedTool for CronList {
    type Args = ListArgs;

    fn name(&self) -> &str {
        "cron.list"
    }

    fn description(&self) -> &str {
        "List the scheduled cron jobs (from the config file and added with cron.add) and the heartbeat: each one's schedule, next run in its time zone, and how its last run went."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    async fn run(&self, _args: ListArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let jobs = self
            .0
            .jobs()
            .await
            .map_err(|e| tool_error("cron.list", e))?;
        let mut text = if jobs.is_empty() {
            "No cron jobs. Add one with cron.add.\n".to_owned()
        } else {
            let mut text = format!(
                "{} cron job{}:\n",
                jobs.len(),
                if jobs.len() == 1 { "" } else { "s" }
            );
            for info in &jobs {
                let origin = match &info.origin {
                    JobOrigin::Config => {
                        "from the config file (cron.remove cannot remove it)".to_owned()
                    }
                    JobOrigin::Agent { created_by } => format!("added from {created_by}"),
                };
                text.push_str(&format!(
                    "- {}: {}; {origin}\n  {}\n",
                    info.name,
                    info.schedule.describe(),
                    details(info).replace('\n', "\n  ")
                ));
            }
            text
        };
        text.push_str(&self.heartbeat_line().await?);
        Ok(text)
    }
}

impl CronList {
    async fn heartbeat_line(&self) -> Result<String, ToolError> {
        let Some(settings) = &self.0.inner.heartbeat else {
            return Ok("Heartbeat: off (automation.heartbeat.enabled).".to_owned());
        };
        let last = self
            .0
            .heartbeat_last()
            .await
            .map_err(|e| tool_error("cron.list", e))?;
        let mut line = format!(
            "Heartbeat: every {} min, reads {} (times in {}); the agent is asked only when a task there is due.",
            settings.every.as_secs() / 60,
            settings
                .file
                .as_ref()
                .map_or_else(|| "HEARTBEAT.md".to_owned(), |f| f.display().to_string()),
            settings.heartbeat.timezone()
        );
        if let Some(last) = last {
            line.push_str(&format!(
                " Last run {}, {}.",
                settings.heartbeat.local(from_millis(last.scheduled_for)),
                outcome_text(&last)
            ));
        }
        if let Some(to) = &settings.deliver_to {
            line.push_str(&format!(" Answers go to {to}."));
        }
        Ok(line)
    }
}

#[async_trait]
impl TypedTool for CronRemove {
    type Args = RemoveArgs;

    fn name(&self) -> &str {
        "cron.remove"
    }

    fn description(&self) -> &str {
        "Remove a cron job added with cron.add, by name (jobs from the config file are removed there)."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    /// It stops messages Flynn would have sent.
    fn effect(&self) -> ToolEffect {
        ToolEffect::SendsMessages
    }

    async fn run(&self, args: RemoveArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        if ctx.principal.is_guest() {
            return Err(tool_error("cron.remove", JobError::Guest));
        }
        let name = args.name.trim();
        self.0
            .remove(name)
            .await
            .map_err(|e| tool_error("cron.remove", e))?;
        Ok(format!("Removed cron job '{name}'."))
    }
}

/// Next run, last run, who answers and where.
fn details(info: &JobInfo) -> String {
    let next = if !info.enabled {
        "off (enabled: false)".to_owned()
    } else {
        match info.next {
            Some(next) => format!("next run {}", info.schedule.local(next)),
            None => "never runs again".to_owned(),
        }
    };
    let last = match &info.last {
        Some(last) => format!(
            "last run {}, {}",
            info.schedule.local(from_millis(last.scheduled_for)),
            outcome_text(last)
        ),
        None => "never ran".to_owned(),
    };
    let to = match &info.deliver_to {
        Some(to) => format!("answers go to {to}"),
        None => "answers stay in the session".to_owned(),
    };
    format!(
        "{next}; {last}.\nAgent {} in {}; {to}.",
        info.agent, info.session
    )
}

fn outcome_text(last: &LastRun) -> String {
    match &last.error {
        Some(error) => format!("{}: {error}", last.outcome.as_str()),
        None => last.outcome.as_str().to_owned(),
    }
}
