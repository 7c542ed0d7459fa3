//! Compaction: replacing the older part of a session's stored history with
//! one summary message, so a conversation can run on within a model's
//! context window.
//!
//! [`Compactor::compact`] reads the history, keeps the last turns whole
//! (moving the cut later when they alone are too big), has a
//! [`Summariser`] summarise the rest (in several chunks with a rolling
//! summary when it does not fit the summariser's window), tells the
//! [`MemoryFlush`] what is about to go, and replaces the compacted messages
//! with one summary message. It always finishes: when the summariser times
//! out, fails, or answers with nothing or too much, a deterministic
//! extractive summary takes the place of its answer.

mod cut;
mod extract;
mod text;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use flynn_models::TokenCounter;
use flynn_protocol::{ContentBlock, Message, Role, SessionKey};
use flynn_sessions::Conversations;
use tokio_util::sync::CancellationToken;

use crate::CompactionError;
use cut::Cuts;
use extract::{extractive, outcomes};
use text::{clip_tokens, render};

/// One message as the summariser reads it: a line per content block
/// (`user: ...`, `assistant called tool {...}`, `tool result (ok): ...`,
/// long tool input and output clipped), thinking left out.
pub fn render_message(message: &Message) -> String {
    render(message)
}

/// Marks a stored message as a compaction summary; it starts the text.
pub const SUMMARY_PREFIX: &str = "[flynn:summary]";

/// What follows [`SUMMARY_PREFIX`] up to the message count.
const HEADER_LEAD: &str = " The conversation before this point was compacted (";

/// What separates a summary message's header from its body.
const HEADER_END: &str = " messages). Summary:\n\n";

/// The summariser's instructions.
pub const COMPACTION_PROMPT: &str = "You summarise the earlier part of a conversation between a user and Flynn, an AI assistant that uses tools, so that Flynn can carry on without the original messages. You are given the summary so far, when there is one, and the next part of the conversation. Write one updated summary that folds the new part into the summary so far; leave nothing of the summary so far out unless the conversation made it obsolete.\n\nKeep: facts learned; decisions made and their reasons; names of people, projects, files and things; the user's preferences and instructions; open tasks and unanswered questions; file paths, commands, URLs, identifiers and numbers exactly as written; what each tool call found or why it failed. Drop greetings, small talk and repetition.\n\nWrite in the third person (\"The user asked...\", \"Flynn found...\"), as short paragraphs or bullet points, most important first. Answer with the summary only: no preamble, no heading, no closing remark.";

/// The prefix of the summary so far in the summariser's input.
const SUMMARY_SO_FAR: &str = "Summary so far:\n";

/// The fewest tokens of transcript a summariser call must have room for;
/// with less, compaction does not call the summariser at all.
const MIN_ROOM: usize = 256;

/// How compaction behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionSettings {
    /// Compact when the prompt reaches this percentage of the window.
    pub threshold_pct: u8,
    /// The last this many turns are kept whole.
    pub keep_turns: usize,
    /// How long one summariser call may take.
    pub timeout: Duration,
    /// The largest summary asked for, in tokens.
    pub summary_max_tokens: u32,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        CompactionSettings {
            threshold_pct: 80,
            keep_turns: 4,
            timeout: Duration::from_secs(60),
            summary_max_tokens: 2_048,
        }
    }
}

/// The model that writes summaries (the orchestrator implements it by
/// delegating to the `fast` tier).
#[async_trait]
pub trait Summariser: Send + Sync {
    /// One summary: `system` is the instructions, `transcript` the text to
    /// summarise; at most `max_tokens` of answer. The error says what went
    /// wrong, for the compaction report.
    async fn summarise(
        &self,
        system: &str,
        transcript: &str,
        max_tokens: u32,
    ) -> Result<String, String>;

    /// Tokens the summariser's model takes in one call (its context
    /// window).
    fn window_tokens(&self) -> usize;
}

/// Told about the messages compaction is about to replace, before they are
/// replaced (to extract facts worth keeping).
#[async_trait]
pub trait MemoryFlush: Send + Sync {
    /// `messages` are the messages about to be replaced, oldest first;
    /// `summary` is what replaces them. An error is logged and compaction
    /// goes on.
    async fn flush(
        &self,
        session: &SessionKey,
        messages: &[Message],
        summary: &str,
    ) -> Result<(), String>;
}

/// The room a prompt has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The context window of the model the turn uses, in tokens.
    pub window: usize,
    /// Tokens of the system prompt and tool specs sent with the history.
    pub overhead: usize,
}

/// What one compaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactionReport {
    /// Stored messages replaced by the summary.
    pub replaced: usize,
    /// The estimated prompt (overhead and history) before.
    pub tokens_before: usize,
    /// The estimated prompt after (not counting messages other writers
    /// appended meanwhile).
    pub tokens_after: usize,
    /// Whether some or all of the summary is the extractive fallback.
    pub fallback: bool,
    /// Summariser calls made (0 when it fell back without calling).
    pub chunks: usize,
    /// Tokens sent to the summariser over all calls.
    pub summariser_tokens: usize,
    /// Why the summariser's answer was not used, the first time it was
    /// not (`the summariser timed out after 60 s`).
    pub fallback_reason: Option<String>,
}

/// Compacts session histories.
pub struct Compactor {
    settings: CompactionSettings,
    summariser: Arc<dyn Summariser>,
    counter: &'static dyn TokenCounter,
    flush: Option<Arc<dyn MemoryFlush>>,
}

impl fmt::Debug for Compactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compactor")
            .field("settings", &self.settings)
            .field("counter", &self.counter)
            .field("flush", &self.flush.is_some())
            .finish_non_exhaustive()
    }
}

/// The summary of the compacted messages, and how it was made.
struct Summary {
    text: String,
    chunks: usize,
    sent_tokens: usize,
    fallback_reason: Option<String>,
}

/// Why one summariser answer was not used.
struct Failure {
    reason: String,
    /// A timeout: later chunks do not call the summariser again.
    timed_out: bool,
}

impl Compactor {
    /// A compactor that summarises with `summariser` and counts tokens
    /// with `counter`.
    pub fn new(
        settings: CompactionSettings,
        summariser: Arc<dyn Summariser>,
        counter: &'static dyn TokenCounter,
    ) -> Self {
        Compactor {
            settings,
            summariser,
            counter,
            flush: None,
        }
    }

    /// The same compactor, telling `flush` what it is about to replace.
    pub fn with_flush(mut self, flush: Arc<dyn MemoryFlush>) -> Self {
        self.flush = Some(flush);
        self
    }

    /// How it behaves.
    pub fn settings(&self) -> &CompactionSettings {
        &self.settings
    }

    /// Whether a prompt of `tokens` has reached the threshold of `window`.
    pub fn should_compact(&self, tokens: usize, window: usize) -> bool {
        (tokens as u128) * 100 >= (window as u128) * u128::from(self.settings.threshold_pct)
    }

    /// What the prompt should come to after compacting for `window`: 60 %
    /// of the threshold.
    pub fn target(&self, window: usize) -> usize {
        let target = (window as u128) * u128::from(self.settings.threshold_pct) / 100 * 6 / 10;
        usize::try_from(target).unwrap_or(usize::MAX)
    }

    /// The most tokens a summary may have for `window`: the smaller of
    /// `summary_max_tokens` and an eighth of the window.
    pub fn summary_budget(&self, window: usize) -> usize {
        usize::try_from(self.settings.summary_max_tokens)
            .unwrap_or(usize::MAX)
            .min(window / 8)
    }

    /// Compacts the session's stored history. `force` (the `/compact`
    /// command, a context-overflow retry) compacts even below the
    /// threshold. Returns `None` when there is nothing older than the kept
    /// turns to compact (or, without `force`, the prompt is below the
    /// threshold). When `cancel` fires, returns
    /// [`CompactionError::Cancelled`] with the history unchanged.
    ///
    /// Messages other writers append while it runs are kept, after the
    /// summary.
    pub async fn compact(
        &self,
        store: &dyn Conversations,
        key: &SessionKey,
        budget: Budget,
        force: bool,
        cancel: &CancellationToken,
    ) -> Result<Option<CompactionReport>, CompactionError> {
        if cancel.is_cancelled() {
            return Err(CompactionError::Cancelled);
        }
        let stored = store.history(key).await?;
        let messages: Vec<Message> = stored.iter().map(|m| m.message.clone()).collect();
        let counts: Vec<usize> = messages
            .iter()
            .map(|m| self.counter.count_message(m))
            .collect();
        // kept[i]: the tokens of messages[i..].
        let mut kept = vec![0_usize; messages.len() + 1];
        for i in (0..messages.len()).rev() {
            kept[i] = kept[i + 1] + counts[i];
        }
        let tokens_before = budget.overhead + kept[0];
        if !force && !self.should_compact(tokens_before, budget.window) {
            return Ok(None);
        }

        let summary_budget = self.summary_budget(budget.window);
        let target = self.target(budget.window);
        let reserve = summary_budget + self.counter.count_message(&summary_message(usize::MAX, ""));
        let cuts = Cuts::of(&messages);
        let mut cut = cuts.keeping_turns(self.settings.keep_turns);
        while budget.overhead + reserve + kept[cut] > target {
            match cuts.next_after(cut) {
                Some(next) => cut = next,
                None => break,
            }
        }
        let earlier = messages.first().and_then(summary_body);
        let fresh = usize::from(earlier.is_some());
        if cut <= fresh {
            return Ok(None);
        }

        let compacted = &messages[..cut];
        let summary = self
            .summarise(
                earlier.as_deref(),
                &compacted[fresh..],
                summary_budget,
                cancel,
            )
            .await?;
        let represented = compacted
            .first()
            .filter(|_| fresh == 1)
            .and_then(summarised_count)
            .unwrap_or(fresh)
            // The count is read from text a user can write (a first message
            // that looks like a summary header), so it may be anything.
            .saturating_add(cut - fresh);
        let body = clean(&summary.text);
        // A summary of untrusted content is untrusted content: the marker
        // survives compaction, so the model, memory extraction and the next
        // compaction still treat it as data.
        let body = if compacted.iter().any(flynn_protocol::message_is_untrusted) {
            flynn_protocol::wrap_untrusted("summary of earlier messages", &body)
        } else {
            body
        };
        let message = summary_message(represented, &body);

        if let Some(flush) = &self.flush {
            let flushed = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(CompactionError::Cancelled),
                flushed = tokio::time::timeout(
                    self.settings.timeout,
                    flush.flush(key, compacted, &body),
                ) => flushed,
            };
            match flushed {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::warn!(session = %key, %error, "the memory flush before compaction failed; compacting anyway");
                }
                Err(_) => {
                    tracing::warn!(session = %key, timeout = ?self.settings.timeout, "the memory flush before compaction timed out; compacting anyway");
                }
            }
        }
        if cancel.is_cancelled() {
            return Err(CompactionError::Cancelled);
        }
        let upto = stored[cut - 1].seq;
        store
            .replace_history(key, upto, std::slice::from_ref(&message))
            .await?;

        let report = CompactionReport {
            replaced: cut,
            tokens_before,
            tokens_after: budget.overhead + self.counter.count_message(&message) + kept[cut],
            fallback: summary.fallback_reason.is_some(),
            chunks: summary.chunks,
            summariser_tokens: summary.sent_tokens,
            fallback_reason: summary.fallback_reason,
        };
        tracing::info!(
            session = %key,
            replaced = report.replaced,
            tokens_before = report.tokens_before,
            tokens_after = report.tokens_after,
            chunks = report.chunks,
            fallback = report.fallback_reason.as_deref().unwrap_or("none"),
            "compacted the history"
        );
        Ok(Some(report))
    }

    /// Summarises `messages` after the summary so far, in chunks that fit
    /// the summariser's window, falling back to the extractive summary
    /// per chunk.
    async fn summarise(
        &self,
        earlier: Option<&str>,
        messages: &[Message],
        budget: usize,
        cancel: &CancellationToken,
    ) -> Result<Summary, CompactionError> {
        let outcomes = outcomes(messages);
        let rendered: Vec<String> = messages.iter().map(render_for_summary).collect();
        let system_tokens = self.counter.count_text(COMPACTION_PROMPT);
        let window = self.summariser.window_tokens();
        let room = (window.saturating_mul(9) / 10).saturating_sub(system_tokens + budget);
        let max_tokens = u32::try_from(budget).unwrap_or(u32::MAX);

        let mut out = Summary {
            text: String::new(),
            chunks: 0,
            sent_tokens: 0,
            fallback_reason: None,
        };
        let mut usable = room >= MIN_ROOM;
        if !usable {
            out.fallback_reason = Some(format!(
                "the summariser's window of {window} tokens cannot hold its instructions, a {budget}-token summary and some conversation"
            ));
        }
        // The last summary the summariser wrote (or the earlier one), and
        // where the messages it does not cover start when extractive
        // summaries took over after it: consecutive fallbacks make one
        // extractive summary from there, rather than nesting them.
        let mut good: Option<String> = earlier.map(str::to_owned);
        let mut uncovered: Option<usize> = None;
        let mut summary = good.clone();
        let mut start = 0;
        while start < messages.len() {
            let end = if usable {
                let (end, input) = self.chunk(summary.as_deref(), &rendered, start, room);
                out.chunks += 1;
                out.sent_tokens += system_tokens + self.counter.count_text(&input);
                let answer = self.call(&input, max_tokens, cancel).await?;
                match answer.and_then(|answer| self.check(answer, budget)) {
                    Ok(answer) => {
                        good = Some(answer);
                        summary.clone_from(&good);
                        uncovered = None;
                        start = end;
                        continue;
                    }
                    Err(failure) => {
                        tracing::warn!(reason = %failure.reason, "using an extractive summary instead of the summariser's");
                        usable &= !failure.timed_out;
                        out.fallback_reason.get_or_insert(failure.reason);
                        end
                    }
                }
            } else {
                // The summariser is not called again: the rest at once.
                messages.len()
            };
            let from = *uncovered.get_or_insert(start);
            summary = Some(extractive(
                self.counter,
                good.as_deref(),
                &messages[from..end],
                &outcomes,
                budget,
            ));
            start = end;
        }
        out.text = summary.unwrap_or_default();
        Ok(out)
    }

    /// The summariser input for the chunk starting at message `start`: the
    /// summary so far, then as many rendered messages as fit in `room`
    /// tokens (one clipped message when even one does not fit). Returns
    /// the end of the chunk and the input.
    fn chunk(
        &self,
        summary: Option<&str>,
        rendered: &[String],
        start: usize,
        room: usize,
    ) -> (usize, String) {
        let counter = self.counter;
        let lead = summary.map_or(String::new(), |summary| {
            let space = (room / 2).saturating_sub(counter.count_text(SUMMARY_SO_FAR) + 1);
            format!(
                "{SUMMARY_SO_FAR}{}\n\n",
                clip_tokens(counter, summary, space)
            )
        });
        let assemble = |end: usize| format!("{lead}{}", rendered[start..end].join("\n\n"));
        // Estimate from the pieces, then make sure of the whole: counts of
        // joined text need not be the sums of the pieces'.
        let mut used = counter.count_text(&lead);
        let mut end = start;
        while end < rendered.len() {
            let cost = counter.count_text(&rendered[end]) + 1;
            if used + cost > room {
                break;
            }
            used += cost;
            end += 1;
        }
        while end > start {
            let input = assemble(end);
            if counter.count_text(&input) <= room {
                return (end, input);
            }
            end -= 1;
        }
        // The first message alone does not fit: clip it.
        let space = room.saturating_sub(counter.count_text(&lead) + 1);
        let mut clipped = clip_tokens(counter, &rendered[start], space);
        while counter.count_text(&format!("{lead}{clipped}")) > room && !clipped.is_empty() {
            let less = counter.count_text(&clipped).saturating_sub(1);
            clipped = clip_tokens(counter, &clipped, less);
        }
        (start + 1, format!("{lead}{clipped}"))
    }

    /// One summariser call, under the timeout and the cancel token.
    async fn call(
        &self,
        input: &str,
        max_tokens: u32,
        cancel: &CancellationToken,
    ) -> Result<Result<String, Failure>, CompactionError> {
        let timeout = self.settings.timeout;
        tokio::select! {
            biased;
            () = cancel.cancelled() => Err(CompactionError::Cancelled),
            answer = tokio::time::timeout(
                timeout,
                self.summariser.summarise(COMPACTION_PROMPT, input, max_tokens),
            ) => Ok(match answer {
                Err(_) => Err(Failure {
                    reason: format!("the summariser timed out after {}", seconds(timeout)),
                    timed_out: true,
                }),
                Ok(Err(error)) => Err(Failure {
                    reason: format!("the summariser failed: {error}"),
                    timed_out: false,
                }),
                Ok(Ok(answer)) => Ok(answer),
            }),
        }
    }

    /// The answer, trimmed, when it is a usable summary.
    fn check(&self, answer: String, budget: usize) -> Result<String, Failure> {
        let answer = answer.trim();
        if answer.is_empty() {
            return Err(Failure {
                reason: "the summariser answered with an empty summary".to_owned(),
                timed_out: false,
            });
        }
        let tokens = self.counter.count_text(answer);
        let most = budget.saturating_mul(3) / 2;
        if tokens > most {
            return Err(Failure {
                reason: format!(
                    "the summariser's summary was too long ({tokens} tokens; at most {most} allowed)"
                ),
                timed_out: false,
            });
        }
        Ok(answer.to_owned())
    }
}

/// `duration` as people read it: `60 s`, `1.5 s`, `250 ms`.
fn seconds(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{} s", duration.as_secs())
    } else if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

/// A message for the summariser's transcript; an earlier summary in the
/// middle of the range (there should be none) is shown by its body.
fn render_for_summary(message: &Message) -> String {
    match summary_body(message) {
        Some(body) => format!("earlier summary: {body}"),
        None => render(message),
    }
}

/// A summary as it is stored: trimmed, without a header the summariser
/// may have echoed, and without the prefix anywhere in it, so a stored
/// summary never nests headers.
fn clean(summary: &str) -> String {
    let mut body = summary.trim();
    while let Some(rest) = body.strip_prefix(SUMMARY_PREFIX) {
        body = rest
            .split_once(HEADER_END)
            .map_or(rest, |(_, after)| after)
            .trim();
    }
    body.replace(SUMMARY_PREFIX, "[summary]")
}

/// The stored summary message: a user message with one text block, the
/// header and then `body` (see [`clean`]).
fn summary_message(represented: usize, body: &str) -> Message {
    Message {
        role: Role::User,
        content: vec![ContentBlock::text(format!(
            "{SUMMARY_PREFIX}{HEADER_LEAD}{represented}{HEADER_END}{body}"
        ))],
    }
}

/// Whether `message` is a summary compaction stored: a user message whose
/// text starts with [`SUMMARY_PREFIX`].
pub fn is_summary(message: &Message) -> bool {
    message.role == Role::User
        && matches!(
            message.content.first(),
            Some(ContentBlock::Text { text }) if text.starts_with(SUMMARY_PREFIX)
        )
}

/// The body of a summary message (after its header); `None` for other
/// messages.
fn summary_body(message: &Message) -> Option<String> {
    if !is_summary(message) {
        return None;
    }
    let text = message.text();
    let rest = text.strip_prefix(SUMMARY_PREFIX).unwrap_or(&text);
    let body = rest.split_once(HEADER_END).map_or(rest, |(_, body)| body);
    Some(body.trim().to_owned())
}

/// How many original messages a summary message stands for, from its
/// header.
fn summarised_count(message: &Message) -> Option<usize> {
    let text = message.text();
    let rest = text
        .strip_prefix(SUMMARY_PREFIX)?
        .strip_prefix(HEADER_LEAD)?;
    let (count, _) = rest.split_once(HEADER_END)?;
    count.parse().ok()
}

#[cfg(test)]
mod tests {
    use flynn_models::Estimate;

    use super::*;

    #[test]
    fn summary_messages_carry_one_header_and_read_back() {
        let message = summary_message(12, "The user set up a repo.");
        assert_eq!(
            message,
            Message::user(
                "[flynn:summary] The conversation before this point was compacted (12 messages). Summary:\n\nThe user set up a repo."
            )
        );
        assert!(is_summary(&message));
        assert_eq!(
            summary_body(&message).as_deref(),
            Some("The user set up a repo.")
        );
        assert_eq!(summarised_count(&message), Some(12));
        // An echoed header is not nested.
        let echoed = summary_message(20, &clean(&message.text()));
        assert_eq!(echoed.text().matches(SUMMARY_PREFIX).count(), 1);
        assert_eq!(
            summary_body(&echoed).as_deref(),
            Some("The user set up a repo.")
        );
        assert!(!is_summary(&Message::user("hello")));
        assert!(!is_summary(&Message::assistant("[flynn:summary] no")));
    }

    #[test]
    fn thresholds_and_budgets() {
        struct Never;
        #[async_trait]
        impl Summariser for Never {
            async fn summarise(&self, _: &str, _: &str, _: u32) -> Result<String, String> {
                Err("unused".into())
            }
            fn window_tokens(&self) -> usize {
                0
            }
        }
        let compactor = Compactor::new(CompactionSettings::default(), Arc::new(Never), &Estimate);
        assert_eq!(compactor.target(8_192), 3_931);
        assert_eq!(compactor.summary_budget(8_192), 1_024);
        assert_eq!(compactor.summary_budget(200_000), 2_048);
        assert_eq!(seconds(Duration::from_secs(60)), "60 s");
        assert_eq!(seconds(Duration::from_millis(250)), "250 ms");
        assert_eq!(seconds(Duration::from_millis(1_500)), "1.5 s");
    }
}
