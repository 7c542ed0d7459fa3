use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use schemars::JsonSchema;
use serde::Deserialize;

use super::walk::{NameGlob, Stop, StopOnDrop, walk};
use crate::confine::display;
use crate::{ToolContext, ToolError, TypedTool};

/// Entries listed before the rest are only counted.
const MAX_ENTRIES: usize = 1000;

/// `file.list`: files under a directory of the workspace.
#[derive(Debug, Clone)]
pub struct FileList {
    timeout: Duration,
}

impl FileList {
    pub fn new(timeout: Duration) -> Self {
        FileList { timeout }
    }
}

/// Arguments of `file.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileListArgs {
    /// Directory in the workspace; its root when absent.
    path: Option<String>,
    /// Glob, e.g. `*.rs` or `src/**/*.md`.
    pattern: Option<String>,
}

#[async_trait]
impl TypedTool for FileList {
    type Args = FileListArgs;

    fn name(&self) -> &str {
        "file.list"
    }

    fn description(&self) -> &str {
        "List files under a directory (respects .gitignore), optionally by glob."
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

    async fn run(&self, args: FileListArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let root = ctx.confine(args.path.as_deref().unwrap_or("."))?;
        let shown = display(&ctx.workspace, &root);
        match tokio::fs::metadata(&root).await {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(ToolError::failed(format!(
                    "{shown} is a file, not a directory; use file.read"
                )));
            }
            Err(e) => return Err(ToolError::failed(format!("cannot list {shown}: {e}"))),
        }
        let glob = args.pattern.as_deref().map(NameGlob::new).transpose()?;
        let private = ctx.private_dirs();
        let stop = Stop::default();
        let _stop = StopOnDrop(stop.clone());
        let listing = tokio::task::spawn_blocking(move || {
            let mut lines = Vec::new();
            let mut more = 0usize;
            walk(&root, private, &stop, |entry| {
                if let Some(glob) = &glob
                    && (entry.is_dir || !glob.matches(&entry.relative))
                {
                    return true;
                }
                if lines.len() < MAX_ENTRIES {
                    let mut line = entry.relative.display().to_string();
                    if entry.is_dir {
                        line.push('/');
                    }
                    lines.push(line);
                } else {
                    more += 1;
                }
                true
            });
            (lines, more)
        })
        .await
        .map_err(|e| ToolError::failed(format!("listing {shown} failed: {e}")))?;
        let (lines, more) = listing;
        if lines.is_empty() {
            return Ok(match args.pattern {
                Some(pattern) => format!("nothing in {shown} matches {pattern}"),
                None => format!("{shown} is empty"),
            });
        }
        let mut out = lines.join("\n");
        if more > 0 {
            out.push_str(&format!("\n... {more} more (narrow with path or pattern)"));
        }
        Ok(out)
    }
}
