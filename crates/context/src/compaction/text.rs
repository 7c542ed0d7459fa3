//! Clipping text on character boundaries, and rendering messages as the
//! transcript the summariser reads.

use flynn_models::TokenCounter;
use flynn_protocol::{ContentBlock, Message};

/// Characters of a tool call's JSON arguments kept in the transcript.
pub(crate) const TOOL_ARGS_CHARS: usize = 500;

/// Characters of a tool result kept in the transcript (head and tail).
pub(crate) const TOOL_RESULT_CHARS: usize = 2_000;

/// The first `max` characters of `text`, with `…` when something was cut.
pub(crate) fn head(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// `text` with its middle left out, so that at most `max` characters of it
/// remain (its head and tail), joined by a marker saying how much went.
pub(crate) fn clip_middle(text: &str, max: usize) -> String {
    let total = text.chars().count();
    if total <= max {
        return text.to_owned();
    }
    let head_chars = max.div_ceil(2);
    let tail_chars = max - head_chars;
    let head_end = byte_index(text, head_chars);
    let tail_start = byte_index(text, total - tail_chars);
    format!(
        "{}\n[… {} characters left out …]\n{}",
        &text[..head_end],
        total - max,
        &text[tail_start..]
    )
}

/// The byte offset of character `n` of `text` (its length past the end).
fn byte_index(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

/// `text` clipped in the middle (see [`clip_middle`]) to at most
/// `max_tokens` tokens as `counter` counts them.
pub(crate) fn clip_tokens(counter: &dyn TokenCounter, text: &str, max_tokens: usize) -> String {
    if counter.count_text(text) <= max_tokens {
        return text.to_owned();
    }
    // The largest number of kept characters that fits, by bisection: the
    // count grows with the characters kept.
    let (mut fits, mut too_many) = (0_usize, text.chars().count());
    while too_many - fits > 1 {
        let mid = fits + (too_many - fits) / 2;
        if counter.count_text(&clip_middle(text, mid)) <= max_tokens {
            fits = mid;
        } else {
            too_many = mid;
        }
    }
    let clipped = clip_middle(text, fits);
    if counter.count_text(&clipped) <= max_tokens {
        clipped
    } else {
        // Not even the marker fits.
        String::new()
    }
}

/// `text` on one line: every run of whitespace becomes one space.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One message as the summariser reads it: a line block per content
/// block, thinking left out. Empty when nothing is left.
pub(crate) fn render(message: &Message) -> String {
    let role = message.role.as_str();
    let mut lines: Vec<String> = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } => lines.push(format!("{role}: {text}")),
            ContentBlock::Image { .. } => lines.push(format!("{role}: [image]")),
            ContentBlock::ToolUse { name, input, .. } => lines.push(format!(
                "{role} called {name} {}",
                clip_middle(&input.to_string(), TOOL_ARGS_CHARS)
            )),
            ContentBlock::ToolResult {
                content, is_error, ..
            } => lines.push(format!(
                "tool result ({}): {}",
                if *is_error { "error" } else { "ok" },
                clip_middle(content, TOOL_RESULT_CHARS)
            )),
            ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => {}
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use flynn_models::Estimate;
    use serde_json::json;

    use flynn_protocol::Role;

    use super::*;

    #[test]
    fn clipping_keeps_whole_characters() {
        let text = "é".repeat(10) + &"ü".repeat(10);
        assert_eq!(head(&text, 3), "ééé…");
        assert_eq!(head("short", 10), "short");
        assert_eq!(
            clip_middle(&text, 4),
            "éé\n[… 16 characters left out …]\nüü"
        );
        assert_eq!(clip_middle(&text, 20), text);
        assert_eq!(
            clip_middle("日本語のテキスト", 3),
            "日本\n[… 5 characters left out …]\nト"
        );
    }

    #[test]
    fn clipping_to_tokens_fits_the_count() {
        let text = "ß".repeat(1_000);
        for max in [0, 5, 20, 100, 499, 500, 1_000] {
            let clipped = clip_tokens(&Estimate, &text, max);
            assert!(Estimate.count_text(&clipped) <= max, "{max}: {clipped}");
        }
        assert_eq!(clip_tokens(&Estimate, &text, 500), text);
        // The most that fits is kept: 100 tokens of 400 bytes, less the marker.
        let clipped = clip_tokens(&Estimate, &text, 100);
        assert!(Estimate.count_text(&clipped) >= 95, "{clipped}");
    }

    #[test]
    fn messages_render_one_line_block_each_without_thinking() {
        let message = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "secret".into(),
                    signature: None,
                },
                ContentBlock::text("Looking."),
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "shell.exec".into(),
                    input: json!({"command": "x".repeat(600)}),
                },
            ],
        };
        let rendered = render(&message);
        let expected_args = clip_middle(&json!({"command": "x".repeat(600)}).to_string(), 500);
        assert_eq!(
            rendered,
            format!("assistant: Looking.\nassistant called shell.exec {expected_args}")
        );
        let result = Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: "t1".into(),
                content: "y".repeat(3_000),
                is_error: true,
            }],
        };
        assert_eq!(
            render(&result),
            format!(
                "tool result (error): {}\n[… 1000 characters left out …]\n{}",
                "y".repeat(1_000),
                "y".repeat(1_000)
            )
        );
    }
}
