//! Conversions both stores share between the crate's types and the
//! values of their columns.

use flynn_protocol::{ContentBlock, MediaKind, Message, Principal};

use crate::{Error, Result, TurnStatus};

/// A message ready to store: its role and its content as JSON, encoded
/// before the write begins.
pub(crate) struct Encoded {
    pub(crate) role: &'static str,
    pub(crate) content: String,
}

impl Encoded {
    pub(crate) fn all(messages: &[Message]) -> Result<Vec<Encoded>> {
        messages
            .iter()
            .map(|message| {
                Ok(Encoded {
                    role: message.role.as_str(),
                    content: encode(&message.content)?,
                })
            })
            .collect()
    }
}

pub(crate) fn encode(content: &[ContentBlock]) -> Result<String> {
    // Content blocks are plain JSON-shaped data; this cannot fail short of
    // running out of memory. JSON escapes the NUL character, which
    // PostgreSQL's text cannot hold.
    serde_json::to_string(content).map_err(|e| Error::Backend {
        message: format!("cannot encode a message as JSON: {e}"),
    })
}

pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(crate) fn to_u64(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// A stored principal; NULL (turns from before principals) and anything
/// unreadable are the owner's, as every turn was then.
pub(crate) fn principal_from(text: Option<String>) -> Principal {
    text.and_then(|text| text.parse().ok()).unwrap_or_default()
}

pub(crate) fn status_from(text: &str) -> TurnStatus {
    match text {
        "pending" => TurnStatus::Pending,
        "running" => TurnStatus::Running,
        "completed" => TurnStatus::Completed,
        "cancelled" => TurnStatus::Cancelled,
        "interrupted" => TurnStatus::Interrupted,
        // "failed"; the table's CHECK constraint admits nothing else.
        _ => TurnStatus::Failed,
    }
}

/// A kept file's kind; one this version does not know (a newer one wrote
/// it) is a document, which every client can offer as a download.
pub(crate) fn media_kind_from(text: &str) -> MediaKind {
    match text {
        "image" => MediaKind::Image,
        "audio" => MediaKind::Audio,
        "voice" => MediaKind::Voice,
        _ => MediaKind::Document,
    }
}

/// The functions that read a store's rows back into the crate's types,
/// for one backend's row type (`$row`, a full path) and visibility
/// (`$vis`): both stores name and type their columns alike, as sqlx
/// reads them. They are written once here and generated in each store's
/// module.
macro_rules! row_decoders {
    ($vis:vis $row:ty) => {
        mod decoders {
            use std::str::FromStr;

            use flynn_protocol::config::{ModelRef, VoiceReply};
            use flynn_protocol::{Message, Role, SessionKey, Tier, TurnId};
            use sqlx::Row;

            use $crate::automation::{JobKind, JobRuns, LastRun, RunOutcome};
            use $crate::codec::{principal_from, status_from, to_u64};
            use $crate::{
                Error, Result, SessionInfo, SessionMeta, StoredMessage, TurnOrigin, TurnRecord,
            };

            pub(crate) fn stored_from_row(key: &SessionKey, row: &$row) -> Result<StoredMessage> {
                let seq = to_u64(row.try_get("seq")?);
                let role: String = row.try_get("role")?;
                let content: String = row.try_get("content")?;
                let turn: Option<i64> = row.try_get("turn_id")?;
                let corrupt = |source| Error::Corrupt {
                    key: key.to_string(),
                    seq,
                    source,
                };
                let role = serde_json::from_value::<Role>(serde_json::Value::String(role))
                    .map_err(corrupt)?;
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

            pub(crate) fn meta_from_row(row: &$row) -> Result<SessionMeta> {
                let tier: Option<String> = row.try_get("tier")?;
                let model: Option<String> = row.try_get("model")?;
                let voice: Option<String> = row.try_get("voice")?;
                Ok(SessionMeta {
                    agent: row.try_get("agent")?,
                    // Written from `Tier::as_str` and `ModelRef`'s display; anything
                    // else reads as unset.
                    tier: tier.and_then(|t| t.parse::<Tier>().ok()),
                    model: model.and_then(|m| m.parse::<ModelRef>().ok()),
                    title: row.try_get("title")?,
                    last_channel: row.try_get("last_channel")?,
                    taint: row.try_get("taint")?,
                    // Written from `VoiceReply::as_str`; a mode this version
                    // does not know (a newer one wrote it) leaves the choice
                    // to the config.
                    voice: voice.and_then(|v| match v.parse::<VoiceReply>() {
                        Ok(voice) => Some(voice),
                        Err(_) => {
                            tracing::warn!(voice = %v, "a session's voice reply mode is unknown to this version; the config's voice.reply applies");
                            None
                        }
                    }),
                })
            }

            pub(crate) fn info_from_row(row: &$row) -> Result<Option<SessionInfo>> {
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

            pub(crate) fn turn_from_row(row: &$row) -> Result<Option<TurnRecord>> {
                let key: String = row.try_get("session_key")?;
                let Ok(session) = SessionKey::from_str(&key) else {
                    return Ok(None);
                };
                let id = TurnId(to_u64(row.try_get("id")?));
                let content: String = row.try_get("content")?;
                let content =
                    serde_json::from_str(&content).map_err(|source| Error::CorruptTurn {
                        turn: id,
                        source,
                    })?;
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
            pub(crate) fn runs_from_row(row: &$row) -> Result<Option<JobRuns>> {
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

            /// A kept file without its bytes; `None` for a row whose session
            /// key no longer parses.
            pub(crate) fn file_from_row(row: &$row) -> Result<Option<$crate::StoredFile>> {
                let key: String = row.try_get("session_key")?;
                let Ok(session) = SessionKey::from_str(&key) else {
                    return Ok(None);
                };
                let turn: Option<i64> = row.try_get("turn_id")?;
                let kind: String = row.try_get("kind")?;
                let sent_at: Option<i64> = row.try_get("sent_at")?;
                Ok(Some($crate::StoredFile {
                    session,
                    turn: turn.map(|t| TurnId(to_u64(t))),
                    file: flynn_protocol::MediaFile {
                        id: row.try_get("id")?,
                        name: row.try_get("name")?,
                        media_type: row.try_get("media_type")?,
                        size: to_u64(row.try_get("size")?),
                        kind: $crate::codec::media_kind_from(&kind),
                        caption: row.try_get("caption")?,
                    },
                    created_at: row.try_get("created_at")?,
                    sent: sent_at.is_some(),
                }))
            }
        }

        #[allow(unused_imports)]
        $vis use decoders::{
            file_from_row, info_from_row, meta_from_row, runs_from_row, stored_from_row,
            turn_from_row,
        };
    };
}
pub(crate) use row_decoders;
