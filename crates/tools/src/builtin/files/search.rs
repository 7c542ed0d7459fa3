use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use regex::RegexBuilder;
use schemars::JsonSchema;
use serde::Deserialize;

use super::walk::{NameGlob, Stop, StopOnDrop, walk};
use super::{is_binary, not_regular, open_regular};
use crate::confine::display;
use crate::{ToolContext, ToolError, TypedTool};

/// Matches shown before the rest are only counted.
const MAX_MATCHES: usize = 200;
/// Characters of a matching line shown.
const MAX_LINE: usize = 200;
/// Files larger than this are skipped.
const MAX_FILE: u64 = 10 * 1024 * 1024;

/// `file.search`: a regex over the workspace's text files.
#[derive(Debug, Clone)]
pub struct FileSearch {
    timeout: Duration,
}

impl FileSearch {
    pub fn new(timeout: Duration) -> Self {
        FileSearch { timeout }
    }
}

/// Arguments of `file.search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSearchArgs {
    /// Regular expression (Rust syntax).
    pattern: String,
    /// Directory or file in the workspace; its root when absent.
    path: Option<String>,
    /// Only files matching this glob, e.g. `*.rs`.
    glob: Option<String>,
    /// Ignore letter case.
    #[serde(default)]
    ignore_case: bool,
}

#[async_trait]
impl TypedTool for FileSearch {
    type Args = FileSearchArgs;

    fn name(&self) -> &str {
        "file.search"
    }

    fn description(&self) -> &str {
        "Search files for a regex; returns path:line: text."
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

    async fn run(&self, args: FileSearchArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let root = ctx.confine(args.path.as_deref().unwrap_or("."))?;
        let shown = display(&ctx.workspace, &root);
        let regex = RegexBuilder::new(&args.pattern)
            .case_insensitive(args.ignore_case)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| ToolError::failed(format!("invalid regex: {e}")))?;
        let glob = args.glob.as_deref().map(NameGlob::new).transpose()?;
        match tokio::fs::metadata(&root).await {
            Err(_) => return Err(ToolError::failed(format!("{shown} does not exist"))),
            Ok(meta) if !meta.is_dir() => {
                if let Some(kind) = not_regular(&meta.file_type()) {
                    return Err(ToolError::failed(format!(
                        "{shown} is {kind}, not a regular file"
                    )));
                }
            }
            Ok(_) => {}
        }
        let workspace = ctx.workspace.clone();
        let private = ctx.private_dirs();
        let stop = Stop::default();
        let _stop = StopOnDrop(stop.clone());
        let found = tokio::task::spawn_blocking(move || {
            let mut lines = Vec::new();
            let mut more = 0usize;
            let real_root = workspace
                .canonicalize()
                .unwrap_or_else(|_| workspace.clone());
            let mut search_file = |path: &std::path::Path| {
                // A symlink may point out of the workspace; its target
                // must be inside, like any path a file tool opens.
                let Some(real) = path
                    .canonicalize()
                    .ok()
                    .filter(|real| real.starts_with(&real_root))
                else {
                    return;
                };
                // Regular files only: a named pipe would block the search.
                let Ok(file) = open_regular(&real, "") else {
                    return;
                };
                if file.metadata().map_or(true, |m| m.len() > MAX_FILE) {
                    return;
                }
                let mut reader = BufReader::new(file);
                let Ok(start) = reader.fill_buf() else { return };
                if is_binary(start) {
                    return;
                }
                let name = display(&workspace, path);
                let mut buf = Vec::new();
                let mut number = 0usize;
                loop {
                    buf.clear();
                    match (&mut reader).take(1 << 20).read_until(b'\n', &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    number += 1;
                    let text = String::from_utf8_lossy(&buf);
                    let text = text.trim_end_matches(['\n', '\r']);
                    if regex.is_match(text) {
                        if lines.len() < MAX_MATCHES {
                            lines.push(format!("{name}:{number}: {}", clip(text)));
                        } else {
                            more += 1;
                        }
                    }
                }
            };
            if root.is_file() {
                search_file(&root);
            } else {
                walk(&root, private, &stop, |entry| {
                    if !entry.is_dir && glob.as_ref().is_none_or(|g| g.matches(&entry.relative)) {
                        search_file(&entry.path);
                    }
                    true
                });
            }
            (lines, more)
        })
        .await
        .map_err(|e| ToolError::failed(format!("searching {shown} failed: {e}")))?;
        let (lines, more) = found;
        if lines.is_empty() {
            return Ok(format!("no matches for /{}/ in {shown}", args.pattern));
        }
        let mut out = lines.join("\n");
        if more > 0 {
            out.push_str(&format!(
                "\n... {more} more matches (narrow with path or glob)"
            ));
        }
        Ok(out)
    }
}

/// A line cut to [`MAX_LINE`] characters.
fn clip(line: &str) -> String {
    flynn_protocol::text::clip(line, MAX_LINE)
}
