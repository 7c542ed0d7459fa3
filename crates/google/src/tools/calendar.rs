//! `calendar.*`: list, create, update and delete events, in the
//! calendar's own time zone.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Days, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc};
use chrono_tz::Tz;
use flynn_protocol::ToolEffect;
use flynn_protocol::config::GoogleService;
use flynn_tools::{ToolContext, ToolError, TypedTool};
use reqwest::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{TIMEOUT, segment};
use crate::Google;
use crate::client::Call;

const CALENDAR: GoogleService = GoogleService::Calendar;

/// A calendar's id and zone.
struct Cal {
    id: String,
    zone: Tz,
    zone_name: String,
}

/// The calendar `id` (`primary` by default) and its time zone.
async fn calendar(
    google: &Google,
    account: Option<&str>,
    id: Option<&str>,
) -> Result<Cal, ToolError> {
    #[derive(Deserialize)]
    struct List {
        #[serde(default)]
        items: Vec<Entry>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Entry {
        id: String,
        #[serde(default)]
        summary: String,
        time_zone: Option<String>,
        #[serde(default)]
        primary: bool,
    }
    let list: List = google
        .json(
            account,
            CALENDAR,
            &Call::get(format!(
                "{}/users/me/calendarList",
                google.endpoints().calendar
            )),
        )
        .await?;
    let wanted = id
        .map(str::trim)
        .filter(|i| !i.is_empty() && *i != "primary");
    let entry = match wanted {
        None => list.items.iter().find(|e| e.primary),
        Some(w) => list
            .items
            .iter()
            .find(|e| e.id == w || e.summary.eq_ignore_ascii_case(w)),
    }
    .ok_or_else(|| {
        let names: Vec<&str> = list.items.iter().map(|e| e.summary.as_str()).collect();
        ToolError::failed(format!(
            "no calendar {} (calendars: {})",
            wanted.unwrap_or("primary"),
            names.join(", ")
        ))
    })?;
    let zone_name = entry.time_zone.clone().unwrap_or_else(|| "UTC".into());
    let zone: Tz = zone_name.parse().unwrap_or(Tz::UTC);
    Ok(Cal {
        id: entry.id.clone(),
        zone,
        zone_name,
    })
}

/// A time the model wrote: RFC 3339 with an offset, or a local date and
/// time (`2026-11-29T10:00`, `2026-11-29 10:00`) read in `zone`.
fn parse_time(text: &str, zone: Tz) -> Result<DateTime<Tz>, ToolError> {
    let text = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&zone));
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(local) = NaiveDateTime::parse_from_str(text, format) {
            return zone.from_local_datetime(&local).earliest().ok_or_else(|| {
                ToolError::failed(format!("{text} does not exist in {zone} (a clock change)"))
            });
        }
    }
    Err(ToolError::failed(format!(
        "'{text}' is not a time: write 2026-11-29T10:00 (in the calendar's zone) or with an offset, 2026-11-29T10:00:00+01:00"
    )))
}

fn parse_date(text: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d").ok()
}

/// The start of `date` in `zone`.
fn day_start(date: NaiveDate, zone: Tz) -> DateTime<Tz> {
    zone.from_local_datetime(&date.and_time(NaiveTime::MIN))
        .earliest()
        .unwrap_or_else(|| {
            Utc.from_utc_datetime(&date.and_time(NaiveTime::MIN))
                .with_timezone(&zone)
        })
}

/// An event's start or end as the API takes it.
fn when(text: &str, zone: &Cal, all_day: bool) -> Result<Value, ToolError> {
    if all_day {
        let date = parse_date(text).ok_or_else(|| {
            ToolError::failed(format!("'{text}' is not a date (write 2026-11-29)"))
        })?;
        return Ok(json!({ "date": date.format("%Y-%m-%d").to_string() }));
    }
    let at = parse_time(text, zone.zone)?;
    Ok(json!({
        "dateTime": at.to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
        "timeZone": zone.zone_name,
    }))
}

/// An event as the API gives it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(default)]
    id: String,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    location: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    start: Option<When>,
    #[serde(default)]
    end: Option<When>,
    #[serde(default)]
    attendees: Vec<Attendee>,
    #[serde(default)]
    html_link: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct When {
    date: Option<String>,
    date_time: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Attendee {
    email: String,
}

impl When {
    fn show(&self, zone: Tz, with_date: bool) -> String {
        if let Some(date) = &self.date {
            return date.clone();
        }
        self.date_time
            .as_deref()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| {
                let t = t.with_timezone(&zone);
                if with_date {
                    t.format("%a %d %b %Y %H:%M").to_string()
                } else {
                    t.format("%H:%M").to_string()
                }
            })
            .unwrap_or_default()
    }
}

fn show_event(event: &Event, zone: Tz) -> String {
    let title = event.summary.as_deref().unwrap_or("(no title)");
    let time = match (&event.start, &event.end) {
        (Some(start), _) if start.date.is_some() => {
            format!("{} (all day)", start.date.as_deref().unwrap_or_default())
        }
        (Some(start), Some(end)) => format!("{}–{}", start.show(zone, true), end.show(zone, false)),
        (Some(start), None) => start.show(zone, true),
        _ => String::new(),
    };
    let mut line = format!("- {time} · {title}");
    if let Some(location) = event.location.as_deref().filter(|l| !l.is_empty()) {
        line.push_str(&format!(" · at {location}"));
    }
    if !event.attendees.is_empty() {
        let who: Vec<&str> = event.attendees.iter().map(|a| a.email.as_str()).collect();
        line.push_str(&format!(" · with {}", who.join(", ")));
    }
    line.push_str(&format!(" [id {}]", event.id));
    if let Some(description) = event
        .description
        .as_deref()
        .filter(|d| !d.trim().is_empty())
    {
        let short: String = description.trim().chars().take(300).collect();
        line.push_str(&format!("\n  {short}"));
    }
    line
}

/// `calendar.list`.
#[derive(Debug)]
pub struct CalendarList(pub Arc<Google>);

/// Arguments of `calendar.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalendarListArgs {
    /// From when: a date (`2026-11-29`, from its start) or a time; now by
    /// default. Read in the calendar's time zone unless it has an offset.
    from: Option<String>,
    /// Until when: a date (to its end) or a time; 7 days after `from` by
    /// default.
    to: Option<String>,
    /// Only events with these words.
    query: Option<String>,
    /// The calendar (its id or name); the primary one by default.
    calendar: Option<String>,
    /// How many events at most (50 by default, 250 at most).
    max: Option<u32>,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for CalendarList {
    type Args = CalendarListArgs;

    fn name(&self) -> &str {
        "calendar.list"
    }

    fn description(&self) -> &str {
        "List the events of the owner's Google Calendar between two dates or times (today onwards by default), in the calendar's time zone, each with its id."
    }

    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn untrusted_output(&self) -> bool {
        // Invitations carry other people's words.
        true
    }

    async fn run(&self, args: CalendarListArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Events {
            #[serde(default)]
            items: Vec<Event>,
            next_page_token: Option<String>,
        }
        let google = &self.0;
        let account = args.account.as_deref();
        let cal = calendar(google, account, args.calendar.as_deref()).await?;
        let from = match args.from.as_deref() {
            None => Utc::now().with_timezone(&cal.zone),
            Some(text) => match parse_date(text) {
                Some(date) => day_start(date, cal.zone),
                None => parse_time(text, cal.zone)?,
            },
        };
        let to = match args.to.as_deref() {
            None => from + chrono::Duration::days(7),
            Some(text) => match parse_date(text) {
                Some(date) => day_start(
                    date.checked_add_days(Days::new(1)).unwrap_or(date),
                    cal.zone,
                ),
                None => parse_time(text, cal.zone)?,
            },
        };
        if to <= from {
            return Err(ToolError::failed(format!(
                "the end ({}) is not after the start ({})",
                to.to_rfc3339(),
                from.to_rfc3339()
            )));
        }
        let max = args.max.unwrap_or(50).clamp(1, 250);
        let mut events = Vec::new();
        let mut page: Option<String> = None;
        loop {
            let list: Events = google
                .json(
                    account,
                    CALENDAR,
                    &Call::get(format!(
                        "{}/calendars/{}/events",
                        google.endpoints().calendar,
                        segment(&cal.id)
                    ))
                    .query(
                        "timeMin",
                        from.to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
                    )
                    .query(
                        "timeMax",
                        to.to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
                    )
                    .query("singleEvents", "true")
                    .query("orderBy", "startTime")
                    .query("maxResults", max)
                    .query_opt("q", args.query.as_deref())
                    .query_opt("pageToken", page.as_deref()),
                )
                .await?;
            events.extend(list.items);
            page = list.next_page_token;
            if page.is_none() || events.len() >= max as usize {
                break;
            }
        }
        events.truncate(max as usize);
        let span = format!(
            "{} to {} ({})",
            from.format("%a %d %b %Y %H:%M"),
            to.format("%a %d %b %Y %H:%M"),
            cal.zone_name
        );
        if events.is_empty() {
            return Ok(format!("No events from {span}."));
        }
        let mut out = format!("{} events from {span}:\n", events.len());
        for event in &events {
            out.push_str(&show_event(event, cal.zone));
            out.push('\n');
        }
        Ok(out)
    }
}

/// `calendar.create`.
#[derive(Debug)]
pub struct CalendarCreate(pub Arc<Google>);

/// Arguments of `calendar.create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalendarCreateArgs {
    /// The event's title.
    title: String,
    /// When it starts: `2026-11-29T10:00` (in the calendar's zone), with an
    /// offset, or a date for an all-day event.
    start: String,
    /// When it ends (same forms); an hour after the start (the next day
    /// for an all-day event) by default.
    end: Option<String>,
    location: Option<String>,
    description: Option<String>,
    /// Guests' addresses; they are sent invitations.
    #[serde(default, deserialize_with = "super::string_or_list")]
    attendees: Vec<String>,
    /// The calendar (id or name); the primary one by default.
    calendar: Option<String>,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for CalendarCreate {
    type Args = CalendarCreateArgs;

    fn name(&self) -> &str {
        "calendar.create"
    }

    fn description(&self) -> &str {
        "Create an event in the owner's Google Calendar (guests get invitations). Times are in the calendar's time zone unless given with an offset; a date alone makes an all-day event."
    }

    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ActsOnAccount
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    async fn run(&self, args: CalendarCreateArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let google = &self.0;
        let account = args.account.as_deref();
        let cal = calendar(google, account, args.calendar.as_deref()).await?;
        let all_day = parse_date(&args.start).is_some();
        let start = when(&args.start, &cal, all_day)?;
        let end = match &args.end {
            Some(end) => when(end, &cal, all_day)?,
            None if all_day => {
                let date = parse_date(&args.start).unwrap_or_default();
                json!({ "date": date.succ_opt().unwrap_or(date).format("%Y-%m-%d").to_string() })
            }
            None => {
                let at = parse_time(&args.start, cal.zone)? + chrono::Duration::hours(1);
                json!({
                    "dateTime": at.to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
                    "timeZone": cal.zone_name,
                })
            }
        };
        let mut body = json!({
            "summary": args.title.trim(),
            "start": start,
            "end": end,
        });
        if let Some(location) = &args.location {
            body["location"] = json!(location);
        }
        if let Some(description) = &args.description {
            body["description"] = json!(description);
        }
        if !args.attendees.is_empty() {
            body["attendees"] = json!(
                args.attendees
                    .iter()
                    .map(|a| json!({ "email": a.trim() }))
                    .collect::<Vec<_>>()
            );
        }
        let event: Event = google
            .json(
                account,
                CALENDAR,
                &Call::post(format!(
                    "{}/calendars/{}/events",
                    google.endpoints().calendar,
                    segment(&cal.id)
                ))
                .query(
                    "sendUpdates",
                    if args.attendees.is_empty() {
                        "none"
                    } else {
                        "all"
                    },
                )
                .json(body),
            )
            .await?;
        Ok(format!(
            "created:\n{}{}",
            show_event(&event, cal.zone),
            event
                .html_link
                .map(|l| format!("\n  {l}"))
                .unwrap_or_default()
        ))
    }
}

/// `calendar.update`.
#[derive(Debug)]
pub struct CalendarUpdate(pub Arc<Google>);

/// Arguments of `calendar.update`: only what is given changes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalendarUpdateArgs {
    /// The event's id (from calendar.list).
    id: String,
    title: Option<String>,
    /// A new start (the same forms as calendar.create).
    start: Option<String>,
    /// A new end.
    end: Option<String>,
    location: Option<String>,
    description: Option<String>,
    /// The calendar (id or name); the primary one by default.
    calendar: Option<String>,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for CalendarUpdate {
    type Args = CalendarUpdateArgs;

    fn name(&self) -> &str {
        "calendar.update"
    }

    fn description(&self) -> &str {
        "Change an event of the owner's Google Calendar: its title, times, place or description (only what is given changes; guests are told)."
    }

    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ActsOnAccount
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    async fn run(&self, args: CalendarUpdateArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let google = &self.0;
        let account = args.account.as_deref();
        let cal = calendar(google, account, args.calendar.as_deref()).await?;
        let mut body = json!({});
        if let Some(title) = &args.title {
            body["summary"] = json!(title.trim());
        }
        for (key, value) in [("start", &args.start), ("end", &args.end)] {
            if let Some(value) = value {
                body[key] = when(value, &cal, parse_date(value).is_some())?;
            }
        }
        if let Some(location) = &args.location {
            body["location"] = json!(location);
        }
        if let Some(description) = &args.description {
            body["description"] = json!(description);
        }
        if body.as_object().is_some_and(serde_json::Map::is_empty) {
            return Err(ToolError::failed(
                "say what to change (title, start, end, location or description)",
            ));
        }
        let event: Event = google
            .json(
                account,
                CALENDAR,
                &Call::new(
                    Method::PATCH,
                    format!(
                        "{}/calendars/{}/events/{}",
                        google.endpoints().calendar,
                        segment(&cal.id),
                        segment(&args.id)
                    ),
                )
                .query("sendUpdates", "all")
                .json(body),
            )
            .await?;
        Ok(format!("updated:\n{}", show_event(&event, cal.zone)))
    }
}

/// `calendar.delete`.
#[derive(Debug)]
pub struct CalendarDelete(pub Arc<Google>);

/// Arguments of `calendar.delete`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CalendarDeleteArgs {
    /// The event's id (from calendar.list).
    id: String,
    /// The calendar (id or name); the primary one by default.
    calendar: Option<String>,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for CalendarDelete {
    type Args = CalendarDeleteArgs;

    fn name(&self) -> &str {
        "calendar.delete"
    }

    fn description(&self) -> &str {
        "Delete an event from the owner's Google Calendar (guests are told)."
    }

    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ActsOnAccount
    }

    fn parallel_safe(&self) -> bool {
        false
    }

    async fn run(&self, args: CalendarDeleteArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let google = &self.0;
        let account = args.account.as_deref();
        let cal = calendar(google, account, args.calendar.as_deref()).await?;
        google
            .send(
                account,
                CALENDAR,
                &Call::new(
                    Method::DELETE,
                    format!(
                        "{}/calendars/{}/events/{}",
                        google.endpoints().calendar,
                        segment(&cal.id),
                        segment(&args.id)
                    ),
                )
                .query("sendUpdates", "all"),
            )
            .await?;
        Ok(format!("deleted event {}", args.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_times_are_read_in_the_calendars_zone() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let at = parse_time("2026-11-29T10:00", berlin).unwrap();
        assert_eq!(at.to_rfc3339(), "2026-11-29T10:00:00+01:00");
        let summer = parse_time("2026-07-01 10:00", berlin).unwrap();
        assert_eq!(summer.to_rfc3339(), "2026-07-01T10:00:00+02:00");
        let given = parse_time("2026-11-29T10:00:00-05:00", berlin).unwrap();
        assert_eq!(given.to_rfc3339(), "2026-11-29T16:00:00+01:00");
        // 02:30 on the spring change does not exist in Berlin.
        assert!(parse_time("2026-03-29T02:30", berlin).is_err());
        let error = parse_time("tomorrow", berlin).unwrap_err().to_string();
        assert!(error.contains("2026-11-29T10:00"), "{error}");
        assert_eq!(
            day_start(parse_date("2026-11-29").unwrap(), berlin).to_rfc3339(),
            "2026-11-29T00:00:00+01:00"
        );
    }
}
