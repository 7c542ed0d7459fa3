use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

use crate::{ToolContext, ToolError, TypedTool};

/// Largest file prefix read at all; the executor truncates the output further.
const READ_LIMIT: u64 = 8 * 1024 * 1024;

/// `file.read`: returns a text file's contents, optionally a range of lines.
#[derive(Debug, Clone)]
pub struct FileRead {
    timeout: Duration,
}

impl FileRead {
    pub fn new(timeout: Duration) -> Self {
        FileRead { timeout }
    }
}

/// Arguments of `file.read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileReadArgs {
    /// File path, relative to the workspace.
    path: String,
    /// First line to return, counting from 1.
    offset: Option<usize>,
    /// Number of lines to return.
    limit: Option<usize>,
}

#[async_trait]
impl TypedTool for FileRead {
    type Args = FileReadArgs;

    fn name(&self) -> &str {
        "file.read"
    }

    fn description(&self) -> &str {
        "Read a text file, optionally only `limit` lines from line `offset`."
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    async fn run(&self, args: FileReadArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = ctx.resolve(&args.path);
        let fail = |what: &str, e: std::io::Error| {
            ToolError::failed(format!("cannot {what} {}: {e}", path.display()))
        };
        let file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| fail("open", e))?;
        let mut bytes = Vec::new();
        file.take(READ_LIMIT)
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| fail("read", e))?;
        if bytes[..bytes.len().min(8192)].contains(&0) {
            return Err(ToolError::failed(format!(
                "{} is a binary file, not text",
                path.display()
            )));
        }
        let text = String::from_utf8_lossy(&bytes);
        if args.offset.is_none() && args.limit.is_none() {
            return Ok(text.into_owned());
        }
        let skip = args.offset.unwrap_or(1).saturating_sub(1);
        let take = args.limit.unwrap_or(usize::MAX);
        let lines: Vec<&str> = text.lines().skip(skip).take(take).collect();
        Ok(lines.join("\n"))
    }
}
