use flynn_automation::{Schedule, ScheduleError};

use crate::at;

#[test]
fn next_runs_in_utc() {
    let schedule = Schedule::parse("30 7 * * MON-FRI", "UTC").unwrap();
    // 2026-03-06 is a Friday.
    assert_eq!(
        schedule.upcoming(at("2026-03-06T08:00:00Z"), 3),
        vec![
            at("2026-03-09T07:30:00Z"),
            at("2026-03-10T07:30:00Z"),
            at("2026-03-11T07:30:00Z"),
        ]
    );
    // Strictly after: a run at exactly `after` is not the next one.
    assert_eq!(
        schedule.next_after(at("2026-03-09T07:30:00Z")),
        Some(at("2026-03-10T07:30:00Z"))
    );
}

#[test]
fn six_fields_have_seconds_first() {
    let schedule = Schedule::parse("15 */10 * * * *", "UTC").unwrap();
    assert_eq!(
        schedule.upcoming(at("2026-01-01T00:00:00Z"), 2),
        vec![at("2026-01-01T00:00:15Z"), at("2026-01-01T00:10:15Z")]
    );
}

#[test]
fn next_runs_in_a_zone() {
    // 09:00 in Berlin is 08:00 UTC in winter, 07:00 UTC in summer.
    let schedule = Schedule::parse("0 9 * * *", "Europe/Berlin").unwrap();
    assert_eq!(
        schedule.next_after(at("2026-01-15T12:00:00Z")),
        Some(at("2026-01-16T08:00:00Z"))
    );
    assert_eq!(
        schedule.next_after(at("2026-07-15T12:00:00Z")),
        Some(at("2026-07-16T07:00:00Z"))
    );
}

#[test]
fn spring_forward_runs_a_skipped_time_when_the_clock_jumps() {
    // America/New_York, 2026-03-08: 02:00 EST becomes 03:00 EDT, so 02:30
    // does not exist that day.
    let schedule = Schedule::parse("30 2 * * *", "America/New_York").unwrap();
    assert_eq!(
        schedule.upcoming(at("2026-03-07T12:00:00Z"), 3),
        vec![
            // 2026-03-07 02:30 EST was before; next is 03-08.
            at("2026-03-08T07:00:00Z"), // 03:00 EDT, the moment the clock jumps past 02:30
            at("2026-03-09T06:30:00Z"), // 02:30 EDT
            at("2026-03-10T06:30:00Z"),
        ]
    );
}

#[test]
fn fall_back_runs_a_repeated_time_once() {
    // America/New_York, 2026-11-01: 02:00 EDT becomes 01:00 EST, so 01:30
    // happens twice; the job runs at the first.
    let schedule = Schedule::parse("30 1 * * *", "America/New_York").unwrap();
    assert_eq!(
        schedule.upcoming(at("2026-10-31T12:00:00Z"), 3),
        vec![
            at("2026-11-01T05:30:00Z"), // 01:30 EDT
            at("2026-11-02T06:30:00Z"), // 01:30 EST
            at("2026-11-03T06:30:00Z"),
        ]
    );
}

#[test]
fn describe_gives_croner_text_and_the_zone() {
    let schedule = Schedule::parse("30 7 * * MON-FRI", "Europe/Berlin").unwrap();
    assert_eq!(
        schedule.describe(),
        "At 07:30, on Monday, Tuesday, Wednesday, Thursday, and Friday (Europe/Berlin)"
    );
}

#[test]
fn errors_say_what_is_wrong_and_show_the_shape() {
    let shape = "expected 5 fields `minute hour day-of-month month day-of-week` (`30 7 * * MON-FRI`) or 6 with seconds first (`0 30 7 * * *`)";
    let error = Schedule::parse("30 7 * *", "UTC").unwrap_err();
    assert_eq!(
        error.to_string(),
        format!("invalid cron expression '30 7 * *': 4 fields; {shape}")
    );
    let error = Schedule::parse("61 7 * * *", "UTC").unwrap_err();
    assert!(
        matches!(&error, ScheduleError::InvalidExpression { expr, .. } if expr == "61 7 * * *"),
        "{error:?}"
    );
    assert!(error.to_string().ends_with(shape), "{error}");
    assert_eq!(
        Schedule::parse("0 9 * * *", "Europe/Berln").unwrap_err(),
        ScheduleError::UnknownTimeZone {
            name: "Europe/Berln".to_owned()
        }
    );
}

#[test]
fn times_are_shown_in_the_schedules_zone() {
    let berlin = Schedule::parse("30 7 * * *", "Europe/Berlin").unwrap();
    assert_eq!(
        berlin.local(at("2026-07-01T05:30:00Z")),
        "2026-07-01 07:30 CEST"
    );
    assert_eq!(
        berlin.local(at("2026-01-15T06:30:00Z")),
        "2026-01-15 07:30 CET"
    );
    let seconds = Schedule::parse("*/2 * * * * *", "UTC").unwrap();
    assert_eq!(
        seconds.local(at("2026-01-15T06:30:04Z")),
        "2026-01-15 06:30:04 UTC"
    );
}

/// An empty item in a field's list (a fuzzed `*/2 , 5 * * *`) is refused
/// with the field named; croner took it for a field that never matches
/// and searched a year of seconds (14 s) for the next run.
#[test]
fn an_empty_list_item_is_refused_naming_the_field() {
    for (expr, field) in [
        ("*/2 , 5 * * *", "the minutes field ','"),
        ("0 1,,2 * * *", "the hours field '1,,2'"),
        ("0 9 * * MON,", "the day-of-week field 'MON,'"),
        ("5 0 9 ,1 * *", "the day-of-month field ',1'"),
    ] {
        let error = Schedule::parse(expr, "UTC").unwrap_err().to_string();
        assert!(
            error.contains(&format!("{field} has an empty item between commas")),
            "{expr}: {error}"
        );
    }
    assert!(Schedule::parse("0 1,2 * * MON,FRI", "UTC").is_ok());
}
