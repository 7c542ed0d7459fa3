//! `docs.*`: create a Google Doc, add text to one.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use flynn_protocol::config::GoogleService;
use flynn_tools::{ToolContext, ToolError, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{TIMEOUT, segment};
use crate::Google;
use crate::client::Call;

const DOCS: GoogleService = GoogleService::Docs;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    document_id: String,
    #[serde(default)]
    title: String,
}

async fn append(
    google: &Google,
    account: Option<&str>,
    id: &str,
    text: &str,
) -> Result<(), ToolError> {
    let _: serde_json::Value = google
        .json(
            account,
            DOCS,
            &Call::post(format!(
                "{}/{}:batchUpdate",
                google.endpoints().docs,
                segment(id)
            ))
            .json(json!({
                "requests": [{
                    "insertText": { "text": text, "endOfSegmentLocation": {} }
                }]
            })),
        )
        .await?;
    Ok(())
}

fn link(id: &str) -> String {
    format!("https://docs.google.com/document/d/{id}/edit")
}

/// `docs.create`.
#[derive(Debug)]
pub struct DocsCreate(pub Arc<Google>);

/// Arguments of `docs.create`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocsCreateArgs {
    /// The document's title.
    title: String,
    /// Its first text (plain text; new lines start paragraphs).
    #[serde(default)]
    text: String,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for DocsCreate {
    type Args = DocsCreateArgs;

    fn name(&self) -> &str {
        "docs.create"
    }

    fn description(&self) -> &str {
        "Create a Google Doc in the owner's Drive with a title and text; returns its id and link."
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

    async fn run(&self, args: DocsCreateArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let google = &self.0;
        let account = args.account.as_deref();
        let document: Document = google
            .json(
                account,
                DOCS,
                &Call::post(&google.endpoints().docs).json(json!({ "title": args.title.trim() })),
            )
            .await?;
        if !args.text.is_empty() {
            append(google, account, &document.document_id, &args.text).await?;
        }
        Ok(format!(
            "created the document \"{}\" (id {}): {}",
            document.title,
            document.document_id,
            link(&document.document_id)
        ))
    }
}

/// `docs.append`.
#[derive(Debug)]
pub struct DocsAppend(pub Arc<Google>);

/// Arguments of `docs.append`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocsAppendArgs {
    /// The document's id (from drive.search or docs.create).
    id: String,
    /// The text added at its end (plain text; new lines start paragraphs).
    text: String,
    /// The Google account; the default one when absent.
    account: Option<String>,
}

#[async_trait]
impl TypedTool for DocsAppend {
    type Args = DocsAppendArgs;

    fn name(&self) -> &str {
        "docs.append"
    }

    fn description(&self) -> &str {
        "Add text at the end of a Google Doc of the owner's."
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

    async fn run(&self, args: DocsAppendArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        if args.text.is_empty() {
            return Err(ToolError::failed("give the text to add"));
        }
        append(&self.0, args.account.as_deref(), &args.id, &args.text).await?;
        Ok(format!(
            "added {} characters to document {}: {}",
            args.text.chars().count(),
            args.id,
            link(&args.id)
        ))
    }
}
