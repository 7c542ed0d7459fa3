//! Counting tokens before a call, to budget a prompt against its context
//! window. What a provider reports after the call is the truth for
//! accounting; these counts only decide when to compact.
//!
//! [`Estimate`] (the default) is one token per four bytes, rounded up, plus
//! a few tokens of framing per message: free, and within a few tens of
//! percent for English prose and code. With the `tiktoken` cargo
//! feature and `models.token_counting: tiktoken`, OpenAI model families are
//! counted exactly with their BPE (`o200k_base` for GPT-4o, GPT-4.1, the
//! o-series and GPT-5; `cl100k_base` for GPT-4 and GPT-3.5), compiled in
//! and used offline. Other families are estimated either way.

use std::fmt;

use flynn_protocol::config::TokenCounting;
use flynn_protocol::{ContentBlock, Message, ToolSpec};
use serde_json::Value;

/// Tokens added per message for its role and framing.
pub const MESSAGE_OVERHEAD: usize = 4;

/// Tokens counted for an image: providers bill images by their size, which
/// is not known here; this is a typical mid-size image.
pub const IMAGE_TOKENS: usize = 1_000;

/// Counts tokens. Implementations are stateless and shared (`&'static`).
pub trait TokenCounter: Send + Sync + fmt::Debug {
    /// Tokens in a piece of text.
    fn count_text(&self, text: &str) -> usize;

    /// Tokens in a JSON value as it goes on the wire (tool arguments and
    /// schemas).
    fn count_json(&self, value: &Value) -> usize {
        self.count_text(&value.to_string())
    }

    /// Whether the counts are the model's own tokenizer's (not an estimate).
    fn is_exact(&self) -> bool {
        false
    }

    /// Tokens of one message, framing included.
    fn count_message(&self, message: &Message) -> usize {
        MESSAGE_OVERHEAD
            + message
                .content
                .iter()
                .map(|block| match block {
                    ContentBlock::Text { text } => self.count_text(text),
                    ContentBlock::Thinking { thinking, .. } => self.count_text(thinking),
                    ContentBlock::RedactedThinking { data } => self.count_text(data),
                    ContentBlock::ToolUse { name, input, .. } => {
                        self.count_text(name) + self.count_json(input)
                    }
                    ContentBlock::ToolResult { content, .. } => self.count_text(content),
                    ContentBlock::Image { .. } => IMAGE_TOKENS,
                })
                .sum::<usize>()
    }

    /// Tokens of a whole request: system prompt, history and tools.
    fn count_request(
        &self,
        system: Option<&str>,
        messages: &[Message],
        tools: &[ToolSpec],
    ) -> usize {
        system.map_or(0, |system| self.count_text(system))
            + messages
                .iter()
                .map(|message| self.count_message(message))
                .sum::<usize>()
            + tools
                .iter()
                .map(|tool| {
                    self.count_text(&tool.name)
                        + self.count_text(&tool.description)
                        + self.count_json(&tool.input_schema)
                })
                .sum::<usize>()
    }
}

/// One token per four bytes, rounded up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Estimate;

impl TokenCounter for Estimate {
    fn count_text(&self, text: &str) -> usize {
        text.len().div_ceil(4)
    }

    /// Its length as JSON, measured without writing it out: the estimate
    /// runs before every model call, over every tool's schema.
    fn count_json(&self, value: &Value) -> usize {
        let mut length = Length(0);
        // Writing to `Length` cannot fail, and a `Value` always serialises.
        let _ = serde_json::to_writer(&mut length, value);
        length.0.div_ceil(4)
    }
}

/// An `io::Write` that only counts the bytes written to it.
struct Length(usize);

impl std::io::Write for Length {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A BPE encoding of OpenAI's models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// GPT-4o, GPT-4.1, GPT-4.5, the o-series, GPT-5, gpt-oss.
    O200kBase,
    /// GPT-4 and GPT-3.5.
    Cl100kBase,
}

/// Model id prefixes and their encodings; the longest matching prefix wins.
const ENCODINGS: &[(&str, Encoding)] = &[
    ("gpt-5", Encoding::O200kBase),
    ("gpt-4.5", Encoding::O200kBase),
    ("gpt-4.1", Encoding::O200kBase),
    ("gpt-4o", Encoding::O200kBase),
    ("chatgpt-4o", Encoding::O200kBase),
    ("gpt-oss", Encoding::O200kBase),
    ("o1", Encoding::O200kBase),
    ("o3", Encoding::O200kBase),
    ("o4", Encoding::O200kBase),
    ("gpt-4", Encoding::Cl100kBase),
    ("gpt-3.5", Encoding::Cl100kBase),
    ("gpt-35", Encoding::Cl100kBase),
];

/// The encoding of an OpenAI model, also when another service serves it
/// under a `publisher/` path (`openai/gpt-4.1` on GitHub Models and
/// OpenRouter); `None` for every other family.
pub fn encoding_for_model(model: &str) -> Option<Encoding> {
    let lower = model.trim().to_ascii_lowercase();
    let id = lower.rsplit('/').next().unwrap_or_default();
    ENCODINGS
        .iter()
        .filter(|(prefix, _)| id.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, encoding)| *encoding)
}

/// The counter `counting` asks for, for `model`: exact for OpenAI families
/// when the `tiktoken` feature is built in, the estimate otherwise. Asking
/// for tiktoken in a build without it logs one warning per process.
pub fn token_counter(counting: TokenCounting, model: &str) -> &'static dyn TokenCounter {
    match counting {
        TokenCounting::Estimate => &Estimate,
        TokenCounting::Tiktoken => exact(model),
    }
}

#[cfg(feature = "tiktoken")]
fn exact(model: &str) -> &'static dyn TokenCounter {
    match encoding_for_model(model) {
        Some(Encoding::O200kBase) => &tiktoken::O200K,
        Some(Encoding::Cl100kBase) => &tiktoken::CL100K,
        None => &Estimate,
    }
}

#[cfg(not(feature = "tiktoken"))]
fn exact(_model: &str) -> &'static dyn TokenCounter {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            "models.token_counting is 'tiktoken' but this Flynn was built without the \
             `tiktoken` feature; tokens are estimated instead (rebuild with \
             `--features flynn-models/tiktoken`, or set token_counting: estimate)"
        );
    });
    &Estimate
}

#[cfg(feature = "tiktoken")]
pub use tiktoken::Tiktoken;

#[cfg(feature = "tiktoken")]
mod tiktoken {
    use tiktoken_rs::CoreBPE;

    use super::{Encoding, TokenCounter};

    /// Exact counts with one of OpenAI's BPE encodings. The tables are
    /// compiled into the binary and parsed on first use (tens of
    /// milliseconds), then shared by every counter of that encoding.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Tiktoken {
        encoding: Encoding,
    }

    pub(super) static O200K: Tiktoken = Tiktoken {
        encoding: Encoding::O200kBase,
    };
    pub(super) static CL100K: Tiktoken = Tiktoken {
        encoding: Encoding::Cl100kBase,
    };

    impl Tiktoken {
        pub fn new(encoding: Encoding) -> Self {
            Tiktoken { encoding }
        }

        fn bpe(&self) -> &'static CoreBPE {
            match self.encoding {
                Encoding::O200kBase => tiktoken_rs::o200k_base_singleton(),
                Encoding::Cl100kBase => tiktoken_rs::cl100k_base_singleton(),
            }
        }
    }

    impl TokenCounter for Tiktoken {
        fn count_text(&self, text: &str) -> usize {
            // Text from users and tools is data: special-token spellings in
            // it are counted as ordinary text, as the API treats them.
            self.bpe().count_ordinary(text)
        }

        fn is_exact(&self) -> bool {
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn conversation() -> (Vec<Message>, Vec<ToolSpec>) {
        let messages = vec![
            Message::user("List the files, please."),
            Message {
                role: flynn_protocol::Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "shell.exec".into(),
                    input: json!({"command": "ls"}),
                }],
            },
            Message {
                role: flynn_protocol::Role::User,
                content: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "call_1".into(),
                        content: "a.txt\nb.txt".into(),
                        is_error: false,
                    },
                    ContentBlock::Image {
                        source: flynn_protocol::ImageSource::Url {
                            url: "https://example.com/a.png".into(),
                        },
                    },
                ],
            },
        ];
        let tools = vec![ToolSpec {
            name: "shell.exec".into(),
            description: "Run a command".into(),
            input_schema: json!({"type": "object"}).into(),
        }];
        (messages, tools)
    }

    #[test]
    fn the_estimate_is_a_quarter_of_the_bytes_rounded_up_plus_framing() {
        assert_eq!(Estimate.count_text(""), 0);
        assert_eq!(Estimate.count_text("abcd"), 1);
        assert_eq!(Estimate.count_text("abcde"), 2);
        // Two bytes per character: bytes are counted, not characters.
        assert_eq!(Estimate.count_text("ééé"), 2);
        let (messages, tools) = conversation();
        // "List the files, please." is 23 bytes: 6 tokens, + 4 framing.
        assert_eq!(Estimate.count_message(&messages[0]), 10);
        // shell.exec (10 bytes: 3) + {"command":"ls"} (16 bytes: 4) + 4.
        assert_eq!(Estimate.count_message(&messages[1]), 11);
        // "a.txt\nb.txt" (11 bytes: 3) + an image (1,000) + 4.
        assert_eq!(Estimate.count_message(&messages[2]), 1_007);
        // System "Be brief." (9 bytes: 3) + 1,028 + tool: name 3,
        // description "Run a command" 4, schema {"type":"object"} 5.
        assert_eq!(
            Estimate.count_request(Some("Be brief."), &messages, &tools),
            3 + 1_028 + 12
        );
        assert!(!Estimate.is_exact());
    }

    #[test]
    fn json_is_estimated_by_the_length_it_has_on_the_wire() {
        let values = [
            json!(null),
            json!("a \"quoted\" line\nwith é and \u{1}"),
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": -1.5}}}),
            json!([1, [2, [3]], {"": {}}]),
        ];
        for value in values {
            assert_eq!(
                Estimate.count_json(&value),
                Estimate.count_text(&value.to_string()),
                "{value}"
            );
        }
    }

    #[test]
    fn openai_families_map_to_their_encodings() {
        let cases = [
            ("gpt-4o-mini", Some(Encoding::O200kBase)),
            ("gpt-4.1-nano", Some(Encoding::O200kBase)),
            ("gpt-5", Some(Encoding::O200kBase)),
            ("o1-mini", Some(Encoding::O200kBase)),
            ("o3", Some(Encoding::O200kBase)),
            ("o4-mini", Some(Encoding::O200kBase)),
            ("openai/gpt-4.1", Some(Encoding::O200kBase)),
            ("gpt-4-turbo", Some(Encoding::Cl100kBase)),
            ("gpt-4", Some(Encoding::Cl100kBase)),
            ("gpt-3.5-turbo", Some(Encoding::Cl100kBase)),
            ("claude-sonnet-4-5", None),
            ("llama3.1:8b", None),
        ];
        for (model, expected) in cases {
            assert_eq!(encoding_for_model(model), expected, "{model}");
        }
    }

    #[test]
    fn estimate_counting_never_uses_tiktoken() {
        let counter = token_counter(TokenCounting::Estimate, "gpt-4o");
        assert!(!counter.is_exact());
        assert_eq!(counter.count_text("Hello, world!"), 4);
    }

    #[test]
    fn other_families_are_estimated_even_when_tiktoken_is_asked_for() {
        let counter = token_counter(TokenCounting::Tiktoken, "claude-sonnet-4-5");
        assert!(!counter.is_exact());
        assert_eq!(counter.count_text("Hello, world!"), 4);
    }

    #[cfg(not(feature = "tiktoken"))]
    #[test]
    fn without_the_feature_tiktoken_falls_back_to_the_estimate() {
        for _ in 0..2 {
            let counter = token_counter(TokenCounting::Tiktoken, "gpt-4o");
            assert!(!counter.is_exact());
            assert_eq!(counter.count_text("Hello, world!"), 4);
        }
    }

    #[cfg(feature = "tiktoken")]
    mod exact {
        use super::*;

        #[test]
        fn gpt_4o_is_counted_with_o200k() {
            let counter = token_counter(TokenCounting::Tiktoken, "gpt-4o");
            assert!(counter.is_exact());
            // "Hello, world!" is Hello / , / world / ! in both encodings.
            assert_eq!(counter.count_text("Hello, world!"), 4);
            assert_eq!(counter.count_text(""), 0);
            // Special-token spellings count as ordinary text.
            assert!(counter.count_text("<|endoftext|>") > 1);
        }

        #[test]
        fn the_encodings_differ_where_their_vocabularies_do() {
            let o200k = token_counter(TokenCounting::Tiktoken, "gpt-4.1");
            let cl100k = token_counter(TokenCounting::Tiktoken, "gpt-4");
            assert_eq!(
                (
                    o200k.count_text("hello world"),
                    cl100k.count_text("hello world")
                ),
                (2, 2)
            );
            // o200k has far more non-English tokens than cl100k.
            let hindi = "नमस्ते, आप कैसे हैं? मुझे आपकी मदद करने में खुशी होगी।";
            assert!(
                o200k.count_text(hindi) < cl100k.count_text(hindi),
                "o200k {} vs cl100k {}",
                o200k.count_text(hindi),
                cl100k.count_text(hindi)
            );
        }

        #[test]
        fn messages_are_counted_with_the_same_framing() {
            let counter = token_counter(TokenCounting::Tiktoken, "gpt-4o");
            let (messages, tools) = conversation();
            let text = counter.count_text("List the files, please.");
            assert_eq!(counter.count_message(&messages[0]), text + MESSAGE_OVERHEAD);
            assert_eq!(
                counter.count_request(None, &messages, &tools),
                messages
                    .iter()
                    .map(|m| counter.count_message(m))
                    .sum::<usize>()
                    + counter.count_text("shell.exec")
                    + counter.count_text("Run a command")
                    + counter.count_text(r#"{"type":"object"}"#)
            );
        }
    }
}
