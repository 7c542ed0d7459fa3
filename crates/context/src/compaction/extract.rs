//! The deterministic extractive summary: what compaction stores when the
//! summariser cannot give one.

use std::collections::HashMap;

use flynn_models::TokenCounter;
use flynn_protocol::{ContentBlock, Message, Role};

use super::text::{clip_tokens, head, one_line};
use super::{is_summary, summary_body};

/// Characters of each message's text kept in an extractive summary.
pub(crate) const LINE_CHARS: usize = 300;

/// How each tool call ended, by call id: `true` when it failed.
pub(crate) fn outcomes(messages: &[Message]) -> HashMap<String, bool> {
    messages
        .iter()
        .flat_map(|message| &message.content)
        .filter_map(|block| match block {
            ContentBlock::ToolResult {
                tool_use_id,
                is_error,
                ..
            } => Some((tool_use_id.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

/// The lines of an extractive summary of `messages`, oldest first.
fn lines(messages: &[Message], outcomes: &HashMap<String, bool>) -> Vec<String> {
    let mut lines = Vec::new();
    for message in messages {
        if is_summary(message) {
            let body = summary_body(message).unwrap_or_default();
            lines.push(format!(
                "- earlier summary: {}",
                head(&one_line(&body), LINE_CHARS)
            ));
            continue;
        }
        let role = message.role.as_str();
        let text = one_line(&message.text());
        if !text.is_empty() {
            lines.push(format!("- {role}: {}", head(&text, LINE_CHARS)));
        } else if message
            .content
            .iter()
            .any(|block| matches!(block, ContentBlock::Image { .. }))
        {
            lines.push(format!("- {role}: [image]"));
        }
        if message.role == Role::Assistant {
            let calls: Vec<String> = message
                .tool_uses()
                .map(|(id, name, _)| {
                    let outcome = match outcomes.get(id) {
                        Some(false) => "ok",
                        Some(true) => "failed",
                        None => "no result",
                    };
                    format!("{name} ({outcome})")
                })
                .collect();
            if !calls.is_empty() {
                lines.push(format!("- tools: {}", calls.join(", ")));
            }
        }
    }
    lines
}

/// An extractive summary of `messages` after `summary_so_far`, within
/// `budget` tokens: the summary so far (clipped to half the budget), then
/// one line per message (user and assistant text cut to its first 300
/// characters, tool calls as `name (ok|failed)`, their outcomes looked up
/// in `outcomes`). When the lines do not fit, the most recent ones that do
/// are kept, after a note of how many were left out. The same input gives
/// the same output.
pub(crate) fn extractive(
    counter: &dyn TokenCounter,
    summary_so_far: Option<&str>,
    messages: &[Message],
    outcomes: &HashMap<String, bool>,
    budget: usize,
) -> String {
    let lines = lines(messages, outcomes);
    let earlier = summary_so_far
        .map(str::trim)
        .filter(|summary| !summary.is_empty())
        .map(|summary| {
            let prefix = "Summary so far: ";
            // An extractive summary of an extractive summary says so once.
            let mut summary = summary;
            while let Some(rest) = summary.strip_prefix(prefix.trim_end()) {
                summary = rest.trim_start();
            }
            let room = (budget / 2).saturating_sub(counter.count_text(prefix));
            format!("{prefix}{}", clip_tokens(counter, summary, room))
        });
    let assemble = |from: usize| {
        let mut parts: Vec<String> = earlier.iter().cloned().collect();
        if from > 0 {
            parts.push(format!("(… {from} earlier lines left out)"));
        }
        parts.extend(lines[from..].iter().cloned());
        parts.join("\n")
    };
    let whole = assemble(0);
    if counter.count_text(&whole) <= budget {
        return whole;
    }
    // Keep the most recent lines that fit: estimate from the end, then
    // drop lines until the whole text counts within the budget.
    let fixed = earlier.as_deref().map_or(0, |e| counter.count_text(e) + 1)
        + counter.count_text(&format!("(… {} earlier lines left out)", lines.len()))
        + 1;
    let mut used = fixed;
    let mut from = lines.len();
    while from > 0 {
        let cost = counter.count_text(&lines[from - 1]) + 1;
        if used + cost > budget {
            break;
        }
        used += cost;
        from -= 1;
    }
    // The whole text did not fit, so at least one line goes.
    let mut from = from.max(1).min(lines.len());
    let mut summary = assemble(from);
    while counter.count_text(&summary) > budget && from < lines.len() {
        from += 1;
        summary = assemble(from);
    }
    if counter.count_text(&summary) > budget {
        // Only the summary so far and the note are left, and even they
        // are too long for a tiny budget.
        summary = clip_tokens(counter, &summary, budget);
    }
    summary
}

#[cfg(test)]
mod tests {
    use flynn_models::Estimate;
    use serde_json::json;

    use super::*;

    fn exchange(i: usize, failed: bool) -> Vec<Message> {
        vec![
            Message::user(format!("question {i}: ünïcödé ✓ {}", "ж".repeat(400))),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::text(format!("I will look, {i}.")),
                    ContentBlock::ToolUse {
                        id: format!("t{i}"),
                        name: "shell.exec".into(),
                        input: json!({"command": "ls"}),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: format!("t{i}"),
                    content: "a.txt".into(),
                    is_error: failed,
                }],
            },
            Message::assistant(format!("Answer {i}\nsecond line")),
        ]
    }

    #[test]
    fn a_short_history_is_summarised_line_by_line() {
        let messages = exchange(1, true);
        let summary = extractive(
            &Estimate,
            Some("We met."),
            &messages,
            &outcomes(&messages),
            1_000,
        );
        let question = format!("question 1: ünïcödé ✓ {}", "ж".repeat(400));
        assert_eq!(
            summary,
            format!(
                "Summary so far: We met.\n- user: {}\n- assistant: I will look, 1.\n- tools: shell.exec (failed)\n- assistant: Answer 1 second line",
                head(&question, LINE_CHARS)
            )
        );
    }

    #[test]
    fn a_long_history_keeps_the_most_recent_lines_deterministically() {
        let messages: Vec<Message> = (0..50).flat_map(|i| exchange(i, i % 3 == 0)).collect();
        let outcomes = outcomes(&messages);
        let earlier = "ü".repeat(5_000);
        let summary = extractive(&Estimate, Some(&earlier), &messages, &outcomes, 600);
        assert!(Estimate.count_text(&summary) <= 600, "{summary}");
        assert_eq!(
            summary,
            extractive(&Estimate, Some(&earlier), &messages, &outcomes, 600)
        );
        let lines: Vec<&str> = summary.lines().collect();
        assert!(lines[0].starts_with("Summary so far: üü"), "{}", lines[0]);
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("(… ") && l.ends_with(" earlier lines left out)")),
            "{summary}"
        );
        assert_eq!(lines.last(), Some(&"- assistant: Answer 49 second line"));
        // Tiny budgets stay within the budget too.
        for budget in [0, 1, 10, 50] {
            let summary = extractive(&Estimate, Some(&earlier), &messages, &outcomes, budget);
            assert!(
                Estimate.count_text(&summary) <= budget,
                "{budget}: {summary}"
            );
        }
    }
}
