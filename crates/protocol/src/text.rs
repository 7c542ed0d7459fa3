//! Small text helpers every crate shows text with.

/// `text` cut to its first `max` characters, with `…` after it when
/// something was cut. Never splits a character.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn clipping_counts_characters_and_marks_a_cut() {
        assert_eq!(clip("short", 5), "short");
        assert_eq!(clip("shorter", 5), "short…");
        assert_eq!(clip("café au lait", 4), "café…");
        assert_eq!(clip("", 0), "");
        assert_eq!(clip("a", 0), "…");
    }
}
