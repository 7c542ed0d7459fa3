//! The jobs an [`Automation`] holds, and what its owner calls.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use flynn_automation::{Clock, Heartbeat, ScheduleError, Scheduler, due};
use flynn_channels::Registry;
use flynn_protocol::config::{AutomationConfig, ChannelsConfig, CronJobConfig, Missed};
use flynn_protocol::{SessionKey, TurnId};
use flynn_sessions::{JobKind, JobRuns, LastRun, RunOutcome, StoredCronJob};
use flynn_tools::{Tool, ToolContext};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::HEARTBEAT_JOB;
use crate::gmail::Watch;
use crate::job::{
    Job, JobError, JobInfo, JobOrigin, NewJob, check_channel, check_frequency, check_name,
    describe_origin, names, session_key,
};
use crate::run::Beat;
use crate::tools::{CronAdd, CronList, CronRemove};
use flynn_google::Google;
use flynn_orchestrator::{Error, SessionManager};
use flynn_protocol::sync::lock;

/// What `deliver_to` may say instead of a session key in `cron.add`.
pub(crate) const HERE: &str = "here";
/// How long a stopping daemon waits for runs it cancelled to record how
/// they ended.
pub(crate) const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// The heartbeat's settings, checked.
#[derive(Debug, Clone)]
pub(crate) struct HeartbeatSettings {
    pub(crate) heartbeat: Heartbeat,
    pub(crate) every: Duration,
    pub(crate) file: Option<PathBuf>,
    pub(crate) deliver_to: Option<SessionKey>,
}

/// A run's turn, while it runs.
pub(crate) type InFlight = HashMap<(JobKind, String), Option<(SessionKey, TurnId)>>;

/// The jobs and the loop that runs them. Cheap to clone; every clone is
/// the same automation.
#[derive(Clone)]
pub struct Automation {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) heartbeat: Option<HeartbeatSettings>,
    /// The Gmail watches (`automation.gmail`).
    pub(crate) watches: Vec<Watch>,
    /// The owner's Google accounts, which the watches read.
    pub(crate) google: OnceLock<Arc<Google>>,
    /// Configured chat channels, for `deliver_to`.
    pub(crate) channels: Vec<String>,
    pub(crate) jobs: Mutex<BTreeMap<String, Job>>,
    pub(crate) manager: OnceLock<SessionManager>,
    /// Where answers are delivered; set by `start`.
    pub(crate) registry: OnceLock<Option<Registry>>,
    /// The jobs changed: the loop brings its scheduler in line.
    pub(crate) changed: Notify,
    pub(crate) in_flight: Mutex<InFlight>,
    /// Where the next heartbeat looks back from when a due task's message
    /// was refused (a busy database, a full queue): the task is due again.
    pub(crate) heartbeat_retry: Mutex<Option<DateTime<Utc>>>,
    pub(crate) runner: Mutex<Option<JoinHandle<()>>>,
    pub(crate) tasks: TaskTracker,
    pub(crate) stop: CancellationToken,
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

pub(crate) fn millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

pub(crate) fn from_millis(ms: i64) -> DateTime<Utc> {
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
        let mut watches: Vec<Watch> = Vec::new();
        for (index, config) in config.gmail.iter().enumerate() {
            let watch = Watch::parse(index, config, &channels).map_err(Error::Config)?;
            if watches.iter().any(|w| w.name == watch.name) {
                return Err(Error::Config(format!(
                    "automation.gmail[{index}]: a second watch named '{}' (give each its own `name`)",
                    watch.name
                )));
            }
            watches.push(watch);
        }
        Ok(Automation {
            inner: Arc::new(Inner {
                clock,
                heartbeat,
                watches,
                google: OnceLock::new(),
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

    /// Gives the Gmail watches the owner's Google accounts (before
    /// [`start`](Self::start)).
    pub fn set_google(&self, google: Arc<Google>) {
        let _ = self.inner.google.set(google);
    }

    /// Whether the config has Gmail watches.
    pub fn watches_gmail(&self) -> bool {
        !self.inner.watches.is_empty()
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

    pub(crate) fn manager(&self) -> Result<&SessionManager, JobError> {
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
        if !inner.watches.is_empty() {
            let Some(google) = inner.google.get() else {
                return Err(JobError::NotReady(
                    "automation.gmail needs the `google` block (and an account signed in with `flynn auth google login`)",
                ));
            };
            for watch in &inner.watches {
                store
                    .track_job(JobKind::Gmail, &watch.name, millis(now))
                    .await?;
                inner
                    .tasks
                    .spawn(inner.clone().watch(watch.clone(), google.clone()));
            }
        }
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

    pub(crate) fn info(
        &self,
        manager: &SessionManager,
        job: &Job,
        last: Option<LastRun>,
    ) -> JobInfo {
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
    pub(crate) async fn heartbeat_last(&self) -> Result<Option<LastRun>, JobError> {
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
