//! `drive.*`: search, read (Docs, Sheets, Slides, text and PDFs as text),
//! upload.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use flynn_protocol::config::GoogleService;
use flynn_tools::builtin::media_type_of;
use flynn_tools::{ToolContext, ToolError, TypedTool, find_program};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{TIMEOUT, cut, quote_query, segment, size};
use crate::Google;
use crate::client::Call;

const DRIVE: GoogleService = GoogleService::Drive;
/// The largest file read or uploaded.
const MAX_FILE: u64 = 50 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    mime_type: String,
    modified_time: Option<String>,
    size: Option<String>,
    web_view_link: Option<String>,
}

fn kind(mime: &str) -> &str {
    match mime {
        "application/vnd.google-apps.document" => "Google Doc",
        "application/vnd.google-apps.spreadsheet" => "Google Sheet",
        "application/vnd.google-apps.presentation" => "Google Slides",
        "application/vnd.google-apps.folder" => "folder",
        "application/pdf" => "PDF",
        other => other,
    }
}

/// `drive.search`.
#[derive(Debug)]
pub struct DriveSearch(pub Arc<Google>);

/// What kind of file `drive.search` looks for.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DriveKind {
    Document,
    Spreadsheet,
    Presentation,
    Pdf,
    Folder,
}

/// Arguments of `drive.search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DriveSearchArgs {
    /// Words in the file's name or content.
    #[serde(default)]
    query: String,
    /// Only files of this kind.
    kind: Option<DriveKind>,
    /// How many files (1–50, 20 by default).
    max: Option<u32>,
    /// The `next_page` a previous search returned.
    page: Option<String>,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for DriveSearch {
    type Args = DriveSearchArgs;

    fn name(&self) -> &str {
        "drive.search"
    }

    fn description(&self) -> &str {
        "Search the owner's Google Drive by words in a file's name or content; lists each file's id, kind, name and date. Read one with drive.read."
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

    async fn run(&self, args: DriveSearchArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct List {
            #[serde(default)]
            files: Vec<File>,
            next_page_token: Option<String>,
        }
        let google = &self.0;
        let mut q = vec!["trashed = false".to_owned()];
        let words = args.query.trim();
        if !words.is_empty() {
            q.push(format!("fullText contains '{}'", quote_query(words)));
        }
        if let Some(kind) = args.kind {
            let mime = match kind {
                DriveKind::Document => "application/vnd.google-apps.document",
                DriveKind::Spreadsheet => "application/vnd.google-apps.spreadsheet",
                DriveKind::Presentation => "application/vnd.google-apps.presentation",
                DriveKind::Pdf => "application/pdf",
                DriveKind::Folder => "application/vnd.google-apps.folder",
            };
            q.push(format!("mimeType = '{mime}'"));
        }
        let list: List = google
            .json(
                args.account.as_deref(),
                DRIVE,
                &Call::get(format!("{}/files", google.endpoints().drive))
                    .query("q", q.join(" and "))
                    .query("pageSize", args.max.unwrap_or(20).clamp(1, 50))
                    .query(
                        "fields",
                        "nextPageToken,files(id,name,mimeType,modifiedTime,size,webViewLink)",
                    )
                    .query_opt("pageToken", args.page.as_deref()),
            )
            .await?;
        if list.files.is_empty() {
            return Ok("No file matches.".to_owned());
        }
        let mut out = String::new();
        for file in &list.files {
            out.push_str(&format!(
                "- id {} · {} · {}{}{}\n",
                file.id,
                kind(&file.mime_type),
                file.name,
                file.modified_time
                    .as_deref()
                    .map(|t| format!(" · changed {t}"))
                    .unwrap_or_default(),
                file.size
                    .as_deref()
                    .and_then(|s| s.parse().ok())
                    .map(|s| format!(" · {}", size(s)))
                    .unwrap_or_default()
            ));
        }
        if let Some(next) = list.next_page_token {
            out.push_str(&format!("More: page \"{next}\"\n"));
        }
        Ok(out)
    }
}

/// `drive.read`.
#[derive(Debug)]
pub struct DriveRead(pub Arc<Google>);

/// Arguments of `drive.read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DriveReadArgs {
    /// The file's id (from drive.search).
    id: String,
    /// Longest text returned, in characters (30000 by default).
    max_chars: Option<usize>,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for DriveRead {
    type Args = DriveReadArgs;

    fn name(&self) -> &str {
        "drive.read"
    }

    fn description(&self) -> &str {
        "Read a file of the owner's Google Drive as text: Google Docs and Slides as text, Sheets as CSV, PDFs and text files as they read."
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

    async fn run(&self, args: DriveReadArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let google = &self.0;
        let account = args.account.as_deref();
        let url = format!("{}/files/{}", google.endpoints().drive, segment(&args.id));
        let file: File = google
            .json(
                account,
                DRIVE,
                &Call::get(&url).query("fields", "id,name,mimeType,modifiedTime,size,webViewLink"),
            )
            .await?;
        let export = match file.mime_type.as_str() {
            "application/vnd.google-apps.document" | "application/vnd.google-apps.presentation" => {
                Some("text/plain")
            }
            "application/vnd.google-apps.spreadsheet" => Some("text/csv"),
            m if m.starts_with("application/vnd.google-apps.") => {
                return Err(ToolError::failed(format!(
                    "{} is a {} and has no text to read",
                    file.name,
                    kind(m)
                )));
            }
            _ => None,
        };
        if export.is_none()
            && file
                .size
                .as_deref()
                .and_then(|s| s.parse::<u64>().ok())
                .is_some_and(|s| s > MAX_FILE)
        {
            return Err(ToolError::failed(format!(
                "{} is larger than the {} drive.read reads",
                file.name,
                size(MAX_FILE)
            )));
        }
        let call = match export {
            Some(mime) => Call::get(format!("{url}/export")).query("mimeType", mime),
            None => Call::get(&url).query("alt", "media"),
        };
        let bytes = google
            .send(account, DRIVE, &call)
            .await?
            .bytes()
            .await
            .map_err(|e| {
                ToolError::failed(format!("cannot read {} from Google: {e}", file.name))
            })?;
        let text = if file.mime_type == "application/pdf" {
            pdf_text(&bytes, &file.name).await?
        } else if export.is_some()
            || file.mime_type.starts_with("text/")
            || matches!(
                file.mime_type.as_str(),
                "application/json" | "application/xml" | "application/csv"
            )
        {
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            return Err(ToolError::failed(format!(
                "{} is {} ({}), not a document with text",
                file.name,
                file.mime_type,
                size(bytes.len() as u64)
            )));
        };
        Ok(format!(
            "{} ({}){}\n\n{}",
            file.name,
            kind(&file.mime_type),
            file.web_view_link
                .map(|l| format!(" {l}"))
                .unwrap_or_default(),
            cut(text.trim(), args.max_chars.unwrap_or(30_000))
        ))
    }
}

/// A PDF's text, by `pdftotext` (poppler-utils), the file given on its
/// stdin: nothing is written to disk.
async fn pdf_text(bytes: &[u8], name: &str) -> Result<String, ToolError> {
    use tokio::io::AsyncWriteExt;

    let Some(program) = find_program(std::path::Path::new("pdftotext")) else {
        return Err(ToolError::failed(format!(
            "{name} is a PDF, and reading PDFs needs pdftotext, which is not installed (apt-get install poppler-utils)"
        )));
    };
    let mut child = tokio::process::Command::new(program)
        .args(["-layout", "-enc", "UTF-8", "-", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ToolError::failed(format!("cannot run pdftotext: {e}")))?;
    let mut stdin = child.stdin.take();
    let data = bytes.to_vec();
    // Written while the output is read, so a large PDF cannot stall both.
    let feed = tokio::spawn(async move {
        if let Some(stdin) = stdin.as_mut() {
            let _ = stdin.write_all(&data).await;
        }
    });
    let output = child
        .wait_with_output()
        .await
        .map_err(|e| ToolError::failed(format!("cannot run pdftotext: {e}")))?;
    let _ = feed.await;
    if !output.status.success() {
        return Err(ToolError::failed(format!(
            "pdftotext could not read {name}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `drive.upload`.
#[derive(Debug)]
pub struct DriveUpload(pub Arc<Google>);

/// Arguments of `drive.upload`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DriveUploadArgs {
    /// The workspace file to upload.
    path: String,
    /// Its name in Drive; the file's own by default.
    name: Option<String>,
    /// The folder's id; My Drive's top by default.
    folder: Option<String>,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for DriveUpload {
    type Args = DriveUploadArgs;

    fn name(&self) -> &str {
        "drive.upload"
    }

    fn description(&self) -> &str {
        "Upload a file from the workspace to the owner's Google Drive."
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

    async fn run(&self, args: DriveUploadArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let google = &self.0;
        let path = ctx.confine(&args.path)?;
        let meta = tokio::fs::metadata(&path)
            .await
            .map_err(|e| ToolError::failed(format!("cannot read {}: {e}", args.path)))?;
        if !meta.is_file() {
            return Err(ToolError::failed(format!("{} is not a file", args.path)));
        }
        if meta.len() > MAX_FILE {
            return Err(ToolError::failed(format!(
                "{} has {}, more than the {} drive.upload sends",
                args.path,
                size(meta.len()),
                size(MAX_FILE)
            )));
        }
        let data = tokio::fs::read(&path)
            .await
            .map_err(|e| ToolError::failed(format!("cannot read {}: {e}", args.path)))?;
        let name = args.name.clone().unwrap_or_else(|| {
            path.file_name()
                .map_or_else(|| "file".to_owned(), |n| n.to_string_lossy().into_owned())
        });
        let media_type = media_type_of(&name);
        let mut metadata = json!({ "name": name });
        if let Some(folder) = &args.folder {
            metadata["parents"] = json!([folder]);
        }
        // multipart/related: the metadata, then the bytes.
        let boundary = format!("flynn-{}", uuid::Uuid::now_v7().simple());
        let mut body = format!(
            "--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{metadata}\r\n--{boundary}\r\nContent-Type: {media_type}\r\n\r\n"
        )
        .into_bytes();
        body.extend_from_slice(&data);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let file: File = google
            .json(
                args.account.as_deref(),
                DRIVE,
                &Call::post(format!("{}/files", google.endpoints().drive_upload))
                    .query("uploadType", "multipart")
                    .query("fields", "id,name,mimeType,webViewLink")
                    .bytes(format!("multipart/related; boundary={boundary}"), body),
            )
            .await?;
        Ok(format!(
            "uploaded {} to Drive as {} (id {}){}",
            args.path,
            file.name,
            file.id,
            file.web_view_link
                .map(|l| format!(": {l}"))
                .unwrap_or_default()
        ))
    }
}
