use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use super::{is_binary, open_regular};
use crate::confine::display;
use crate::{ToolContext, ToolError, TypedTool};

/// Lines returned when no `limit` is given.
const DEFAULT_LINES: usize = 2000;
/// Output kept, under the executor's default 50 KB cap, so the note
/// saying which lines were shown is never the part that is cut.
const MAX_OUTPUT: usize = 40 * 1024;

/// `file.read`: a text file with line numbers, optionally a range of lines.
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
    /// Path in the workspace.
    path: String,
    /// First line, from 1.
    offset: Option<usize>,
    /// Number of lines.
    limit: Option<usize>,
}

#[async_trait]
impl TypedTool for FileRead {
    type Args = FileReadArgs;

    fn name(&self) -> &str {
        "file.read"
    }

    fn description(&self) -> &str {
        "Read a text file, with line numbers."
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn reads_private_data(&self) -> bool {
        true
    }

    async fn run(&self, args: FileReadArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = ctx.confine(&args.path)?;
        let shown = display(&ctx.workspace, &path);
        let fail = |what: &str, e: std::io::Error| {
            ToolError::failed(format!("cannot {what} {shown}: {e}"))
        };
        if tokio::fs::metadata(&path).await.is_ok_and(|m| m.is_dir()) {
            return Err(ToolError::failed(format!(
                "{shown} is a directory; use file.list to see what it holds"
            )));
        }
        let opened = {
            let (path, name) = (path.clone(), shown.clone());
            tokio::task::spawn_blocking(move || open_regular(&path, &name))
                .await
                .map_err(|e| ToolError::failed(format!("cannot open {shown}: {e}")))?
        };
        let mut file = tokio::fs::File::from_std(opened?);
        let mut start = vec![0u8; super::SNIFF];
        let n = read_up_to(&mut file, &mut start)
            .await
            .map_err(|e| fail("read", e))?;
        start.truncate(n);
        if is_binary(&start) {
            return Err(ToolError::failed(format!(
                "{shown} is a binary file, not text"
            )));
        }
        let reader = BufReader::new(std::io::Cursor::new(start).chain(file));
        let first = args.offset.unwrap_or(1).max(1);
        let limit = args.limit.unwrap_or(DEFAULT_LINES).max(1);
        let mut lines = reader.split(b'\n');
        let mut out = String::new();
        let mut total = 0usize;
        let mut last_shown = 0usize;
        let mut full = false;
        while let Some(line) = lines.next_segment().await.map_err(|e| fail("read", e))? {
            total += 1;
            if total >= first && total < first.saturating_add(limit) && !full {
                let text = String::from_utf8_lossy(&line);
                let text = text.strip_suffix('\r').unwrap_or(&text);
                let numbered = format!("{total:>6}\t{text}\n");
                if out.len() + numbered.len() > MAX_OUTPUT && last_shown > 0 {
                    full = true;
                    continue;
                }
                out.push_str(&numbered);
                last_shown = total;
            }
        }
        if total == 0 {
            return Ok(format!("{shown} is empty"));
        }
        if first > total {
            return Err(ToolError::failed(format!(
                "{shown} has {total} lines; offset {first} is past the end"
            )));
        }
        if last_shown < total {
            out.push_str(&format!(
                "[lines {first}-{last_shown} of {total}; use offset={} to read on]",
                last_shown + 1
            ));
        } else if first > 1 {
            out.push_str(&format!("[lines {first}-{last_shown} of {total}]"));
        }
        Ok(out)
    }
}

/// Reads until `buf` is full or the file ends.
async fn read_up_to(file: &mut tokio::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = file.read(&mut buf[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}
