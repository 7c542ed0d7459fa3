//! The Calendar API (`/calendar/v3/…`).
//!
//! Served: `GET users/me/calendarList`; `GET calendars/{id}/events`;
//! `POST calendars/{id}/events`; `GET`, `PATCH` and `DELETE
//! calendars/{id}/events/{eventId}`. Each account has its primary
//! calendar, whose id is the account's email (alias `primary`), in the
//! account's time zone (`UTC` unless [`FakeGoogle::set_time_zone`]).
//!
//! Strict as Google: `timeMin`/`timeMax` must be RFC 3339 with an offset,
//! `orderBy=startTime` needs `singleEvents=true`, an event needs `start`
//! and `end` (`dateTime` with an offset or a `timeZone`, or an all-day
//! `date`) and must not end before it starts, with Google's messages
//! ("Missing time zone definition for start time.", "The specified time
//! range is empty."). Listing returns only events overlapping the window,
//! by start time, with `dateTime`s written in the response's time zone
//! (`timeZone`, else the calendar's). Deleting twice is `410 deleted`.
//! Recurring events are not expanded.
//!
//! Scopes: reading events needs `calendar`, `calendar.readonly`,
//! `calendar.events` or `calendar.events.readonly`; writing `calendar` or
//! `calendar.events`; the calendar list `calendar`, `calendar.readonly`
//! or `calendar.calendarlist(.readonly)`.

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde_json::{Map, Value, json};

use super::{
    Answer, Caller, Fail, FakeGoogle, Req, State, bad, invalid, json_body, not_found, now, ok,
    page, parse_rfc3339, rfc3339, size_param, unserved,
};
use crate::server;

const SERVICE: &str = "calendar-json.googleapis.com";
const READ: &[&str] = &[
    "calendar",
    "calendar.readonly",
    "calendar.events",
    "calendar.events.readonly",
];
const WRITE: &[&str] = &["calendar", "calendar.events"];
const LIST: &[&str] = &[
    "calendar",
    "calendar.readonly",
    "calendar.calendarlist",
    "calendar.calendarlist.readonly",
];

#[derive(Debug)]
struct Event {
    value: Value,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
}

#[derive(Debug)]
pub(crate) struct Calendar {
    id: String,
    summary: String,
    primary: bool,
    events: Vec<Event>,
}

impl Calendar {
    pub fn primary(email: &str) -> Self {
        Calendar {
            id: email.to_owned(),
            summary: email.to_owned(),
            primary: true,
            events: Vec::new(),
        }
    }
}

fn zone(name: &str) -> Option<Tz> {
    name.parse::<Tz>().ok()
}

/// The instant an `EventDateTime` stands for, and whether it is a date.
fn instant(
    event: &Value,
    field: &str,
    calendar_zone: &str,
) -> Result<(DateTime<Utc>, bool), String> {
    let Some(when) = event.get(field).and_then(Value::as_object) else {
        return Err(format!("Missing {field} time."));
    };
    let zone_name = when.get("timeZone").and_then(Value::as_str);
    if let Some(name) = zone_name
        && zone(name).is_none()
    {
        return Err(format!("Invalid time zone definition for {field} time."));
    }
    if let Some(date) = when.get("date").and_then(Value::as_str) {
        let date = NaiveDate::parse_from_str(date, "%Y-%m-%d")
            .map_err(|_| format!("Invalid {field} time."))?;
        let tz = zone(zone_name.unwrap_or(calendar_zone)).unwrap_or(Tz::UTC);
        let midnight = date.and_hms_opt(0, 0, 0).unwrap_or_default();
        let local = tz
            .from_local_datetime(&midnight)
            .earliest()
            .ok_or_else(|| format!("Invalid {field} time."))?;
        return Ok((local.with_timezone(&Utc), true));
    }
    let Some(text) = when.get("dateTime").and_then(Value::as_str) else {
        return Err(format!("Missing {field} time."));
    };
    if let Some(time) = parse_rfc3339(text) {
        return Ok((time, false));
    }
    let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
        .map_err(|_| format!("Invalid {field} time."))?;
    let Some(tz) = zone_name.and_then(zone) else {
        return Err(format!("Missing time zone definition for {field} time."));
    };
    let local = tz
        .from_local_datetime(&naive)
        .earliest()
        .ok_or_else(|| format!("Invalid {field} time."))?;
    Ok((local.with_timezone(&Utc), false))
}

/// The event's span, or Google's 400 (a violation).
fn span(event: &Value, calendar_zone: &str) -> Result<(DateTime<Utc>, DateTime<Utc>), Fail> {
    let (start, all_day) = instant(event, "start", calendar_zone).map_err(bad)?;
    let (end, _) = instant(event, "end", calendar_zone).map_err(bad)?;
    if end < start || (all_day && end == start) {
        return Err(Fail::Violation(
            400,
            "timeRangeEmpty",
            "The specified time range is empty.".to_owned(),
        ));
    }
    Ok((start, end))
}

/// A time in a zone, RFC 3339 with its offset (`Z` for UTC).
fn local_time(time: DateTime<Utc>, tz: Tz) -> String {
    let local = time.with_timezone(&tz);
    if local.offset().to_string() == "UTC" || tz == Tz::UTC {
        time.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        local.format("%Y-%m-%dT%H:%M:%S%:z").to_string()
    }
}

/// The event as answered: `dateTime`s in `tz`.
fn render(event: &Event, tz: Tz) -> Value {
    let mut value = event.value.clone();
    for (field, time) in [("start", event.start), ("end", event.end)] {
        if value[field].get("dateTime").is_some() {
            value[field]["dateTime"] = json!(local_time(time, tz));
        }
    }
    value
}

/// Merges `patch` into `target` (objects recursively, the rest replaced).
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                match target.get_mut(key) {
                    Some(existing) if existing.is_object() && value.is_object() => {
                        merge(existing, value);
                    }
                    _ => {
                        target.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (target, patch) => *target = patch.clone(),
    }
}

fn calendar_index(st: &mut State, email: &str, id: &str) -> Option<usize> {
    let id = if id == "primary" { email } else { id };
    st.account(email).calendars.iter().position(|c| c.id == id)
}

fn calendar<'a>(st: &'a mut State, email: &str, index: usize) -> &'a mut Calendar {
    &mut st.account(email).calendars[index]
}

/// A new event from the client's (or a test's) fields.
fn new_event(
    n: u64,
    email: &str,
    fields: Map<String, Value>,
    calendar_zone: &str,
) -> Result<Event, Fail> {
    let mut value = Value::Object(fields);
    let (start, end) = span(&value, calendar_zone)?;
    let id = match value.get("id").and_then(Value::as_str) {
        Some(id) => {
            let valid = (5..=1024).contains(&id.len())
                && id
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'v').contains(&b));
            if !valid {
                return Err(invalid(format!("Invalid resource id value: {id}")));
            }
            id.to_owned()
        }
        None => format!("fake{n:012}ev"),
    };
    let stamp = rfc3339(now());
    let defaults = json!({
        "kind": "calendar#event",
        "etag": format!("\"{}\"", 3_000_000_000_000_u64 + n),
        "id": id,
        "status": "confirmed",
        "htmlLink": format!("https://www.google.com/calendar/event?eid={id}"),
        "created": stamp,
        "updated": stamp,
        "creator": {"email": email, "self": true},
        "organizer": {"email": email, "self": true},
        "iCalUID": format!("{id}@google.com"),
        "sequence": 0,
        "reminders": {"useDefault": true},
        "eventType": "default",
    });
    let mut event = defaults;
    merge(&mut event, &value);
    event["id"] = json!(id);
    value = event;
    Ok(Event { value, start, end })
}

pub(crate) fn route(st: &mut State, req: &Req, caller: &Caller, segs: &[&str]) -> Answer {
    let scopes = match (req.method.as_str(), segs) {
        ("GET", ["users", "me", "calendarList"]) => LIST,
        ("GET", ["calendars", _, "events"] | ["calendars", _, "events", _]) => READ,
        ("POST", ["calendars", _, "events"]) => WRITE,
        ("PATCH" | "DELETE", ["calendars", _, "events", _]) => WRITE,
        _ => return Err(unserved()),
    };
    if let Some(response) = caller.require(scopes, SERVICE) {
        return Ok(response);
    }
    let email = caller.email.as_str();
    if let ["calendars", id, ..] = segs
        && calendar_index(st, email, id).is_none()
    {
        return Err(not_found("Not Found"));
    }
    match (req.method.as_str(), segs) {
        ("GET", ["users", "me", "calendarList"]) => calendar_list(st, email),
        ("GET", ["calendars", id, "events"]) => list(st, req, email, id),
        ("POST", ["calendars", id, "events"]) => insert(st, req, email, id),
        ("GET", ["calendars", id, "events", event]) => get(st, email, id, event),
        ("PATCH", ["calendars", id, "events", event]) => patch(st, req, email, id, event),
        ("DELETE", ["calendars", id, "events", event]) => delete(st, email, id, event),
        _ => Err(unserved()),
    }
}

fn calendar_list(st: &mut State, email: &str) -> Answer {
    let account = st.account(email);
    let items: Vec<Value> = account
        .calendars
        .iter()
        .map(|c| {
            let mut entry = json!({
                "kind": "calendar#calendarListEntry",
                "etag": format!("\"{}\"", c.id.len()),
                "id": c.id,
                "summary": c.summary,
                "timeZone": account.time_zone,
                "colorId": "14",
                "backgroundColor": "#9fe1e7",
                "foregroundColor": "#000000",
                "selected": true,
                "accessRole": "owner",
                "defaultReminders": [],
            });
            if c.primary {
                entry["primary"] = json!(true);
            }
            entry
        })
        .collect();
    Ok(ok(&json!({
        "kind": "calendar#calendarList",
        "etag": "\"fake-calendar-list\"",
        "items": items,
    })))
}

fn time_param(req: &Req, name: &str) -> Result<Option<DateTime<Utc>>, Fail> {
    match req.param(name) {
        None => Ok(None),
        Some(text) => parse_rfc3339(text).map(Some).ok_or_else(|| {
            bad(format!(
                "Bad Request: {name} must be an RFC 3339 timestamp with a time zone offset, not {text:?}"
            ))
        }),
    }
}

fn list(st: &mut State, req: &Req, email: &str, id: &str) -> Answer {
    let size = size_param(req, "maxResults", 250, 2500)?;
    let min = time_param(req, "timeMin")?;
    let max = time_param(req, "timeMax")?;
    if let (Some(min), Some(max)) = (min, max)
        && max <= min
    {
        return Err(Fail::Violation(
            400,
            "timeRangeEmpty",
            "The specified time range is empty.".to_owned(),
        ));
    }
    let single = req.param("singleEvents") == Some("true");
    match req.param("orderBy") {
        None | Some("updated") => {}
        Some("startTime") if single => {}
        Some("startTime") => {
            return Err(Fail::Violation(
                400,
                "invalid",
                "The requested ordering is not available for the particular query.".to_owned(),
            ));
        }
        Some(other) => return Err(invalid(format!("Invalid value for orderBy: {other}"))),
    }
    let zone_name = st.account(email).time_zone.clone();
    let zone_name = match req.param("timeZone") {
        Some(name) if zone(name).is_none() => {
            return Err(invalid(format!("Invalid time zone: {name}")));
        }
        Some(name) => name.to_owned(),
        None => zone_name,
    };
    let tz = zone(&zone_name).unwrap_or(Tz::UTC);
    let words = req.param("q").unwrap_or_default().to_lowercase();
    let deleted = req.param("showDeleted") == Some("true");
    let index = calendar_index(st, email, id).ok_or_else(|| not_found("Not Found"))?;
    let calendar = calendar(st, email, index);
    let mut found: Vec<&Event> = calendar
        .events
        .iter()
        .filter(|e| deleted || e.value["status"] != "cancelled")
        .filter(|e| min.is_none_or(|min| e.end > min))
        .filter(|e| max.is_none_or(|max| e.start < max))
        .filter(|e| {
            let text = ["summary", "description", "location"]
                .iter()
                .filter_map(|f| e.value[f].as_str())
                .collect::<Vec<_>>()
                .join(" ")
                .to_lowercase();
            words.split_whitespace().all(|w| text.contains(w))
        })
        .collect();
    if req.param("orderBy") == Some("updated") {
        found.sort_by(|a, b| {
            a.value["updated"]
                .as_str()
                .cmp(&b.value["updated"].as_str())
        });
    } else {
        found.sort_by_key(|e| e.start);
    }
    let items: Vec<Value> = found.iter().map(|e| render(e, tz)).collect();
    let (items, next) = page(req, &items, size)?;
    let mut answer = json!({
        "kind": "calendar#events",
        "etag": "\"fake-events\"",
        "summary": calendar.summary,
        "updated": rfc3339(now()),
        "timeZone": zone_name,
        "accessRole": "owner",
        "defaultReminders": [],
        "items": items,
    });
    if let Some(next) = next {
        answer["nextPageToken"] = json!(next);
    }
    Ok(ok(&answer))
}

fn insert(st: &mut State, req: &Req, email: &str, id: &str) -> Answer {
    if let Some(updates) = req.param("sendUpdates")
        && !["all", "externalOnly", "none"].contains(&updates)
    {
        return Err(invalid(format!("Invalid value for sendUpdates: {updates}")));
    }
    let body = json_body(req)?;
    let n = st.next();
    let zone_name = st.account(email).time_zone.clone();
    let event = new_event(n, email, body, &zone_name)?;
    let index = calendar_index(st, email, id).ok_or_else(|| not_found("Not Found"))?;
    let calendar = calendar(st, email, index);
    if calendar
        .events
        .iter()
        .any(|e| e.value["id"] == event.value["id"])
    {
        return Err(Fail::Error(
            409,
            "duplicate",
            "The requested identifier already exists.".to_owned(),
        ));
    }
    let answer = render(&event, zone(&zone_name).unwrap_or(Tz::UTC));
    calendar.events.push(event);
    Ok(ok(&answer))
}

fn find<'a>(calendar: &'a mut Calendar, event: &str) -> Result<&'a mut Event, Fail> {
    calendar
        .events
        .iter_mut()
        .find(|e| e.value["id"] == event)
        .ok_or_else(|| not_found("Not Found"))
}

fn get(st: &mut State, email: &str, id: &str, event: &str) -> Answer {
    let tz = zone(&st.account(email).time_zone).unwrap_or(Tz::UTC);
    let index = calendar_index(st, email, id).ok_or_else(|| not_found("Not Found"))?;
    let found = find(calendar(st, email, index), event)?;
    Ok(ok(&render(found, tz)))
}

fn patch(st: &mut State, req: &Req, email: &str, id: &str, event: &str) -> Answer {
    let body = json_body(req)?;
    let zone_name = st.account(email).time_zone.clone();
    let index = calendar_index(st, email, id).ok_or_else(|| not_found("Not Found"))?;
    let found = find(calendar(st, email, index), event)?;
    let mut value = found.value.clone();
    merge(&mut value, &Value::Object(body));
    let (start, end) = span(&value, &zone_name)?;
    value["id"] = found.value["id"].clone();
    value["updated"] = json!(rfc3339(now()));
    value["sequence"] = json!(value["sequence"].as_i64().unwrap_or(0) + 1);
    *found = Event { value, start, end };
    Ok(ok(&render(found, zone(&zone_name).unwrap_or(Tz::UTC))))
}

fn delete(st: &mut State, email: &str, id: &str, event: &str) -> Answer {
    let index = calendar_index(st, email, id).ok_or_else(|| not_found("Not Found"))?;
    let found = find(calendar(st, email, index), event)?;
    if found.value["status"] == "cancelled" {
        return Err(Fail::Error(
            410,
            "deleted",
            "Resource has been deleted".to_owned(),
        ));
    }
    found.value["status"] = json!("cancelled");
    found.value["updated"] = json!(rfc3339(now()));
    Ok(server::respond(204, &[], axum::body::Body::empty()))
}

impl FakeGoogle {
    /// Adds an event (an Events resource's fields: `summary`, `start`,
    /// `end`…) to a calendar of `email` (`primary`, or any id: a new one
    /// becomes a secondary calendar); returns its id. Panics when Google
    /// would refuse the event.
    pub fn add_event(&self, email: &str, calendar_id: &str, event: Value) -> String {
        let mut st = self.lock();
        let n = st.next();
        let zone_name = st.account(email).time_zone.clone();
        let Value::Object(fields) = event else {
            panic!("flynn-testkit: an event is a JSON object");
        };
        let event = match new_event(n, email, fields, &zone_name) {
            Ok(event) => event,
            Err(problem) => panic!("flynn-testkit: Google would refuse this event: {problem:?}"),
        };
        let id = event.value["id"].as_str().unwrap_or_default().to_owned();
        let index = match calendar_index(&mut st, email, calendar_id) {
            Some(index) => index,
            None => {
                let calendars = &mut st.account(email).calendars;
                calendars.push(Calendar {
                    id: calendar_id.to_owned(),
                    summary: calendar_id.to_owned(),
                    primary: false,
                    events: Vec::new(),
                });
                calendars.len() - 1
            }
        };
        calendar(&mut st, email, index).events.push(event);
        id
    }

    /// The events of a calendar as stored (deleted ones with `status:
    /// "cancelled"`), in the order added; empty for an unknown calendar.
    pub fn events(&self, email: &str, calendar_id: &str) -> Vec<Value> {
        let mut st = self.lock();
        match calendar_index(&mut st, email, calendar_id) {
            Some(index) => calendar(&mut st, email, index)
                .events
                .iter()
                .map(|e| e.value.clone())
                .collect(),
            None => Vec::new(),
        }
    }

    /// The time zone of `email`'s calendars (an IANA name; `UTC` by
    /// default).
    pub fn set_time_zone(&self, email: &str, time_zone: &str) {
        if zone(time_zone).is_none() {
            panic!("flynn-testkit: {time_zone} is not an IANA time zone");
        }
        self.lock().account(email).time_zone = time_zone.to_owned();
    }
}

#[cfg(test)]
mod tests {
    use super::super::OWNER;
    use super::super::testing::{call, get};
    use super::*;

    #[tokio::test]
    async fn events_are_listed_in_their_window_and_time_zone() {
        let fake = FakeGoogle::start();
        fake.set_time_zone(OWNER, "Europe/Berlin");
        let token = fake
            .issue_tokens(OWNER, &["calendar.readonly"])
            .access_token;
        let standup = fake.add_event(
            OWNER,
            "primary",
            json!({"summary": "Standup", "start": {"dateTime": "2026-12-01T09:00:00Z"},
                   "end": {"dateTime": "2026-12-01T09:15:00Z"}}),
        );
        fake.add_event(
            OWNER,
            "primary",
            json!({"summary": "Holiday", "start": {"date": "2026-12-02"}, "end": {"date": "2026-12-03"}}),
        );
        fake.add_event(
            OWNER,
            OWNER,
            json!({"summary": "Dentist", "start": {"dateTime": "2026-12-05T14:00:00", "timeZone": "Europe/Berlin"},
                   "end": {"dateTime": "2026-12-05T15:00:00", "timeZone": "Europe/Berlin"}}),
        );
        let (status, list) = get(
            &fake,
            &token,
            "/calendar/v3/calendars/primary/events?timeMin=2026-12-01T00:00:00Z&timeMax=2026-12-02T12:00:00%2B01:00&singleEvents=true&orderBy=startTime",
        )
        .await;
        assert_eq!(status, 200, "{list}");
        assert_eq!(list["kind"], "calendar#events");
        assert_eq!(list["timeZone"], "Europe/Berlin");
        let items = list["items"].as_array().unwrap();
        let summaries: Vec<&str> = items
            .iter()
            .map(|e| e["summary"].as_str().unwrap())
            .collect();
        assert_eq!(summaries, vec!["Standup", "Holiday"]);
        assert_eq!(items[0]["id"], standup.as_str());
        assert_eq!(items[0]["start"]["dateTime"], "2026-12-01T10:00:00+01:00");
        assert_eq!(items[0]["status"], "confirmed");
        let (_, utc) = get(
            &fake,
            &token,
            "/calendar/v3/calendars/owner%40example.com/events?q=dentist&timeZone=UTC",
        )
        .await;
        assert_eq!(utc["items"][0]["start"]["dateTime"], "2026-12-05T13:00:00Z");
        assert_eq!(fake.violations(), Vec::<String>::new());

        let (status, _) = get(
            &fake,
            &token,
            "/calendar/v3/calendars/primary/events?timeMin=2026-12-01T00:00:00",
        )
        .await;
        assert_eq!(status, 400);
        let (status, error) = get(
            &fake,
            &token,
            "/calendar/v3/calendars/primary/events?orderBy=startTime",
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(
            error["error"]["message"],
            "The requested ordering is not available for the particular query."
        );
        assert_eq!(fake.violations().len(), 2);
        let (status, _) = get(&fake, &token, "/calendar/v3/calendars/nobody/events").await;
        assert_eq!(status, 404);
    }

    #[tokio::test]
    async fn events_are_created_patched_and_deleted() {
        let fake = FakeGoogle::start();
        let token = fake.issue_tokens(OWNER, &["calendar.events"]).access_token;
        let path = "/calendar/v3/calendars/primary/events";
        let (status, error) = call(
            &fake,
            "POST",
            &token,
            path,
            Some(
                json!({"summary": "x", "start": {"dateTime": "2026-12-01T09:00:00"},
                        "end": {"dateTime": "2026-12-01T10:00:00"}}),
            ),
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(
            error["error"]["message"],
            "Missing time zone definition for start time."
        );
        let (status, error) = call(
            &fake,
            "POST",
            &token,
            path,
            Some(
                json!({"summary": "x", "start": {"dateTime": "2026-12-01T09:00:00Z"},
                        "end": {"dateTime": "2026-12-01T08:00:00Z"}}),
            ),
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(
            error["error"]["message"],
            "The specified time range is empty."
        );
        assert_eq!(fake.violations().len(), 2);

        let (status, event) = call(
            &fake,
            "POST",
            &token,
            &format!("{path}?sendUpdates=none"),
            Some(
                json!({"summary": "Review", "start": {"dateTime": "2026-12-01T09:00:00-05:00"},
                        "end": {"dateTime": "2026-12-01T10:00:00-05:00"},
                        "attendees": [{"email": "bob@example.org"}]}),
            ),
        )
        .await;
        assert_eq!(status, 200, "{event}");
        let id = event["id"].as_str().unwrap().to_owned();
        assert!(
            event["htmlLink"]
                .as_str()
                .unwrap()
                .starts_with("https://www.google.com/calendar/event?eid=")
        );
        assert!(event["created"].is_string() && event["updated"].is_string());
        assert_eq!(event["start"]["dateTime"], "2026-12-01T14:00:00Z");
        let (status, patched) = call(
            &fake,
            "PATCH",
            &token,
            &format!("{path}/{id}"),
            Some(json!({"summary": "Design review"})),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(patched["summary"], "Design review");
        assert_eq!(patched["attendees"][0]["email"], "bob@example.org");
        assert_eq!(fake.events(OWNER, "primary")[0]["summary"], "Design review");
        let (status, _) = call(&fake, "DELETE", &token, &format!("{path}/{id}"), None).await;
        assert_eq!(status, 204);
        let (status, error) = call(&fake, "DELETE", &token, &format!("{path}/{id}"), None).await;
        assert_eq!(status, 410);
        assert_eq!(error["error"]["errors"][0]["reason"], "deleted");
        let (_, list) = get(&fake, &token, path).await;
        assert_eq!(list["items"], json!([]));
        let (status, _) = get(&fake, &token, "/calendar/v3/users/me/calendarList").await;
        assert_eq!(status, 403);
        assert_eq!(fake.violations().len(), 2);
    }

    #[tokio::test]
    async fn event_lists_page() {
        let fake = FakeGoogle::start();
        let token = fake.issue_tokens(OWNER, &["calendar"]).access_token;
        for day in 1..=5 {
            fake.add_event(
                OWNER,
                "primary",
                json!({"summary": format!("Day {day}"), "start": {"date": format!("2026-12-0{day}")},
                       "end": {"date": format!("2026-12-0{}", day + 1)}}),
            );
        }
        let mut seen = Vec::new();
        let mut path = "/calendar/v3/calendars/primary/events?maxResults=2".to_owned();
        loop {
            let (_, list) = get(&fake, &token, &path).await;
            for item in list["items"].as_array().unwrap() {
                seen.push(item["summary"].as_str().unwrap().to_owned());
            }
            match list["nextPageToken"].as_str() {
                Some(next) => {
                    path = format!(
                        "/calendar/v3/calendars/primary/events?maxResults=2&pageToken={next}"
                    );
                }
                None => break,
            }
        }
        assert_eq!(seen, vec!["Day 1", "Day 2", "Day 3", "Day 4", "Day 5"]);
        let (_, calendars) = get(&fake, &token, "/calendar/v3/users/me/calendarList").await;
        assert_eq!(calendars["items"][0]["id"], OWNER);
        assert_eq!(calendars["items"][0]["primary"], true);
        assert_eq!(calendars["items"][0]["timeZone"], "UTC");
        assert_eq!(fake.violations(), Vec::<String>::new());
    }
}
