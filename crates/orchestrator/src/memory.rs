//! Memory in the agent loop: the `memory.*` tools, the `[Memory Context]`
//! prompt slot, and extraction of facts from what compaction summarises.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_context::{MemoryFlush, render_message};
use flynn_memory::{Hit, Memory, Namespace, Scope, SearchMode, SearchOptions, WriteMode};
use flynn_models::{Estimate, TokenCounter};
use flynn_protocol::{ContentBlock, Message, Purpose, SessionKey, ToolEffect};
use flynn_tools::{ToolContext, ToolError, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::delegate::{AgentOrchestrator, SubAgentRequest};
use crate::prompt::{PromptContext, PromptSlot};

pub const MEMORY_READ: &str = "memory.read";
pub const MEMORY_WRITE: &str = "memory.write";
pub const MEMORY_SEARCH: &str = "memory.search";

/// Memory as the runtime uses it.
#[derive(Debug, Clone)]
pub struct MemoryRuntime {
    pub memory: Memory,
    /// Extract facts after compaction (`memory.auto_extract`).
    pub auto_extract: bool,
    /// `memory.max_context_tokens`.
    pub max_context_tokens: usize,
    /// `memory.context_hits`.
    pub context_hits: usize,
}

impl MemoryRuntime {
    /// The three memory tools.
    pub fn tools(&self) -> Vec<Arc<dyn flynn_tools::Tool>> {
        vec![
            flynn_tools::into_dyn(MemoryRead(self.memory.clone())),
            flynn_tools::into_dyn(MemoryWrite(self.memory.clone())),
            flynn_tools::into_dyn(MemorySearch(self.memory.clone())),
        ]
    }

    /// The `[Memory Context]` prompt slot.
    pub fn slot(&self) -> Arc<dyn PromptSlot> {
        Arc::new(MemorySlot {
            memory: self.memory.clone(),
            budget: self.max_context_tokens,
            hits: self.context_hits,
        })
    }
}

fn failed(error: flynn_memory::Error) -> ToolError {
    ToolError::failed(error.to_string())
}

fn scope(ctx: &ToolContext) -> Scope {
    Scope::now(Some(ctx.session.clone()))
}

/// The namespaces a guest's turn may reach: its own notes
/// (`people/<channel>-<id>`) and its session's; `None` for the owner, who
/// reaches all.
fn guest_namespaces(ctx: &ToolContext) -> Option<Vec<Namespace>> {
    let own = ctx.principal.memory_namespace()?;
    let mut allowed = vec![Namespace::of_session(&ctx.session)];
    allowed.extend(Namespace::parse(&own).ok());
    Some(allowed)
}

/// A namespace a tool names, as this turn may reach it: for a guest,
/// `user` is its own notes, and anything but those and `session` is
/// refused.
fn resolve(name: &str, ctx: &ToolContext) -> Result<Namespace, ToolError> {
    let Some(allowed) = guest_namespaces(ctx) else {
        return Namespace::resolve(name, &scope(ctx)).map_err(failed);
    };
    let trimmed = name.trim();
    let namespace = match trimmed.strip_suffix(".md").unwrap_or(trimmed) {
        "user" => allowed.last().cloned(),
        _ => Namespace::resolve(name, &scope(ctx)).ok(),
    };
    match namespace {
        Some(namespace) if allowed.contains(&namespace) => Ok(namespace),
        _ => Err(ToolError::failed(format!(
            "memory '{name}' is not reachable in this conversation: it is with a guest, whose memory is {} (or `user` for short) and `session`",
            allowed
                .last()
                .map_or_else(|| "session".to_owned(), ToString::to_string)
        ))),
    }
}

/// `memory.read`.
struct MemoryRead(Memory);

/// Arguments of `memory.read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryReadArgs {
    /// user, global, session (this chat), daily (today) or a path like
    /// projects/x.
    namespace: String,
}

#[async_trait]
impl TypedTool for MemoryRead {
    type Args = MemoryReadArgs;

    fn name(&self) -> &str {
        MEMORY_READ
    }

    fn description(&self) -> &str {
        "Read a memory file, with its version (needed to replace it)."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn reads_private_data(&self) -> bool {
        true
    }

    async fn run(&self, args: MemoryReadArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let namespace = resolve(&args.namespace, ctx)?;
        match self.0.read(&namespace).await.map_err(failed)? {
            Some(file) => Ok(format!(
                "[memory {namespace} version {}]\n{}",
                file.version, file.content
            )),
            None => {
                let allowed = guest_namespaces(ctx);
                let known: Vec<String> = self
                    .0
                    .list()
                    .await
                    .map_err(failed)?
                    .into_iter()
                    .filter(|f| allowed.as_ref().is_none_or(|a| a.contains(&f.namespace)))
                    .map(|f| f.namespace.to_string())
                    .collect();
                Ok(format!(
                    "[memory {namespace} is empty; it is created by memory.write. Files: {}]",
                    if known.is_empty() {
                        "none yet".to_owned()
                    } else {
                        known.join(", ")
                    }
                ))
            }
        }
    }
}

/// `memory.write`.
struct MemoryWrite(Memory);

/// Arguments of `memory.write`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryWriteArgs {
    /// user, global, session, daily or a path like projects/x.
    namespace: String,
    /// Markdown; facts as `- ` lines.
    content: String,
    /// Replace the whole file instead of appending.
    #[serde(default)]
    replace: bool,
    /// The same choice by name: `append` (the default) or `replace`.
    mode: Option<WriteChoice>,
    /// To replace: the version memory.read gave.
    version: Option<String>,
}

/// `mode` of `memory.write`, the design notes' name for `replace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WriteChoice {
    Append,
    Replace,
}

#[async_trait]
impl TypedTool for MemoryWrite {
    type Args = MemoryWriteArgs;

    fn name(&self) -> &str {
        MEMORY_WRITE
    }

    fn description(&self) -> &str {
        "Save to your memory files (appends unless replace)."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::WritesMemory
    }

    async fn run(&self, args: MemoryWriteArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let namespace = resolve(&args.namespace, ctx)?;
        let replace = match (args.mode, args.replace) {
            (Some(WriteChoice::Append), true) => {
                return Err(ToolError::InvalidArguments {
                    tool: MEMORY_WRITE.to_owned(),
                    message: "mode is append but replace is true; give one of them".to_owned(),
                });
            }
            (Some(WriteChoice::Replace), _) => true,
            (Some(WriteChoice::Append), false) | (None, false) => false,
            (None, true) => true,
        };
        if args.content.trim().is_empty() && !replace {
            return Err(ToolError::InvalidArguments {
                tool: MEMORY_WRITE.to_owned(),
                message: "content is empty; nothing to append".to_owned(),
            });
        }
        let mode = if replace {
            WriteMode::Replace {
                expected: args.version,
            }
        } else {
            WriteMode::Append
        };
        let written = self
            .0
            .write(&namespace, &args.content, mode)
            .await
            .map_err(failed)?;
        Ok(format!(
            "{} memory {} ({} bytes, version {})",
            if written.created { "created" } else { "saved" },
            written.namespace,
            written.bytes,
            written.version
        ))
    }
}

/// `memory.search`.
struct MemorySearch(Memory);

/// Arguments of `memory.search`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySearchArgs {
    /// What to look for, in words.
    query: String,
}

#[async_trait]
impl TypedTool for MemorySearch {
    type Args = MemorySearchArgs;

    fn name(&self) -> &str {
        MEMORY_SEARCH
    }

    fn description(&self) -> &str {
        "Search all memory files: file, line and snippet per hit."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(30)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn reads_private_data(&self) -> bool {
        true
    }

    async fn run(&self, args: MemorySearchArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let allowed = guest_namespaces(ctx);
        let options = SearchOptions {
            // A guest's hits are filtered to its own files: look further.
            limit: if allowed.is_some() { 64 } else { 8 },
            mode: SearchMode::Hybrid,
            ..SearchOptions::default()
        };
        let mut hits = self.0.search(&args.query, &options).await.map_err(failed)?;
        if let Some(allowed) = &allowed {
            hits.retain(|hit| allowed.contains(&hit.namespace));
            hits.truncate(8);
        }
        Ok(render_hits(&args.query, &hits))
    }
}

/// Search results as the model and `flynn memory search` show them: one
/// `file:line-line` line with a snippet per hit.
pub fn render_hits(query: &str, hits: &[Hit]) -> String {
    if hits.is_empty() {
        return format!("no memory matches {query:?}");
    }
    let mut out = String::new();
    for hit in hits {
        if !out.is_empty() {
            out.push('\n');
        }
        let lines = if hit.start_line == hit.end_line {
            hit.start_line.to_string()
        } else {
            format!("{}-{}", hit.start_line, hit.end_line)
        };
        out.push_str(&format!("{}:{lines}: {}", hit.file, hit.snippet));
    }
    out
}

/// `[Memory Context]` in the system prompt.
struct MemorySlot {
    memory: Memory,
    budget: usize,
    hits: usize,
}

#[async_trait]
impl PromptSlot for MemorySlot {
    fn name(&self) -> &str {
        "memory"
    }

    async fn render(&self, context: &PromptContext<'_>) -> Option<String> {
        if self.budget == 0 {
            return None;
        }
        if let Some(own) = context.principal.memory_namespace() {
            // A guest: its own notes only, never the owner's memory.
            return self.guest_context(&own).await;
        }
        let message: String = context
            .message
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let count = |text: &str| Estimate.count_text(text);
        match self
            .memory
            .context(&message, self.hits, self.budget, &count)
            .await
        {
            Ok(section) => section,
            Err(error) => {
                tracing::warn!(%error, "memory left out of the prompt");
                None
            }
        }
    }
}

impl MemorySlot {
    async fn guest_context(&self, own: &str) -> Option<String> {
        let namespace = Namespace::parse(own).ok()?;
        let file = match self.memory.read(&namespace).await {
            Ok(file) => file?,
            Err(error) => {
                tracing::warn!(%error, "a guest's memory left out of the prompt");
                return None;
            }
        };
        let content = file.content.trim();
        if content.is_empty() {
            return None;
        }
        let count = |text: &str| Estimate.count_text(text);
        let mut body = content.to_owned();
        // The newest part that fits the budget.
        while count(&body) > self.budget {
            let (_, rest) = body.split_once('\n')?;
            body = rest.to_owned();
        }
        Some(format!(
            "[Memory Context]\nYou are talking with a guest, not your owner. Your notes about this person ({namespace}; memory.write user adds to them):\n\n{body}"
        ))
    }
}

/// What the memory-extraction call is told.
pub const EXTRACTION_PROMPT: &str = "You keep the long-term memory of a personal assistant. From the conversation below, list the facts worth remembering in future conversations: lasting facts about the user (name, preferences, people, places, projects, decisions, plans, commitments) and lasting knowledge about their world. Leave out small talk, one-off requests, passing states, anything already in memory, and secrets (passwords, keys, tokens). Write one short, self-contained fact per line, each starting with `user: ` (about the user) or `global: ` (anything else). If nothing is worth keeping, answer NONE.";

/// Largest part of the compacted conversation sent for extraction, in
/// bytes (the newest part; the summary covers the rest).
const EXTRACTION_INPUT_BYTES: usize = 48 * 1024;
/// Largest part of existing memory shown to the extractor, in bytes.
const EXISTING_BYTES: usize = 8 * 1024;
/// The longest fact kept, in characters.
const MAX_FACT_CHARS: usize = 300;

/// Extracts facts from what compaction replaces, on the memory extraction
/// tier, and appends the new ones to `user.md` or `global.md`.
pub(crate) struct Extractor {
    pub(crate) memory: Memory,
    pub(crate) orchestrator: AgentOrchestrator,
    pub(crate) depth: u32,
    pub(crate) cancel: CancellationToken,
}

#[async_trait]
impl MemoryFlush for Extractor {
    async fn flush(
        &self,
        session: &SessionKey,
        messages: &[Message],
        summary: &str,
    ) -> Result<(), String> {
        // What a web page (or any outside content) says must not become a
        // remembered fact: the transcript stops where untrusted content
        // starts, and the summary, written from all of it, is left out.
        let trusted = messages
            .iter()
            .position(flynn_protocol::message_is_untrusted)
            .unwrap_or(messages.len());
        let (messages, summary) = if trusted < messages.len() {
            (
                &messages[..trusted],
                "(left out: it covers untrusted content)",
            )
        } else {
            (messages, summary)
        };
        if messages.is_empty() {
            tracing::info!(%session, "no memory extraction: the compacted messages start with untrusted content");
            return Ok(());
        }
        let user = self.existing(&Namespace::user()).await;
        let global = self.existing(&Namespace::global()).await;
        let mut transcript = String::new();
        for message in messages {
            let rendered = render_message(message);
            if !rendered.is_empty() {
                transcript.push_str(&rendered);
                transcript.push('\n');
            }
        }
        let transcript = tail(&transcript, EXTRACTION_INPUT_BYTES);
        let request_text = format!(
            "Already in memory (user.md):\n{}\n\nAlready in memory (global.md):\n{}\n\nConversation:\n{transcript}\n\nIts summary:\n{summary}",
            if user.trim().is_empty() {
                "(empty)"
            } else {
                tail(&user, EXISTING_BYTES)
            },
            if global.trim().is_empty() {
                "(empty)"
            } else {
                tail(&global, EXISTING_BYTES)
            },
        );
        let request = SubAgentRequest {
            depth: self.depth,
            max_tokens: Some(1024),
            ..SubAgentRequest::new(
                Purpose::MemoryExtraction,
                session.clone(),
                EXTRACTION_PROMPT,
                request_text,
            )
        };
        let answer = self
            .orchestrator
            .delegate(request, &self.cancel)
            .await
            .map_err(|error| format!("memory extraction: {error}"))?
            .content;
        let facts = parse_facts(&answer);
        for (namespace, existing) in [(Namespace::user(), user), (Namespace::global(), global)] {
            let new = novel(
                &existing,
                facts
                    .iter()
                    .filter(|f| f.0 == namespace)
                    .map(|f| f.1.as_str()),
            );
            if new.is_empty() {
                continue;
            }
            let lines: Vec<String> = new.iter().map(|fact| format!("- {fact}")).collect();
            self.memory
                .write(&namespace, &lines.join("\n"), WriteMode::Append)
                .await
                .map_err(|error| format!("memory extraction: {error}"))?;
            tracing::info!(%session, file = %namespace, facts = new.len(), "facts added to memory");
        }
        Ok(())
    }
}

impl Extractor {
    async fn existing(&self, namespace: &Namespace) -> String {
        match self.memory.read(namespace).await {
            Ok(file) => file.map(|f| f.content).unwrap_or_default(),
            Err(error) => {
                tracing::warn!(%error, "memory not shown to the extractor");
                String::new()
            }
        }
    }
}

/// The end of `text`, at most `limit` bytes, from a character boundary.
fn tail(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let start = text.ceil_char_boundary(text.len() - limit);
    &text[start..]
}

/// `user: ...` and `global: ...` lines of the extractor's answer, with
/// list markers and quotes stripped; anything else is ignored.
pub fn parse_facts(answer: &str) -> Vec<(Namespace, String)> {
    let mut facts = Vec::new();
    for line in answer.lines() {
        let line = line.trim().trim_start_matches(['-', '*', '•']).trim_start();
        let Some((label, fact)) = line.split_once(':') else {
            continue;
        };
        let namespace = match label
            .trim()
            .trim_matches(['*', '`'])
            .to_ascii_lowercase()
            .as_str()
        {
            "user" => Namespace::user(),
            "global" => Namespace::global(),
            _ => continue,
        };
        let mut fact = fact.trim().trim_matches('`').trim();
        if fact.len() >= 2 && fact.starts_with('"') && fact.ends_with('"') {
            fact = &fact[1..fact.len() - 1];
        }
        let fact: String = fact.split_whitespace().collect::<Vec<_>>().join(" ");
        if fact.chars().count() < 3 || fact.eq_ignore_ascii_case("none") {
            continue;
        }
        let fact: String = fact.chars().take(MAX_FACT_CHARS).collect();
        facts.push((namespace, fact));
    }
    facts
}

/// Word stems of a fact, for comparing facts: lower-case words of two
/// or more characters, without a plural or -ed/-ing ending, cut to five
/// characters (so "likes"/"liked" and "prefers"/"preferred" match),
/// without the commonest words.
fn stems(text: &str) -> std::collections::BTreeSet<String> {
    const COMMON: &[&str] = &[
        "the", "a", "an", "and", "is", "are", "was", "of", "to", "in", "on", "for", "user",
        "user's", "their", "they", "he", "she", "his", "her", "has", "have", "with", "at",
    ];
    text.split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| w.chars().count() >= 2 && !COMMON.contains(&w.as_str()))
        .map(|w| {
            // A crude stemmer: enough to match likes/liked, prefers/preferred.
            let mut stem = w.as_str();
            for suffix in ["ing", "ed", "es", "s"] {
                if let Some(rest) = stem.strip_suffix(suffix)
                    && rest.chars().count() >= 3
                {
                    stem = rest;
                    break;
                }
            }
            stem.chars().take(5).collect()
        })
        .collect()
}

/// Whether two facts say the same thing: their stems overlap by at least
/// three quarters (Jaccard), or one's stems are all in the other's.
pub fn near_duplicate(a: &str, b: &str) -> bool {
    let (a, b) = (stems(a), stems(b));
    if a.is_empty() || b.is_empty() {
        return a == b;
    }
    let shared = a.intersection(&b).count();
    let union = a.union(&b).count();
    let contained = shared == a.len().min(b.len()) && a.len().min(b.len()) >= 3;
    contained || shared * 4 >= union * 3
}

/// The facts not already in `existing` (any of its lines) nor earlier in
/// the list.
fn novel<'a>(existing: &str, facts: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut known: Vec<String> = existing
        .lines()
        .map(|l| l.trim().trim_start_matches(['-', '*']).trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect();
    let mut new = Vec::new();
    for fact in facts {
        if known.iter().any(|k| near_duplicate(k, fact)) {
            continue;
        }
        known.push(fact.to_owned());
        new.push(fact.to_owned());
    }
    new
}

/// Runs one flush after another (an embedder's own, then extraction).
pub(crate) struct Both(
    pub(crate) Arc<dyn MemoryFlush>,
    pub(crate) Arc<dyn MemoryFlush>,
);

#[async_trait]
impl MemoryFlush for Both {
    async fn flush(
        &self,
        session: &SessionKey,
        messages: &[Message],
        summary: &str,
    ) -> Result<(), String> {
        let first = self.0.flush(session, messages, summary).await;
        let second = self.1.flush(session, messages, summary).await;
        first.and(second)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_are_read_from_labelled_lines_only() {
        let answer = "Here is what I found:\n- user: Prefers green tea\n* Global: The office wifi is \"flynn-net\"\nuser:   \nNONE\nsomething: else\nUSER: Has a sister called Ana";
        let facts: Vec<(String, String)> = parse_facts(answer)
            .into_iter()
            .map(|(ns, fact)| (ns.to_string(), fact))
            .collect();
        assert_eq!(
            facts,
            [
                ("user".to_owned(), "Prefers green tea".to_owned()),
                (
                    "global".to_owned(),
                    "The office wifi is \"flynn-net\"".to_owned()
                ),
                ("user".to_owned(), "Has a sister called Ana".to_owned()),
            ]
        );
        assert!(parse_facts("NONE").is_empty());
    }

    #[test]
    fn near_duplicates_are_recognised() {
        assert!(near_duplicate(
            "The user prefers green tea",
            "User prefers green tea."
        ));
        assert!(near_duplicate(
            "Likes green tea in the morning",
            "liked green tea in the morning"
        ));
        assert!(near_duplicate(
            "Has a sister called Ana",
            "The user has a sister called Ana who lives in Porto"
        ));
        assert!(!near_duplicate("Prefers green tea", "Prefers black coffee"));
        assert!(!near_duplicate("Lives in Porto", "Works in Lisbon"));
        let new = novel(
            "# User\n- Prefers green tea\n",
            [
                "User prefers green tea",
                "Lives in Porto",
                "lives in Porto.",
                "Works in Lisbon",
            ]
            .into_iter(),
        );
        assert_eq!(new, ["Lives in Porto", "Works in Lisbon"]);
    }
}
