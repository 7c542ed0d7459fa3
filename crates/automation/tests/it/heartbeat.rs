use chrono::{DateTime, TimeDelta, Utc};
use flynn_automation::{Heartbeat, LineProblem, Parsed, Task, When};

use crate::at;

const IDLE: &str = "\
# Heartbeat

Things to look at now and then. Nothing open today.

- [x] daily 08:00: summarise my unread mail
- plain list item, not a task
";

/// Beats every 30 minutes for a day from `start`; the messages returned.
fn simulate_day(
    heartbeat: &Heartbeat,
    contents: &str,
    start: DateTime<Utc>,
) -> Vec<(DateTime<Utc>, String)> {
    let mut sent = Vec::new();
    let mut last = None;
    let mut now = start;
    while now <= start + TimeDelta::days(1) {
        if let Some(message) = heartbeat.check(contents, now, last) {
            sent.push((now, message));
        }
        last = Some(now);
        now += TimeDelta::minutes(30);
    }
    sent
}

#[test]
fn an_idle_heartbeat_never_asks_a_model() {
    let heartbeat = Heartbeat::default();
    for contents in ["", IDLE] {
        let model_calls = simulate_day(&heartbeat, contents, at("2026-05-01T00:00:00Z")).len();
        assert_eq!(model_calls, 0, "{contents}");
    }
}

#[test]
fn a_due_task_is_sent_once_per_period() {
    let heartbeat = Heartbeat::default();
    let contents = format!("{IDLE}- [ ] daily 09:10: check the backups\n");
    let sent = simulate_day(&heartbeat, &contents, at("2026-05-01T00:00:00Z"));
    assert_eq!(
        sent,
        vec![(
            at("2026-05-01T09:30:00Z"),
            "Heartbeat: these tasks from HEARTBEAT.md are due now. Do each one and report briefly.\n- check the backups\n".to_owned()
        )]
    );

    let every = "- [ ] every 6 hours: look at the alerts\n";
    let times: Vec<_> = simulate_day(&heartbeat, every, at("2026-05-01T00:00:00Z"))
        .into_iter()
        .map(|(now, _)| now)
        .collect();
    assert_eq!(
        times,
        vec![
            at("2026-05-01T06:00:00Z"),
            at("2026-05-01T12:00:00Z"),
            at("2026-05-01T18:00:00Z"),
            at("2026-05-02T00:00:00Z"),
        ]
    );
}

#[test]
fn weekday_tasks_use_the_heartbeat_zone() {
    // Monday 09:30 in Berlin (summer) is 07:30 UTC.
    let heartbeat = Heartbeat::new("Europe/Berlin").unwrap();
    let contents = "- [ ] mon 09:30: plan the week\n- [ ] Friday 17:00: weekly review\n";
    let sent = simulate_day(&heartbeat, contents, at("2026-05-04T00:00:00Z"));
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].0, at("2026-05-04T07:30:00Z"));
    assert!(sent[0].1.ends_with("- plan the week\n"), "{}", sent[0].1);
}

#[test]
fn the_first_beat_and_a_beat_without_time_passing_are_never_due() {
    let heartbeat = Heartbeat::default();
    let contents = "- [ ] every 1 min: tick\n";
    assert_eq!(
        heartbeat.check(contents, at("2026-05-01T09:00:00Z"), None),
        None
    );
    let now = at("2026-05-01T09:00:00Z");
    assert_eq!(heartbeat.check(contents, now, Some(now)), None);
}

#[test]
fn parse_reads_tasks_and_reports_lines_it_does_not_understand() {
    let contents = "\
- [ ] daily 8:05: wake up
- [ ] every 15 mins: poll
* [ ] Sun 23:59: backup
- [ ] sometimes: whenever
- [ ] daily 25:00: never
- [ ] every 2 hours
";
    let shape = "expected `- [ ] <when>: <task>` where <when> is `daily HH:MM`, `every N minutes`, `every N hours` or a weekday and a time (`mon 09:30`)";
    assert_eq!(
        Heartbeat::parse(contents),
        Parsed {
            tasks: vec![
                Task {
                    line: 1,
                    when: When::Daily { hour: 8, minute: 5 },
                    text: "wake up".to_owned()
                },
                Task {
                    line: 2,
                    when: When::Every { minutes: 15 },
                    text: "poll".to_owned()
                },
                Task {
                    line: 3,
                    when: When::Weekly {
                        weekday: 0,
                        hour: 23,
                        minute: 59
                    },
                    text: "backup".to_owned()
                },
            ],
            problems: vec![
                LineProblem {
                    line: 4,
                    message: format!("unknown schedule 'sometimes': {shape}")
                },
                LineProblem {
                    line: 5,
                    message: format!("'25:00' is not a time HH:MM: {shape}")
                },
                LineProblem {
                    line: 6,
                    message: format!("no `<when>:` before the task: {shape}")
                },
            ],
        }
    );
}
