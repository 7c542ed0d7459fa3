//! The Google tools, a family per service (`gmail.*`, `calendar.*`,
//! `drive.*`, `docs.*`, `tasks.*`; the policy's `google.*` is all of
//! them).
//!
//! Every read returns untrusted content (mail and documents are written
//! by other people), so the executor wraps it and marks the session; every
//! call that sends, creates, changes or deletes declares
//! [`ToolEffect::ActsOnAccount`](flynn_protocol::ToolEffect::ActsOnAccount)
//! and takes everything it does in its arguments, so the confirmation
//! shows the whole of it (the whole message, for mail).

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use flynn_protocol::config::GoogleService;
use flynn_tools::{Tool, ToolError, into_dyn};

use crate::Google;

mod calendar;
mod docs;
mod drive;
mod gmail;
mod tasks;

pub use calendar::{CalendarCreate, CalendarDelete, CalendarList, CalendarUpdate};
pub use docs::{DocsAppend, DocsCreate};
pub use drive::{DriveRead, DriveSearch, DriveUpload};
pub(crate) use gmail::read_message;
pub use gmail::{GmailAttachment, GmailDraft, GmailLabel, GmailRead, GmailSearch, GmailSend};
pub use tasks::{TasksAdd, TasksComplete, TasksList};

/// How long one Google call may take (a rate limit waited out included).
const TIMEOUT: Duration = Duration::from_secs(90);

/// The tools of the services `google` offers.
pub fn tools(google: &Arc<Google>) -> Vec<Arc<dyn Tool>> {
    let g = || Arc::clone(google);
    let mut tools = Vec::new();
    for service in google.services() {
        match service {
            GoogleService::Gmail => tools.extend([
                into_dyn(GmailSearch(g())),
                into_dyn(GmailRead(g())),
                into_dyn(GmailAttachment(g())),
                into_dyn(GmailDraft(g())),
                into_dyn(GmailSend(g())),
                into_dyn(GmailLabel(g())),
            ]),
            GoogleService::Calendar => tools.extend([
                into_dyn(CalendarList(g())),
                into_dyn(CalendarCreate(g())),
                into_dyn(CalendarUpdate(g())),
                into_dyn(CalendarDelete(g())),
            ]),
            GoogleService::Drive => tools.extend([
                into_dyn(DriveSearch(g())),
                into_dyn(DriveRead(g())),
                into_dyn(DriveUpload(g())),
            ]),
            GoogleService::Docs => {
                tools.extend([into_dyn(DocsCreate(g())), into_dyn(DocsAppend(g()))]);
            }
            GoogleService::Tasks => tools.extend([
                into_dyn(TasksList(g())),
                into_dyn(TasksAdd(g())),
                into_dyn(TasksComplete(g())),
            ]),
        }
    }
    tools
}

/// Gmail's base64url, with or without padding.
pub(crate) fn decode_base64url(data: &str) -> Result<Vec<u8>, ToolError> {
    const ENGINE: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    ENGINE
        .decode(data.trim())
        .map_err(|e| ToolError::failed(format!("Google sent data that is not base64url: {e}")))
}

pub(crate) fn encode_base64url(data: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data)
}

/// `text` cut at `max` characters, saying how much was left out.
pub(crate) fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!(
            "{}\n[… {} more characters; ask for more with max_chars]",
            &text[..at],
            text[at..].chars().count()
        ),
        None => text.to_owned(),
    }
}

/// A size for people.
pub(crate) fn size(bytes: u64) -> String {
    match bytes {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.0} KB", b as f64 / 1024.0),
        b => format!("{:.1} MB", b as f64 / 1_048_576.0),
    }
}

/// A value for a Drive query string: `'` and `\` escaped.
pub(crate) fn quote_query(value: &str) -> String {
    value.replace('\\', "\\\\").replace('\'', "\\'")
}

/// A list of strings that a model may also give as one string
/// (`"to": "ann@example.com"`): the schema says a list, both are taken.
pub(crate) fn string_or_list<'de, D>(deserializer: D) -> Result<Vec<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Either {
        One(String),
        Many(Vec<String>),
    }
    use serde::Deserialize as _;
    Ok(match Option::<Either>::deserialize(deserializer)? {
        None => Vec::new(),
        Some(Either::One(one)) => vec![one],
        Some(Either::Many(many)) => many,
    })
}

/// A path segment: ids go into URLs escaped.
pub(crate) fn segment(id: &str) -> String {
    url::form_urlencoded::byte_serialize(id.trim().as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}
