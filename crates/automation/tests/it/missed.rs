use flynn_automation::{Due, Missed, Schedule, due};

use crate::at;

fn hourly() -> Schedule {
    Schedule::parse("0 * * * *", "UTC").unwrap()
}

#[test]
fn skip_drops_every_missed_run() {
    // Last ran at 08:00; down until 11:20: 09:00, 10:00 and 11:00 were missed.
    assert_eq!(
        due(
            &hourly(),
            Some(at("2026-05-01T08:00:00Z")),
            at("2026-05-01T11:20:00Z"),
            Missed::Skip
        ),
        Due {
            run_now: false,
            skipped: 3,
            next: Some(at("2026-05-01T12:00:00Z")),
        }
    );
}

#[test]
fn run_once_makes_one_catch_up_run() {
    assert_eq!(
        due(
            &hourly(),
            Some(at("2026-05-01T08:00:00Z")),
            at("2026-05-01T11:20:00Z"),
            Missed::RunOnce
        ),
        Due {
            run_now: true,
            skipped: 2,
            next: Some(at("2026-05-01T12:00:00Z")),
        }
    );
    // A week down is still one run.
    let week = due(
        &hourly(),
        Some(at("2026-05-01T08:00:00Z")),
        at("2026-05-08T08:30:00Z"),
        Missed::RunOnce,
    );
    assert_eq!((week.run_now, week.skipped), (true, 7 * 24 - 1));
}

#[test]
fn nothing_missed_means_no_run() {
    for policy in [Missed::Skip, Missed::RunOnce] {
        assert_eq!(
            due(
                &hourly(),
                Some(at("2026-05-01T08:00:00Z")),
                at("2026-05-01T08:59:59Z"),
                policy
            ),
            Due {
                run_now: false,
                skipped: 0,
                next: Some(at("2026-05-01T09:00:00Z")),
            }
        );
        // Never ran: nothing counts as missed.
        assert_eq!(
            due(&hourly(), None, at("2026-05-01T08:30:00Z"), policy),
            Due {
                run_now: false,
                skipped: 0,
                next: Some(at("2026-05-01T09:00:00Z")),
            }
        );
    }
}

#[test]
fn a_run_scheduled_for_now_is_on_time() {
    for policy in [Missed::Skip, Missed::RunOnce] {
        assert_eq!(
            due(
                &hourly(),
                Some(at("2026-05-01T08:00:00Z")),
                at("2026-05-01T10:00:00Z"),
                policy
            ),
            Due {
                run_now: true,
                skipped: 1,
                next: Some(at("2026-05-01T11:00:00Z")),
            }
        );
        assert!(due(&hourly(), None, at("2026-05-01T10:00:00Z"), policy).run_now);
    }
}
