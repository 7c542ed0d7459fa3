//! Splitting an answer into messages a platform accepts: each at most the
//! platform's limit, cut at the best boundary there is (a blank line, a
//! line, a sentence, a space, else between two characters), never inside a
//! UTF-8 character, and with a code block that spans a cut closed at the
//! end of one message and opened again (same language) at the start of
//! the next.

/// How a platform counts a message's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Unicode scalar values (Discord, WhatsApp).
    Chars,
    /// UTF-16 code units (Telegram).
    Utf16,
    /// UTF-8 bytes.
    Bytes,
}

impl Measure {
    pub fn of(self, text: &str) -> usize {
        match self {
            Measure::Chars => text.chars().count(),
            Measure::Utf16 => text.encode_utf16().count(),
            Measure::Bytes => text.len(),
        }
    }

    fn of_char(self, c: char) -> usize {
        match self {
            Measure::Chars => 1,
            Measure::Utf16 => c.len_utf16(),
            Measure::Bytes => c.len_utf8(),
        }
    }
}

/// The longest fence opener kept when a block is reopened
/// (```` ```language ````); longer info strings are cut.
const MAX_FENCE: usize = 24;

/// Splits `text` into messages of at most `limit` (measured by
/// `measure`). `limit` below 32 is raised to 32, so a code block can
/// always be closed and reopened.
pub fn chunk(text: &str, limit: usize, measure: Measure) -> Vec<String> {
    let limit = limit.max(32);
    let mut out = Vec::new();
    let mut rest = text.trim_end();
    // A code block left open by the previous chunk: its opening line.
    let mut reopen: Option<String> = None;
    while !rest.is_empty() {
        // A reopened fence whose info string would take more than half a
        // message (a long non-ASCII one, measured in bytes) reopens bare.
        let prefix = reopen
            .as_ref()
            .map(|f| {
                if measure.of(f) + 5 > limit / 2 {
                    "```\n".to_owned()
                } else {
                    format!("{f}\n")
                }
            })
            .unwrap_or_default();
        let whole = format!("{prefix}{rest}");
        if measure.of(&whole) <= limit {
            out.push(whole);
            break;
        }
        // Room for the text, keeping space to close a block: "\n```".
        let budget = limit.saturating_sub(measure.of(&prefix) + 4);
        let cut = best_cut(rest, budget, measure);
        let (head, tail) = rest.split_at(cut);
        let head = head.trim_end();
        let mut piece = format!("{prefix}{head}");
        let open = open_fence(&piece);
        if open.is_some() {
            piece.push_str("\n```");
        }
        if !head.trim().is_empty() || open.is_some() {
            out.push(piece);
        }
        reopen = open;
        rest = tail.trim_start_matches([' ', '\t']);
        rest = rest.strip_prefix('\n').unwrap_or(rest);
        if reopen.is_none() {
            rest = rest.trim_start_matches('\n');
        }
    }
    out
}

/// Finds the end of the last boundary of one kind in a window.
type Boundary = dyn Fn(&str) -> Option<usize>;

/// The byte offset to cut `text` at so the head measures at most
/// `budget`, at the best boundary within the last part of the window.
fn best_cut(text: &str, budget: usize, measure: Measure) -> usize {
    // The furthest char boundary within the budget.
    let mut end = 0;
    let mut used = 0;
    for (i, c) in text.char_indices() {
        let w = measure.of_char(c);
        if used + w > budget {
            break;
        }
        used += w;
        end = i + c.len_utf8();
    }
    if end == 0 {
        // Not even one character fits (cannot happen with limit >= 32).
        return text.chars().next().map_or(text.len(), char::len_utf8);
    }
    let window = &text[..end];
    // Prefer boundaries in the second half, so chunks stay full.
    let floor = end / 2;
    let candidates: [&Boundary; 4] = [
        &|w: &str| w.rfind("\n\n").map(|i| i + 2),
        &|w: &str| w.rfind('\n').map(|i| i + 1),
        &|w: &str| {
            [". ", "! ", "? ", "。"]
                .iter()
                .filter_map(|p| w.rfind(p).map(|i| i + p.len()))
                .max()
        },
        &|w: &str| w.rfind([' ', '\t']).map(|i| i + 1),
    ];
    for find in candidates {
        if let Some(at) = find(window)
            && at > floor
        {
            return at;
        }
    }
    end
}

/// The opening line of a fenced code block still open at the end of
/// `text`, if any.
fn open_fence(text: &str) -> Option<String> {
    let mut open: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            open = match open {
                Some(_) => None,
                None => Some(trimmed.chars().take(MAX_FENCE).collect()),
            };
        }
    }
    open
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_short_text_is_one_message() {
        assert_eq!(chunk("hello", 100, Measure::Chars), ["hello"]);
        assert_eq!(chunk("", 100, Measure::Chars), Vec::<String>::new());
    }

    #[test]
    fn paragraphs_lines_and_words_are_the_cut_points_in_that_order() {
        let text = format!("{}\n\n{}", "a".repeat(30), "b ".repeat(30));
        assert_eq!(
            chunk(&text, 40, Measure::Chars),
            [
                "a".repeat(30),
                "b ".repeat(18).trim_end().to_owned(),
                "b ".repeat(12).trim_end().to_owned()
            ]
        );
        let words = "one two three four five six seven eight nine ten eleven";
        for piece in chunk(words, 32, Measure::Chars) {
            assert!(
                !piece.starts_with(' ') && !piece.ends_with(' '),
                "{piece:?}"
            );
            for word in piece.split(' ') {
                assert!(words.split(' ').any(|w| w == word), "{word} was cut");
            }
        }
    }

    #[test]
    fn a_long_non_ascii_fence_measured_in_bytes_fits_the_smallest_limit() {
        let fence = format!("```{}", "é".repeat(40));
        let code = "x = 1\n".repeat(40);
        let text = format!("{fence}\n{code}```");
        let chunks = chunk(&text, 32, Measure::Bytes);
        assert!(chunks.len() > 2, "{chunks:#?}");
        for piece in &chunks {
            assert!(piece.len() <= 32, "{} bytes: {piece:?}", piece.len());
            assert_eq!(piece.matches("```").count() % 2, 0, "unbalanced: {piece}");
        }
        let lines = chunks
            .iter()
            .flat_map(|c| c.lines())
            .filter(|l| *l == "x = 1");
        assert_eq!(lines.count(), 40);
    }

    #[test]
    fn a_code_block_across_a_cut_is_closed_and_reopened_with_its_language() {
        let code: String = (0..20).map(|i| format!("let x{i} = {i};\n")).collect();
        let text = format!("Here:\n```rust\n{code}```\nDone.");
        let chunks = chunk(&text, 120, Measure::Chars);
        assert!(chunks.len() > 2, "{chunks:#?}");
        for piece in &chunks {
            assert!(piece.chars().count() <= 120, "{piece}");
            assert_eq!(piece.matches("```").count() % 2, 0, "unbalanced: {piece}");
        }
        for piece in &chunks[1..chunks.len() - 1] {
            assert!(piece.starts_with("```rust\n"), "{piece}");
        }
        let lines: Vec<&str> = chunks
            .iter()
            .flat_map(|c| c.lines())
            .filter(|l| l.starts_with("let "))
            .collect();
        assert_eq!(lines, code.lines().collect::<Vec<_>>());
    }

    #[test]
    fn telegram_counts_utf16_units() {
        // Each emoji is two UTF-16 units.
        let text = "😀".repeat(40);
        let chunks = chunk(&text, 32, Measure::Utf16);
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|c| Measure::Utf16.of(c) <= 32));
        assert_eq!(chunks.concat(), text);
    }

    proptest! {
        #[test]
        fn every_chunk_fits_and_no_text_is_lost(
            text in "[a-zé😀 \\n.]{0,400}",
            limit in 32usize..120,
        ) {
            for measure in [Measure::Chars, Measure::Utf16, Measure::Bytes] {
                let chunks = chunk(&text, limit, measure);
                for piece in &chunks {
                    prop_assert!(measure.of(piece) <= limit, "{:?} over {}", piece, limit);
                    prop_assert!(!piece.trim().is_empty());
                }
                let squeeze = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
                prop_assert_eq!(squeeze(&chunks.concat()), squeeze(&text));
            }
        }

        #[test]
        fn code_fences_are_cut_and_reopened_without_losing_text(
            lines in prop::collection::vec(
                prop_oneof![
                    "[a-zé😀 .`]{0,40}",
                    Just("```".to_owned()),
                    Just("```rust".to_owned()),
                    Just("````".to_owned()),
                    Just("``` ```".to_owned()),
                    "```[a-z]{0,40}",
                ],
                0..40,
            ),
            // Down to the floor of 32 (and below, which is raised to it):
            // a fence too long for half a message reopens bare.
            limit in 0usize..160,
        ) {
            let text = lines.join("\n");
            for measure in [Measure::Chars, Measure::Utf16, Measure::Bytes] {
                let chunks = chunk(&text, limit, measure);
                for piece in &chunks {
                    prop_assert!(measure.of(piece) <= limit.max(32), "{:?} over {}", piece, limit);
                    prop_assert!(!piece.trim().is_empty());
                }
                // Fences closed and reopened at the cuts add text; none
                // of the original may go missing or move.
                let kept = |c: &char| !c.is_whitespace() && *c != '`';
                let joined = chunks.concat();
                let mut out = joined.chars().filter(kept);
                let lost = text.chars().filter(kept).find(|c| !out.any(|o| o == *c));
                prop_assert!(lost.is_none(), "{:?} lost from {:?}", lost, chunks);
            }
        }
    }
}
