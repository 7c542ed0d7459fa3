use std::io::Read;
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{open_regular, write_atomically};
use crate::confine::display;
use crate::{ToolContext, ToolError, TypedTool};

/// `file.edit`: exact find-and-replace in one file.
#[derive(Debug, Clone)]
pub struct FileEdit {
    timeout: Duration,
}

impl FileEdit {
    pub fn new(timeout: Duration) -> Self {
        FileEdit { timeout }
    }
}

/// Arguments of `file.edit`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileEditArgs {
    /// Path in the workspace.
    path: String,
    /// Exact text to find, with enough context to be unique.
    #[serde(alias = "oldString", alias = "old_string")]
    old: String,
    /// Replacement text.
    #[serde(alias = "newString", alias = "new_string")]
    new: String,
    /// Replace every match instead of exactly one.
    #[serde(default, alias = "replaceAll")]
    replace_all: bool,
}

#[async_trait]
impl TypedTool for FileEdit {
    type Args = FileEditArgs;

    fn name(&self) -> &str {
        "file.edit"
    }

    fn description(&self) -> &str {
        "Replace exact text in a file (must match once unless replace_all)."
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::WritesFiles
    }

    async fn run(&self, args: FileEditArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let path = ctx.confine(&args.path)?;
        let shown = display(&ctx.workspace, &path);
        if args.old.is_empty() {
            return Err(ToolError::failed(
                "old is empty; give the exact text to replace (use file.write to create a file)",
            ));
        }
        if args.old == args.new {
            return Err(ToolError::failed(
                "old and new are the same; nothing to change",
            ));
        }
        let bytes = {
            let (path, name) = (path.clone(), shown.clone());
            tokio::task::spawn_blocking(move || {
                let mut bytes = Vec::new();
                open_regular(&path, &name)?
                    .read_to_end(&mut bytes)
                    .map_err(|e| ToolError::failed(format!("cannot read {name}: {e}")))?;
                Ok::<_, ToolError>(bytes)
            })
            .await
            .map_err(|e| ToolError::failed(format!("cannot read {shown}: {e}")))??
        };
        let text = String::from_utf8(bytes).map_err(|_| {
            ToolError::failed(format!(
                "{shown} is not UTF-8 text; file.edit changes text files only"
            ))
        })?;
        let starts: Vec<usize> = text.match_indices(&args.old).map(|(i, _)| i).collect();
        let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
        match starts.len() {
            0 => return Err(ToolError::failed(no_match(&shown, &text, &args.old))),
            1 => {}
            n if !args.replace_all => {
                let mut lines: Vec<String> =
                    starts.iter().map(|&s| line_of(s).to_string()).collect();
                lines.dedup();
                return Err(ToolError::failed(format!(
                    "old matches {n} places in {shown} (lines {}); add surrounding text so it matches once, or set replace_all",
                    lines.join(", ")
                )));
            }
            _ => {}
        }
        // Each line once: two matches on one line are "line 3", not "lines 3, 3".
        let mut lines: Vec<String> = starts.iter().map(|&s| line_of(s).to_string()).collect();
        lines.dedup();
        let edited = if args.replace_all {
            text.replace(&args.old, &args.new)
        } else {
            text.replacen(&args.old, &args.new, 1)
        };
        write_atomically(&path, edited.as_bytes()).await?;
        Ok(format!(
            "replaced {} occurrence{} in {shown} (line{} {})",
            starts.len(),
            if starts.len() == 1 { "" } else { "s" },
            if lines.len() == 1 { "" } else { "s" },
            lines.join(", ")
        ))
    }
}

/// Says that `old` is not in the file, and where something close is.
fn no_match(shown: &str, text: &str, old: &str) -> String {
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let first = old.lines().find(|l| !l.trim().is_empty()).unwrap_or(old);
    let wanted = squash(first);
    let wanted_lower = wanted.to_lowercase();
    let mut whitespace = Vec::new();
    let mut case = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = squash(line);
        if line.is_empty() || wanted.is_empty() {
            continue;
        }
        if line.contains(&wanted) {
            whitespace.push(i + 1);
        } else if line.to_lowercase().contains(&wanted_lower) {
            case.push(i + 1);
        }
    }
    let list = |v: &[usize]| {
        v.iter()
            .take(5)
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let hint = if !whitespace.is_empty() {
        format!(
            "; text matching it apart from whitespace or line breaks is at line {} (read the file and copy the text exactly)",
            list(&whitespace)
        )
    } else if !case.is_empty() {
        format!(
            "; text matching it apart from letter case is at line {}",
            list(&case)
        )
    } else {
        "; read the file first and copy the text exactly".to_owned()
    };
    format!("old does not occur in {shown}{hint}")
}
