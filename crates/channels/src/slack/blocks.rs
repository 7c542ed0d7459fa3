//! Block Kit for messages with buttons: the text in `section` blocks
//! (each at most 3000 characters), then one `actions` block of buttons.

use serde_json::{Value, json};

use crate::adapter::{Button, ButtonStyle};
use crate::chunk::{Measure, chunk};

/// The longest text of a `section` block.
pub const SECTION_MAX: usize = 3000;
/// The most elements of an `actions` block.
pub const ACTIONS_MAX: usize = 25;
/// The longest button label.
pub const LABEL_MAX: usize = 75;
/// The longest button value.
pub const VALUE_MAX: usize = 2000;

/// The blocks of a message: `[]` without buttons (which also removes the
/// buttons of a message being edited).
pub(super) fn message_blocks(text: &str, buttons: &[Button]) -> Value {
    if buttons.is_empty() {
        return json!([]);
    }
    let mut blocks: Vec<Value> = chunk(text, SECTION_MAX, Measure::Chars)
        .into_iter()
        .filter(|piece| !piece.trim().is_empty())
        .map(|piece| json!({"type": "section", "text": {"type": "mrkdwn", "text": piece}}))
        .collect();
    let elements: Vec<Value> = buttons
        .iter()
        .take(ACTIONS_MAX)
        .enumerate()
        .map(|(i, button)| {
            let style = match button.style {
                ButtonStyle::Primary => "primary",
                ButtonStyle::Danger => "danger",
            };
            json!({
                "type": "button",
                "action_id": format!("flynn_{i}"),
                "text": {"type": "plain_text", "text": cut(&button.label, LABEL_MAX), "emoji": true},
                "value": cut(&button.data, VALUE_MAX),
                "style": style,
            })
        })
        .collect();
    blocks.push(json!({"type": "actions", "elements": elements}));
    Value::Array(blocks)
}

fn cut(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_spread_over_sections_within_the_limit() {
        let text = "word ".repeat(1300);
        let buttons = [Button {
            label: "Approve".into(),
            data: "y:1".into(),
            style: ButtonStyle::Primary,
        }];
        let blocks = message_blocks(&text, &buttons);
        let blocks = blocks.as_array().unwrap();
        assert_eq!(blocks.len(), 4);
        for section in &blocks[..3] {
            assert!(section["text"]["text"].as_str().unwrap().chars().count() <= SECTION_MAX);
        }
        assert_eq!(blocks[3]["elements"][0]["style"], "primary");
        assert_eq!(message_blocks("x", &[]), json!([]));
    }
}
