//! `HEARTBEAT.md`: a task list read on every heartbeat, where a model is
//! asked only when a task is due.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::schedule::Schedule;

/// When a heartbeat task is due.
#[derive(Debug, Clone, PartialEq)]
pub enum When {
    /// Every day at this local time (`daily 08:00`).
    Daily {
        /// Hour, 0–23.
        hour: u32,
        /// Minute, 0–59.
        minute: u32,
    },
    /// On one weekday at this local time (`mon 09:30`).
    Weekly {
        /// 0 = Sunday … 6 = Saturday.
        weekday: u32,
        /// Hour, 0–23.
        hour: u32,
        /// Minute, 0–59.
        minute: u32,
    },
    /// Every this many minutes, counted from the Unix epoch (UTC), so
    /// `every 2 hours` is due at 00:00, 02:00… UTC.
    Every {
        /// The period in minutes (at least 1).
        minutes: u32,
    },
}

/// One open task of the file.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// 1-based line number in the file.
    pub line: usize,
    /// When it is due.
    pub when: When,
    /// What to ask the agent.
    pub text: String,
}

/// A task line that did not parse, so it never runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineProblem {
    /// 1-based line number in the file.
    pub line: usize,
    /// What is wrong, and the accepted shape.
    pub message: String,
}

/// The file's open tasks and the task lines that did not parse.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    /// Open (`- [ ]`) tasks, in file order.
    pub tasks: Vec<Task>,
    /// Open task lines that were not understood.
    pub problems: Vec<LineProblem>,
}

/// The shape of a task line, for messages.
pub const TASK_SHAPE: &str = "`- [ ] <when>: <task>` where <when> is `daily HH:MM`, `every N minutes`, `every N hours` or a weekday and a time (`mon 09:30`)";

/// Reads a heartbeat file and says what is due. See the crate docs for
/// the file's format.
#[derive(Debug, Clone, Copy)]
pub struct Heartbeat {
    tz: Tz,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Heartbeat { tz: Tz::UTC }
    }
}

impl Heartbeat {
    /// Reads the file's times in the IANA zone `tz`; `None` for an unknown
    /// zone.
    pub fn new(tz: &str) -> Option<Heartbeat> {
        tz.parse().ok().map(|tz| Heartbeat { tz })
    }

    /// The IANA name of the zone the file's times are read in.
    pub fn timezone(&self) -> &str {
        self.tz.name()
    }

    /// `at` as people read it in the heartbeat's zone: `2026-05-04 08:00
    /// CEST`.
    pub fn local(&self, at: DateTime<Utc>) -> String {
        at.with_timezone(&self.tz)
            .format("%Y-%m-%d %H:%M %Z")
            .to_string()
    }

    /// Parses the file: open tasks and the task lines not understood.
    pub fn parse(contents: &str) -> Parsed {
        let mut parsed = Parsed::default();
        for (index, raw) in contents.lines().enumerate() {
            let line = index + 1;
            let trimmed = raw.trim();
            let Some(item) = trimmed
                .strip_prefix("- [ ]")
                .or_else(|| trimmed.strip_prefix("* [ ]"))
            else {
                continue;
            };
            match parse_task(item.trim()) {
                Ok((when, text)) => parsed.tasks.push(Task { line, when, text }),
                Err(message) => parsed.problems.push(LineProblem { line, message }),
            }
        }
        parsed
    }

    /// The message to send the agent when at least one task fell due
    /// after `last_beat` and at or before `now`; `None` otherwise, which
    /// is what keeps an idle heartbeat from calling a model. The first
    /// beat (`last_beat: None`) only sets the baseline and is never due.
    pub fn check(
        &self,
        contents: &str,
        now: DateTime<Utc>,
        last_beat: Option<DateTime<Utc>>,
    ) -> Option<String> {
        let last = last_beat?;
        if now <= last {
            return None;
        }
        let due: Vec<Task> = Self::parse(contents)
            .tasks
            .into_iter()
            .filter(|task| self.is_due(&task.when, last, now))
            .collect();
        if due.is_empty() {
            return None;
        }
        let mut message = String::from(
            "Heartbeat: these tasks from HEARTBEAT.md are due now. Do each one and report briefly.\n",
        );
        for task in due {
            message.push_str("- ");
            message.push_str(&task.text);
            message.push('\n');
        }
        Some(message)
    }

    fn is_due(&self, when: &When, last: DateTime<Utc>, now: DateTime<Utc>) -> bool {
        let cron = match *when {
            When::Every { minutes } => {
                let period = i64::from(minutes.max(1)) * 60;
                return now.timestamp().div_euclid(period) > last.timestamp().div_euclid(period);
            }
            When::Daily { hour, minute } => format!("{minute} {hour} * * *"),
            When::Weekly {
                weekday,
                hour,
                minute,
            } => format!("{minute} {hour} * * {weekday}"),
        };
        Schedule::parse(&cron, self.tz.name())
            .ok()
            .and_then(|schedule| schedule.next_after(last))
            .is_some_and(|next| next <= now)
    }
}

const WEEKDAYS: [&str; 7] = [
    "sunday",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
];

fn parse_task(item: &str) -> Result<(When, String), String> {
    let fail = |what: &str| Err(format!("{what}: expected {TASK_SHAPE}"));
    let Some((when, text)) = item.split_once(':').and_then(|(when, rest)| {
        // `daily 08:00: task`: the first ':' may sit inside the time.
        if when.trim_end().ends_with(|c: char| c.is_ascii_digit())
            && rest.starts_with(|c: char| c.is_ascii_digit())
        {
            let (minutes, text) = rest.split_once(':')?;
            Some((format!("{when}:{minutes}"), text))
        } else {
            Some((when.to_owned(), rest))
        }
    }) else {
        return fail("no `<when>:` before the task");
    };
    let text = text.trim();
    if text.is_empty() {
        return fail("no task after the time");
    }
    let words: Vec<String> = when
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let when = match words.as_slice() {
        ["daily", time] => {
            let Some((hour, minute)) = parse_time(time) else {
                return fail(&format!("'{time}' is not a time HH:MM"));
            };
            When::Daily { hour, minute }
        }
        ["every", n, unit] => {
            let Some(n) = n.parse::<u32>().ok().filter(|n| *n > 0) else {
                return fail(&format!("'{n}' is not a whole number of 1 or more"));
            };
            let minutes = match *unit {
                "min" | "mins" | "minute" | "minutes" => Some(n),
                "hour" | "hours" => n.checked_mul(60),
                _ => return fail(&format!("unknown unit '{unit}'")),
            };
            let Some(minutes) = minutes else {
                return fail("period too long");
            };
            When::Every { minutes }
        }
        [day, time] => {
            let Some(weekday) = WEEKDAYS
                .iter()
                .position(|name| day.len() >= 3 && name.starts_with(day))
            else {
                return fail(&format!("unknown schedule '{}'", when.trim()));
            };
            let Some((hour, minute)) = parse_time(time) else {
                return fail(&format!("'{time}' is not a time HH:MM"));
            };
            When::Weekly {
                weekday: u32::try_from(weekday).unwrap_or_default(),
                hour,
                minute,
            }
        }
        _ => return fail(&format!("unknown schedule '{}'", when.trim())),
    };
    Ok((when, text.to_owned()))
}

fn parse_time(time: &str) -> Option<(u32, u32)> {
    let (hour, minute) = time.split_once(':')?;
    if !(1..=2).contains(&hour.len()) || minute.len() != 2 {
        return None;
    }
    let hour: u32 = hour.parse().ok().filter(|h| *h < 24)?;
    let minute: u32 = minute.parse().ok().filter(|m| *m < 60)?;
    Some((hour, minute))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_h_or_hh_then_mm() {
        assert_eq!(parse_time("8:05"), Some((8, 5)));
        assert_eq!(parse_time("23:59"), Some((23, 59)));
        for bad in ["24:00", "8:5", "123:00", ":30", "08:60", "08"] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_colon_after_the_time_ends_the_schedule() {
        assert_eq!(
            parse_task("daily 08:00: read: the news"),
            Ok((
                When::Daily { hour: 8, minute: 0 },
                "read: the news".to_owned()
            ))
        );
        assert_eq!(
            parse_task("every 1 hour: a: b"),
            Ok((When::Every { minutes: 60 }, "a: b".to_owned()))
        );
    }
}
