//! The Gmail API (`/gmail/v1/users/me/…`), one mailbox per account.
//!
//! Served: `GET profile`; `GET messages` (`q`, `labelIds`, `maxResults`
//! 100 by default and at most 500, `pageToken`, `includeSpamTrash`;
//! newest first; no `messages` key when nothing matches); `GET
//! messages/{id}` in the `full`, `metadata` (with `metadataHeaders`),
//! `minimal` and `raw` formats, the payload being the message's real MIME
//! tree; `GET messages/{id}/attachments/{attachmentId}`; `POST
//! messages/send`; `POST messages/{id}/modify`; `GET`/`POST labels`; `GET
//! history`; `POST`/`GET drafts`, `GET drafts/{id}`, `POST drafts/send`.
//!
//! The search `q` understands `from:`, `to:`, `subject:`, `is:unread`,
//! `is:read`, `is:starred`, `label:`, `in:inbox` (and the other system
//! labels), `has:attachment`, `newer_than:`/`older_than:` (`d`, `m`, `y`),
//! `after:`/`before:` (`YYYY/MM/DD` at midnight Pacific time, as Gmail,
//! or epoch seconds), quoted phrases and bare words (matched without case
//! in the sender, recipients, subject and body).
//!
//! Sent messages are parsed (RFC 2822): `From`, `To` and `Subject` are
//! required, and a reply given a `threadId` must follow Gmail's threading
//! rules (`In-Reply-To` or `References` naming a message of that thread,
//! and the same subject up to `Re:`/`Fwd:`), else it lands in a new
//! thread and the fake records a violation. Scopes as Gmail documents
//! them: reading needs `gmail.readonly`, `gmail.modify` or
//! `https://mail.google.com/` (the profile and history also take
//! `gmail.metadata`); sending `gmail.send`, `gmail.compose`,
//! `gmail.modify` or the full scope; drafts `gmail.compose`,
//! `gmail.modify` or the full scope; label changes `gmail.modify` (or
//! `gmail.labels` for labels themselves) or the full scope.

use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use serde_json::{Value, json};

use super::mime::{self, Part};
use super::{
    Answer, Caller, Fail, FakeGoogle, Req, State, b64url, b64url_decode, bad, json_body, not_found,
    now, ok, page, size_param, unserved,
};

const SERVICE: &str = "gmail.googleapis.com";
const FULL: &str = "https://mail.google.com/";
const READ: &[&str] = &["gmail.readonly", "gmail.modify", FULL];
/// Profile and history also take `gmail.metadata`.
const READ_METADATA: &[&str] = &["gmail.readonly", "gmail.metadata", "gmail.modify", FULL];
const SEND: &[&str] = &["gmail.send", "gmail.compose", "gmail.modify", FULL];
const COMPOSE: &[&str] = &["gmail.compose", "gmail.modify", FULL];
const DRAFT_READ: &[&str] = &["gmail.readonly", "gmail.compose", "gmail.modify", FULL];
const MODIFY: &[&str] = &["gmail.modify", FULL];
const LABELS: &[&str] = &["gmail.labels", "gmail.modify", FULL];
const LABELS_READ: &[&str] = &[
    "gmail.labels",
    "gmail.readonly",
    "gmail.metadata",
    "gmail.modify",
    FULL,
];

/// Gmail's system labels.
pub const SYSTEM_LABELS: &[&str] = &[
    "INBOX",
    "UNREAD",
    "STARRED",
    "IMPORTANT",
    "SENT",
    "DRAFT",
    "SPAM",
    "TRASH",
];

/// A file attached to a [`Mail`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    pub name: String,
    pub media_type: String,
    pub data: Vec<u8>,
}

/// A message to put in a mailbox with [`FakeGoogle::add_mail`].
#[derive(Debug, Clone, PartialEq)]
pub struct Mail {
    /// The `From` header, e.g. `Ada <ada@example.com>`.
    pub from: String,
    /// The `To` header.
    pub to: String,
    /// The `Cc` header; none when empty.
    pub cc: String,
    pub subject: String,
    /// The text/plain body.
    pub text: String,
    /// A text/html alternative.
    pub html: Option<String>,
    pub attachments: Vec<Attachment>,
    /// Label ids or names (a new name becomes a user label); by default
    /// `INBOX` and `UNREAD`.
    pub labels: Vec<String>,
    /// When it was received (`internalDate`, the `Date` header).
    pub date: DateTime<Utc>,
    /// The thread to join; by default a thread of its own.
    pub thread_id: Option<String>,
    /// The `Message-ID` header (with its angle brackets); by default one
    /// is made up.
    pub message_id: Option<String>,
}

impl Default for Mail {
    fn default() -> Self {
        Mail {
            from: "Ada Lovelace <ada@example.com>".to_owned(),
            to: super::OWNER.to_owned(),
            cc: String::new(),
            subject: String::new(),
            text: String::new(),
            html: None,
            attachments: Vec::new(),
            labels: vec!["INBOX".to_owned(), "UNREAD".to_owned()],
            date: now(),
            thread_id: None,
            message_id: None,
        }
    }
}

/// A message the client sent or saved as a draft, as the fake read it.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMail {
    pub id: String,
    pub thread_id: String,
    pub from: String,
    pub to: String,
    pub cc: String,
    pub subject: String,
    /// The text/plain body (the first such part), without its final line
    /// break.
    pub text: String,
    /// Every header, in order, encoded words decoded.
    pub headers: Vec<(String, String)>,
    /// The whole RFC 2822 message as sent.
    pub raw: String,
}

#[derive(Debug, Clone)]
pub(crate) struct Message {
    id: String,
    thread_id: String,
    labels: Vec<String>,
    internal_date: i64,
    history_id: u64,
    raw: Vec<u8>,
    part: Part,
}

#[derive(Debug, Clone)]
struct Label {
    id: String,
    name: String,
    system: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Change {
    Added,
    Deleted,
    LabelsAdded(Vec<String>),
    LabelsRemoved(Vec<String>),
}

#[derive(Debug, Clone)]
struct Record {
    id: u64,
    message_id: String,
    thread_id: String,
    labels: Vec<String>,
    change: Change,
}

#[derive(Debug)]
pub(crate) struct Mailbox {
    messages: Vec<Message>,
    labels: Vec<Label>,
    history: Vec<Record>,
    history_id: u64,
    /// History ids below this one are no longer kept.
    floor: u64,
    /// (draft id, message id).
    drafts: Vec<(String, String)>,
}

impl Mailbox {
    pub fn new() -> Self {
        Mailbox {
            messages: Vec::new(),
            labels: SYSTEM_LABELS
                .iter()
                .map(|id| Label {
                    id: (*id).to_owned(),
                    name: (*id).to_owned(),
                    system: true,
                })
                .collect(),
            history: Vec::new(),
            history_id: 1000,
            floor: 0,
            drafts: Vec::new(),
        }
    }

    fn message(&self, id: &str) -> Option<&Message> {
        self.messages.iter().find(|m| m.id == id)
    }

    fn record(&mut self, id: &str, change: Change) {
        self.history_id += 1;
        let history_id = self.history_id;
        if let Some(message) = self.messages.iter_mut().find(|m| m.id == id) {
            message.history_id = history_id;
            let record = Record {
                id: history_id,
                message_id: message.id.clone(),
                thread_id: message.thread_id.clone(),
                labels: message.labels.clone(),
                change,
            };
            self.history.push(record);
        }
    }

    /// A label id for an id or a name (case-insensitive).
    fn label_id(&self, label: &str) -> Option<String> {
        self.labels
            .iter()
            .find(|l| l.id == label || l.name.eq_ignore_ascii_case(label))
            .map(|l| l.id.clone())
    }

    fn add_label(&mut self, name: &str, n: u64) -> String {
        let id = format!("Label_{n}");
        self.labels.push(Label {
            id: id.clone(),
            name: name.to_owned(),
            system: false,
        });
        id
    }

    fn store(&mut self, message: Message) -> String {
        let id = message.id.clone();
        self.messages.push(message);
        self.record(&id, Change::Added);
        id
    }
}

fn message_id_of(n: u64) -> String {
    format!("{:016x}", 0x18c0_0000_0000_0000_u64 + n * 0x1_0537)
}

impl Message {
    fn new(id: String, thread_id: String, labels: Vec<String>, date: i64, raw: Vec<u8>) -> Self {
        let part = mime::parse(&raw);
        Message {
            id,
            thread_id,
            labels,
            internal_date: date,
            history_id: 0,
            raw,
            part,
        }
    }

    fn header(&self, name: &str) -> String {
        self.part.header(name).unwrap_or_default().to_owned()
    }

    fn text(&self) -> String {
        self.part
            .text_of("text/plain")
            .or_else(|| self.part.text_of("text/html").map(|h| strip_tags(&h)))
            .unwrap_or_default()
    }

    fn snippet(&self) -> String {
        let text = self.text();
        let words: Vec<&str> = text.split_whitespace().collect();
        let text: String = words.join(" ").chars().take(200).collect();
        text.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', "&#39;")
    }

    fn brief(&self) -> Value {
        json!({"id": self.id, "threadId": self.thread_id, "labelIds": self.labels})
    }

    fn resource(&self, format: &str, wanted: &[&str]) -> Value {
        let mut value = json!({
            "id": self.id,
            "threadId": self.thread_id,
            "labelIds": self.labels,
            "snippet": self.snippet(),
            "sizeEstimate": self.raw.len(),
            "historyId": self.history_id.to_string(),
            "internalDate": self.internal_date.to_string(),
        });
        match format {
            "raw" => value["raw"] = json!(b64url(&self.raw)),
            "metadata" => {
                let headers: Vec<Value> = self
                    .part
                    .headers
                    .iter()
                    .filter(|(name, _)| {
                        wanted.is_empty() || wanted.iter().any(|w| w.eq_ignore_ascii_case(name))
                    })
                    .map(|(name, value)| json!({"name": name, "value": value}))
                    .collect();
                value["payload"] = json!({
                    "partId": "",
                    "mimeType": self.part.mime_type,
                    "filename": "",
                    "headers": headers,
                    "body": {"size": 0},
                });
            }
            "full" => value["payload"] = payload(&self.part, "", &self.id),
            _ => {}
        }
        value
    }

    fn sent_mail(&self) -> SentMail {
        SentMail {
            id: self.id.clone(),
            thread_id: self.thread_id.clone(),
            from: self.header("From"),
            to: self.header("To"),
            cc: self.header("Cc"),
            subject: self.header("Subject"),
            text: self
                .part
                .text_of("text/plain")
                .unwrap_or_default()
                .trim_end_matches(['\r', '\n'])
                .to_owned(),
            headers: self.part.headers.clone(),
            raw: String::from_utf8_lossy(&self.raw).into_owned(),
        }
    }
}

fn strip_tags(html: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for c in html.chars() {
        match c {
            '<' => inside = true,
            '>' => {
                inside = false;
                out.push(' ');
            }
            c if !inside => out.push(c),
            _ => {}
        }
    }
    out
}

fn attachment_id(message: &str, part_id: &str) -> String {
    format!("ANGjdJ_fake_{message}_{}", part_id.replace('.', "_"))
}

/// A part as Gmail's `MessagePart`.
fn payload(part: &Part, part_id: &str, message: &str) -> Value {
    let headers: Vec<Value> = part
        .headers
        .iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect();
    let mut value = json!({
        "partId": part_id,
        "mimeType": part.mime_type,
        "filename": part.filename,
        "headers": headers,
    });
    if part.mime_type.starts_with("multipart/") {
        value["body"] = json!({"size": 0});
        let parts: Vec<Value> = part
            .parts
            .iter()
            .enumerate()
            .map(|(i, child)| {
                let id = if part_id.is_empty() {
                    i.to_string()
                } else {
                    format!("{part_id}.{i}")
                };
                payload(child, &id, message)
            })
            .collect();
        value["parts"] = json!(parts);
    } else if !part.filename.is_empty() {
        value["body"] = json!({
            "attachmentId": attachment_id(message, part_id),
            "size": part.body.len(),
        });
    } else if part.body.is_empty() {
        value["body"] = json!({"size": 0});
    } else {
        value["body"] = json!({"size": part.body.len(), "data": b64url(&part.body)});
    }
    value
}

/// Builds the RFC 2822 text of a [`Mail`].
fn build(mail: &Mail, message_id: &str, n: u64) -> Vec<u8> {
    let mut head = format!(
        "From: {}\r\nTo: {}\r\n",
        mime::encode_word(&mail.from),
        mail.to
    );
    if !mail.cc.is_empty() {
        head.push_str(&format!("Cc: {}\r\n", mail.cc));
    }
    head.push_str(&format!(
        "Subject: {}\r\nDate: {}\r\nMessage-ID: {message_id}\r\nMIME-Version: 1.0\r\n",
        mime::encode_word(&mail.subject),
        mail.date.to_rfc2822()
    ));
    let text = mime::leaf("text/plain; charset=\"UTF-8\"", &[], mail.text.as_bytes());
    let body = match &mail.html {
        Some(html) => {
            let html = mime::leaf("text/html; charset=\"UTF-8\"", &[], html.as_bytes());
            mime::multipart("alternative", &format!("alt-{n:08x}"), &[text, html])
        }
        None => text,
    };
    let body = if mail.attachments.is_empty() {
        body
    } else {
        let mut parts = vec![body];
        for attachment in &mail.attachments {
            let name = attachment.name.replace('"', "");
            parts.push(mime::leaf(
                &format!("{}; name=\"{name}\"", attachment.media_type),
                &[(
                    "Content-Disposition",
                    format!("attachment; filename=\"{name}\""),
                )],
                &attachment.data,
            ));
        }
        mime::multipart("mixed", &format!("mixed-{n:08x}"), &parts)
    };
    format!("{head}{body}").into_bytes()
}

/// The subject without its `Re:`/`Fwd:` prefixes, in lower case.
fn base_subject(subject: &str) -> String {
    let mut subject = subject.trim();
    loop {
        let lower = subject.to_ascii_lowercase();
        let cut = ["re:", "fwd:", "fw:", "aw:"]
            .iter()
            .find(|p| lower.starts_with(**p))
            .map(|p| p.len());
        match cut {
            Some(len) => subject = subject[len..].trim_start(),
            None => return subject.to_lowercase(),
        }
    }
}

/// The `<…>` ids in a `References` or `In-Reply-To` header.
fn message_ids(value: &str) -> Vec<String> {
    value
        .split('<')
        .skip(1)
        .filter_map(|piece| piece.split_once('>').map(|(id, _)| format!("<{id}>")))
        .collect()
}

fn mailbox<'a>(st: &'a mut State, email: &str) -> &'a mut Mailbox {
    &mut st.account(email).mailbox
}

pub(crate) fn route(st: &mut State, req: &Req, caller: &Caller, segs: &[&str]) -> Answer {
    let ["users", user, rest @ ..] = segs else {
        return Err(unserved());
    };
    if *user != "me" && *user != caller.email {
        return Err(Fail::Error(
            403,
            "forbidden",
            format!("Delegation denied for {}", caller.email),
        ));
    }
    let scopes = match (req.method.as_str(), rest) {
        ("GET", ["profile" | "history"]) => READ_METADATA,
        ("GET", ["messages"]) => READ,
        ("GET", ["messages", _] | ["messages", _, "attachments", _]) => READ,
        ("POST", ["messages", "send"]) => SEND,
        ("POST", ["messages", _, "modify"]) => MODIFY,
        ("GET", ["labels"]) => LABELS_READ,
        ("POST", ["labels"]) => LABELS,
        ("POST", ["drafts"] | ["drafts", "send"]) => COMPOSE,
        ("GET", ["drafts"] | ["drafts", _]) => DRAFT_READ,
        _ => return Err(unserved()),
    };
    if let Some(response) = caller.require(scopes, SERVICE) {
        return Ok(response);
    }
    let email = caller.email.as_str();
    match (req.method.as_str(), rest) {
        ("GET", ["profile"]) => profile(st, email),
        ("GET", ["messages"]) => list(st, req, email),
        ("GET", ["messages", id]) => get(st, req, email, id),
        ("GET", ["messages", id, "attachments", attachment]) => {
            get_attachment(st, email, id, attachment)
        }
        ("POST", ["messages", "send"]) => send(st, req, email),
        ("POST", ["messages", id, "modify"]) => modify(st, req, email, id),
        ("GET", ["labels"]) => labels(st, email),
        ("POST", ["labels"]) => create_label(st, req, email),
        ("GET", ["history"]) => history(st, req, email),
        ("POST", ["drafts"]) => create_draft(st, req, email),
        ("POST", ["drafts", "send"]) => send_draft(st, req, email),
        ("GET", ["drafts"]) => list_drafts(st, req, email),
        ("GET", ["drafts", id]) => get_draft(st, req, email, id),
        _ => Err(unserved()),
    }
}

fn profile(st: &mut State, email: &str) -> Answer {
    let mailbox = mailbox(st, email);
    let mut threads: Vec<&str> = mailbox
        .messages
        .iter()
        .map(|m| m.thread_id.as_str())
        .collect();
    threads.sort_unstable();
    threads.dedup();
    Ok(ok(&json!({
        "emailAddress": email,
        "messagesTotal": mailbox.messages.len(),
        "threadsTotal": threads.len(),
        "historyId": mailbox.history_id.to_string(),
    })))
}

#[derive(Debug, Clone, PartialEq)]
enum Term {
    From(String),
    To(String),
    Subject(String),
    Label(String),
    NotLabel(String),
    Attachment,
    After(i64),
    Before(i64),
    Word(String),
    Nothing,
}

/// The query's tokens: bare, `op:value` or `op:"quoted value"`, or a
/// quoted phrase.
fn tokens(q: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in q.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Midnight of a `YYYY/MM/DD` date in Pacific time, or epoch seconds, in
/// milliseconds.
fn date_ms(value: &str) -> Option<i64> {
    if let Ok(seconds) = value.parse::<i64>() {
        return Some(seconds * 1000);
    }
    let date = NaiveDate::parse_from_str(value, "%Y/%m/%d")
        .or_else(|_| NaiveDate::parse_from_str(value, "%Y-%m-%d"))
        .ok()?;
    let midnight = date.and_hms_opt(0, 0, 0)?;
    chrono_tz::America::Los_Angeles
        .from_local_datetime(&midnight)
        .earliest()
        .map(|t| t.timestamp_millis())
}

fn age_ms(value: &str) -> Option<i64> {
    let unit = value.chars().last()?;
    let count: i64 = value[..value.len() - 1].parse().ok()?;
    let day = 86_400_000;
    let span = match unit {
        'd' => count * day,
        'm' => count * 30 * day,
        'y' => count * 365 * day,
        _ => return None,
    };
    Some(now().timestamp_millis() - span)
}

fn terms(q: &str) -> Vec<Term> {
    tokens(q)
        .into_iter()
        .map(|token| {
            let Some((op, value)) = token.split_once(':') else {
                return Term::Word(token.to_lowercase());
            };
            let value = value.to_lowercase();
            match op.to_ascii_lowercase().as_str() {
                "from" => Term::From(value),
                "to" => Term::To(value),
                "subject" => Term::Subject(value),
                "label" => Term::Label(value),
                "in" if value == "anywhere" => Term::Word(String::new()),
                "in" => Term::Label(value),
                "is" if value == "read" => Term::NotLabel("unread".to_owned()),
                "is" => Term::Label(value),
                "has" if value == "attachment" => Term::Attachment,
                "newer_than" => age_ms(&value).map_or(Term::Nothing, Term::After),
                "older_than" => age_ms(&value).map_or(Term::Nothing, Term::Before),
                "after" => date_ms(&value).map_or(Term::Nothing, Term::After),
                "before" => date_ms(&value).map_or(Term::Nothing, Term::Before),
                _ => Term::Word(token.to_lowercase()),
            }
        })
        .collect()
}

fn has_label(mailbox: &Mailbox, message: &Message, label: &str) -> bool {
    let label = match label {
        "drafts" => "draft",
        "sent" | "inbox" | "trash" | "spam" | "starred" | "important" | "unread" => label,
        other => other,
    };
    let id = mailbox
        .labels
        .iter()
        .find(|l| l.id.eq_ignore_ascii_case(label) || l.name.eq_ignore_ascii_case(label))
        .or_else(|| {
            mailbox
                .labels
                .iter()
                .find(|l| l.name.to_lowercase().replace([' ', '/'], "-") == label)
        })
        .map(|l| l.id.as_str());
    id.is_some_and(|id| message.labels.iter().any(|l| l == id))
}

fn matches(mailbox: &Mailbox, message: &Message, term: &Term) -> bool {
    let field = |name: &str| message.header(name).to_lowercase();
    match term {
        Term::From(value) => field("From").contains(value.as_str()),
        Term::To(value) => [field("To"), field("Cc")]
            .iter()
            .any(|f| f.contains(value.as_str())),
        Term::Subject(value) => field("Subject").contains(value.as_str()),
        Term::Label(label) => has_label(mailbox, message, label),
        Term::NotLabel(label) => !has_label(mailbox, message, label),
        Term::Attachment => message.part.has_attachment(),
        Term::After(ms) => message.internal_date >= *ms,
        Term::Before(ms) => message.internal_date < *ms,
        Term::Word(word) => [
            field("From"),
            field("To"),
            field("Subject"),
            message.text().to_lowercase(),
        ]
        .iter()
        .any(|f| f.contains(word.as_str())),
        Term::Nothing => false,
    }
}

fn list(st: &mut State, req: &Req, email: &str) -> Answer {
    let size = size_param(req, "maxResults", 100, 500)?;
    let terms = terms(req.param("q").unwrap_or_default());
    let label_ids: Vec<&str> = req.params("labelIds");
    let everywhere = req.param("includeSpamTrash") == Some("true")
        || req.param("q").is_some_and(|q| q.contains("in:anywhere"));
    let mailbox = mailbox(st, email);
    for label in &label_ids {
        if !mailbox.labels.iter().any(|l| l.id == *label) {
            return Err(bad(format!("Invalid label: {label}")));
        }
    }
    let mut found: Vec<&Message> = mailbox
        .messages
        .iter()
        .filter(|m| {
            everywhere
                || label_ids.iter().any(|l| *l == "SPAM" || *l == "TRASH")
                || !m.labels.iter().any(|l| l == "SPAM" || l == "TRASH")
        })
        .filter(|m| {
            label_ids
                .iter()
                .all(|l| m.labels.iter().any(|have| have == l))
        })
        .filter(|m| terms.iter().all(|t| matches(mailbox, m, t)))
        .collect();
    found.sort_by(|a, b| b.internal_date.cmp(&a.internal_date).then(b.id.cmp(&a.id)));
    let briefs: Vec<Value> = found
        .iter()
        .map(|m| json!({"id": m.id, "threadId": m.thread_id}))
        .collect();
    let (items, next) = page(req, &briefs, size)?;
    let mut answer = json!({"resultSizeEstimate": briefs.len()});
    if !items.is_empty() {
        answer["messages"] = json!(items);
    }
    if let Some(next) = next {
        answer["nextPageToken"] = json!(next);
    }
    Ok(ok(&answer))
}

fn format_param(req: &Req) -> Result<&str, Fail> {
    match req.param("format").unwrap_or("full") {
        format @ ("full" | "metadata" | "minimal" | "raw") => Ok(format),
        other => Err(super::invalid(format!(
            "Invalid value at 'format' ({other}): one of full, metadata, minimal, raw"
        ))),
    }
}

fn get(st: &mut State, req: &Req, email: &str, id: &str) -> Answer {
    let format = format_param(req)?;
    let wanted = req.params("metadataHeaders");
    let mailbox = mailbox(st, email);
    let message = mailbox
        .message(id)
        .ok_or_else(|| not_found("Requested entity was not found."))?;
    Ok(ok(&message.resource(format, &wanted)))
}

fn get_attachment(st: &mut State, email: &str, id: &str, attachment: &str) -> Answer {
    let mailbox = mailbox(st, email);
    let message = mailbox
        .message(id)
        .ok_or_else(|| not_found("Requested entity was not found."))?;
    let part_id = attachment
        .strip_prefix(&format!("ANGjdJ_fake_{id}_"))
        .map(|p| p.replace('_', "."))
        .ok_or_else(|| bad(format!("Invalid attachment token: {attachment}")))?;
    let part = message
        .part
        .at(&part_id)
        .filter(|p| !p.filename.is_empty())
        .ok_or_else(|| bad(format!("Invalid attachment token: {attachment}")))?;
    Ok(ok(
        &json!({"size": part.body.len(), "data": b64url(&part.body)}),
    ))
}

/// The decoded `raw` of a message body (`{raw, threadId?}`).
fn decode_raw(message: &serde_json::Map<String, Value>) -> Result<Vec<u8>, Fail> {
    let raw = message.get("raw").and_then(Value::as_str).ok_or_else(|| {
        bad("'raw' RFC822 payload message string or uploading message via /upload/* URL required")
    })?;
    b64url_decode(raw).ok_or_else(|| {
        super::invalid("Invalid value for ByteString: raw is not base64url".to_owned())
    })
}

/// Checks the headers a message needs to be sent.
fn check_sendable(part: &Part) -> Result<(), Fail> {
    for header in ["To", "From", "Subject"] {
        if part.header(header).is_none_or(|v| v.trim().is_empty()) {
            let message = if header == "To" {
                "Recipient address required".to_owned()
            } else {
                format!("Invalid {header} header: the message has none")
            };
            return Err(Fail::Violation(400, "invalidArgument", message));
        }
    }
    Ok(())
}

/// The thread a new message goes to: the asked one if it follows Gmail's
/// threading rules (else a new one, and a violation).
fn thread_for(
    st: &mut State,
    req: &Req,
    email: &str,
    part: &Part,
    asked: Option<&str>,
    own_id: &str,
) -> Result<String, Fail> {
    let Some(thread) = asked else {
        return Ok(own_id.to_owned());
    };
    let mailbox = mailbox(st, email);
    let members: Vec<&Message> = mailbox
        .messages
        .iter()
        .filter(|m| m.thread_id == thread)
        .collect();
    if members.is_empty() {
        return Err(Fail::Violation(
            404,
            "notFound",
            format!("Requested entity was not found: no thread {thread}"),
        ));
    }
    let mut referenced = message_ids(part.header("In-Reply-To").unwrap_or_default());
    referenced.extend(message_ids(part.header("References").unwrap_or_default()));
    let names_one = members.iter().any(|m| {
        let id = m.header("Message-ID");
        referenced.iter().any(|r| r.eq_ignore_ascii_case(id.trim()))
    });
    let subject = base_subject(part.header("Subject").unwrap_or_default());
    let same_subject = members
        .iter()
        .any(|m| base_subject(&m.header("Subject")) == subject);
    if names_one && same_subject {
        return Ok(thread.to_owned());
    }
    let why = if names_one {
        "its Subject does not match the thread's"
    } else {
        "neither In-Reply-To nor References names a message of that thread"
    };
    st.violation(
        req,
        &format!("threadId {thread} given but {why}: Gmail puts it in a new thread"),
    );
    Ok(own_id.to_owned())
}

/// Adds a `Message-ID` header when the client did not write one, as
/// Gmail does.
fn with_message_id(raw: Vec<u8>, part: &Part, n: u64) -> Vec<u8> {
    if part.header("Message-ID").is_some() {
        return raw;
    }
    let mut out = format!("Message-ID: <fake-{n}@mail.gmail.com>\r\n").into_bytes();
    out.extend(raw);
    out
}

fn send(st: &mut State, req: &Req, email: &str) -> Answer {
    let body = json_body(req)?;
    let raw = decode_raw(&body)?;
    let part = mime::parse(&raw);
    check_sendable(&part)?;
    let n = st.next();
    let id = message_id_of(n);
    let asked = body.get("threadId").and_then(Value::as_str);
    let thread = thread_for(st, req, email, &part, asked, &id)?;
    let raw = with_message_id(raw, &part, n);
    let message = Message::new(
        id,
        thread,
        vec!["SENT".to_owned()],
        now().timestamp_millis(),
        raw,
    );
    let answer = message.brief();
    mailbox(st, email).store(message);
    Ok(ok(&answer))
}

fn modify(st: &mut State, req: &Req, email: &str, id: &str) -> Answer {
    let body = json_body(req)?;
    let ids = |key: &str| -> Vec<String> {
        body.get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let (add, remove) = (ids("addLabelIds"), ids("removeLabelIds"));
    let mailbox = mailbox(st, email);
    for label in add.iter().chain(&remove) {
        if !mailbox.labels.iter().any(|l| l.id == *label) {
            return Err(bad(format!("Invalid label: {label}")));
        }
    }
    let message = mailbox
        .messages
        .iter_mut()
        .find(|m| m.id == id)
        .ok_or_else(|| not_found("Requested entity was not found."))?;
    let added: Vec<String> = add
        .iter()
        .filter(|l| !message.labels.contains(l))
        .cloned()
        .collect();
    message.labels.extend(added.iter().cloned());
    let removed: Vec<String> = remove
        .iter()
        .filter(|l| message.labels.contains(l))
        .cloned()
        .collect();
    message.labels.retain(|l| !removed.contains(l));
    if !added.is_empty() {
        mailbox.record(id, Change::LabelsAdded(added));
    }
    if !removed.is_empty() {
        mailbox.record(id, Change::LabelsRemoved(removed));
    }
    let message = mailbox
        .message(id)
        .ok_or_else(|| not_found("Requested entity was not found."))?;
    Ok(ok(&message.brief()))
}

fn label_resource(label: &Label) -> Value {
    if label.system {
        json!({"id": label.id, "name": label.name, "type": "system"})
    } else {
        json!({
            "id": label.id,
            "name": label.name,
            "type": "user",
            "messageListVisibility": "show",
            "labelListVisibility": "labelShow",
        })
    }
}

fn labels(st: &mut State, email: &str) -> Answer {
    let labels: Vec<Value> = mailbox(st, email)
        .labels
        .iter()
        .map(label_resource)
        .collect();
    Ok(ok(&json!({ "labels": labels })))
}

fn create_label(st: &mut State, req: &Req, email: &str) -> Answer {
    let body = json_body(req)?;
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| super::invalid("Invalid label name: name is required"))?
        .to_owned();
    let n = st.next();
    let mailbox = mailbox(st, email);
    if mailbox.label_id(&name).is_some() {
        return Err(Fail::Error(
            409,
            "alreadyExists",
            "Label name exists or conflicts".to_owned(),
        ));
    }
    let id = mailbox.add_label(&name, n);
    let label = mailbox
        .labels
        .iter()
        .find(|l| l.id == id)
        .map(label_resource)
        .unwrap_or_default();
    Ok(ok(&label))
}

fn history(st: &mut State, req: &Req, email: &str) -> Answer {
    let size = size_param(req, "maxResults", 100, 500)?;
    let start = req
        .param("startHistoryId")
        .ok_or_else(|| super::invalid("Missing required parameter: startHistoryId"))?;
    let start: u64 = start
        .parse()
        .map_err(|_| super::invalid(format!("Invalid startHistoryId: {start}")))?;
    let types = req.params("historyTypes");
    for kind in &types {
        if ![
            "messageAdded",
            "messageDeleted",
            "labelAdded",
            "labelRemoved",
        ]
        .contains(kind)
        {
            return Err(super::invalid(format!(
                "Invalid value at 'history_types': {kind}"
            )));
        }
    }
    let label = req.param("labelId");
    let mailbox = mailbox(st, email);
    if start < mailbox.floor {
        return Err(not_found("Requested entity was not found."));
    }
    let records: Vec<Value> = mailbox
        .history
        .iter()
        .filter(|r| r.id > start)
        .filter(|r| {
            let kind = match r.change {
                Change::Added => "messageAdded",
                Change::Deleted => "messageDeleted",
                Change::LabelsAdded(_) => "labelAdded",
                Change::LabelsRemoved(_) => "labelRemoved",
            };
            types.is_empty() || types.contains(&kind)
        })
        .filter(|r| label.is_none_or(|l| r.labels.iter().any(|have| have == l)))
        .map(history_record)
        .collect();
    let (items, next) = page(req, &records, size)?;
    let mut answer = json!({"historyId": mailbox.history_id.to_string()});
    if !items.is_empty() {
        answer["history"] = json!(items);
    }
    if let Some(next) = next {
        answer["nextPageToken"] = json!(next);
    }
    Ok(ok(&answer))
}

fn history_record(record: &Record) -> Value {
    let message = json!({
        "id": record.message_id,
        "threadId": record.thread_id,
        "labelIds": record.labels,
    });
    let mut value = json!({
        "id": record.id.to_string(),
        "messages": [{"id": record.message_id, "threadId": record.thread_id}],
    });
    match &record.change {
        Change::Added => value["messagesAdded"] = json!([{ "message": message }]),
        Change::Deleted => value["messagesDeleted"] = json!([{ "message": message }]),
        Change::LabelsAdded(labels) => {
            value["labelsAdded"] = json!([{"message": message, "labelIds": labels}]);
        }
        Change::LabelsRemoved(labels) => {
            value["labelsRemoved"] = json!([{"message": message, "labelIds": labels}]);
        }
    }
    value
}

fn create_draft(st: &mut State, req: &Req, email: &str) -> Answer {
    let body = json_body(req)?;
    let message = body
        .get("message")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("a draft needs a `message` object with `raw`"))?;
    let raw = decode_raw(message)?;
    let part = mime::parse(&raw);
    let n = st.next();
    let id = message_id_of(n);
    let asked = message.get("threadId").and_then(Value::as_str);
    let thread = thread_for(st, req, email, &part, asked, &id)?;
    let raw = with_message_id(raw, &part, n);
    let stored = Message::new(
        id.clone(),
        thread,
        vec!["DRAFT".to_owned()],
        now().timestamp_millis(),
        raw,
    );
    let brief = stored.brief();
    let draft_id = format!("r{}", 1_000_000_000_000_u64 + n);
    let mailbox = mailbox(st, email);
    mailbox.store(stored);
    mailbox.drafts.push((draft_id.clone(), id));
    Ok(ok(&json!({"id": draft_id, "message": brief})))
}

fn list_drafts(st: &mut State, req: &Req, email: &str) -> Answer {
    let size = size_param(req, "maxResults", 100, 500)?;
    let mailbox = mailbox(st, email);
    let drafts: Vec<Value> = mailbox
        .drafts
        .iter()
        .rev()
        .filter_map(|(draft, id)| {
            let message = mailbox.message(id)?;
            Some(json!({"id": draft, "message": {"id": id, "threadId": message.thread_id}}))
        })
        .collect();
    let (items, next) = page(req, &drafts, size)?;
    let mut answer = json!({"resultSizeEstimate": drafts.len()});
    if !items.is_empty() {
        answer["drafts"] = json!(items);
    }
    if let Some(next) = next {
        answer["nextPageToken"] = json!(next);
    }
    Ok(ok(&answer))
}

fn get_draft(st: &mut State, req: &Req, email: &str, draft: &str) -> Answer {
    let format = format_param(req)?;
    let mailbox = mailbox(st, email);
    let message = mailbox
        .drafts
        .iter()
        .find(|(id, _)| id == draft)
        .and_then(|(_, message)| mailbox.message(message))
        .ok_or_else(|| not_found("Requested entity was not found."))?;
    Ok(ok(
        &json!({"id": draft, "message": message.resource(format, &[])}),
    ))
}

fn send_draft(st: &mut State, req: &Req, email: &str) -> Answer {
    let body = json_body(req)?;
    let draft = body
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("drafts.send needs the draft's `id`"))?
        .to_owned();
    let n = st.next();
    let mailbox = mailbox(st, email);
    let position = mailbox
        .drafts
        .iter()
        .position(|(id, _)| *id == draft)
        .ok_or_else(|| not_found("Requested entity was not found."))?;
    let old_id = mailbox.drafts[position].1.clone();
    let old = mailbox
        .message(&old_id)
        .cloned()
        .ok_or_else(|| not_found("Requested entity was not found."))?;
    check_sendable(&old.part)?;
    mailbox.drafts.remove(position);
    mailbox.record(&old_id, Change::Deleted);
    mailbox.messages.retain(|m| m.id != old_id);
    let thread = if old.thread_id == old_id {
        message_id_of(n)
    } else {
        old.thread_id.clone()
    };
    let message = Message::new(
        message_id_of(n),
        thread,
        vec!["SENT".to_owned()],
        now().timestamp_millis(),
        old.raw,
    );
    let answer = message.brief();
    mailbox.store(message);
    Ok(ok(&answer))
}

impl FakeGoogle {
    /// Puts a message in `email`'s mailbox (a new history record,
    /// `messagesAdded`); returns its id.
    pub fn add_mail(&self, email: &str, mail: Mail) -> String {
        let mut st = self.lock();
        let n = st.next();
        let id = message_id_of(n);
        let message_id = mail
            .message_id
            .clone()
            .unwrap_or_else(|| format!("<fake-{n}@mail.example.com>"));
        let raw = build(&mail, &message_id, n);
        let mut label_ids = Vec::new();
        for label in &mail.labels {
            let existing = mailbox(&mut st, email).label_id(label);
            let label_id = match existing {
                Some(id) => id,
                None => {
                    let n = st.next();
                    mailbox(&mut st, email).add_label(label, n)
                }
            };
            label_ids.push(label_id);
        }
        let thread = mail.thread_id.clone().unwrap_or_else(|| id.clone());
        let message = Message::new(id, thread, label_ids, mail.date.timestamp_millis(), raw);
        mailbox(&mut st, email).store(message)
    }

    /// The messages the client sent as `email`, in order.
    pub fn sent(&self, email: &str) -> Vec<SentMail> {
        self.messages_labelled(email, "SENT")
    }

    /// `email`'s drafts, in order.
    pub fn drafts(&self, email: &str) -> Vec<SentMail> {
        self.messages_labelled(email, "DRAFT")
    }

    fn messages_labelled(&self, email: &str, label: &str) -> Vec<SentMail> {
        let mut st = self.lock();
        mailbox(&mut st, email)
            .messages
            .iter()
            .filter(|m| m.labels.iter().any(|l| l == label))
            .map(Message::sent_mail)
            .collect()
    }

    /// The label ids of message `id` (empty when there is no such message).
    pub fn labels_of(&self, email: &str, id: &str) -> Vec<String> {
        let mut st = self.lock();
        mailbox(&mut st, email)
            .message(id)
            .map(|m| m.labels.clone())
            .unwrap_or_default()
    }

    /// Forgets `email`'s history: listing it from any history id issued
    /// so far is a 404 (the mailbox's own history id moves on by one).
    pub fn expire_history(&self, email: &str) {
        let mut st = self.lock();
        let mailbox = mailbox(&mut st, email);
        mailbox.history_id += 1;
        mailbox.floor = mailbox.history_id;
        mailbox.history.clear();
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use chrono::Duration;

    use super::super::OWNER;
    use super::super::testing::{call, get};
    use super::*;

    const BOX: &str = "/gmail/v1/users/me";

    fn raw(text: &str) -> String {
        URL_SAFE_NO_PAD.encode(text)
    }

    fn decode(data: &Value) -> String {
        String::from_utf8(b64url_decode(data.as_str().unwrap()).unwrap()).unwrap()
    }

    #[tokio::test]
    async fn a_message_is_served_with_its_mime_tree() {
        let fake = FakeGoogle::start();
        let token = fake.issue_tokens(OWNER, &["gmail.readonly"]).access_token;
        let id = fake.add_mail(
            OWNER,
            Mail {
                subject: "Quarterly report".into(),
                text: "Numbers attached, see you <soon>.".into(),
                html: Some("<p>Numbers attached</p>".into()),
                attachments: vec![Attachment {
                    name: "q3.pdf".into(),
                    media_type: "application/pdf".into(),
                    data: b"%PDF-1.4 fake".to_vec(),
                }],
                ..Mail::default()
            },
        );
        let (status, message) = get(&fake, &token, &format!("{BOX}/messages/{id}")).await;
        assert_eq!(status, 200);
        assert_eq!(message["labelIds"], json!(["INBOX", "UNREAD"]));
        assert_eq!(
            message["snippet"],
            "Numbers attached, see you &lt;soon&gt;."
        );
        assert!(message["internalDate"].is_string());
        assert!(message["historyId"].is_string());
        let payload = &message["payload"];
        assert_eq!(payload["mimeType"], "multipart/mixed");
        assert_eq!(payload["partId"], "");
        let subject = payload["headers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["name"] == "Subject")
            .unwrap();
        assert_eq!(subject["value"], "Quarterly report");
        let alternative = &payload["parts"][0];
        assert_eq!(alternative["mimeType"], "multipart/alternative");
        assert_eq!(alternative["parts"][0]["partId"], "0.0");
        assert_eq!(alternative["parts"][0]["mimeType"], "text/plain");
        assert_eq!(
            decode(&alternative["parts"][0]["body"]["data"]),
            "Numbers attached, see you <soon>."
        );
        assert_eq!(alternative["parts"][1]["mimeType"], "text/html");
        let pdf = &payload["parts"][1];
        assert_eq!(pdf["filename"], "q3.pdf");
        assert_eq!(pdf["body"]["size"], 13);
        assert_eq!(pdf["body"].get("data"), None);
        let attachment = pdf["body"]["attachmentId"].as_str().unwrap();
        let (status, body) = get(
            &fake,
            &token,
            &format!("{BOX}/messages/{id}/attachments/{attachment}"),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(body["size"], 13);
        assert_eq!(decode(&body["data"]), "%PDF-1.4 fake");

        let (_, raw) = get(&fake, &token, &format!("{BOX}/messages/{id}?format=raw")).await;
        assert!(decode(&raw["raw"]).contains("Subject: Quarterly report\r\n"));
        assert_eq!(raw.get("payload"), None);
        let (_, meta) = get(
            &fake,
            &token,
            &format!(
                "{BOX}/messages/{id}?format=metadata&metadataHeaders=From&metadataHeaders=subject"
            ),
        )
        .await;
        let names: Vec<&str> = meta["payload"]["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["From", "Subject"]);
        let (status, _) = get(&fake, &token, &format!("{BOX}/messages/ffff")).await;
        assert_eq!(status, 404);
        assert_eq!(fake.violations(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn searches_match_gmail_operators_and_pages_are_real() {
        let fake = FakeGoogle::start();
        let token = fake.issue_tokens(OWNER, &["gmail.modify"]).access_token;
        let old = fake.add_mail(
            OWNER,
            Mail {
                from: "Bob <bob@example.org>".into(),
                subject: "Old news".into(),
                text: "nothing".into(),
                date: now() - Duration::days(40),
                labels: vec!["INBOX".into()],
                ..Mail::default()
            },
        );
        let mut recent = Vec::new();
        for i in 0..7 {
            recent.push(fake.add_mail(
                OWNER,
                Mail {
                    subject: format!("Invoice number {i}"),
                    text: format!("Please pay invoice {i}."),
                    date: now() - Duration::hours(10 - i),
                    ..Mail::default()
                },
            ));
        }
        let ids = |value: &Value| -> Vec<String> {
            value["messages"]
                .as_array()
                .map(|m| {
                    m.iter()
                        .map(|m| m["id"].as_str().unwrap().to_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        let search = |q: &str| {
            format!(
                "{BOX}/messages?q={}",
                q.replace(' ', "%20").replace('"', "%22")
            )
        };
        let (_, found) = get(&fake, &token, &search("from:bob")).await;
        assert_eq!(ids(&found), vec![old.clone()]);
        let (_, found) = get(&fake, &token, &search("is:unread newer_than:2d")).await;
        assert_eq!(found["resultSizeEstimate"], 7);
        let (_, found) = get(&fake, &token, &search("subject:\"number 3\"")).await;
        assert_eq!(ids(&found), vec![recent[3].clone()]);
        let (_, found) = get(&fake, &token, &search("PAY invoice in:inbox")).await;
        assert_eq!(found["resultSizeEstimate"], 7);
        let (_, found) = get(&fake, &token, &search("has:attachment")).await;
        assert_eq!(found, json!({"resultSizeEstimate": 0}));
        let before = (now() - Duration::days(20)).timestamp();
        let (_, found) = get(&fake, &token, &search(&format!("before:{before}"))).await;
        assert_eq!(ids(&found), vec![old.clone()]);
        let (_, found) = get(&fake, &token, &search("after:2001/01/01")).await;
        assert_eq!(found["resultSizeEstimate"], 8);

        let mut seen = Vec::new();
        let mut path = format!("{BOX}/messages?maxResults=3&labelIds=UNREAD");
        loop {
            let (status, page) = get(&fake, &token, &path).await;
            assert_eq!(status, 200);
            seen.extend(ids(&page));
            match page["nextPageToken"].as_str() {
                Some(next) => {
                    path = format!("{BOX}/messages?maxResults=3&labelIds=UNREAD&pageToken={next}");
                }
                None => break,
            }
        }
        let newest_first: Vec<String> = recent.iter().rev().cloned().collect();
        assert_eq!(seen, newest_first);
        assert_eq!(fake.violations(), Vec::<String>::new());
    }

    #[tokio::test]
    async fn replies_follow_the_threading_rules() {
        let fake = FakeGoogle::start();
        let token = fake.issue_tokens(OWNER, &["gmail.modify"]).access_token;
        let first = fake.add_mail(
            OWNER,
            Mail {
                subject: "Lunch?".into(),
                text: "Tomorrow at noon?".into(),
                message_id: Some("<lunch-1@example.com>".into()),
                ..Mail::default()
            },
        );
        let reply = "From: owner@example.com\r\nTo: ada@example.com\r\nSubject: Re: Lunch?\r\n\
In-Reply-To: <lunch-1@example.com>\r\nReferences: <lunch-1@example.com>\r\n\
Content-Type: text/plain; charset=UTF-8\r\n\r\nYes, see you there.\r\n";
        let (status, sent) = call(
            &fake,
            "POST",
            &token,
            &format!("{BOX}/messages/send"),
            Some(json!({"raw": raw(reply), "threadId": first})),
        )
        .await;
        assert_eq!(status, 200, "{sent}");
        assert_eq!(sent["threadId"], first.as_str());
        assert_eq!(sent["labelIds"], json!(["SENT"]));
        let mails = fake.sent(OWNER);
        assert_eq!(mails.len(), 1);
        assert_eq!(mails[0].subject, "Re: Lunch?");
        assert_eq!(mails[0].to, "ada@example.com");
        assert_eq!(mails[0].text, "Yes, see you there.");
        assert_eq!(mails[0].thread_id, first);
        assert_eq!(fake.violations(), Vec::<String>::new());

        let unthreaded =
            "From: owner@example.com\r\nTo: ada@example.com\r\nSubject: Re: Lunch?\r\n\r\nOk\r\n";
        let (status, sent) = call(
            &fake,
            "POST",
            &token,
            &format!("{BOX}/messages/send"),
            Some(json!({"raw": raw(unthreaded), "threadId": first})),
        )
        .await;
        assert_eq!(status, 200);
        assert_ne!(sent["threadId"], first.as_str());
        assert_eq!(fake.violations().len(), 1);

        let no_to = "From: owner@example.com\r\nSubject: Hi\r\n\r\nOk\r\n";
        let (status, error) = call(
            &fake,
            "POST",
            &token,
            &format!("{BOX}/messages/send"),
            Some(json!({"raw": raw(no_to)})),
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(error["error"]["message"], "Recipient address required");
        assert_eq!(fake.violations().len(), 2);
    }

    #[tokio::test]
    async fn label_changes_appear_in_the_history() {
        let fake = FakeGoogle::start();
        let token = fake.issue_tokens(OWNER, &["gmail.modify"]).access_token;
        let (_, profile) = get(&fake, &token, &format!("{BOX}/profile")).await;
        let start = profile["historyId"].as_str().unwrap().to_owned();
        let id = fake.add_mail(
            OWNER,
            Mail {
                subject: "Hello".into(),
                ..Mail::default()
            },
        );
        let (status, label) = call(
            &fake,
            "POST",
            &token,
            &format!("{BOX}/labels"),
            Some(json!({"name": "Receipts"})),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(label["type"], "user");
        let label_id = label["id"].as_str().unwrap().to_owned();
        assert!(label_id.starts_with("Label_"));
        let (status, modified) = call(
            &fake,
            "POST",
            &token,
            &format!("{BOX}/messages/{id}/modify"),
            Some(json!({"addLabelIds": [label_id], "removeLabelIds": ["UNREAD"]})),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(modified["labelIds"], json!(["INBOX", label_id]));
        assert_eq!(
            fake.labels_of(OWNER, &id),
            vec!["INBOX".to_owned(), label_id.clone()]
        );
        let (status, history) = get(
            &fake,
            &token,
            &format!("{BOX}/history?startHistoryId={start}"),
        )
        .await;
        assert_eq!(status, 200);
        let records = history["history"].as_array().unwrap();
        assert_eq!(records.len(), 3);
        assert_eq!(records[0]["messagesAdded"][0]["message"]["id"], id.as_str());
        assert_eq!(records[1]["labelsAdded"][0]["labelIds"], json!([label_id]));
        assert_eq!(
            records[2]["labelsRemoved"][0]["labelIds"],
            json!(["UNREAD"])
        );
        let (_, added) = get(
            &fake,
            &token,
            &format!("{BOX}/history?startHistoryId={start}&historyTypes=messageAdded"),
        )
        .await;
        assert_eq!(added["history"].as_array().unwrap().len(), 1);
        let (status, error) = call(
            &fake,
            "POST",
            &token,
            &format!("{BOX}/messages/{id}/modify"),
            Some(json!({"addLabelIds": ["Receipts"]})),
        )
        .await;
        assert_eq!(
            (status, &error["error"]["message"]),
            (400, &json!("Invalid label: Receipts"))
        );
        assert_eq!(fake.violations().len(), 1);

        fake.expire_history(OWNER);
        let (status, _) = get(
            &fake,
            &token,
            &format!("{BOX}/history?startHistoryId={start}"),
        )
        .await;
        assert_eq!(status, 404);
        let (_, profile) = get(&fake, &token, &format!("{BOX}/profile")).await;
        let now_id = profile["historyId"].as_str().unwrap();
        let (status, empty) = get(
            &fake,
            &token,
            &format!("{BOX}/history?startHistoryId={now_id}"),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(empty, json!({"historyId": now_id}));
    }

    #[tokio::test]
    async fn drafts_are_saved_and_sent() {
        let fake = FakeGoogle::start();
        let token = fake.issue_tokens(OWNER, &["gmail.compose"]).access_token;
        let text =
            "From: owner@example.com\r\nTo: bob@example.org\r\nSubject: Plan\r\n\r\nDraft text\r\n";
        let (status, draft) = call(
            &fake,
            "POST",
            &token,
            &format!("{BOX}/drafts"),
            Some(json!({"message": {"raw": raw(text)}})),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(draft["message"]["labelIds"], json!(["DRAFT"]));
        assert_eq!(fake.drafts(OWNER)[0].text, "Draft text");
        let (_, list) = get(&fake, &token, &format!("{BOX}/drafts")).await;
        assert_eq!(list["drafts"][0]["id"], draft["id"]);
        let (status, sent) = call(
            &fake,
            "POST",
            &token,
            &format!("{BOX}/drafts/send"),
            Some(json!({"id": draft["id"]})),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(sent["labelIds"], json!(["SENT"]));
        assert_eq!(fake.drafts(OWNER), Vec::new());
        assert_eq!(fake.sent(OWNER)[0].subject, "Plan");
        let (_, list) = get(&fake, &token, &format!("{BOX}/drafts")).await;
        assert_eq!(list, json!({"resultSizeEstimate": 0}));
        // Reading mail needs more than gmail.compose.
        let (status, _) = get(&fake, &token, &format!("{BOX}/messages")).await;
        assert_eq!(status, 403);
        assert_eq!(fake.violations(), Vec::<String>::new());
    }
}
