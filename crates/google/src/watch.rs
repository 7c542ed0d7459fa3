//! New mail from a mailbox's history, for the Gmail watcher: no Pub/Sub,
//! one cheap request when nothing arrived.

use flynn_protocol::config::GoogleService;
use serde::Deserialize;

use crate::client::Call;
use crate::tools::read_message;
use crate::{Google, GoogleError};

/// What arrived since a cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrived {
    /// New inbox messages matching the query, oldest first.
    pub messages: Vec<String>,
    /// Where to read from next time.
    pub cursor: String,
    /// The cursor was older than the history Gmail keeps (about a week):
    /// mail in the gap is not reported, and reading starts again from now.
    pub gap: bool,
}

/// The mailbox's history id now: where a new watch starts.
pub async fn cursor_now(google: &Google, account: Option<&str>) -> Result<String, GoogleError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Profile {
        history_id: String,
    }
    let profile: Profile = google
        .json(
            account,
            GoogleService::Gmail,
            &Call::get(format!("{}/profile", google.endpoints().gmail)),
        )
        .await?;
    Ok(profile.history_id)
}

/// Inbox messages added since `cursor`, those matching `query` only.
pub async fn arrived(
    google: &Google,
    account: Option<&str>,
    cursor: &str,
    query: Option<&str>,
) -> Result<Arrived, GoogleError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Page {
        #[serde(default)]
        history: Vec<Record>,
        history_id: Option<String>,
        next_page_token: Option<String>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Record {
        #[serde(default)]
        messages_added: Vec<Added>,
    }
    #[derive(Deserialize)]
    struct Added {
        message: Id,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Id {
        id: String,
        #[serde(default)]
        label_ids: Vec<String>,
    }
    let mut messages: Vec<String> = Vec::new();
    let mut next = cursor.to_owned();
    let mut page: Option<String> = None;
    loop {
        let call = Call::get(format!("{}/history", google.endpoints().gmail))
            .query("startHistoryId", cursor)
            .query("historyTypes", "messageAdded")
            .query("labelId", "INBOX")
            .query("maxResults", 500)
            .query_opt("pageToken", page.as_deref());
        let got: Page = match google.json(account, GoogleService::Gmail, &call).await {
            Ok(got) => got,
            Err(GoogleError::Api { status: 404, .. }) => {
                return Ok(Arrived {
                    messages: Vec::new(),
                    cursor: cursor_now(google, account).await?,
                    gap: true,
                });
            }
            Err(e) => return Err(e),
        };
        for record in got.history {
            for added in record.messages_added {
                let drafted = added
                    .message
                    .label_ids
                    .iter()
                    .any(|l| l == "DRAFT" || l == "SENT");
                if !drafted && !messages.contains(&added.message.id) {
                    messages.push(added.message.id);
                }
            }
        }
        if let Some(id) = got.history_id {
            next = id;
        }
        page = got.next_page_token;
        if page.is_none() {
            break;
        }
    }
    if let (Some(query), false) = (
        query.map(str::trim).filter(|q| !q.is_empty()),
        messages.is_empty(),
    ) {
        #[derive(Deserialize)]
        struct List {
            #[serde(default)]
            messages: Vec<Id>,
        }
        let matching: List = google
            .json(
                account,
                GoogleService::Gmail,
                &Call::get(format!("{}/messages", google.endpoints().gmail))
                    .query("q", query)
                    .query("maxResults", 500),
            )
            .await?;
        messages.retain(|id| matching.messages.iter().any(|m| &m.id == id));
    }
    Ok(Arrived {
        messages,
        cursor: next,
        gap: false,
    })
}

/// A message as text (headers, body, attachments), for the agent.
pub async fn message_text(
    google: &Google,
    account: Option<&str>,
    id: &str,
) -> Result<String, GoogleError> {
    read_message(google, account, id, 20_000).await
}
