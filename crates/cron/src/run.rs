//! The loop: due jobs and heartbeats become runs, runs become turns, and
//! answers go to their chats.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use flynn_automation::{Heartbeat, LineProblem, Schedule, Scheduler};
use flynn_channels::{Target, outbound};
use flynn_protocol::{Principal, SessionKey};
use flynn_sessions::{JobKind, LastRun, RunOutcome};
use flynn_tools::DenyAll;
use futures::FutureExt;

use crate::automation::{HeartbeatSettings, Inner, millis};
use crate::{HEARTBEAT_JOB, HEARTBEAT_SESSION};
use flynn_orchestrator::{Error, Submitted, TurnRequest};
use flynn_protocol::sync::lock;

/// One run to make.
pub(crate) struct RunSpec {
    pub(crate) kind: JobKind,
    pub(crate) name: String,
    /// "cron job 'x'" or "the heartbeat", for messages.
    pub(crate) what: String,
    pub(crate) message: String,
    pub(crate) agent: String,
    pub(crate) session: SessionKey,
    pub(crate) deliver_to: Option<SessionKey>,
    /// The heartbeat's: where the next beat looks back from if this
    /// run's message is refused.
    pub(crate) retry_from: Option<DateTime<Utc>>,
    /// What makes the message untrusted content (a Gmail watch's mail):
    /// the session is tainted from this turn on.
    pub(crate) untrusted: Option<String>,
}

/// The heartbeat's state in the loop.
pub(crate) struct Beat {
    pub(crate) settings: HeartbeatSettings,
    pub(crate) path: PathBuf,
    /// The previous beat: tasks due after it and by now are due.
    pub(crate) last: DateTime<Utc>,
    /// The file's task lines not understood, as last reported.
    pub(crate) problems: Vec<LineProblem>,
    pub(crate) told_missing: bool,
}

/// Takes a run off the in-flight list when it ends, however it ends.
pub(crate) struct Running {
    pub(crate) inner: Arc<Inner>,
    pub(crate) key: (JobKind, String),
}

impl Drop for Running {
    fn drop(&mut self) {
        lock(&self.inner.in_flight).remove(&self.key);
    }
}

impl Inner {
    /// The loop: jobs as they fall due, changes to the jobs, heartbeats.
    pub(crate) async fn run(self: Arc<Self>, mut scheduler: Scheduler, mut beat: Option<Beat>) {
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
    pub(crate) fn sync(&self, scheduler: &mut Scheduler) {
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
    pub(crate) fn spawn_job(self: &Arc<Self>, name: &str, scheduled_for: DateTime<Utc>) {
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
            untrusted: None,
        };
        self.tasks.spawn(self.clone().run_once(spec, scheduled_for));
    }

    /// One heartbeat: reads the file, and only when a task in it is due
    /// asks the agent.
    pub(crate) async fn beat(self: &Arc<Self>, beat: &mut Beat) {
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
            untrusted: None,
        };
        // Marked in flight before the task starts, so the next beat waits.
        lock(&self.in_flight).insert(key, None);
        self.tasks.spawn(self.clone().run_marked(spec, now));
    }

    /// One run of a cron job, unless its previous run still goes on.
    pub(crate) async fn run_once(self: Arc<Self>, spec: RunSpec, scheduled_for: DateTime<Utc>) {
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
    pub(crate) async fn run_marked(self: Arc<Self>, spec: RunSpec, scheduled_for: DateTime<Utc>) {
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
            JobKind::Gmail => format!("gmail:{}", spec.name),
        });
        request.untrusted = spec.untrusted.clone();
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
    pub(crate) async fn last_run(&self, spec: &RunSpec) -> Option<LastRun> {
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

    pub(crate) async fn record(&self, spec: &RunSpec, run: &LastRun) {
        let Some(manager) = self.manager.get() else {
            return;
        };
        if let Err(error) = manager.store().record_run(spec.kind, &spec.name, run).await {
            tracing::error!(job = %spec.name, %error, "cannot record the run");
        }
    }

    /// Sends `text` to the chat `to` names.
    pub(crate) async fn deliver(&self, to: &SessionKey, text: &str) -> Result<(), String> {
        let registry = self.registry.get().and_then(Option::as_ref);
        let Some(adapter) = registry.and_then(|r| r.get(to.channel())) else {
            return Err(format!(
                "the channel '{}' is not running (see `flynn doctor`)",
                to.channel()
            ));
        };
        let target = Target::session(to);
        adapter
            .can_send(&target)
            .map_err(|error| error.to_string())?;
        outbound::send(adapter.as_ref(), &target, text, &[])
            .await
            .map(|_| ())
            .map_err(|error| error.to_string())
    }
}

/// Runs one step of the automation loop; a panic in it (a bug) is logged
/// with `what` it was doing, and the loop goes on with the next step.
pub(crate) fn survive(what: &str, step: impl FnOnce()) {
    if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(step)) {
        let message = flynn_protocol::fault::panic_message(panic.as_ref());
        tracing::error!(
            panic = message,
            "the automation loop panicked {what}; it carries on"
        );
    }
}

/// The next heartbeat tick; never, without a heartbeat.
pub(crate) async fn tick(ticks: &mut Option<tokio::time::Interval>) {
    match ticks {
        Some(ticks) => {
            ticks.tick().await;
        }
        None => std::future::pending().await,
    }
}
