//! A cron expression read in a time zone.

use std::fmt;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use crate::error::{Result, ScheduleError};

/// The fields of a six-field expression; five fields start at minutes.
const FIELD_NAMES: [&str; 6] = [
    "seconds",
    "minutes",
    "hours",
    "day-of-month",
    "month",
    "day-of-week",
];

/// A cron expression (5 fields, or 6 with seconds first) read in an IANA
/// time zone. Daylight saving is the zone's: a time the clock skips runs
/// when the clock jumps past it, a time the clock repeats runs once, at
/// its first occurrence.
#[derive(Clone)]
pub struct Schedule {
    expr: String,
    tz: Tz,
    cron: Cron,
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schedule")
            .field("expr", &self.expr)
            .field("tz", &self.tz.name())
            .finish()
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.expr == other.expr && self.tz == other.tz
    }
}

impl Schedule {
    /// Parses `expr` (`30 7 * * MON-FRI`, `0 */15 * * * *`) to be read in
    /// the IANA zone `tz` (`UTC`, `Europe/Berlin`).
    pub fn parse(expr: &str, tz: &str) -> Result<Schedule> {
        let tz: Tz = tz.parse().map_err(|_| ScheduleError::UnknownTimeZone {
            name: tz.to_owned(),
        })?;
        let invalid = |reason: String| ScheduleError::InvalidExpression {
            expr: expr.to_owned(),
            reason,
        };
        let fields: Vec<&str> = expr.split_whitespace().collect();
        if !(5..=6).contains(&fields.len()) {
            return Err(invalid(format!("{} fields", fields.len())));
        }
        // croner reads an empty list item (`,` `1,,2` `5,`) as a field that
        // never matches, and then searches a year of seconds for a run.
        let names = &FIELD_NAMES[6 - fields.len()..];
        for (field, name) in fields.iter().zip(names) {
            if field.split(',').any(str::is_empty) {
                return Err(invalid(format!(
                    "the {name} field '{field}' has an empty item between commas"
                )));
            }
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|error| invalid(error.to_string().trim_end_matches('.').to_owned()))?;
        Ok(Schedule {
            expr: expr.trim().to_owned(),
            tz,
            cron,
        })
    }

    /// The expression as given (trimmed).
    pub fn expression(&self) -> &str {
        &self.expr
    }

    /// The time zone's IANA name.
    pub fn timezone(&self) -> &str {
        self.tz.name()
    }

    /// The first run strictly after `after`; `None` when the pattern never
    /// matches again (`0 0 30 2 *`).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&after.with_timezone(&self.tz), false)
            .ok()
            .map(|at| at.with_timezone(&Utc))
    }

    /// The next `n` runs after `after`, in order (fewer when the pattern
    /// stops matching).
    pub fn upcoming(&self, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut runs = Vec::with_capacity(n);
        let mut from = after;
        while runs.len() < n {
            let Some(next) = self.next_after(from) else {
                break;
            };
            runs.push(next);
            from = next;
        }
        runs
    }

    /// `at` as people read it in the schedule's zone: `2026-05-04 07:30
    /// CEST`, with seconds when the expression has them.
    pub fn local(&self, at: DateTime<Utc>) -> String {
        let format = if self.expr.split_whitespace().count() == 6 {
            "%Y-%m-%d %H:%M:%S %Z"
        } else {
            "%Y-%m-%d %H:%M %Z"
        };
        at.with_timezone(&self.tz).format(format).to_string()
    }

    /// Human text: croner's description and the zone, e.g. "At 07:30, on
    /// Monday, Tuesday, Wednesday, Thursday, and Friday (Europe/Berlin)".
    pub fn describe(&self) -> String {
        let text = self.cron.describe();
        format!("{} ({})", text.trim_end_matches('.'), self.tz.name())
    }
}
