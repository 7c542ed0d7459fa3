use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use schemars::JsonSchema;
use serde::Deserialize;

use super::write_atomically;
use crate::confine::display;
use crate::{ToolContext, ToolError, TypedTool};

/// `file.write`: creates or replaces a file, atomically.
#[derive(Debug, Clone)]
pub struct FileWrite {
    timeout: Duration,
}

impl FileWrite {
    pub fn new(timeout: Duration) -> Self {
        FileWrite { timeout }
    }
}

/// Arguments of `file.write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileWriteArgs {
    /// Path in the workspace.
    path: String,
    /// The whole new content.
    content: String,
}

#[async_trait]
impl TypedTool for FileWrite {
    type Args = FileWriteArgs;

    fn name(&self) -> &str {
        "file.write"
    }

    fn description(&self) -> &str {
        "Create or overwrite a file with the given content."
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::WritesFiles
    }

    async fn run(&self, args: FileWriteArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = ctx.confine(&args.path)?;
        let shown = display(&ctx.workspace, &path);
        let before = match tokio::fs::metadata(&path).await {
            Ok(meta) if meta.is_dir() => {
                return Err(ToolError::failed(format!(
                    "{shown} is a directory; give a file path"
                )));
            }
            Ok(meta) => Some(meta.len()),
            Err(_) => None,
        };
        write_atomically(&path, args.content.as_bytes()).await?;
        let bytes = args.content.len();
        Ok(match before {
            Some(old) => format!("replaced {shown} ({bytes} bytes, was {old})"),
            None => format!("created {shown} ({bytes} bytes)"),
        })
    }
}
