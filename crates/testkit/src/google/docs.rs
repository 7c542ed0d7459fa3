//! The Docs API (`/v1/documents…`).
//!
//! Served: `POST /v1/documents` (`{title}`; the document also appears in
//! Drive as a [`DOCUMENT`](super::drive::DOCUMENT) created by the app);
//! `GET /v1/documents/{id}` (the body as structural elements: a section
//! break, then one paragraph per line, each one `textRun`, indexes in
//! UTF-16 code units, the body starting at 1 and ending with a newline);
//! `POST /v1/documents/{id}:batchUpdate` with `insertText` requests only
//! (at a `location.index` or the `endOfSegmentLocation`), applied all or
//! nothing; an index outside the body is a 400 naming the request, as
//! Google words it. Reading needs `documents`, `documents.readonly`,
//! `drive` or `drive.readonly` (or `drive.file` for the app's own
//! documents); writing `documents` or `drive` (or `drive.file` likewise).

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::drive::{DOCUMENT, DriveFile};
use super::{Answer, Caller, Fail, FakeGoogle, Req, State, bad, json_body, now, ok, unserved};

const SERVICE: &str = "docs.googleapis.com";

fn may_read(caller: &Caller, file: &DriveFile) -> bool {
    caller.has_any(&["documents", "documents.readonly", "drive", "drive.readonly"])
        || (caller.has_any(&["drive.file"]) && file.app_created)
}

fn may_write(caller: &Caller, file: &DriveFile) -> bool {
    caller.has_any(&["documents", "drive"]) || (caller.has_any(&["drive.file"]) && file.app_created)
}

/// The body text: the file's text, ending with a newline.
fn body_text(file: &DriveFile) -> String {
    let mut text = String::from_utf8_lossy(&file.data).into_owned();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

fn revision(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!("ALm37BV{}", hex::encode(&digest[..12]))
}

fn utf16_len(text: &str) -> usize {
    text.encode_utf16().count()
}

/// The Document resource.
fn document(file: &DriveFile) -> Value {
    let text = body_text(file);
    let mut content = vec![json!({
        "endIndex": 1,
        "sectionBreak": {"sectionStyle": {
            "columnSeparatorStyle": "NONE",
            "contentDirection": "LEFT_TO_RIGHT",
            "sectionType": "CONTINUOUS",
        }},
    })];
    let mut index = 1;
    for line in text.split_inclusive('\n') {
        let end = index + utf16_len(line);
        content.push(json!({
            "startIndex": index,
            "endIndex": end,
            "paragraph": {
                "elements": [{
                    "startIndex": index,
                    "endIndex": end,
                    "textRun": {"content": line, "textStyle": {}},
                }],
                "paragraphStyle": {"namedStyleType": "NORMAL_TEXT", "direction": "LEFT_TO_RIGHT"},
            },
        }));
        index = end;
    }
    json!({
        "documentId": file.id,
        "title": file.name,
        "body": {"content": content},
        "revisionId": revision(&text),
        "suggestionsViewMode": "SUGGESTIONS_INLINE",
    })
}

pub(crate) fn route(st: &mut State, req: &Req, caller: &Caller, segs: &[&str]) -> Answer {
    match (req.method.as_str(), segs) {
        ("POST", []) => create(st, req, caller),
        ("GET", [id]) if !id.contains(':') => {
            let file = find(st, caller, id)?;
            if !may_read(caller, &file) {
                return Ok(super::insufficient_scope(
                    SERVICE,
                    &["documents", "documents.readonly", "drive", "drive.readonly"],
                ));
            }
            Ok(ok(&document(&file)))
        }
        ("POST", [target]) => match target.split_once(':') {
            Some((id, "batchUpdate")) => batch_update(st, req, caller, id),
            _ => Err(unserved()),
        },
        _ => Err(unserved()),
    }
}

fn find(st: &mut State, caller: &Caller, id: &str) -> Result<DriveFile, Fail> {
    st.account(&caller.email)
        .files
        .iter()
        .find(|f| f.id == id && f.mime_type == DOCUMENT && !f.trashed)
        .cloned()
        .ok_or_else(|| super::not_found("Requested entity was not found."))
}

fn create(st: &mut State, req: &Req, caller: &Caller) -> Answer {
    if let Some(response) = caller.require(&["documents", "drive", "drive.file"], SERVICE) {
        return Ok(response);
    }
    let body = json_body(req)?;
    let title = body
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or("Untitled document");
    let n = st.next();
    let file = DriveFile::new(n, title, DOCUMENT, b"\n".to_vec(), true);
    let answer = document(&file);
    st.account(&caller.email).files.push(file);
    Ok(ok(&answer))
}

/// Applies one `insertText` request to `text`.
fn insert_text(text: &mut String, at: usize, request: &Value) -> Result<(), Fail> {
    let Some(insert) = request.get("insertText") else {
        let kind = request
            .as_object()
            .and_then(|o| o.keys().next().cloned())
            .unwrap_or_default();
        return Err(bad(format!(
            "Invalid requests[{at}]: the fake serves insertText only, not {kind:?}"
        )));
    };
    let Some(new) = insert.get("text").and_then(Value::as_str) else {
        return Err(bad(format!(
            "Invalid requests[{at}].insertText: text is required"
        )));
    };
    let end = utf16_len(text) + 1;
    let index = match (insert.get("location"), insert.get("endOfSegmentLocation")) {
        (Some(location), None) => {
            let index = location.get("index").and_then(Value::as_i64).unwrap_or(0);
            if index < 1 {
                return Err(bad(format!(
                    "Invalid requests[{at}].insertText: The insertion index must be inside the bounds of an existing paragraph. You can still create new paragraphs by inserting newlines."
                )));
            }
            let index = usize::try_from(index).unwrap_or(usize::MAX);
            if index >= end {
                return Err(bad(format!(
                    "Invalid requests[{at}].insertText: Index {index} must be less than the end index of the referenced segment, {end}."
                )));
            }
            index
        }
        (None, Some(_)) => end - 1,
        _ => {
            return Err(bad(format!(
                "Invalid requests[{at}].insertText: exactly one of location and endOfSegmentLocation is required"
            )));
        }
    };
    let units: Vec<u16> = text.encode_utf16().collect();
    let (before, after) = units.split_at(index - 1);
    let mut joined = String::from_utf16_lossy(before);
    joined.push_str(new);
    joined.push_str(&String::from_utf16_lossy(after));
    *text = joined;
    Ok(())
}

fn batch_update(st: &mut State, req: &Req, caller: &Caller, id: &str) -> Answer {
    let body = json_body(req)?;
    let file = find(st, caller, id)?;
    if !may_write(caller, &file) {
        return Ok(super::insufficient_scope(SERVICE, &["documents", "drive"]));
    }
    let Some(requests) = body.get("requests").and_then(Value::as_array) else {
        return Err(bad("Invalid JSON payload: requests is required"));
    };
    let mut text = body_text(&file);
    for (at, request) in requests.iter().enumerate() {
        insert_text(&mut text, at, request)?;
    }
    let revision_id = revision(&text);
    if let Some(stored) = st
        .account(&caller.email)
        .files
        .iter_mut()
        .find(|f| f.id == id)
    {
        stored.data = text.into_bytes();
        stored.modified = now();
    }
    let replies: Vec<Value> = requests.iter().map(|_| json!({})).collect();
    Ok(ok(&json!({
        "documentId": id,
        "replies": replies,
        "writeControl": {"requiredRevisionId": revision_id},
    })))
}

impl FakeGoogle {
    /// A document's body text (ending with its newline), whoever owns it.
    pub fn document_text(&self, id: &str) -> Option<String> {
        self.lock()
            .accounts
            .values()
            .flat_map(|a| &a.files)
            .find(|f| f.id == id && f.mime_type == DOCUMENT)
            .map(body_text)
    }
}

#[cfg(test)]
mod tests {
    use super::super::OWNER;
    use super::super::testing::{call, get};
    use super::*;

    #[tokio::test]
    async fn documents_are_created_read_and_written() {
        let fake = FakeGoogle::start();
        let token = fake.issue_tokens(OWNER, &["documents"]).access_token;
        let (status, created) = call(
            &fake,
            "POST",
            &token,
            "/v1/documents",
            Some(json!({"title": "Trip plan"})),
        )
        .await;
        assert_eq!(status, 200, "{created}");
        assert_eq!(created["title"], "Trip plan");
        let id = created["documentId"].as_str().unwrap().to_owned();
        assert_eq!(fake.files(OWNER)[0]["mimeType"], DOCUMENT);
        let (status, reply) = call(
            &fake,
            "POST",
            &token,
            &format!("/v1/documents/{id}:batchUpdate"),
            Some(json!({"requests": [
                {"insertText": {"text": "Day 1: Zürich\n", "location": {"index": 1}}},
                {"insertText": {"text": "Day 2: Bern", "endOfSegmentLocation": {}}},
            ]})),
        )
        .await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["replies"], json!([{}, {}]));
        assert!(reply["writeControl"]["requiredRevisionId"].is_string());
        assert_eq!(
            fake.document_text(&id).unwrap(),
            "Day 1: Zürich\nDay 2: Bern\n"
        );
        let (_, doc) = get(&fake, &token, &format!("/v1/documents/{id}")).await;
        let content = doc["body"]["content"].as_array().unwrap();
        assert_eq!(content[0]["endIndex"], 1);
        assert!(content[0]["sectionBreak"].is_object());
        assert_eq!(content[1]["startIndex"], 1);
        assert_eq!(content[1]["endIndex"], 15);
        assert_eq!(
            content[1]["paragraph"]["elements"][0]["textRun"]["content"],
            "Day 1: Zürich\n"
        );
        assert_eq!(content[2]["startIndex"], 15);
        assert_eq!(content[2]["endIndex"], 27);
        assert_eq!(
            doc["revisionId"],
            reply["writeControl"]["requiredRevisionId"]
        );
        assert_eq!(fake.violations(), Vec::<String>::new());

        let (status, error) = call(
            &fake,
            "POST",
            &token,
            &format!("/v1/documents/{id}:batchUpdate"),
            Some(json!({"requests": [{"insertText": {"text": "x", "location": {"index": 27}}}]})),
        )
        .await;
        assert_eq!(status, 400);
        assert_eq!(
            error["error"]["message"],
            "Invalid requests[0].insertText: Index 27 must be less than the end index of the referenced segment, 27."
        );
        assert_eq!(
            fake.document_text(&id).unwrap(),
            "Day 1: Zürich\nDay 2: Bern\n"
        );
        assert_eq!(fake.violations().len(), 1);
        let (status, _) = get(&fake, &token, "/v1/documents/nothing-here").await;
        assert_eq!(status, 404);
    }

    #[tokio::test]
    async fn drive_file_reaches_only_the_apps_documents() {
        let fake = FakeGoogle::start();
        let other = fake.add_file(OWNER, "Old doc", DOCUMENT, b"old text");
        let token = fake
            .issue_tokens(OWNER, &["documents.readonly"])
            .access_token;
        let (status, doc) = get(&fake, &token, &format!("/v1/documents/{other}")).await;
        assert_eq!(status, 200);
        assert_eq!(
            doc["body"]["content"][1]["paragraph"]["elements"][0]["textRun"]["content"],
            "old text\n"
        );
        let limited = fake.issue_tokens(OWNER, &["drive.file"]).access_token;
        let (status, _) = get(&fake, &limited, &format!("/v1/documents/{other}")).await;
        assert_eq!(status, 403);
        let (status, _) = call(
            &fake,
            "POST",
            &token,
            "/v1/documents",
            Some(json!({"title": "x"})),
        )
        .await;
        assert_eq!(status, 403);
        assert_eq!(fake.violations(), Vec::<String>::new());
    }
}
