//! The system prompt, assembled on every turn from parts: the agent's base
//! prompt, its workspace files (`SOUL.md`, `AGENTS.md`) when present, and
//! slots other subsystems fill (memory, skills).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use flynn_protocol::{ContentBlock, Principal, SessionKey};

/// The system prompt used when the config sets none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are Flynn, a personal AI assistant running on your owner's machine. \
Answer concisely. Use the tools when they help; say what you did.";

/// Largest part of one workspace file put into the prompt, in bytes.
pub const PROMPT_FILE_LIMIT: usize = 16 * 1024;

/// What a slot may look at to decide what to contribute.
#[derive(Debug, Clone, Copy)]
pub struct PromptContext<'a> {
    pub session: &'a SessionKey,
    pub agent: &'a str,
    pub workspace: &'a Path,
    /// The message the turn answers.
    pub message: &'a [ContentBlock],
    /// Who sent it: a guest's prompt never carries the owner's memory.
    pub principal: &'a Principal,
}

/// One section of the system prompt that another subsystem provides, such
/// as `[Memory Context]` or the skills list. Asked on every turn.
#[async_trait]
pub trait PromptSlot: Send + Sync {
    /// A short name for logs (`memory`, `skills`).
    fn name(&self) -> &str;

    /// The section's text, heading included, or `None` to leave it out.
    async fn render(&self, context: &PromptContext<'_>) -> Option<String>;
}

/// Assembles one agent's system prompt.
#[derive(Clone)]
pub struct PromptBuilder {
    base: String,
    files: Vec<String>,
    workspace: PathBuf,
    slots: Vec<Arc<dyn PromptSlot>>,
}

impl std::fmt::Debug for PromptBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptBuilder")
            .field("files", &self.files)
            .field("workspace", &self.workspace)
            .field(
                "slots",
                &self.slots.iter().map(|s| s.name()).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl PromptBuilder {
    /// `files` are names relative to `workspace`, read on every turn.
    pub fn new(base: impl Into<String>, files: Vec<String>, workspace: impl Into<PathBuf>) -> Self {
        PromptBuilder {
            base: base.into(),
            files,
            workspace: workspace.into(),
            slots: Vec::new(),
        }
    }

    /// Adds a slot; slots render in the order they were added.
    pub fn slot(mut self, slot: Arc<dyn PromptSlot>) -> Self {
        self.slots.push(slot);
        self
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The prompt for one turn. Files that are missing are left out;
    /// files that cannot be read are left out with a logged warning, so a
    /// bad file never stops a turn.
    pub async fn build(&self, context: &PromptContext<'_>) -> String {
        let mut prompt = self.base.trim_end().to_owned();
        if !self.files.is_empty() {
            // One trip to the blocking pool for all files.
            let paths: Vec<(String, PathBuf)> = self
                .files
                .iter()
                .map(|name| (name.clone(), self.workspace.join(name)))
                .collect();
            let read = tokio::task::spawn_blocking(move || {
                paths
                    .into_iter()
                    .map(|(name, path)| {
                        let bytes = std::fs::read(&path);
                        (name, path, bytes)
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            for (name, path, bytes) in read {
                match bytes {
                    Ok(bytes) => {
                        let text = String::from_utf8_lossy(&bytes);
                        let text = text.trim();
                        if text.is_empty() {
                            continue;
                        }
                        prompt.push_str("\n\n## ");
                        prompt.push_str(&name);
                        prompt.push('\n');
                        push_capped(&mut prompt, text, PROMPT_FILE_LIMIT);
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => {
                        tracing::warn!(path = %path.display(), %error, "prompt file left out");
                    }
                }
            }
        }
        for slot in &self.slots {
            if let Some(section) = slot.render(context).await {
                let section = section.trim();
                if !section.is_empty() {
                    prompt.push_str("\n\n");
                    prompt.push_str(section);
                }
            }
        }
        prompt
    }
}

fn push_capped(out: &mut String, text: &str, limit: usize) {
    if text.len() <= limit {
        out.push_str(text);
        return;
    }
    let end = text.floor_char_boundary(limit);
    out.push_str(&text[..end]);
    out.push_str(&format!("\n[cut: showed {end} of {} bytes]", text.len()));
}
