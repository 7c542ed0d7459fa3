use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use flynn_automation::{Clock, Fired, PausedClock, Schedule, ScheduleError, Scheduler};

use crate::at;

fn fired(job: &str, scheduled_for: &str) -> Fired {
    Fired {
        job: job.to_owned(),
        scheduled_for: at(scheduled_for),
    }
}

/// Runs the scheduler until the clock reaches `until`; every job it
/// returns, checked to come no earlier than its time.
async fn run_until(
    scheduler: &mut Scheduler,
    clock: &PausedClock,
    until: DateTime<Utc>,
) -> Vec<Fired> {
    let mut all = Vec::new();
    loop {
        let left = (until - clock.now()).to_std().unwrap_or_default();
        let Ok(next) = tokio::time::timeout(left, scheduler.next_due()).await else {
            return all;
        };
        assert_eq!(
            clock.now(),
            next.scheduled_for,
            "fired early or late: {next:?}"
        );
        all.push(next);
    }
}

#[tokio::test(start_paused = true)]
async fn fires_jobs_in_order_over_a_simulated_day() {
    let clock = PausedClock::starting_at(at("2026-05-01T00:00:00Z"));
    let mut scheduler = Scheduler::new(Arc::new(clock));
    scheduler
        .add("every6", Schedule::parse("0 */6 * * *", "UTC").unwrap())
        .unwrap();
    scheduler
        .add("morning", Schedule::parse("30 7 * * *", "UTC").unwrap())
        .unwrap();
    scheduler
        .add("noon", Schedule::parse("0 0 12 * * *", "UTC").unwrap())
        .unwrap();
    let all = run_until(&mut scheduler, &clock, at("2026-05-02T00:00:01Z")).await;
    assert_eq!(
        all,
        vec![
            fired("every6", "2026-05-01T06:00:00Z"),
            fired("morning", "2026-05-01T07:30:00Z"),
            fired("every6", "2026-05-01T12:00:00Z"),
            fired("noon", "2026-05-01T12:00:00Z"),
            fired("every6", "2026-05-01T18:00:00Z"),
            fired("every6", "2026-05-02T00:00:00Z"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn follows_the_zone_across_a_dst_change() {
    let clock = PausedClock::starting_at(at("2026-03-07T12:00:00Z"));
    let mut scheduler = Scheduler::new(Arc::new(clock));
    scheduler
        .add(
            "night",
            Schedule::parse("30 2 * * *", "America/New_York").unwrap(),
        )
        .unwrap();
    let all = run_until(&mut scheduler, &clock, at("2026-03-10T00:00:00Z")).await;
    assert_eq!(
        all,
        vec![
            fired("night", "2026-03-08T07:00:00Z"),
            fired("night", "2026-03-09T06:30:00Z"),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn jobs_are_added_and_removed_at_run_time() {
    let clock = PausedClock::starting_at(at("2026-05-01T00:00:00Z"));
    let mut scheduler = Scheduler::new(Arc::new(clock));
    // No job: nothing fires all day.
    assert!(
        tokio::time::timeout(Duration::from_secs(86_400), scheduler.next_due())
            .await
            .is_err()
    );
    assert_eq!(clock.now(), at("2026-05-02T00:00:00Z"));

    let next = scheduler
        .add("hourly", Schedule::parse("0 * * * *", "UTC").unwrap())
        .unwrap();
    assert_eq!(next, Some(at("2026-05-02T01:00:00Z")));
    assert_eq!(
        scheduler
            .add("hourly", Schedule::parse("0 9 * * *", "UTC").unwrap())
            .unwrap_err(),
        ScheduleError::DuplicateJob {
            name: "hourly".to_owned()
        }
    );
    assert_eq!(
        scheduler.next_due().await,
        fired("hourly", "2026-05-02T01:00:00Z")
    );

    scheduler
        .add("half", Schedule::parse("30 1 * * *", "UTC").unwrap())
        .unwrap();
    assert_eq!(
        scheduler
            .entries()
            .iter()
            .map(|e| (e.name.as_str(), e.next))
            .collect::<Vec<_>>(),
        vec![
            ("half", Some(at("2026-05-02T01:30:00Z"))),
            ("hourly", Some(at("2026-05-02T02:00:00Z"))),
        ]
    );
    assert_eq!(
        scheduler.next_due().await,
        fired("half", "2026-05-02T01:30:00Z")
    );
    assert!(scheduler.remove("hourly"));
    assert!(!scheduler.remove("hourly"));
    let all = run_until(&mut scheduler, &clock, at("2026-05-03T12:00:00Z")).await;
    assert_eq!(all, vec![fired("half", "2026-05-03T01:30:00Z")]);
}
