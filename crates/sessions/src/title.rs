//! A session's title: what the list of sessions shows instead of its key.
//!
//! A session gets one at once, from its first message: the first line of
//! its text, whitespace collapsed, cut to [`MAX_CHARS`] characters at a
//! word boundary with `…`. [`Turns::accept`](crate::Turns::accept)
//! sets it when the session has none; a better title (say, one a model
//! made) may replace it with [`Conversations::set_metadata`](crate::Conversations::set_metadata).

use flynn_protocol::ContentBlock;

/// Longest title, in characters (`…` included).
pub const MAX_CHARS: usize = 60;

/// The title for a session whose first message is `content`: `None` when
/// it holds no text (an image alone).
pub fn from_content(content: &[ContentBlock]) -> Option<String> {
    content.iter().find_map(|block| match block {
        ContentBlock::Text { text } => from_text(text),
        _ => None,
    })
}

/// The title for a first message of `text`: `None` when it is blank.
pub fn from_text(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|line| !line.is_empty())?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let whole = words.join(" ");
    if whole.chars().count() <= MAX_CHARS {
        return Some(whole);
    }
    let mut title = String::new();
    for word in &words {
        let next = if title.is_empty() {
            (*word).to_owned()
        } else {
            format!("{title} {word}")
        };
        if next.chars().count() > MAX_CHARS - 1 {
            break;
        }
        title = next;
    }
    if title.is_empty() {
        // One word longer than a title: cut inside it.
        title = whole.chars().take(MAX_CHARS - 1).collect();
    }
    title.push('…');
    Some(title)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_cut_at_a_word() {
        assert_eq!(
            from_text("  what is the weather\nin Paris?").as_deref(),
            Some("what is the weather")
        );
        assert_eq!(from_text(" \n\t\n"), None);
        assert_eq!(
            from_text("a  b\tc").as_deref(),
            Some("a b c"),
            "whitespace collapsed"
        );
        let long =
            "summarise the alerts of today and tell me which of them need a person to look at them";
        let title = from_text(long).unwrap_or_default();
        assert_eq!(
            title,
            "summarise the alerts of today and tell me which of them…"
        );
        assert!(title.chars().count() <= MAX_CHARS);
        let word = "x".repeat(100);
        let title = from_text(&word).unwrap_or_default();
        assert_eq!(title.chars().count(), MAX_CHARS);
        assert!(title.ends_with('…'));
        assert_eq!(from_text("héllo wörld").as_deref(), Some("héllo wörld"));
    }
}
