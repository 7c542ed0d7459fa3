//! `gmail.*`: search, read, fetch attachments, draft, send, label.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use flynn_protocol::config::GoogleService;
use flynn_tools::builtin::web::{Format, extract};
use flynn_tools::{ToolContext, ToolError, TypedTool};
use futures::StreamExt;
use lettre::message::header::ContentType;
use lettre::message::{Mailbox, Message as Mail};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{TIMEOUT, cut, decode_base64url, encode_base64url, segment, size};
use crate::client::Call;
use crate::{Google, GoogleError};

const GMAIL: GoogleService = GoogleService::Gmail;

/// A message as the API gives it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Message {
    id: String,
    #[serde(default)]
    thread_id: String,
    #[serde(default)]
    label_ids: Vec<String>,
    #[serde(default)]
    snippet: String,
    #[serde(default)]
    internal_date: Option<String>,
    #[serde(default)]
    payload: Option<Part>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part {
    #[serde(default)]
    mime_type: String,
    #[serde(default)]
    filename: String,
    #[serde(default)]
    headers: Vec<Header>,
    #[serde(default)]
    body: PartBody,
    #[serde(default)]
    parts: Vec<Part>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartBody {
    #[serde(default)]
    size: u64,
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    attachment_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Header {
    name: String,
    value: String,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.payload.as_ref().and_then(|p| {
            p.headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case(name))
                .map(|h| h.value.as_str())
        })
    }

    fn date(&self) -> String {
        self.internal_date
            .as_deref()
            .and_then(|ms| ms.parse::<i64>().ok())
            .and_then(chrono::DateTime::from_timestamp_millis)
            .map(|d| d.format("%Y-%m-%d %H:%M UTC").to_string())
            .unwrap_or_default()
    }
}

/// An attachment of a message.
struct Attached<'a> {
    name: &'a str,
    media_type: &'a str,
    size: u64,
    id: Option<&'a str>,
    data: Option<&'a str>,
}

fn attachments<'a>(part: &'a Part, out: &mut Vec<Attached<'a>>) {
    if !part.filename.is_empty() {
        out.push(Attached {
            name: &part.filename,
            media_type: &part.mime_type,
            size: part.body.size,
            id: part.body.attachment_id.as_deref(),
            data: part.body.data.as_deref(),
        });
    }
    for child in &part.parts {
        attachments(child, out);
    }
}

/// The first body part of `media_type` that is not an attachment.
fn body_of<'a>(part: &'a Part, media_type: &str) -> Option<&'a str> {
    if part.filename.is_empty() && part.mime_type.eq_ignore_ascii_case(media_type) {
        return part.body.data.as_deref();
    }
    part.parts.iter().find_map(|p| body_of(p, media_type))
}

/// The message's text: the plain part, else the HTML part as text.
fn text_of(message: &Message) -> Result<String, ToolError> {
    let Some(payload) = &message.payload else {
        return Ok(String::new());
    };
    if let Some(data) = body_of(payload, "text/plain") {
        return Ok(String::from_utf8_lossy(&decode_base64url(data)?).into_owned());
    }
    if let Some(data) = body_of(payload, "text/html") {
        let html = String::from_utf8_lossy(&decode_base64url(data)?).into_owned();
        return Ok(extract(&html, "https://mail.google.com/", Format::Text).content);
    }
    Ok(String::new())
}

async fn get_message(
    google: &Google,
    account: Option<&str>,
    id: &str,
    format: &str,
    headers: &[&str],
) -> Result<Message, GoogleError> {
    let mut call = Call::get(format!(
        "{}/messages/{}",
        google.endpoints().gmail,
        segment(id)
    ))
    .query("format", format);
    for header in headers {
        call = call.query("metadataHeaders", header);
    }
    google.json(account, GMAIL, &call).await
}

/// `gmail.search`.
#[derive(Debug)]
pub struct GmailSearch(pub Arc<Google>);

/// Arguments of `gmail.search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GmailSearchArgs {
    /// A Gmail search, as in Gmail's search box: `from:ann is:unread`,
    /// `subject:invoice newer_than:7d`, `has:attachment`. Empty: the
    /// newest mail.
    #[serde(default)]
    query: String,
    /// How many messages (1–50, 10 by default).
    max: Option<u32>,
    /// The `next_page` a previous search returned.
    page: Option<String>,
    /// The Google account (an email address); the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for GmailSearch {
    type Args = GmailSearchArgs;

    fn name(&self) -> &str {
        "gmail.search"
    }

    fn description(&self) -> &str {
        "Search the owner's Gmail with Gmail's search syntax; lists each message's id, date, sender, subject and a snippet, newest first. Read one with gmail.read."
    }

    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn untrusted_output(&self) -> bool {
        true
    }

    async fn run(&self, args: GmailSearchArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct List {
            #[serde(default)]
            messages: Vec<Id>,
            next_page_token: Option<String>,
        }
        #[derive(Deserialize)]
        struct Id {
            id: String,
        }
        let google = &self.0;
        let account = args.account.as_deref();
        let max = args.max.unwrap_or(10).clamp(1, 50);
        let query = args.query.trim();
        let list: List = google
            .json(
                account,
                GMAIL,
                &Call::get(format!("{}/messages", google.endpoints().gmail))
                    .query("maxResults", max)
                    .query_opt("q", Some(query).filter(|q| !q.is_empty()))
                    .query_opt("pageToken", args.page.as_deref()),
            )
            .await?;
        if list.messages.is_empty() {
            return Ok(if query.is_empty() {
                "The mailbox is empty.".to_owned()
            } else {
                format!("No message matches {query}.")
            });
        }
        let ids: Vec<String> = list.messages.into_iter().map(|m| m.id).collect();
        let messages: Vec<Result<Message, GoogleError>> = futures::stream::iter(ids)
            .map(|id| {
                let google = Arc::clone(google);
                let account = account.map(str::to_owned);
                async move {
                    get_message(
                        &google,
                        account.as_deref(),
                        &id,
                        "metadata",
                        &["From", "Subject", "Date"],
                    )
                    .await
                }
            })
            .buffered(5)
            .collect()
            .await;
        let mut out = String::new();
        for message in messages {
            let message = message?;
            let unread = if message.label_ids.iter().any(|l| l == "UNREAD") {
                " · unread"
            } else {
                ""
            };
            out.push_str(&format!(
                "- id {} · {} · from {} · {}{unread}\n  {}\n",
                message.id,
                message.date(),
                message.header("From").unwrap_or("?"),
                message.header("Subject").unwrap_or("(no subject)"),
                message.snippet.trim()
            ));
        }
        if let Some(next) = list.next_page_token {
            out.push_str(&format!("More: page \"{next}\"\n"));
        }
        Ok(out)
    }
}

/// `gmail.read`.
#[derive(Debug)]
pub struct GmailRead(pub Arc<Google>);

/// Arguments of `gmail.read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GmailReadArgs {
    /// The message's id (from gmail.search).
    id: String,
    /// Longest text returned, in characters (20000 by default).
    max_chars: Option<usize>,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for GmailRead {
    type Args = GmailReadArgs;

    fn name(&self) -> &str {
        "gmail.read"
    }

    fn description(&self) -> &str {
        "Read one Gmail message: its headers (From, To, Cc, Date, Subject, Message-ID), its text and its attachments (fetch one into the workspace with gmail.attachment)."
    }

    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn untrusted_output(&self) -> bool {
        true
    }

    async fn run(&self, args: GmailReadArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok(read_message(
            &self.0,
            args.account.as_deref(),
            &args.id,
            args.max_chars.unwrap_or(20_000),
        )
        .await?)
    }
}

/// A message as `gmail.read` shows it: headers, text, attachments.
pub(crate) async fn read_message(
    google: &Google,
    account: Option<&str>,
    id: &str,
    max_chars: usize,
) -> Result<String, GoogleError> {
    let message = get_message(google, account, id, "full", &[]).await?;
    let mut out = format!(
        "Message {} (thread {}), labels: {}\n",
        message.id,
        message.thread_id,
        message.label_ids.join(", ")
    );
    for name in [
        "From",
        "Reply-To",
        "To",
        "Cc",
        "Date",
        "Subject",
        "Message-ID",
    ] {
        if let Some(value) = message.header(name) {
            out.push_str(&format!("{name}: {value}\n"));
        }
    }
    out.push('\n');
    let text = text_of(&message).map_err(|e| GoogleError::Transport(e.to_string()))?;
    out.push_str(&cut(text.trim(), max_chars));
    out.push('\n');
    let mut found = Vec::new();
    if let Some(payload) = &message.payload {
        attachments(payload, &mut found);
    }
    if !found.is_empty() {
        out.push_str("\nAttachments (fetch one with gmail.attachment):\n");
        for a in &found {
            out.push_str(&format!(
                "- {} ({}, {})\n",
                a.name,
                a.media_type,
                size(a.size)
            ));
        }
    }
    Ok(out)
}

/// `gmail.attachment`.
#[derive(Debug)]
pub struct GmailAttachment(pub Arc<Google>);

/// Arguments of `gmail.attachment`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GmailAttachmentArgs {
    /// The message's id.
    message: String,
    /// The attachment's file name, as gmail.read lists it.
    name: String,
    /// Where to save it in the workspace; `attachments/<name>` by default.
    path: Option<String>,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

/// The largest attachment saved (Gmail's own limit is 25 MB).
const MAX_ATTACHMENT: u64 = 35 * 1024 * 1024;

#[async_trait]
impl TypedTool for GmailAttachment {
    type Args = GmailAttachmentArgs;

    fn name(&self) -> &str {
        "gmail.attachment"
    }

    fn description(&self) -> &str {
        "Save an attachment of a Gmail message into the workspace (then read it, or send it on with media.send)."
    }

    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::WritesFiles
    }

    async fn run(&self, args: GmailAttachmentArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let google = &self.0;
        let account = args.account.as_deref();
        let message = get_message(google, account, &args.message, "full", &[]).await?;
        let mut found = Vec::new();
        if let Some(payload) = &message.payload {
            attachments(payload, &mut found);
        }
        let Some(attached) = found.iter().find(|a| a.name == args.name.trim()) else {
            let names: Vec<&str> = found.iter().map(|a| a.name).collect();
            return Err(ToolError::failed(format!(
                "message {} has no attachment named '{}' (it has: {})",
                args.message,
                args.name,
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            )));
        };
        if attached.size > MAX_ATTACHMENT {
            return Err(ToolError::failed(format!(
                "{} has {}, more than the {} an attachment may have here",
                attached.name,
                size(attached.size),
                size(MAX_ATTACHMENT)
            )));
        }
        let data = match (attached.data, attached.id) {
            (Some(data), _) => decode_base64url(data)?,
            (None, Some(id)) => {
                #[derive(Deserialize)]
                struct Body {
                    data: String,
                }
                let body: Body = google
                    .json(
                        account,
                        GMAIL,
                        &Call::get(format!(
                            "{}/messages/{}/attachments/{}",
                            google.endpoints().gmail,
                            segment(&message.id),
                            segment(id)
                        )),
                    )
                    .await?;
                decode_base64url(&body.data)?
            }
            (None, None) => Vec::new(),
        };
        // Only the name's last component: a name is the sender's choice.
        let safe: String = attached
            .name
            .rsplit(['/', '\\'])
            .next()
            .unwrap_or("attachment")
            .chars()
            .filter(|c| !c.is_control())
            .collect();
        let safe = if safe.is_empty() || safe == "." || safe == ".." {
            "attachment".to_owned()
        } else {
            safe
        };
        let wanted = args.path.unwrap_or_else(|| format!("attachments/{safe}"));
        let path = ctx.confine(&wanted)?;
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| ToolError::failed(format!("cannot create {}: {e}", dir.display())))?;
        }
        tokio::fs::write(&path, &data)
            .await
            .map_err(|e| ToolError::failed(format!("cannot write {wanted}: {e}")))?;
        Ok(format!(
            "saved {} ({}, {}) to {wanted}",
            attached.name,
            attached.media_type,
            size(data.len() as u64)
        ))
    }
}

/// A message to write: what `gmail.draft` and `gmail.send` take.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Outgoing {
    /// Recipients: addresses, `Name <address>`, comma-separated or a list.
    #[serde(deserialize_with = "super::string_or_list")]
    to: Vec<String>,
    /// Copies.
    #[serde(default, deserialize_with = "super::string_or_list")]
    cc: Vec<String>,
    /// Blind copies.
    #[serde(default, deserialize_with = "super::string_or_list")]
    bcc: Vec<String>,
    /// The subject (for a reply, `Re: ` and the original's).
    subject: String,
    /// The text of the message (plain text).
    body: String,
    /// For a reply: the id of the message answered (it goes in the same
    /// thread, with `In-Reply-To` and `References` set).
    reply_to: Option<String>,
    /// The Google account it is sent from; the default one when absent.
    account: Option<String>,
}

fn mailboxes(field: &str, values: &[String]) -> Result<Vec<Mailbox>, ToolError> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse::<Mailbox>().map_err(|e| {
                ToolError::failed(format!(
                    "'{v}' in {field} is not an email address ({e}); write name@example.com or Name <name@example.com>"
                ))
            })
        })
        .collect()
}

/// The message as Gmail takes it (`raw`, and its thread for a reply).
async fn compose(
    google: &Google,
    outgoing: &Outgoing,
) -> Result<(serde_json::Value, String), ToolError> {
    let account = google.resolve(outgoing.account.as_deref())?;
    let to = mailboxes("to", &outgoing.to)?;
    if to.is_empty() {
        return Err(ToolError::failed("name at least one recipient in `to`"));
    }
    let from: Mailbox = account
        .parse()
        .map_err(|_| ToolError::failed(format!("{account} is not an address to send from")))?;
    let mut builder = Mail::builder().from(from).subject(outgoing.subject.trim());
    for mailbox in to {
        builder = builder.to(mailbox);
    }
    for mailbox in mailboxes("cc", &outgoing.cc)? {
        builder = builder.cc(mailbox);
    }
    let bcc = mailboxes("bcc", &outgoing.bcc)?;
    if !bcc.is_empty() {
        builder = builder.keep_bcc();
    }
    for mailbox in bcc {
        builder = builder.bcc(mailbox);
    }
    let mut thread = None;
    if let Some(original) = &outgoing.reply_to {
        let original = get_message(
            google,
            Some(&account),
            original,
            "metadata",
            &["Message-ID", "References", "Subject"],
        )
        .await?;
        if let Some(id) = original.header("Message-ID") {
            let references = match original.header("References") {
                Some(earlier) => format!("{earlier} {id}"),
                None => id.to_owned(),
            };
            builder = builder.in_reply_to(id.to_owned()).references(references);
        }
        thread = Some(original.thread_id);
    }
    let mail = builder
        .header(ContentType::TEXT_PLAIN)
        .body(outgoing.body.clone())
        .map_err(|e| ToolError::failed(format!("cannot write the message: {e}")))?;
    let mut message = json!({ "raw": encode_base64url(&mail.formatted()) });
    if let Some(thread) = thread {
        message["threadId"] = json!(thread);
    }
    Ok((message, account))
}

/// `gmail.draft`.
#[derive(Debug)]
pub struct GmailDraft(pub Arc<Google>);

#[async_trait]
impl TypedTool for GmailDraft {
    type Args = Outgoing;

    fn name(&self) -> &str {
        "gmail.draft"
    }

    fn description(&self) -> &str {
        "Save an email as a draft in the owner's Gmail (not sent), for them to check and send. For a reply give reply_to (the answered message's id) and the Re: subject."
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

    async fn run(&self, args: Outgoing, _ctx: &ToolContext) -> Result<String, ToolError> {
        #[derive(Deserialize)]
        struct Draft {
            id: String,
        }
        let google = &self.0;
        let (message, account) = compose(google, &args).await?;
        let draft: Draft = google
            .json(
                Some(&account),
                GMAIL,
                &Call::post(format!("{}/drafts", google.endpoints().gmail))
                    .json(json!({ "message": message })),
            )
            .await?;
        Ok(format!(
            "saved the draft \"{}\" to {} in {account}'s Gmail drafts (draft {})",
            args.subject.trim(),
            args.to.join(", "),
            draft.id
        ))
    }
}

/// `gmail.send`.
#[derive(Debug)]
pub struct GmailSend(pub Arc<Google>);

#[async_trait]
impl TypedTool for GmailSend {
    type Args = Outgoing;

    fn name(&self) -> &str {
        "gmail.send"
    }

    fn description(&self) -> &str {
        "Send an email from the owner's Gmail. The owner is shown the whole message and must approve it. For a reply give reply_to (the answered message's id), its sender in `to` and the Re: subject."
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

    async fn run(&self, args: Outgoing, _ctx: &ToolContext) -> Result<String, ToolError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Sent {
            id: String,
            thread_id: String,
        }
        let google = &self.0;
        let (message, account) = compose(google, &args).await?;
        let sent: Sent = google
            .json(
                Some(&account),
                GMAIL,
                &Call::post(format!("{}/messages/send", google.endpoints().gmail)).json(message),
            )
            .await?;
        Ok(format!(
            "sent \"{}\" from {account} to {} (message {}, thread {})",
            args.subject.trim(),
            args.to.join(", "),
            sent.id,
            sent.thread_id
        ))
    }
}

/// `gmail.label`.
#[derive(Debug)]
pub struct GmailLabel(pub Arc<Google>);

/// Arguments of `gmail.label`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GmailLabelArgs {
    /// The message's id.
    id: String,
    /// Labels to add, by name (`STARRED`, `IMPORTANT`, or the owner's own;
    /// a new name makes a new label).
    #[serde(default, deserialize_with = "super::string_or_list")]
    add: Vec<String>,
    /// Labels to take away: `UNREAD` marks it read, `INBOX` archives it.
    #[serde(default, deserialize_with = "super::string_or_list")]
    remove: Vec<String>,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for GmailLabel {
    type Args = GmailLabelArgs;

    fn name(&self) -> &str {
        "gmail.label"
    }

    fn description(&self) -> &str {
        "Add or remove labels of a Gmail message: remove UNREAD to mark it read, remove INBOX to archive it, add STARRED or any label name."
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

    async fn run(&self, args: GmailLabelArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        #[derive(Deserialize)]
        struct Labels {
            #[serde(default)]
            labels: Vec<Label>,
        }
        #[derive(Deserialize, Clone)]
        struct Label {
            id: String,
            name: String,
        }
        if args.add.is_empty() && args.remove.is_empty() {
            return Err(ToolError::failed("name labels to add or to remove"));
        }
        let google = &self.0;
        let account = Some(google.resolve(args.account.as_deref())?);
        let account = account.as_deref();
        let url = format!("{}/labels", google.endpoints().gmail);
        let mut labels = google
            .json::<Labels>(account, GMAIL, &Call::get(&url))
            .await?
            .labels;
        let find = |labels: &[Label], name: &str| {
            labels
                .iter()
                .find(|l| l.id.eq_ignore_ascii_case(name) || l.name.eq_ignore_ascii_case(name))
                .map(|l| l.id.clone())
        };
        let mut add = Vec::new();
        for name in args.add.iter().map(|n| n.trim()) {
            match find(&labels, name) {
                Some(id) => add.push(id),
                None => {
                    let made: Label = google
                        .json(
                            account,
                            GMAIL,
                            &Call::post(&url).json(json!({ "name": name })),
                        )
                        .await?;
                    add.push(made.id.clone());
                    labels.push(made);
                }
            }
        }
        let mut remove = Vec::new();
        for name in args.remove.iter().map(|n| n.trim()) {
            remove.push(find(&labels, name).ok_or_else(|| {
                ToolError::failed(format!("there is no label named '{name}' to remove"))
            })?);
        }
        let _: serde_json::Value = google
            .json(
                account,
                GMAIL,
                &Call::post(format!(
                    "{}/messages/{}/modify",
                    google.endpoints().gmail,
                    segment(&args.id)
                ))
                .json(json!({ "addLabelIds": add, "removeLabelIds": remove })),
            )
            .await?;
        Ok(format!(
            "message {}: added [{}], removed [{}]",
            args.id,
            args.add.join(", "),
            args.remove.join(", ")
        ))
    }
}
