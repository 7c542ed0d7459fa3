//! Which models read images: `models.image_input`, else a built-in table
//! of well-known families. A model the table does not know is taken not
//! to (an image it cannot read would fail the request or confuse it); the
//! config says otherwise for one that does.

use flynn_protocol::Message;

use crate::context_window::canonical;

/// Model id prefixes (in the form [`canonical`] gives) and whether the
/// family reads images; the longest matching prefix wins.
const KNOWN: &[(&str, bool)] = &[
    // Anthropic: every Claude since 3.
    ("claude", true),
    ("claude-2", false),
    ("claude-instant", false),
    // OpenAI.
    ("gpt-4", false),
    ("gpt-4-turbo", true),
    ("gpt-4-vision", true),
    ("gpt-4o", true),
    ("chatgpt-4o", true),
    ("gpt-4.1", true),
    ("gpt-4.5", true),
    ("gpt-5", true),
    ("o1", true),
    ("o1-mini", false),
    ("o1-preview", false),
    ("o3", true),
    ("o3-mini", false),
    ("o4-mini", true),
    // Google.
    ("gemini", true),
    ("gemma3", true),
    ("gemma-3", true),
    // Meta.
    ("llama4", true),
    ("llama-4", true),
    // Mistral.
    ("pixtral", true),
    ("mistral-small3.1", true),
    ("mistral-small3.2", true),
    ("mistral-small-3.1", true),
    ("mistral-small-3.2", true),
    ("mistral-medium-3", true),
    // Qwen's vision-language models.
    ("qwen-vl", true),
    ("qwen2-vl", true),
    ("qwen2.5vl", true),
    ("qwen2.5-vl", true),
    ("qwen3-vl", true),
    // Self-hosted vision models.
    ("llava", true),
    ("bakllava", true),
    ("moondream", true),
    ("minicpm-v", true),
    ("granite3.2-vision", true),
    // Amazon (Bedrock).
    ("nova-lite", true),
    ("nova-pro", true),
    ("nova-premier", true),
    // xAI.
    ("grok-4", true),
];

/// Whether the built-in table says `model` reads images: a known family,
/// or a name that says "vision". `false` for a model it does not know.
pub fn known_image_input(model: &str) -> bool {
    let id = canonical(model);
    if id.contains("vision") {
        return true;
    }
    KNOWN
        .iter()
        .filter(|(key, _)| id.starts_with(key))
        .max_by_key(|(key, _)| key.len())
        .is_some_and(|(_, reads)| *reads)
}

/// `messages` with every image replaced by `note` (see
/// [`Message::replace_images`]), or `None` when they hold none.
pub(crate) fn without_images(messages: &[Message], note: &str) -> Option<Vec<Message>> {
    if !messages.iter().any(Message::has_images) {
        return None;
    }
    let mut messages = messages.to_vec();
    for message in &mut messages {
        message.replace_images(note);
    }
    Some(messages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_knows_vision_families_and_refuses_the_rest() {
        for (model, expected) in [
            ("claude-sonnet-4-5", true),
            ("anthropic/claude-3.5-haiku", true),
            ("us.anthropic.claude-sonnet-4-20250514-v1:0", true),
            ("claude-2.1", false),
            ("gpt-4o-mini", true),
            ("gpt-4.1", true),
            ("gpt-4", false),
            ("gpt-3.5-turbo", false),
            ("o3-mini", false),
            ("o3", true),
            ("gemini-2.5-flash", true),
            ("llama3.2-vision:11b", true),
            ("llama3.1:8b", false),
            ("qwen2.5vl:7b", true),
            ("Qwen/Qwen2.5-VL-7B-Instruct", true),
            ("qwen2.5:7b", false),
            ("gemma3:12b", true),
            ("amazon.nova-pro-v1:0", true),
            ("amazon.nova-micro-v1:0", false),
            ("deepseek-chat", false),
            ("something-new", false),
        ] {
            assert_eq!(known_image_input(model), expected, "{model}");
        }
    }
}
