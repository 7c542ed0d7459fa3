use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who wrote a message. System prompts travel beside the history, not in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// Where the bytes of an image come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImageSource {
    /// Inline image data, base64-encoded.
    Base64 { media_type: String, data: String },
    /// An image the provider fetches itself.
    Url { url: String },
}

/// One piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    Image {
        source: ImageSource,
    },
    /// The model asks for a tool to run. `name` is the dotted tool name
    /// (`shell.exec`), never the provider's wire form.
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// The answer to a `ToolUse` with the same id.
    ToolResult {
        tool_use_id: String,
        content: String,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// The model's visible reasoning. The signature must be sent back
    /// unchanged on later turns for providers that check it.
    Thinking {
        thinking: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Reasoning the provider returned encrypted; kept only to send back.
    RedactedThinking {
        data: String,
    },
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text { text: text.into() }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

impl Message {
    pub fn user(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: vec![ContentBlock::text(text)],
        }
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::text(text)],
        }
    }

    /// The concatenated text blocks of this message.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let ContentBlock::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }

    /// Whether this is a user message of tool results: at least one
    /// result, and besides them only the images the tools attached (which
    /// follow the results).
    pub fn is_tool_results(&self) -> bool {
        self.role == Role::User
            && self
                .content
                .iter()
                .any(|block| matches!(block, ContentBlock::ToolResult { .. }))
            && self.content.iter().all(|block| {
                matches!(
                    block,
                    ContentBlock::ToolResult { .. } | ContentBlock::Image { .. }
                )
            })
    }

    /// Whether the message holds an image.
    pub fn has_images(&self) -> bool {
        self.content
            .iter()
            .any(|block| matches!(block, ContentBlock::Image { .. }))
    }

    /// Takes the message's images out, leaving `note` in the place of
    /// each: appended to the tool result before it (an image a tool
    /// attached), else as a text block. Returns how many were taken out.
    pub fn replace_images(&mut self, note: &str) -> usize {
        let mut replaced = 0;
        let mut content = Vec::with_capacity(self.content.len());
        let mut last_result = None;
        for block in std::mem::take(&mut self.content) {
            match block {
                ContentBlock::Image { .. } => {
                    replaced += 1;
                    match last_result.and_then(|at| content.get_mut(at)) {
                        Some(ContentBlock::ToolResult { content, .. }) => {
                            content.push('\n');
                            content.push_str(note);
                        }
                        _ => content.push(ContentBlock::text(note)),
                    }
                }
                ContentBlock::ToolResult { .. } => {
                    last_result = Some(content.len());
                    content.push(block);
                }
                other => content.push(other),
            }
        }
        self.content = content;
        replaced
    }

    /// The tool calls this message asks for, in order.
    pub fn tool_uses(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some((id.as_str(), name.as_str(), input)),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_blocks_serialise_with_a_type_tag() {
        let message = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "hmm".into(),
                    signature: Some("sig".into()),
                },
                ContentBlock::text("hi"),
                ContentBlock::ToolUse {
                    id: "t1".into(),
                    name: "shell.exec".into(),
                    input: serde_json::json!({"command": "ls"}),
                },
            ],
        };
        let json = serde_json::to_value(&message).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "text", "text": "hi"},
                    {"type": "tool_use", "id": "t1", "name": "shell.exec", "input": {"command": "ls"}}
                ]
            })
        );
        let back: Message = serde_json::from_value(json).unwrap_or_else(|_| Message::user(""));
        assert_eq!(back, message);
    }

    fn png() -> ContentBlock {
        ContentBlock::Image {
            source: ImageSource::Base64 {
                media_type: "image/png".into(),
                data: "iVBORw0KGgo=".into(),
            },
        }
    }

    fn result(id: &str, content: &str) -> ContentBlock {
        ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: content.into(),
            is_error: false,
        }
    }

    #[test]
    fn tool_results_may_carry_the_images_tools_attached() {
        let results = |content| Message {
            role: Role::User,
            content,
        };
        assert!(results(vec![result("t1", "ok"), png()]).is_tool_results());
        assert!(results(vec![result("t1", "ok")]).is_tool_results());
        assert!(!results(vec![png()]).is_tool_results());
        assert!(!results(vec![result("t1", "ok"), ContentBlock::text("hi")]).is_tool_results());
    }

    #[test]
    fn replaced_images_leave_a_note_on_their_result_or_as_text() {
        let mut message = Message {
            role: Role::User,
            content: vec![result("t1", "a"), result("t2", "b"), png()],
        };
        assert_eq!(message.replace_images("[no image]"), 1);
        assert_eq!(
            message.content,
            vec![result("t1", "a"), result("t2", "b\n[no image]")]
        );

        let mut photo = Message {
            role: Role::User,
            content: vec![png(), ContentBlock::text("what is this?")],
        };
        assert_eq!(photo.replace_images("[no image]"), 1);
        assert_eq!(
            photo.content,
            vec![
                ContentBlock::text("[no image]"),
                ContentBlock::text("what is this?")
            ]
        );
        assert!(!photo.has_images());
    }

    #[test]
    fn text_joins_only_text_blocks() {
        let message = Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::text("a"),
                ContentBlock::Thinking {
                    thinking: "x".into(),
                    signature: None,
                },
                ContentBlock::text("b"),
            ],
        };
        assert_eq!(message.text(), "ab");
    }
}
