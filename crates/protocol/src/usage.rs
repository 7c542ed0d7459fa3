use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Tokens a model call consumed, as the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

/// What a model call was for: the conversation itself, or background
/// work delegated to a tier (`agents.delegation`). Usage is recorded per
/// tier and per purpose, so the cost of background work shows apart.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// A turn answering a message.
    #[default]
    Conversation,
    /// Summarising older messages.
    Compaction,
    /// Extracting facts worth remembering.
    MemoryExtraction,
    /// A short labelling task.
    Classification,
    /// Condensing a long tool output.
    ToolSummarisation,
    /// A turn escalated to the complex tier.
    ComplexReasoning,
    /// A subtask the model handed to a sub-agent (`agents.spawn`).
    Subagent,
}

impl Purpose {
    pub const ALL: [Purpose; 7] = [
        Purpose::Conversation,
        Purpose::Compaction,
        Purpose::MemoryExtraction,
        Purpose::Classification,
        Purpose::ToolSummarisation,
        Purpose::ComplexReasoning,
        Purpose::Subagent,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Conversation => "conversation",
            Purpose::Compaction => "compaction",
            Purpose::MemoryExtraction => "memory_extraction",
            Purpose::Classification => "classification",
            Purpose::ToolSummarisation => "tool_summarisation",
            Purpose::ComplexReasoning => "complex_reasoning",
            Purpose::Subagent => "subagent",
        }
    }

    /// The purpose `as_str` names; `None` for any other text.
    pub fn parse(name: &str) -> Option<Purpose> {
        Purpose::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl std::fmt::Display for Purpose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purposes_round_trip_through_their_names() {
        for purpose in Purpose::ALL {
            assert_eq!(Purpose::parse(purpose.as_str()), Some(purpose));
            assert_eq!(
                serde_json::to_value(purpose).ok(),
                Some(serde_json::Value::String(purpose.as_str().to_owned()))
            );
        }
        assert_eq!(Purpose::parse("chat"), None);
    }

    #[test]
    fn add_sums_every_field() {
        let mut total = Usage {
            input_tokens: 1,
            output_tokens: 2,
            cache_read_tokens: 3,
            cache_write_tokens: 4,
        };
        total.add(total);
        assert_eq!(
            total,
            Usage {
                input_tokens: 2,
                output_tokens: 4,
                cache_read_tokens: 6,
                cache_write_tokens: 8,
            }
        );
    }
}
