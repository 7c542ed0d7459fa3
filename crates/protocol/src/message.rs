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
