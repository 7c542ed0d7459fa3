//! The Drive API (`/drive/v3/…` and `/upload/drive/v3/files`).
//!
//! Served: `GET files` (`q`, `pageSize` 100 by default and at most 1000,
//! `pageToken`, `orderBy`, `fields` accepted but every answer has the same
//! fields: `id`, `name`, `mimeType`, `modifiedTime`, `createdTime`,
//! `size` for binary files, `webViewLink`, `parents`, `trashed`); `GET
//! files/{id}` (metadata) and `?alt=media` (the bytes; a Google Docs type
//! is `403 fileNotDownloadable`); `GET files/{id}/export?mimeType=` (a
//! document as `text/plain`, a spreadsheet as `text/csv`; a binary file is
//! `403 fileNotExportable`, over 10 MB `403 exportSizeLimitExceeded`);
//! `POST /upload/drive/v3/files?uploadType=multipart` with a
//! `multipart/related` body: the JSON metadata, then the media.
//!
//! The search `q` understands clauses joined by `and`: `name contains
//! '…'` (word prefixes, as Drive), `name = '…'`, `fullText contains
//! '…'`, `mimeType = '…'` or `!=`, `trashed = true|false`, `'<id>' in
//! parents` (`root` included) and `modifiedTime > '…'` (or `<`, `>=`,
//! `<=`); anything else is `400 invalid` ("Invalid Value") and a
//! violation, since the fake cannot tell what Drive would answer.
//!
//! Scopes: `drive` and `drive.readonly` see every file, `drive.file` only
//! the files the app created (uploads and new documents; others are
//! 404); uploads need `drive` or `drive.file`.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::mime;
use super::{
    Answer, Caller, Fail, FakeGoogle, Req, State, bad, invalid, now, ok, page, parse_rfc3339,
    rfc3339, size_param, unserved,
};
use crate::server;

const SERVICE: &str = "drive.googleapis.com";
/// A Google document.
pub const DOCUMENT: &str = "application/vnd.google-apps.document";
/// A Google spreadsheet.
pub const SPREADSHEET: &str = "application/vnd.google-apps.spreadsheet";
/// A folder.
pub const FOLDER: &str = "application/vnd.google-apps.folder";
/// The id of every account's My Drive folder (alias `root`).
pub const ROOT: &str = "0AFakeMyDriveRootFolderUk9PVA";
/// The largest file Drive exports.
pub const EXPORT_LIMIT: usize = 10 * 1024 * 1024;

const READ: &[&str] = &["drive", "drive.readonly", "drive.file"];
const METADATA: &[&str] = &[
    "drive",
    "drive.readonly",
    "drive.file",
    "drive.metadata.readonly",
    "drive.metadata",
];
const WRITE: &[&str] = &["drive", "drive.file"];

#[derive(Debug, Clone)]
pub(crate) struct DriveFile {
    pub id: String,
    pub name: String,
    pub mime_type: String,
    pub data: Vec<u8>,
    pub parents: Vec<String>,
    pub trashed: bool,
    /// Made by the app (through the API), so visible with `drive.file`.
    pub app_created: bool,
    pub created: DateTime<Utc>,
    pub modified: DateTime<Utc>,
}

impl DriveFile {
    pub fn new(n: u64, name: &str, mime_type: &str, data: Vec<u8>, app_created: bool) -> Self {
        let time = now();
        DriveFile {
            id: format!("1FakeDriveFile{n:012}xYz"),
            name: name.to_owned(),
            mime_type: mime_type.to_owned(),
            data,
            parents: vec![ROOT.to_owned()],
            trashed: false,
            app_created,
            created: time,
            modified: time,
        }
    }

    fn google_type(&self) -> bool {
        self.mime_type.starts_with("application/vnd.google-apps.")
    }

    pub fn resource(&self) -> Value {
        let link = match self.mime_type.as_str() {
            DOCUMENT => format!(
                "https://docs.google.com/document/d/{}/edit?usp=drivesdk",
                self.id
            ),
            SPREADSHEET => format!(
                "https://docs.google.com/spreadsheets/d/{}/edit?usp=drivesdk",
                self.id
            ),
            FOLDER => format!("https://drive.google.com/drive/folders/{}", self.id),
            _ => format!(
                "https://drive.google.com/file/d/{}/view?usp=drivesdk",
                self.id
            ),
        };
        let mut value = json!({
            "kind": "drive#file",
            "id": self.id,
            "name": self.name,
            "mimeType": self.mime_type,
            "parents": self.parents,
            "trashed": self.trashed,
            "createdTime": rfc3339(self.created),
            "modifiedTime": rfc3339(self.modified),
            "webViewLink": link,
        });
        if !self.google_type() {
            value["size"] = json!(self.data.len().to_string());
        }
        value
    }
}

/// Whether the caller may see `file`.
fn visible(caller: &Caller, file: &DriveFile) -> bool {
    caller.has_any(&[
        "drive",
        "drive.readonly",
        "drive.metadata.readonly",
        "drive.metadata",
    ]) || (caller.has_any(&["drive.file"]) && file.app_created)
}

fn file_not_found(id: &str) -> Fail {
    Fail::Error(404, "notFound", format!("File not found: {id}."))
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Text(String),
    Word(String),
    Op(String),
}

fn tokenize(q: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut chars = q.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '\'' | '"' => {
                let mut text = String::new();
                loop {
                    match chars.next()? {
                        '\\' => text.push(chars.next()?),
                        end if end == c => break,
                        other => text.push(other),
                    }
                }
                tokens.push(Token::Text(text));
            }
            '=' => tokens.push(Token::Op("=".to_owned())),
            '!' | '<' | '>' => {
                let mut op = c.to_string();
                if chars.peek() == Some(&'=') {
                    chars.next();
                    op.push('=');
                }
                tokens.push(Token::Op(op));
            }
            c if c.is_alphanumeric() || c == '_' => {
                let mut word = c.to_string();
                while let Some(next) = chars.peek().copied()
                    && (next.is_alphanumeric() || next == '_')
                {
                    word.push(next);
                    chars.next();
                }
                tokens.push(Token::Word(word));
            }
            _ => return None,
        }
    }
    Some(tokens)
}

#[derive(Debug, Clone, PartialEq)]
enum Clause {
    NameContains(String),
    NameIs(String),
    FullText(String),
    MimeType(String, bool),
    Trashed(bool),
    InParents(String),
    Modified(String, DateTime<Utc>),
}

fn clauses(q: &str) -> Option<Vec<Clause>> {
    let tokens = tokenize(q)?;
    let mut out = Vec::new();
    for group in tokens.split(|t| matches!(t, Token::Word(w) if w.eq_ignore_ascii_case("and"))) {
        let word = |t: &Token, w: &str| matches!(t, Token::Word(x) if x == w);
        let clause = match group {
            [Token::Word(f), op, Token::Text(v)] if f == "name" && word(op, "contains") => {
                Clause::NameContains(v.to_lowercase())
            }
            [Token::Word(f), Token::Op(op), Token::Text(v)] if f == "name" && op == "=" => {
                Clause::NameIs(v.clone())
            }
            [Token::Word(f), op, Token::Text(v)] if f == "fullText" && word(op, "contains") => {
                Clause::FullText(v.to_lowercase())
            }
            [Token::Word(f), Token::Op(op), Token::Text(v)] if f == "mimeType" => match op.as_str()
            {
                "=" => Clause::MimeType(v.clone(), true),
                "!=" => Clause::MimeType(v.clone(), false),
                _ => return None,
            },
            [Token::Word(f), Token::Op(op), Token::Word(v)] if f == "trashed" => {
                let value = match v.as_str() {
                    "true" => true,
                    "false" => false,
                    _ => return None,
                };
                match op.as_str() {
                    "=" => Clause::Trashed(value),
                    "!=" => Clause::Trashed(!value),
                    _ => return None,
                }
            }
            [Token::Text(id), a, b] if word(a, "in") && word(b, "parents") => {
                let id = if id == "root" { ROOT } else { id.as_str() };
                Clause::InParents(id.to_owned())
            }
            [Token::Word(f), Token::Op(op), Token::Text(v)]
                if f == "modifiedTime" && op != "!=" =>
            {
                Clause::Modified(op.clone(), parse_rfc3339(v)?)
            }
            _ => return None,
        };
        out.push(clause);
    }
    Some(out)
}

fn name_contains(name: &str, prefix: &str) -> bool {
    let name = name.to_lowercase();
    name.starts_with(prefix)
        || name
            .split(|c: char| !c.is_alphanumeric())
            .any(|word| word.starts_with(prefix))
}

fn matches(file: &DriveFile, clause: &Clause) -> bool {
    match clause {
        Clause::NameContains(prefix) => name_contains(&file.name, prefix),
        Clause::NameIs(name) => file.name == *name,
        Clause::FullText(text) => {
            let content = if file.mime_type.starts_with("text/")
                || file.mime_type == DOCUMENT
                || file.mime_type == SPREADSHEET
                || file.mime_type == "application/json"
            {
                String::from_utf8_lossy(&file.data).to_lowercase()
            } else {
                String::new()
            };
            file.name.to_lowercase().contains(text.as_str()) || content.contains(text.as_str())
        }
        Clause::MimeType(mime_type, equal) => (file.mime_type == *mime_type) == *equal,
        Clause::Trashed(trashed) => file.trashed == *trashed,
        Clause::InParents(id) => file.parents.iter().any(|p| p == id),
        Clause::Modified(op, time) => match op.as_str() {
            ">" => file.modified > *time,
            ">=" => file.modified >= *time,
            "<" => file.modified < *time,
            "<=" => file.modified <= *time,
            _ => file.modified == *time,
        },
    }
}

pub(crate) fn route(st: &mut State, req: &Req, caller: &Caller, segs: &[&str]) -> Answer {
    let scopes = match (req.method.as_str(), segs) {
        ("GET", ["files"]) => METADATA,
        ("GET", ["files", _]) if req.param("alt") == Some("media") => READ,
        ("GET", ["files", _]) => METADATA,
        ("GET", ["files", _, "export"]) => READ,
        _ => return Err(unserved()),
    };
    if let Some(response) = caller.require(scopes, SERVICE) {
        return Ok(response);
    }
    match segs {
        ["files"] => list(st, req, caller),
        ["files", id] => get(st, req, caller, id),
        ["files", id, "export"] => export(st, req, caller, id),
        _ => Err(unserved()),
    }
}

fn list(st: &mut State, req: &Req, caller: &Caller) -> Answer {
    let size = size_param(req, "pageSize", 100, 1000)?;
    let q = req.param("q").unwrap_or_default();
    let clauses = if q.trim().is_empty() {
        Vec::new()
    } else {
        clauses(q).ok_or_else(|| {
            Fail::Violation(
                400,
                "invalid",
                format!("Invalid Value: q ({q:?} is not a query the fake understands)"),
            )
        })?
    };
    let mut found: Vec<DriveFile> = st
        .account(&caller.email)
        .files
        .iter()
        .filter(|f| visible(caller, f))
        .filter(|f| clauses.iter().all(|c| matches(f, c)))
        .cloned()
        .collect();
    let order = req.param("orderBy").unwrap_or_default();
    for key in order.split(',').rev() {
        let mut words = key.split_whitespace();
        let field = words.next().unwrap_or_default();
        let descending = words.next() == Some("desc");
        match field {
            "modifiedTime" | "modifiedByMeTime" | "viewedByMeTime" | "recency" => {
                found.sort_by_key(|f| f.modified);
            }
            "createdTime" => found.sort_by_key(|f| f.created),
            "name" | "name_natural" => found.sort_by_key(|f| f.name.to_lowercase()),
            "folder" => found.sort_by_key(|f| f.mime_type != FOLDER),
            "" | "quotaBytesUsed" | "sharedWithMeTime" | "starred" => {}
            other => return Err(invalid(format!("Invalid Value: orderBy ({other})"))),
        }
        if descending {
            found.reverse();
        }
    }
    let files: Vec<Value> = found.iter().map(DriveFile::resource).collect();
    let (items, next) = page(req, &files, size)?;
    let mut answer = json!({"kind": "drive#fileList", "incompleteSearch": false, "files": items});
    if let Some(next) = next {
        answer["nextPageToken"] = json!(next);
    }
    Ok(ok(&answer))
}

fn find(st: &mut State, caller: &Caller, id: &str) -> Result<DriveFile, Fail> {
    st.account(&caller.email)
        .files
        .iter()
        .find(|f| f.id == id && visible(caller, f))
        .cloned()
        .ok_or_else(|| file_not_found(id))
}

fn get(st: &mut State, req: &Req, caller: &Caller, id: &str) -> Answer {
    let file = find(st, caller, id)?;
    match req.param("alt") {
        None | Some("json") => Ok(ok(&file.resource())),
        Some("media") if file.google_type() => Err(Fail::Error(
            403,
            "fileNotDownloadable",
            "Only files with binary content can be downloaded. Use Export with Docs Editors files."
                .to_owned(),
        )),
        Some("media") => Ok(server::respond(
            200,
            &[("content-type", &file.mime_type)],
            axum::body::Body::from(file.data),
        )),
        Some(other) => Err(invalid(format!("Invalid Value: alt ({other})"))),
    }
}

fn export(st: &mut State, req: &Req, caller: &Caller, id: &str) -> Answer {
    let wanted = req
        .param("mimeType")
        .ok_or_else(|| bad("Required parameter: mimeType"))?;
    let file = find(st, caller, id)?;
    if !file.google_type() {
        return Err(Fail::Error(
            403,
            "fileNotExportable",
            "Export only supports Docs Editors files.".to_owned(),
        ));
    }
    let supported = matches!(
        (file.mime_type.as_str(), wanted),
        (DOCUMENT, "text/plain") | (SPREADSHEET, "text/csv")
    );
    if !supported {
        return Err(bad(format!(
            "The requested conversion is not supported ({} to {wanted}).",
            file.mime_type
        )));
    }
    if file.data.len() > EXPORT_LIMIT {
        return Err(Fail::Error(
            403,
            "exportSizeLimitExceeded",
            "This file is too large to be exported.".to_owned(),
        ));
    }
    Ok(server::respond(
        200,
        &[("content-type", wanted)],
        axum::body::Body::from(file.data),
    ))
}

/// The parts of a `multipart/related` body, byte for byte.
fn related_parts(body: &[u8], boundary: &str) -> Vec<Vec<u8>> {
    let delimiter = format!("--{boundary}").into_bytes();
    let mut starts = Vec::new();
    let mut i = 0;
    while i + delimiter.len() <= body.len() {
        let at_line = i == 0 || body[i - 1] == b'\n';
        if at_line && body[i..].starts_with(&delimiter) {
            starts.push(i);
            i += delimiter.len();
        } else {
            i += 1;
        }
    }
    let mut parts = Vec::new();
    for pair in starts.windows(2) {
        let (from, to) = (pair[0] + delimiter.len(), pair[1]);
        let mut part = &body[from..to];
        if part.starts_with(b"--") {
            break;
        }
        part = part
            .strip_prefix(b"\r\n")
            .or_else(|| part.strip_prefix(b"\n"))
            .unwrap_or(part);
        part = part
            .strip_suffix(b"\r\n")
            .or_else(|| part.strip_suffix(b"\n"))
            .unwrap_or(part);
        parts.push(part.to_vec());
    }
    parts
}

/// `POST /upload/drive/v3/files?uploadType=multipart`.
pub(crate) fn upload(st: &mut State, req: &Req, caller: &Caller, segs: &[&str]) -> Answer {
    if req.method != "POST" || segs != ["files"] {
        return Err(unserved());
    }
    if let Some(response) = caller.require(WRITE, SERVICE) {
        return Ok(response);
    }
    if req.param("uploadType") != Some("multipart") {
        return Err(bad(format!(
            "uploadType {:?}: the fake serves uploadType=multipart only",
            req.param("uploadType").unwrap_or_default()
        )));
    }
    let content_type = req.header("content-type").unwrap_or_default();
    let boundary = mime::param(content_type, "boundary");
    let (true, Some(boundary)) = (content_type.starts_with("multipart/related"), boundary) else {
        return Err(bad(format!(
            "Content-Type {content_type:?}: a multipart upload is multipart/related with a boundary"
        )));
    };
    let parts = related_parts(&req.body, &boundary);
    let [metadata, media] = parts.as_slice() else {
        return Err(bad(format!(
            "a multipart upload has two parts (metadata, media), not {}",
            parts.len()
        )));
    };
    let metadata = mime::parse(metadata);
    if !metadata
        .header("Content-Type")
        .is_some_and(|t| t.starts_with("application/json"))
    {
        return Err(bad(
            "the first part of a multipart upload is the JSON metadata",
        ));
    }
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(&metadata.body) else {
        return Err(bad("the metadata part is not a JSON object"));
    };
    let media = mime::parse(media);
    let media_type = media.header("Content-Type").map(str::to_owned);
    let mime_type = fields
        .get("mimeType")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or(media_type)
        .unwrap_or_else(|| "application/octet-stream".to_owned());
    let name = fields
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("Untitled");
    let n = st.next();
    let mut file = DriveFile::new(n, name, &mime_type, media.body, true);
    if let Some(parents) = fields.get("parents").and_then(Value::as_array) {
        file.parents = parents
            .iter()
            .filter_map(Value::as_str)
            .map(|p| if p == "root" { ROOT } else { p }.to_owned())
            .collect();
    }
    let answer = file.resource();
    st.account(&caller.email).files.push(file);
    Ok(ok(&answer))
}

impl FakeGoogle {
    /// Puts a file in `email`'s My Drive (not created by the app, so not
    /// visible with `drive.file` alone); returns its id. A Google document
    /// ([`DOCUMENT`]) keeps `data` as its text, a spreadsheet
    /// ([`SPREADSHEET`]) as CSV.
    pub fn add_file(&self, email: &str, name: &str, mime_type: &str, data: &[u8]) -> String {
        let mut st = self.lock();
        let n = st.next();
        let file = DriveFile::new(n, name, mime_type, data.to_vec(), false);
        let id = file.id.clone();
        st.account(email).files.push(file);
        id
    }

    /// `email`'s files as Drive's File resources, in the order added.
    pub fn files(&self, email: &str) -> Vec<Value> {
        self.lock()
            .account(email)
            .files
            .iter()
            .map(DriveFile::resource)
            .collect()
    }

    /// The content of a file of any account (a document's text).
    pub fn file_data(&self, id: &str) -> Option<Vec<u8>> {
        self.lock()
            .accounts
            .values()
            .flat_map(|a| &a.files)
            .find(|f| f.id == id)
            .map(|f| f.data.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::super::OWNER;
    use super::super::testing::{client, get};
    use super::*;

    async fn fetch(fake: &FakeGoogle, token: &str, path: &str) -> (u16, String, Vec<u8>) {
        let response = client()
            .get(format!("{}{path}", fake.base_url()))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let kind = response
            .headers()
            .get("content-type")
            .map(|t| t.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, kind, response.bytes().await.unwrap().to_vec())
    }

    #[tokio::test]
    async fn files_are_searched_downloaded_and_exported() {
        let fake = FakeGoogle::start();
        let token = fake.issue_tokens(OWNER, &["drive.readonly"]).access_token;
        let notes = fake.add_file(OWNER, "Meeting notes", DOCUMENT, b"Budget is approved.\n");
        let sheet = fake.add_file(OWNER, "Budget 2026", SPREADSHEET, b"item,cost\nrent,100\n");
        let pdf = fake.add_file(OWNER, "Scan.pdf", "application/pdf", b"%PDF-1.4");
        let names = |value: &Value| -> Vec<String> {
            value["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["name"].as_str().unwrap().to_owned())
                .collect()
        };
        let search = |q: &str| {
            let query: String = form_urlencoded::byte_serialize(q.as_bytes()).collect();
            format!("/drive/v3/files?q={query}&fields=files(id,name)")
        };
        let (status, found) = get(
            &fake,
            &token,
            &search("name contains 'budg' and trashed = false"),
        )
        .await;
        assert_eq!(status, 200, "{found}");
        assert_eq!(names(&found), vec!["Budget 2026"]);
        let (_, found) = get(&fake, &token, &search("fullText contains 'approved'")).await;
        assert_eq!(names(&found), vec!["Meeting notes"]);
        let (_, found) = get(
            &fake,
            &token,
            &search(&format!("mimeType = '{DOCUMENT}' and 'root' in parents")),
        )
        .await;
        assert_eq!(names(&found), vec!["Meeting notes"]);
        let (_, found) = get(&fake, &token, "/drive/v3/files?orderBy=name&pageSize=2").await;
        assert_eq!(names(&found), vec!["Budget 2026", "Meeting notes"]);
        let next = found["nextPageToken"].as_str().unwrap();
        let (_, rest) = get(
            &fake,
            &token,
            &format!("/drive/v3/files?orderBy=name&pageSize=2&pageToken={next}"),
        )
        .await;
        assert_eq!(names(&rest), vec!["Scan.pdf"]);
        assert_eq!(rest["files"][0]["size"], "8");
        assert_eq!(fake.violations(), Vec::<String>::new());

        let (status, kind, bytes) =
            fetch(&fake, &token, &format!("/drive/v3/files/{pdf}?alt=media")).await;
        assert_eq!(
            (status, kind.as_str(), bytes.as_slice()),
            (200, "application/pdf", &b"%PDF-1.4"[..])
        );
        let (status, _, body) =
            fetch(&fake, &token, &format!("/drive/v3/files/{notes}?alt=media")).await;
        assert_eq!(status, 403);
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["errors"][0]["reason"], "fileNotDownloadable");
        let (status, _, text) = fetch(
            &fake,
            &token,
            &format!("/drive/v3/files/{notes}/export?mimeType=text/plain"),
        )
        .await;
        assert_eq!(
            (status, text.as_slice()),
            (200, &b"Budget is approved.\n"[..])
        );
        let (status, kind, csv) = fetch(
            &fake,
            &token,
            &format!("/drive/v3/files/{sheet}/export?mimeType=text/csv"),
        )
        .await;
        assert_eq!(
            (status, kind.as_str(), csv.as_slice()),
            (200, "text/csv", &b"item,cost\nrent,100\n"[..])
        );
        let (status, _, body) = fetch(
            &fake,
            &token,
            &format!("/drive/v3/files/{pdf}/export?mimeType=text/plain"),
        )
        .await;
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (status, &body["error"]["errors"][0]["reason"]),
            (403, &json!("fileNotExportable"))
        );
        let big = fake.add_file(OWNER, "Huge", DOCUMENT, &vec![b'a'; EXPORT_LIMIT + 1]);
        let (status, _, body) = fetch(
            &fake,
            &token,
            &format!("/drive/v3/files/{big}/export?mimeType=text/plain"),
        )
        .await;
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (status, &body["error"]["errors"][0]["reason"]),
            (403, &json!("exportSizeLimitExceeded"))
        );
        assert_eq!(fake.violations(), Vec::<String>::new());

        let (status, error) = get(
            &fake,
            &token,
            &search("name contains 'a' or name contains 'b'"),
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(error["error"]["errors"][0]["reason"], "invalid");
        assert_eq!(fake.violations().len(), 1);
    }

    #[tokio::test]
    async fn uploads_are_multipart_related_and_drive_file_sees_only_them() {
        let fake = FakeGoogle::start();
        fake.add_file(OWNER, "Private", "text/plain", b"secret");
        let token = fake.issue_tokens(OWNER, &["drive.file"]).access_token;
        let body = "--b0undary\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n\
{\"name\":\"report.txt\",\"parents\":[\"root\"]}\r\n--b0undary\r\nContent-Type: text/plain\r\n\r\n\
line one\nline two\r\n--b0undary--\r\n";
        let response = client()
            .post(format!(
                "{}/upload/drive/v3/files?uploadType=multipart&fields=id,name",
                fake.base_url()
            ))
            .bearer_auth(&token)
            .header("content-type", "multipart/related; boundary=b0undary")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let file: Value = response.json().await.unwrap();
        assert_eq!(file["name"], "report.txt");
        assert_eq!(file["mimeType"], "text/plain");
        let id = file["id"].as_str().unwrap();
        assert_eq!(fake.file_data(id).unwrap(), b"line one\nline two");
        let (_, list) = get(&fake, &token, "/drive/v3/files").await;
        assert_eq!(list["files"].as_array().unwrap().len(), 1);
        assert_eq!(fake.files(OWNER).len(), 2);
        assert_eq!(fake.violations(), Vec::<String>::new());

        let response = client()
            .post(format!(
                "{}/upload/drive/v3/files?uploadType=multipart",
                fake.base_url()
            ))
            .bearer_auth(&token)
            .header("content-type", "multipart/form-data; boundary=b0undary")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 400);
        assert_eq!(fake.violations().len(), 1);
    }
}
