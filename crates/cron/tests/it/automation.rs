//! Automation through the real runtime on a paused clock: cron jobs run at
//! their time and their answers reach a chat, the missed-run policy
//! across a restart, the `cron.*` tools in the agent loop, and a
//! heartbeat that asks the model only when a task is due.
//!
//! The store is the real SQLite one on a runtime of its own
//! (`RealTimeStore`): simulated time moves only while everything waits
//! on a timer, never during a query, so a whole day passes in
//! milliseconds and every run happens at its exact time.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use flynn_automation::{Clock, PausedClock};
use flynn_channels::{Backoff, Delivery, Registry};
use flynn_cron::{Automation, JobOrigin};
use flynn_models::ModelClient;
use flynn_orchestrator::{SessionManager, Submitted, TurnRequest};
use flynn_protocol::config::{
    AutomationConfig, Autonomy, CronJobConfig, HeartbeatConfig, Missed, ToolsConfig,
};
use flynn_protocol::{ContentBlock, Message, Role, SessionKey, TurnId};
use flynn_sessions::{Conversations, JobKind, Jobs, LastRun, RunOutcome, UsageLog};
use flynn_testkit::store::RealTimeStore;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::{Harness, Script, ScriptedModel, Setup, key, last_user_text};
use flynn_testkit::chat::{MemoryChannel, Out, telegram_channels};

#[track_caller]
fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|error| panic!("{text}: {error}"))
}

fn ms(text: &str) -> i64 {
    at(text).timestamp_millis()
}

/// Lets simulated time run until the clock reads `until`.
async fn advance_to(clock: &PausedClock, until: &str) {
    let left = (at(until) - clock.now()).to_std().unwrap();
    tokio::time::sleep(left).await;
    assert_eq!(clock.now(), at(until));
}

fn job(name: &str, schedule: &str, message: &str) -> CronJobConfig {
    CronJobConfig {
        name: name.to_owned(),
        schedule: schedule.to_owned(),
        timezone: "UTC".to_owned(),
        message: message.to_owned(),
        agent: None,
        session: None,
        deliver_to: None,
        missed: Missed::Skip,
        enabled: true,
    }
}

fn calls(calls: &[(&str, &str, Value)]) -> Message {
    Message {
        role: Role::Assistant,
        content: calls
            .iter()
            .map(|(id, name, input)| ContentBlock::ToolUse {
                id: (*id).to_owned(),
                name: (*name).to_owned(),
                input: input.clone(),
            })
            .collect(),
    }
}

/// The tool results a request carries back, in order.
fn results(message: &Message) -> Vec<(String, bool)> {
    message
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult {
                content, is_error, ..
            } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// A runtime over a real store, a scripted model, an in-memory Telegram
/// and the automation, started.
struct Rig {
    manager: SessionManager,
    store: Arc<RealTimeStore>,
    automation: Automation,
    registry: Registry,
    adapter: Arc<MemoryChannel>,
    _deliveries: mpsc::Receiver<Delivery>,
}

impl Rig {
    async fn start(
        dir: &Path,
        clock: &PausedClock,
        model: Arc<ScriptedModel>,
        config: AutomationConfig,
    ) -> Rig {
        let store = Arc::new(RealTimeStore::open_at(&dir.join("s.db")).await);
        let automation =
            Automation::new(&config, &telegram_channels(|_| {}), Arc::new(*clock)).unwrap();
        let clients = HashMap::from([("m".to_owned(), model as Arc<dyn ModelClient>)]);
        let manager = crate::manager_with(
            dir,
            store.clone(),
            clients,
            Setup {
                extra_tools: automation.tools(),
                ..Setup::default()
            },
        );
        automation.bind(manager.clone()).await.unwrap();
        let (registry, deliveries) = Registry::new(Backoff::default());
        let adapter = MemoryChannel::new(4096);
        registry.start(adapter.clone()).await;
        automation.start(Some(registry.clone())).await.unwrap();
        Rig {
            manager,
            store,
            automation,
            registry,
            adapter,
            _deliveries: deliveries,
        }
    }

    /// A message from the chat `telegram:42`, answered.
    async fn say(&self, text: &str) -> String {
        let mut request = TurnRequest::text(key("telegram:42"), text);
        request.external_id = None;
        match self.manager.submit(request).await.unwrap() {
            Submitted::Turn(handle) => handle.outcome().await.unwrap().reply,
            Submitted::Command { reply, .. } => panic!("a command: {reply}"),
        }
    }

    async fn last_run(&self, kind: JobKind, name: &str) -> Option<LastRun> {
        self.store
            .job_runs()
            .await
            .unwrap()
            .into_iter()
            .find(|runs| runs.kind == kind && runs.name == name)
            .and_then(|runs| runs.last)
    }

    async fn history(&self, session: &str) -> Vec<(Role, String)> {
        self.store
            .history(&key(session))
            .await
            .unwrap()
            .into_iter()
            .map(|m| (m.message.role, m.message.text()))
            .collect()
    }

    /// Stops as the daemon does: automation, then the runtime.
    async fn stop(self) {
        self.automation.shutdown(Duration::from_secs(5)).await;
        self.manager.shutdown().await;
        self.registry.shutdown().await;
        self.store.close().await;
    }
}

fn sent(chat: &str, id: &str, text: &str) -> Out {
    Out::Send {
        chat: chat.to_owned(),
        id: id.to_owned(),
        text: text.to_owned(),
        buttons: vec![],
    }
}

/// A finished run as recorded (its start and end are when they were).
fn finished(last: &LastRun) -> (i64, RunOutcome, Option<String>, Option<SessionKey>) {
    assert!(last.finished_at.is_some(), "{last:?}");
    assert!(last.turn.is_some(), "{last:?}");
    (
        last.scheduled_for,
        last.outcome,
        last.error.clone(),
        last.session.clone(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_cron_job_runs_at_its_time_and_its_answer_reaches_the_chat() {
    let dir = tempfile::tempdir().unwrap();
    // Monday 07:00 in Berlin (summer time, UTC+2).
    let clock = PausedClock::starting_at(at("2026-05-04T05:00:00Z"));
    let model = ScriptedModel::replies("m", vec![Message::assistant("Three meetings today.")]);
    let mut brief = job("brief", "30 7 * * MON-FRI", "Give me the morning brief");
    brief.timezone = "Europe/Berlin".to_owned();
    brief.deliver_to = Some("telegram:42".to_owned());
    let rig = Rig::start(
        dir.path(),
        &clock,
        model.clone(),
        AutomationConfig {
            jobs: vec![brief],
            ..AutomationConfig::default()
        },
    )
    .await;

    advance_to(&clock, "2026-05-04T05:29:59Z").await;
    assert_eq!(model.requests().len(), 0);
    assert_eq!(rig.adapter.out(), vec![]);
    assert_eq!(rig.last_run(JobKind::Cron, "brief").await, None);

    advance_to(&clock, "2026-05-04T06:00:00Z").await;
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        last_user_text(&requests[0].messages),
        "Give me the morning brief"
    );
    assert_eq!(
        rig.adapter.out(),
        vec![sent("42", "m0", "Three meetings today.")]
    );
    let last = rig.last_run(JobKind::Cron, "brief").await.unwrap();
    assert_eq!(
        finished(&last),
        (
            ms("2026-05-04T05:30:00Z"),
            RunOutcome::Ok,
            None,
            Some(key("cron:brief"))
        )
    );
    assert_eq!(last.started_at, ms("2026-05-04T05:30:00Z"));
    assert_eq!(
        rig.history("cron:brief").await,
        vec![
            (Role::User, "Give me the morning brief".to_owned()),
            (Role::Assistant, "Three meetings today.".to_owned()),
        ]
    );
    // The usage of the run is the session's, like any turn's.
    assert_eq!(
        rig.store
            .usage_by_tier(Some(&key("cron:brief")))
            .await
            .unwrap()[0]
            .1
            .calls,
        1
    );
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_run_is_recorded_and_told_and_the_next_one_still_runs() {
    let dir = tempfile::tempdir().unwrap();
    let clock = PausedClock::starting_at(at("2026-05-04T08:30:00Z"));
    // The first call is refused; later ones are echoed.
    let model = ScriptedModel::new(
        "m",
        vec![Script::Reply(Err(flynn_models::Error::InvalidRequest {
            provider: "m".to_owned(),
            status: 400,
            message: "unknown model 'one'".to_owned(),
        }))],
    );
    let mut check = job("check", "0 * * * *", "Check the build");
    check.deliver_to = Some("telegram:42".to_owned());
    let rig = Rig::start(
        dir.path(),
        &clock,
        model.clone(),
        AutomationConfig {
            jobs: vec![check],
            ..AutomationConfig::default()
        },
    )
    .await;
    advance_to(&clock, "2026-05-04T09:10:00Z").await;
    let failure = "m: request rejected (HTTP 400): unknown model 'one'";
    assert_eq!(
        rig.adapter.out(),
        vec![sent(
            "42",
            "m0",
            &format!("⚠️ cron job 'check' failed: {failure}")
        )]
    );
    let last = rig.last_run(JobKind::Cron, "check").await.unwrap();
    assert_eq!(
        finished(&last),
        (
            ms("2026-05-04T09:00:00Z"),
            RunOutcome::Failed,
            Some(failure.to_owned()),
            Some(key("cron:check"))
        )
    );

    // The loop goes on: the next run answers and is delivered (the
    // failed run's message stays in the session's history).
    advance_to(&clock, "2026-05-04T10:10:00Z").await;
    assert_eq!(
        rig.adapter.out()[1],
        sent("42", "m1", "re: Check the build Check the build")
    );
    let last = rig.last_run(JobKind::Cron, "check").await.unwrap();
    assert_eq!(
        (last.scheduled_for, last.outcome, last.error),
        (ms("2026-05-04T10:00:00Z"), RunOutcome::Ok, None)
    );

    // With the channel down, the answer is kept in the session and the
    // run recorded as undelivered.
    rig.registry.stop("telegram").await;
    advance_to(&clock, "2026-05-04T11:10:00Z").await;
    assert_eq!(rig.adapter.out().len(), 2);
    let last = rig.last_run(JobKind::Cron, "check").await.unwrap();
    assert_eq!(
        (last.scheduled_for, last.outcome, last.error),
        (
            ms("2026-05-04T11:00:00Z"),
            RunOutcome::Undelivered,
            Some("the channel 'telegram' is not running (see `flynn doctor`)".to_owned())
        )
    );
    assert_eq!(model.requests().len(), 3);
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn after_a_restart_run_once_catches_up_once_and_skip_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut catch_up = job("catch-up", "0 * * * *", "catch up");
    catch_up.missed = Missed::RunOnce;
    let config = AutomationConfig {
        jobs: vec![catch_up, job("skipper", "0 * * * *", "skip")],
        ..AutomationConfig::default()
    };
    let texts = |model: &ScriptedModel| -> Vec<String> {
        let mut texts: Vec<String> = model
            .requests()
            .iter()
            .map(|r| last_user_text(&r.messages))
            .collect();
        texts.sort();
        texts
    };

    // The first process runs both at 09:00, then stops at 09:30.
    let clock = PausedClock::starting_at(at("2026-05-04T08:30:00Z"));
    let first = ScriptedModel::echo("m");
    let rig = Rig::start(dir.path(), &clock, first.clone(), config.clone()).await;
    advance_to(&clock, "2026-05-04T09:30:00Z").await;
    assert_eq!(texts(&first), ["catch up", "skip"]);
    rig.stop().await;

    // Down until 12:20: 10:00, 11:00 and 12:00 were missed.
    let clock = PausedClock::starting_at(at("2026-05-04T12:20:00Z"));
    let second = ScriptedModel::echo("m");
    let rig = Rig::start(dir.path(), &clock, second.clone(), config.clone()).await;
    advance_to(&clock, "2026-05-04T12:50:00Z").await;
    assert_eq!(texts(&second), ["catch up"]);
    let caught = rig.last_run(JobKind::Cron, "catch-up").await.unwrap();
    assert_eq!(
        finished(&caught),
        (
            ms("2026-05-04T12:20:00Z"),
            RunOutcome::Ok,
            None,
            Some(key("cron:catch-up"))
        )
    );
    let skipped = rig.last_run(JobKind::Cron, "skipper").await.unwrap();
    assert_eq!(skipped.scheduled_for, ms("2026-05-04T09:00:00Z"));
    // Both keep their schedule.
    advance_to(&clock, "2026-05-04T13:30:00Z").await;
    assert_eq!(texts(&second), ["catch up", "catch up", "skip"]);
    rig.stop().await;

    // Back at 13:40 with nothing missed: nothing runs.
    let clock = PausedClock::starting_at(at("2026-05-04T13:40:00Z"));
    let third = ScriptedModel::echo("m");
    let rig = Rig::start(dir.path(), &clock, third.clone(), config).await;
    advance_to(&clock, "2026-05-04T13:59:00Z").await;
    assert_eq!(texts(&third), Vec::<String>::new());
    assert_eq!(
        rig.history("cron:catch-up")
            .await
            .iter()
            .filter(|(role, _)| *role == Role::User)
            .count(),
        3
    );
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_run_left_running_by_a_dead_process_is_recorded_as_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = RealTimeStore::open_at(&dir.path().join("s.db")).await;
        store
            .record_run(
                JobKind::Cron,
                "nightly",
                &LastRun {
                    scheduled_for: ms("2026-05-04T03:00:00Z"),
                    started_at: ms("2026-05-04T03:00:00Z"),
                    finished_at: None,
                    outcome: RunOutcome::Running,
                    error: None,
                    session: Some(key("cron:nightly")),
                    turn: Some(TurnId(1)),
                },
            )
            .await
            .unwrap();
        store.close().await;
    }
    let clock = PausedClock::starting_at(at("2026-05-04T09:00:00Z"));
    let model = ScriptedModel::echo("m");
    let mut nightly = job("nightly", "0 3 * * *", "nightly");
    nightly.missed = Missed::RunOnce;
    let rig = Rig::start(
        dir.path(),
        &clock,
        model.clone(),
        AutomationConfig {
            jobs: vec![nightly],
            ..AutomationConfig::default()
        },
    )
    .await;
    // Its run was started, so it was not missed: nothing runs again.
    advance_to(&clock, "2026-05-04T09:10:00Z").await;
    assert_eq!(model.requests().len(), 0);
    let last = rig.last_run(JobKind::Cron, "nightly").await.unwrap();
    assert_eq!(
        (
            last.outcome,
            last.error.as_deref(),
            last.scheduled_for,
            last.turn
        ),
        (
            RunOutcome::Interrupted,
            Some("Flynn stopped while it ran"),
            ms("2026-05-04T03:00:00Z"),
            Some(TurnId(1))
        )
    );
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_agent_adds_lists_and_removes_jobs_with_the_cron_tools() {
    let dir = tempfile::tempdir().unwrap();
    // Monday 08:00 in Berlin.
    let clock = PausedClock::starting_at(at("2026-05-04T06:00:00Z"));
    let model = ScriptedModel::replies(
        "m",
        vec![
            calls(&[(
                "t1",
                "cron.add",
                json!({
                    "name": "standup",
                    "schedule": "0 9 * * MON-FRI",
                    "timezone": "Europe/Berlin",
                    "message": "Remind me of the standup",
                    "deliver_to": "here",
                }),
            )]),
            Message::assistant("Scheduled."),
            calls(&[("t2", "cron.list", json!({}))]),
            Message::assistant("Two jobs."),
            // 09:00 in Berlin: the job's run.
            Message::assistant("Standup now!"),
            calls(&[
                (
                    "b1",
                    "cron.add",
                    json!({"name": "x", "schedule": "61 * * * *", "message": "m"}),
                ),
                (
                    "b2",
                    "cron.add",
                    json!({"name": "x", "schedule": "0 9 * * *", "timezone": "Europe/Berln", "message": "m"}),
                ),
                (
                    "b3",
                    "cron.add",
                    json!({"name": "standup", "schedule": "0 9 * * *", "message": "m"}),
                ),
                (
                    "b4",
                    "cron.add",
                    json!({"name": "backup", "schedule": "0 9 * * *", "message": "m"}),
                ),
                (
                    "b5",
                    "cron.add",
                    json!({"name": "x", "schedule": "0 9 * * *", "message": "m", "agent": "ghost"}),
                ),
                (
                    "b6",
                    "cron.add",
                    json!({"name": "x", "schedule": "0 9 * * *", "message": "m", "deliver_to": "slack:C1"}),
                ),
                (
                    "b7",
                    "cron.add",
                    json!({"name": "my job", "schedule": "0 9 * * *", "message": "m"}),
                ),
                (
                    "b8",
                    "cron.add",
                    json!({"name": "x", "schedule": "0 0 30 2 *", "message": "m"}),
                ),
                (
                    "b8s",
                    "cron.add",
                    json!({"name": "x", "schedule": "* * * * * *", "message": "m"}),
                ),
                ("b9", "cron.remove", json!({"name": "backup"})),
                ("b10", "cron.remove", json!({"name": "nope"})),
            ]),
            Message::assistant("Those failed."),
        ],
    );
    let config = AutomationConfig {
        jobs: vec![job("backup", "0 3 * * *", "Back up the notes")],
        ..AutomationConfig::default()
    };
    let rig = Rig::start(dir.path(), &clock, model.clone(), config.clone()).await;

    assert_eq!(
        rig.say("remind me of the standup on weekdays").await,
        "Scheduled."
    );
    let requests = model.requests();
    assert_eq!(
        results(requests[1].messages.last().unwrap()),
        [(
            "Added cron job 'standup': At 09:00, on Monday, Tuesday, Wednesday, Thursday, and Friday (Europe/Berlin).\n\
             next run 2026-05-04 09:00 CEST; never ran.\n\
             Agent main in cron:standup; answers go to telegram:42."
                .to_owned(),
            false
        )]
    );

    assert_eq!(rig.say("what is scheduled?").await, "Two jobs.");
    let requests = model.requests();
    assert_eq!(
        results(requests[3].messages.last().unwrap()),
        [(
            "2 cron jobs:\n\
             - backup: At 03:00 (UTC); from the config file (cron.remove cannot remove it)\n  \
             next run 2026-05-05 03:00 UTC; never ran.\n  \
             Agent main in cron:backup; answers stay in the session.\n\
             - standup: At 09:00, on Monday, Tuesday, Wednesday, Thursday, and Friday (Europe/Berlin); added from telegram:42\n  \
             next run 2026-05-04 09:00 CEST; never ran.\n  \
             Agent main in cron:standup; answers go to telegram:42.\n\
             Heartbeat: off (automation.heartbeat.enabled)."
                .to_owned(),
            false
        )]
    );

    // Added to the running schedule at once.
    advance_to(&clock, "2026-05-04T07:05:00Z").await;
    assert_eq!(rig.adapter.out(), vec![sent("42", "m0", "Standup now!")]);
    assert_eq!(
        last_user_text(&model.requests()[4].messages),
        "Remind me of the standup"
    );

    // Bad input is refused, saying what was wrong and what was expected.
    assert_eq!(rig.say("try these").await, "Those failed.");
    let requests = model.requests();
    let refusals: Vec<String> = results(requests[6].messages.last().unwrap())
        .into_iter()
        .map(|(text, is_error)| {
            assert!(is_error, "{text}");
            text
        })
        .collect();
    assert_eq!(
        refusals,
        [
            "invalid arguments for cron.add: invalid cron expression '61 * * * *': Component error: Number out of bounds; expected 5 fields `minute hour day-of-month month day-of-week` (`30 7 * * MON-FRI`) or 6 with seconds first (`0 30 7 * * *`)",
            "invalid arguments for cron.add: unknown time zone 'Europe/Berln', expected an IANA name such as `UTC`, `Europe/Berlin` or `America/New_York`",
            "invalid arguments for cron.add: a job named 'standup' already exists (added with cron.add from telegram:42): choose another name, or remove it first",
            "invalid arguments for cron.add: a job named 'backup' already exists (in the config file): choose another name, or remove it first",
            "invalid arguments for cron.add: agent: a job added here runs as this agent ('main'), not 'ghost'; leave agent out, or ask the owner to add it to the config",
            "invalid arguments for cron.add: deliver_to: 'slack:C1' names the channel 'slack', which is not configured (chat channels: telegram); deliver to one of them, or leave deliver_to out to keep the answers in the job's session",
            "invalid arguments for cron.add: job name 'my job': has other characters; expected 1 to 64 letters, digits, '-', '_' or '.' (`morning-brief`)",
            "invalid arguments for cron.add: schedule '0 0 30 2 *' never runs after now (a date that does not exist, such as 30 February?); expected a time that comes round, such as `30 7 * * *`",
            "invalid arguments for cron.add: schedule '* * * * * *' has a seconds field; jobs added with cron.add run at most once a minute: use 5 fields `minute hour day-of-month month day-of-week` (`*/5 * * * *` for every 5 minutes), or put the job in automation.jobs in the config file",
            "invalid arguments for cron.remove: cron job 'backup' comes from the config file (automation.jobs); only jobs added with cron.add can be removed here: remove it from the file instead",
            "invalid arguments for cron.remove: there is no cron job named 'nope' (jobs: backup, standup)",
        ]
    );
    rig.stop().await;

    // The job survives a restart, with its last run; removing it stops it.
    let clock = PausedClock::starting_at(at("2026-05-04T08:00:00Z"));
    let model = ScriptedModel::replies(
        "m",
        vec![
            calls(&[("r1", "cron.remove", json!({"name": "standup"}))]),
            Message::assistant("Removed."),
        ],
    );
    let rig = Rig::start(dir.path(), &clock, model.clone(), config).await;
    let jobs = rig.automation.jobs().await.unwrap();
    assert_eq!(
        jobs.iter()
            .map(|j| (j.name.as_str(), j.origin.clone()))
            .collect::<Vec<_>>(),
        [
            ("backup", JobOrigin::Config),
            (
                "standup",
                JobOrigin::Agent {
                    created_by: key("telegram:42")
                }
            ),
        ]
    );
    let standup = &jobs[1];
    assert_eq!(standup.next, Some(at("2026-05-05T07:00:00Z")));
    assert_eq!(
        standup.last.as_ref().map(|l| (l.scheduled_for, l.outcome)),
        Some((ms("2026-05-04T07:00:00Z"), RunOutcome::Ok))
    );
    assert_eq!(rig.say("drop the standup reminder").await, "Removed.");
    assert_eq!(
        results(model.requests()[1].messages.last().unwrap()),
        [("Removed cron job 'standup'.".to_owned(), false)]
    );
    assert_eq!(rig.store.cron_jobs().await.unwrap(), vec![]);
    advance_to(&clock, "2026-05-06T08:00:00Z").await;
    // Two days: the config job ran twice, the removed one never again.
    let later: Vec<String> = model.requests()[2..]
        .iter()
        .map(|r| last_user_text(&r.messages))
        .collect();
    assert_eq!(later, ["Back up the notes", "Back up the notes"]);
    rig.stop().await;
}

#[tokio::test]
async fn under_supervised_autonomy_cron_add_asks_first_and_cron_list_does_not() {
    let model = ScriptedModel::replies(
        "m",
        vec![
            calls(&[
                ("t1", "cron.list", json!({})),
                (
                    "t2",
                    "cron.add",
                    json!({"name": "x", "schedule": "0 9 * * *", "message": "m"}),
                ),
            ]),
            Message::assistant("Could not."),
        ],
    );
    let automation = Automation::new(
        &AutomationConfig::default(),
        &telegram_channels(|_| {}),
        Arc::new(flynn_automation::SystemClock),
    )
    .unwrap();
    let h = Harness::new(
        vec![model.clone()],
        Setup {
            tools: ToolsConfig {
                autonomy: Autonomy::Supervised,
                ..ToolsConfig::default()
            },
            extra_tools: automation.tools(),
            ..Setup::default()
        },
    )
    .await;
    automation.bind(h.manager.clone()).await.unwrap();
    let (result, _) = h.send(&key("cli:default"), "schedule something").await;
    assert_eq!(result.unwrap().reply, "Could not.");
    let results = results(model.requests()[1].messages.last().unwrap());
    assert_eq!(
        results,
        [
            (
                "No cron jobs. Add one with cron.add.\nHeartbeat: off (automation.heartbeat.enabled)."
                    .to_owned(),
                false
            ),
            (
                "cron.add was denied: nobody can be asked to approve it in this session".to_owned(),
                true
            ),
        ]
    );
    assert_eq!(h.store.cron_jobs().await.unwrap(), vec![]);
}

fn heartbeat_config(deliver_to: Option<&str>) -> AutomationConfig {
    AutomationConfig {
        jobs: vec![],
        heartbeat: HeartbeatConfig {
            enabled: true,
            every_mins: 30,
            file: None,
            timezone: "UTC".to_owned(),
            deliver_to: deliver_to.map(str::to_owned),
        },
        gmail: vec![],
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_heartbeat_makes_no_model_call_in_a_whole_day() {
    let dir = tempfile::tempdir().unwrap();
    // A Tuesday: the Monday task is not due, the checked one is off, the
    // line that does not parse never runs.
    std::fs::write(
        dir.path().join("HEARTBEAT.md"),
        "# Heartbeat\nThings to keep an eye on.\n\n- [ ] mon 09:30: plan the week\n- [x] daily 08:00: switched off\n- [ ] sometimes: not a schedule\n",
    )
    .unwrap();
    let clock = PausedClock::starting_at(at("2026-05-05T00:00:00Z"));
    let model = ScriptedModel::echo("m");
    let rig = Rig::start(
        dir.path(),
        &clock,
        model.clone(),
        heartbeat_config(Some("telegram:42")),
    )
    .await;
    advance_to(&clock, "2026-05-06T00:00:00Z").await;
    assert_eq!(model.requests().len(), 0);

    // Nor with an empty file, nor with none.
    std::fs::write(dir.path().join("HEARTBEAT.md"), "").unwrap();
    advance_to(&clock, "2026-05-07T00:00:00Z").await;
    std::fs::remove_file(dir.path().join("HEARTBEAT.md")).unwrap();
    advance_to(&clock, "2026-05-08T00:00:00Z").await;
    assert_eq!(model.requests().len(), 0);
    assert_eq!(rig.adapter.out(), vec![]);
    assert_eq!(rig.last_run(JobKind::Heartbeat, "heartbeat").await, None);
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_due_heartbeat_task_asks_the_agent_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("HEARTBEAT.md"),
        "- [ ] daily 08:00: summarise my unread mail\n- [ ] mon 09:30: plan the week\n",
    )
    .unwrap();
    let clock = PausedClock::starting_at(at("2026-05-05T00:00:00Z"));
    let model = ScriptedModel::replies("m", vec![Message::assistant("Two new mails.")]);
    let rig = Rig::start(
        dir.path(),
        &clock,
        model.clone(),
        heartbeat_config(Some("telegram:42")),
    )
    .await;
    advance_to(&clock, "2026-05-06T00:00:00Z").await;
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        last_user_text(&requests[0].messages),
        "Heartbeat: these tasks from HEARTBEAT.md are due now. Do each one and report briefly.\n- summarise my unread mail\n"
    );
    assert_eq!(rig.adapter.out(), vec![sent("42", "m0", "Two new mails.")]);
    let last = rig.last_run(JobKind::Heartbeat, "heartbeat").await.unwrap();
    assert_eq!(
        finished(&last),
        (
            ms("2026-05-05T08:00:00Z"),
            RunOutcome::Ok,
            None,
            Some(key("heartbeat:main"))
        )
    );
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_heartbeat_task_whose_message_is_refused_is_due_again_at_the_next_beat() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("HEARTBEAT.md"),
        "- [ ] daily 08:00: summarise my unread mail\n",
    )
    .unwrap();
    let clock = PausedClock::starting_at(at("2026-05-05T07:45:00Z"));
    let model = ScriptedModel::replies("m", vec![Message::assistant("Two new mails.")]);
    let rig = Rig::start(
        dir.path(),
        &clock,
        model.clone(),
        heartbeat_config(Some("telegram:42")),
    )
    .await;
    // The beat after 08:00 finds the database busy: nothing is accepted.
    rig.store.fail_next("accept", 1);
    advance_to(&clock, "2026-05-05T08:20:00Z").await;
    assert_eq!(model.requests().len(), 0);
    let refused = rig.last_run(JobKind::Heartbeat, "heartbeat").await.unwrap();
    assert_eq!(refused.outcome, RunOutcome::Failed);
    // The next beat asks again.
    advance_to(&clock, "2026-05-05T09:00:00Z").await;
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert!(
        last_user_text(&requests[0].messages).contains("summarise my unread mail"),
        "{requests:?}"
    );
    // The chat was told of the refusal, then given the answer.
    let out = rig.adapter.out();
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(
        matches!(&out[0], Out::Send { text, .. } if text.starts_with("⚠️ the heartbeat failed: the session database is busy")),
        "{out:?}"
    );
    assert_eq!(out[1], sent("42", "m1", "Two new mails."));
    rig.stop().await;
}
