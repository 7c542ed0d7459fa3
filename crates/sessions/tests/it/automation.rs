//! What automation keeps: agent-created cron jobs, and since when each
//! job's runs count and how its last run went, across reopening the file.

use flynn_protocol::TurnId;
use flynn_protocol::config::{CronJobConfig, Missed};
use flynn_sessions::{JobKind, JobRuns, LastRun, RunOutcome, StoredCronJob};

use crate::{Db, key};

fn job(name: &str) -> StoredCronJob {
    StoredCronJob {
        job: CronJobConfig {
            name: name.to_owned(),
            schedule: "30 7 * * MON-FRI".to_owned(),
            timezone: "Europe/Berlin".to_owned(),
            message: "morning brief".to_owned(),
            agent: Some("main".to_owned()),
            session: None,
            deliver_to: Some("telegram:42".to_owned()),
            missed: Missed::RunOnce,
            enabled: true,
        },
        created_by: key("telegram:42"),
        created_at: 1_000,
    }
}

fn finished(scheduled_for: i64, outcome: RunOutcome, error: Option<&str>) -> LastRun {
    LastRun {
        scheduled_for,
        started_at: scheduled_for + 5,
        finished_at: Some(scheduled_for + 900),
        outcome,
        error: error.map(str::to_owned),
        session: Some(key("cron:brief")),
        turn: Some(TurnId(7)),
    }
}

async fn agent_jobs_and_their_runs_survive_reopening_the_store(db: Db) {
    {
        let store = db.open().await;
        assert!(store.add_cron_job(&job("brief")).await.unwrap());
        let mut plain = job("plain");
        plain.job.agent = None;
        plain.job.deliver_to = None;
        plain.job.session = Some("cli:notes".to_owned());
        plain.job.missed = Missed::Skip;
        assert!(store.add_cron_job(&plain).await.unwrap());
        store
            .record_run(
                JobKind::Cron,
                "brief",
                &finished(5_000, RunOutcome::Undelivered, Some("telegram is down")),
            )
            .await
            .unwrap();
        store.close().await;
    }
    let store = db.open().await;
    let mut plain = job("plain");
    plain.job.agent = None;
    plain.job.deliver_to = None;
    plain.job.session = Some("cli:notes".to_owned());
    plain.job.missed = Missed::Skip;
    assert_eq!(store.cron_jobs().await.unwrap(), vec![job("brief"), plain]);
    assert_eq!(
        store.job_runs().await.unwrap(),
        vec![
            JobRuns {
                kind: JobKind::Cron,
                name: "brief".to_owned(),
                since: 1_000,
                last: Some(finished(
                    5_000,
                    RunOutcome::Undelivered,
                    Some("telegram is down")
                )),
            },
            JobRuns {
                kind: JobKind::Cron,
                name: "plain".to_owned(),
                since: 1_000,
                last: None,
            },
        ]
    );
}

async fn a_name_is_taken_once_and_removing_a_job_forgets_its_runs(db: Db) {
    let store = db.open().await;
    assert!(store.add_cron_job(&job("brief")).await.unwrap());
    let mut other = job("brief");
    other.job.message = "something else".to_owned();
    assert!(!store.add_cron_job(&other).await.unwrap());
    assert_eq!(store.cron_jobs().await.unwrap(), vec![job("brief")]);

    store
        .record_run(
            JobKind::Cron,
            "brief",
            &finished(5_000, RunOutcome::Ok, None),
        )
        .await
        .unwrap();
    assert!(store.remove_cron_job("brief").await.unwrap());
    assert!(!store.remove_cron_job("brief").await.unwrap());
    assert_eq!(store.cron_jobs().await.unwrap(), vec![]);
    assert_eq!(store.job_runs().await.unwrap(), vec![]);

    // Added again later: its runs count from the new job, not the old one.
    let mut again = job("brief");
    again.created_at = 9_000;
    assert!(store.add_cron_job(&again).await.unwrap());
    assert_eq!(
        store.job_runs().await.unwrap(),
        vec![JobRuns {
            kind: JobKind::Cron,
            name: "brief".to_owned(),
            since: 9_000,
            last: None,
        }]
    );
}

async fn tracking_keeps_the_first_time_and_runs_replace_the_last_one(db: Db) {
    let store = db.open().await;
    let fresh = store.track_job(JobKind::Cron, "daily", 100).await.unwrap();
    assert_eq!(
        fresh,
        JobRuns {
            kind: JobKind::Cron,
            name: "daily".to_owned(),
            since: 100,
            last: None,
        }
    );
    assert_eq!(fresh.counted_from(), 100);
    // A later start does not move it.
    assert_eq!(
        store.track_job(JobKind::Cron, "daily", 500).await.unwrap(),
        fresh
    );
    // The heartbeat and a cron job may share a name.
    assert_eq!(
        store
            .track_job(JobKind::Heartbeat, "daily", 700)
            .await
            .unwrap()
            .since,
        700
    );

    let running = LastRun {
        scheduled_for: 1_000,
        started_at: 1_002,
        finished_at: None,
        outcome: RunOutcome::Running,
        error: None,
        session: Some(key("cron:daily")),
        turn: Some(TurnId(3)),
    };
    store
        .record_run(JobKind::Cron, "daily", &running)
        .await
        .unwrap();
    let done = finished(1_000, RunOutcome::Failed, Some("no model answered"));
    store
        .record_run(JobKind::Cron, "daily", &done)
        .await
        .unwrap();
    let runs = store.job_runs().await.unwrap();
    assert_eq!(
        runs[0],
        JobRuns {
            kind: JobKind::Cron,
            name: "daily".to_owned(),
            since: 100,
            last: Some(done),
        }
    );
    assert_eq!(runs[0].counted_from(), 1_000);
    assert_eq!(runs[1].kind, JobKind::Heartbeat);

    // A run of a job never tracked counts from its start.
    store
        .record_run(JobKind::Cron, "new", &running)
        .await
        .unwrap();
    let runs = store.job_runs().await.unwrap();
    let new = runs.iter().find(|r| r.name == "new").unwrap();
    assert_eq!((new.since, new.last.clone()), (1_002, Some(running)));
}

async fn a_watch_keeps_its_cursor_and_its_runs_beside_the_jobs(db: Db) {
    {
        let store = db.open().await;
        assert_eq!(
            store.job_cursor(JobKind::Gmail, "bank").await.unwrap(),
            None
        );
        store
            .set_job_cursor(JobKind::Gmail, "bank", "history 100", 2_000)
            .await
            .unwrap();
        store
            .set_job_cursor(JobKind::Gmail, "bank", "history 250", 3_000)
            .await
            .unwrap();
        // A cron job of the same name is another job.
        assert_eq!(store.job_cursor(JobKind::Cron, "bank").await.unwrap(), None);
        let mut run = finished(5_000, RunOutcome::Ok, None);
        run.session = Some(key("gmail:bank"));
        store
            .record_run(JobKind::Gmail, "bank", &run)
            .await
            .unwrap();
    }
    let store = db.open().await;
    assert_eq!(
        store
            .job_cursor(JobKind::Gmail, "bank")
            .await
            .unwrap()
            .as_deref(),
        Some("history 250")
    );
    let runs = store.job_runs().await.unwrap();
    let watch = runs.iter().find(|r| r.kind == JobKind::Gmail).unwrap();
    // Counted from the first cursor kept; the run recorded after it.
    assert_eq!(watch.since, 2_000);
    assert_eq!(watch.last.as_ref().unwrap().scheduled_for, 5_000);
    // Recording a run leaves the cursor alone.
    assert_eq!(
        store
            .job_cursor(JobKind::Gmail, "bank")
            .await
            .unwrap()
            .as_deref(),
        Some("history 250")
    );
}

crate::on_both!(
    a_watch_keeps_its_cursor_and_its_runs_beside_the_jobs,
    agent_jobs_and_their_runs_survive_reopening_the_store,
    a_name_is_taken_once_and_removing_a_job_forgets_its_runs,
    tracking_keeps_the_first_time_and_runs_replace_the_last_one,
);
