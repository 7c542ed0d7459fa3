//! Reading the PostgreSQL store's rows back into the crate's types, and
//! the small conversions its writes share.

use std::borrow::Cow;
use std::str::FromStr;

use flynn_protocol::config::ModelRef;
use flynn_protocol::{Message, Role, SessionKey, Tier, TurnId, Usage};
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::automation::{JobKind, JobRuns, LastRun, RunOutcome};
pub(super) use crate::codec::{Encoded, encode, principal_from, status_from, to_i64, to_u64};
use crate::{
    Error, Result, SessionInfo, SessionMeta, StoredMessage, TurnOrigin, TurnRecord, UsageTotal,
};

/// `text` as PostgreSQL's `TEXT` can hold it. SQLite keeps the NUL
/// character; PostgreSQL refuses the whole write, which would refuse a
/// message whose first line (the session's title) held one. Each NUL is
/// stored as U+FFFD, the replacement character.
pub(super) fn text(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(text)
    }
}

/// [`text`] of an optional value.
pub(super) fn opt_text(value: Option<&str>) -> Option<Cow<'_, str>> {
    value.map(text)
}

/// The bytes of a message row's stored JSON.
pub(super) fn content_len(row: &PgRow) -> usize {
    row.try_get::<&str, _>("content").map_or(0, str::len)
}

pub(super) fn stored_from_row(key: &SessionKey, row: &PgRow) -> Result<StoredMessage> {
    let seq = to_u64(row.try_get("seq")?);
    let role: String = row.try_get("role")?;
    let content: String = row.try_get("content")?;
    let turn: Option<i64> = row.try_get("turn_id")?;
    let corrupt = |source| Error::Corrupt {
        key: key.to_string(),
        seq,
        source,
    };
    let role = serde_json::from_value::<Role>(serde_json::Value::String(role)).map_err(corrupt)?;
    let content = serde_json::from_str(&content).map_err(corrupt)?;
    // Only a person's message has a sender; a turn's answers and tool
    // results are the agent's.
    let principal = match (role, turn) {
        (Role::User, Some(_)) => Some(principal_from(row.try_get("principal")?)),
        _ => None,
    };
    Ok(StoredMessage {
        seq,
        turn: turn.map(|t| TurnId(to_u64(t))),
        created_at: row.try_get("created_at")?,
        message: Message { role, content },
        principal,
    })
}

pub(super) fn meta_from_row(row: &PgRow) -> Result<SessionMeta> {
    let tier: Option<String> = row.try_get("tier")?;
    let model: Option<String> = row.try_get("model")?;
    Ok(SessionMeta {
        agent: row.try_get("agent")?,
        // Written from `Tier::as_str` and `ModelRef`'s display; anything
        // else reads as unset.
        tier: tier.and_then(|t| t.parse::<Tier>().ok()),
        model: model.and_then(|m| m.parse::<ModelRef>().ok()),
        title: row.try_get("title")?,
        last_channel: row.try_get("last_channel")?,
        taint: row.try_get("taint")?,
    })
}

pub(super) fn info_from_row(row: &PgRow) -> Result<Option<SessionInfo>> {
    let key: String = row.try_get("key")?;
    // Keys are validated on the way in; a row that no longer parses is skipped.
    let Ok(key) = SessionKey::from_str(&key) else {
        return Ok(None);
    };
    let count: i64 = row.try_get("message_count")?;
    Ok(Some(SessionInfo {
        key,
        message_count: to_u64(count),
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        meta: meta_from_row(row)?,
    }))
}

pub(super) fn turn_from_row(row: &PgRow) -> Result<Option<TurnRecord>> {
    let key: String = row.try_get("session_key")?;
    let Ok(session) = SessionKey::from_str(&key) else {
        return Ok(None);
    };
    let id = TurnId(to_u64(row.try_get("id")?));
    let content: String = row.try_get("content")?;
    let content =
        serde_json::from_str(&content).map_err(|source| Error::CorruptTurn { turn: id, source })?;
    let status: String = row.try_get("status")?;
    let message_seq: Option<i64> = row.try_get("message_seq")?;
    let owner: i64 = row.try_get("owner_pid")?;
    Ok(Some(TurnRecord {
        id,
        session,
        status: status_from(&status),
        content,
        origin: TurnOrigin {
            agent: row.try_get("agent")?,
            owner_pid: u32::try_from(owner).unwrap_or(0),
            external_id: row.try_get("external_id")?,
            principal: principal_from(row.try_get("principal")?),
        },
        message_seq: message_seq.map(to_u64),
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    }))
}

/// A run record; `None` for a row whose kind this version does not know.
pub(super) fn runs_from_row(row: &PgRow) -> Result<Option<JobRuns>> {
    let kind: String = row.try_get("kind")?;
    let Some(kind) = JobKind::parse(&kind) else {
        return Ok(None);
    };
    let scheduled_for: Option<i64> = row.try_get("scheduled_for")?;
    let outcome: Option<String> = row.try_get("outcome")?;
    let last = match (
        scheduled_for,
        outcome.as_deref().and_then(RunOutcome::parse),
    ) {
        (Some(scheduled_for), Some(outcome)) => {
            let session: Option<String> = row.try_get("session_key")?;
            let turn: Option<i64> = row.try_get("turn_id")?;
            Some(LastRun {
                scheduled_for,
                started_at: row
                    .try_get::<Option<i64>, _>("started_at")?
                    .unwrap_or(scheduled_for),
                finished_at: row.try_get("finished_at")?,
                outcome,
                error: row.try_get("error")?,
                session: session.and_then(|s| SessionKey::from_str(&s).ok()),
                turn: turn.map(|t| TurnId(to_u64(t))),
            })
        }
        _ => None,
    };
    Ok(Some(JobRuns {
        kind,
        name: row.try_get("name")?,
        since: row.try_get("since")?,
        last,
    }))
}

/// The sums of a usage query's row (`calls`, `input`, `output`,
/// `cache_read`, `cache_write`, `cost`, `unpriced`).
pub(super) fn usage_total(row: &PgRow) -> Result<UsageTotal> {
    let count = |name: &str| -> Result<u64> { Ok(to_u64(row.try_get::<i64, _>(name)?)) };
    Ok(UsageTotal {
        calls: count("calls")?,
        usage: Usage {
            input_tokens: count("input")?,
            output_tokens: count("output")?,
            cache_read_tokens: count("cache_read")?,
            cache_write_tokens: count("cache_write")?,
        },
        cost_usd: row.try_get("cost")?,
        unpriced_calls: count("unpriced")?,
    })
}
