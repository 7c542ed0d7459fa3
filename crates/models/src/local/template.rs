//! Rendering a conversation the way a model was trained to read it.
//!
//! The chat template in the file (`tokenizer.chat_template`, Jinja) is not
//! executed: it is recognised by the markers it writes, and the family's
//! format is rendered here (see docs/ARCHITECTURE.md, flynn-models). What
//! is taken from the file's template is its default system prompt, when it
//! has a literal one (SmolLM2's, Qwen2.5's), and whether it knows tool
//! calls (`<tool_call>`).

use flynn_protocol::{ContentBlock, Message, Role, ToolSpec};
use serde_json::json;

use crate::ToolNameMap;

/// The chat formats Flynn renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `<|im_start|>role\n...<|im_end|>`: SmolLM2, Qwen2/2.5/3.
    ChatMl,
    /// `<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>`: Llama 3.
    Llama3,
    /// `<|role|>\n...<|end|>`: Phi-3.
    Phi3,
}

impl Format {
    /// The format a template writes, by its markers; `None` when it has
    /// none of them.
    pub fn detect(template: &str) -> Option<Format> {
        if template.contains("<|im_start|>") {
            Some(Format::ChatMl)
        } else if template.contains("<|start_header_id|>") {
            Some(Format::Llama3)
        } else if template.contains("<|assistant|>") && template.contains("<|end|>") {
            Some(Format::Phi3)
        } else {
            None
        }
    }

    /// The format a file without a (known) template most likely uses.
    pub fn for_architecture(architecture: &str) -> Format {
        match architecture {
            "phi3" => Format::Phi3,
            _ => Format::ChatMl,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::ChatMl => "chatml",
            Format::Llama3 => "llama3",
            Format::Phi3 => "phi3",
        }
    }

    /// Tokens that end the assistant's turn in this format (besides the
    /// file's end-of-sequence token), when the vocabulary has them.
    pub fn stop_tokens(self) -> &'static [&'static str] {
        match self {
            Format::ChatMl => &["<|im_end|>", "<|endoftext|>"],
            Format::Llama3 => &["<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"],
            Format::Phi3 => &["<|end|>", "<|endoftext|>"],
        }
    }
}

/// How a model's conversations are rendered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChatTemplate {
    pub format: Format,
    /// The system prompt the file's template writes when the conversation
    /// has none.
    pub default_system: Option<String>,
    /// Whether the model was trained to call tools (its template writes
    /// `<tool_call>`); only then are tools offered to it.
    pub tools: bool,
    /// The beginning-of-sequence token to write first, when the file asks
    /// for one.
    pub bos: Option<String>,
}

impl ChatTemplate {
    pub fn new(template: Option<&str>, architecture: &str, bos: Option<String>) -> Self {
        let format = template
            .and_then(Format::detect)
            .unwrap_or_else(|| Format::for_architecture(architecture));
        if let Some(template) = template
            && Format::detect(template).is_none()
        {
            tracing::warn!(
                architecture,
                "the model's chat template is not one Flynn recognises; rendering {} instead",
                format.name()
            );
        }
        ChatTemplate {
            format,
            default_system: template.and_then(|t| literal_system(t, format)),
            tools: template.is_some_and(|t| t.contains("<tool_call>")),
            bos,
        }
    }

    /// The prompt for `messages`, ending where the assistant's answer
    /// begins.
    pub fn render(
        &self,
        system: Option<&str>,
        messages: &[Message],
        tools: &[ToolSpec],
        names: &ToolNameMap,
    ) -> String {
        let tools = if self.tools { tools } else { &[] };
        let mut system = system
            .map(str::to_owned)
            .or_else(|| self.default_system.clone())
            .unwrap_or_default();
        if !tools.is_empty() {
            system.push_str(&tools_block(tools, names));
        }
        let mut out = self.bos.clone().unwrap_or_default();
        if !system.is_empty() {
            self.turn(&mut out, "system", system.trim_start());
        }
        for message in messages {
            match message.role {
                Role::User => {
                    let (text, results) = split_user(message);
                    if !results.is_empty() {
                        self.tool_results(&mut out, &results);
                    }
                    if !text.is_empty() {
                        self.turn(&mut out, "user", &text);
                    }
                }
                Role::Assistant => {
                    let text = assistant_text(message, names, self.tools);
                    self.turn(&mut out, "assistant", &text);
                }
            }
        }
        out.push_str(&self.header("assistant"));
        out
    }

    fn header(&self, role: &str) -> String {
        match self.format {
            Format::ChatMl => format!("<|im_start|>{role}\n"),
            Format::Llama3 => format!("<|start_header_id|>{role}<|end_header_id|>\n\n"),
            Format::Phi3 => format!("<|{role}|>\n"),
        }
    }

    fn turn(&self, out: &mut String, role: &str, text: &str) {
        out.push_str(&self.header(role));
        out.push_str(text);
        out.push_str(match self.format {
            Format::ChatMl => "<|im_end|>\n",
            Format::Llama3 => "<|eot_id|>",
            Format::Phi3 => "<|end|>\n",
        });
    }

    /// Tool results: Qwen's `<tool_response>` blocks in a user turn; as
    /// plain text in a user turn for models without tools.
    fn tool_results(&self, out: &mut String, results: &[(String, bool)]) {
        let body = results
            .iter()
            .map(|(content, is_error)| {
                let content = if *is_error {
                    format!("error: {content}")
                } else {
                    content.clone()
                };
                if self.tools {
                    format!("<tool_response>\n{content}\n</tool_response>")
                } else {
                    format!("Tool result:\n{content}")
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        self.turn(out, "user", &body);
    }
}

/// The system block Qwen2.5's template writes for tools.
fn tools_block(tools: &[ToolSpec], names: &ToolNameMap) -> String {
    let mut block = String::from(
        "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for tool in tools {
        let spec = json!({
            "type": "function",
            "function": {
                "name": names.to_wire(&tool.name),
                "description": tool.description,
                "parameters": tool.input_schema,
            }
        });
        block.push('\n');
        block.push_str(&spec.to_string());
    }
    block.push_str("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>");
    block
}

/// A user message's text, and its tool results (content, is_error).
fn split_user(message: &Message) -> (String, Vec<(String, bool)>) {
    let mut text = Vec::new();
    let mut results = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text: t } => text.push(t.as_str()),
            ContentBlock::Image { .. } => text.push("[an image, which this model cannot see]"),
            ContentBlock::ToolResult {
                content, is_error, ..
            } => results.push((content.clone(), *is_error)),
            _ => {}
        }
    }
    (text.join("\n"), results)
}

/// An assistant message as the model would have written it.
fn assistant_text(message: &Message, names: &ToolNameMap, tools: bool) -> String {
    let mut out = String::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } => out.push_str(text),
            ContentBlock::ToolUse { name, input, .. } => {
                let call = json!({"name": names.to_wire_or_sanitised(name), "arguments": input});
                if tools {
                    out.push_str(&format!("\n<tool_call>\n{call}\n</tool_call>"));
                } else {
                    out.push_str(&format!("\n[called the tool {call}]"));
                }
            }
            _ => {}
        }
    }
    out.trim_start_matches('\n').to_owned()
}

/// The literal default system prompt of a template: the text between the
/// system header and the end of turn, when the template writes it as one
/// string (`'<|im_start|>system\nYou are ...<|im_end|>\n'`).
fn literal_system(template: &str, format: Format) -> Option<String> {
    if format != Format::ChatMl {
        return None;
    }
    // Jinja source writes `\n`; a file may hold the newline itself.
    let template = template.replace("\\n", "\n");
    let (start, end) = ("<|im_start|>system\n", "<|im_end|>");
    let mut rest = template.as_str();
    while let Some(at) = rest.find(start) {
        let after = &rest[at + start.len()..];
        if let Some(stop) = after.find(end) {
            let text = &after[..stop];
            if !text.is_empty() && !text.contains(['\'', '"', '{', '}', '+']) {
                return Some(text.to_owned());
            }
        }
        rest = after;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn smollm2s_template_is_chatml_with_its_default_system_prompt() {
        // The file's template holds real newlines; Jinja source would hold
        // `\n`: both are read.
        let escaped = SMOLLM2.replace('\n', "\\n");
        assert_eq!(
            ChatTemplate::new(Some(&escaped), "llama", None),
            ChatTemplate::new(Some(SMOLLM2), "llama", None)
        );
        let template = ChatTemplate::new(Some(SMOLLM2), "llama", None);
        assert_eq!(template.format, Format::ChatMl);
        assert!(!template.tools);
        assert_eq!(
            template.default_system.as_deref(),
            Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
        );
        let messages = vec![Message::user("hi")];
        assert_eq!(
            template.render(None, &messages, &[], &ToolNameMap::default()),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn qwen_tools_calls_and_results_render_as_qwen_writes_them() {
        let template = ChatTemplate::new(
            Some("{%- if tools %}<|im_start|>system\\n# Tools <tool_call> {%- endif %}"),
            "qwen2",
            None,
        );
        assert!(template.tools);
        let tools = vec![ToolSpec {
            name: "file.read".into(),
            description: "Read a file".into(),
            input_schema: json!({"type": "object"}).into(),
        }];
        let names = ToolNameMap::new(&tools);
        let messages = vec![
            Message::user("read a"),
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse {
                    id: "c1".into(),
                    name: "file.read".into(),
                    input: json!({"path": "a"}),
                }],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "c1".into(),
                    content: "hello".into(),
                    is_error: false,
                }],
            },
        ];
        let prompt = template.render(Some("Be brief."), &messages, &tools, &names);
        assert_eq!(
            prompt,
            "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"function\":{\"description\":\"Read a file\",\"name\":\"file_read\",\"parameters\":{\"type\":\"object\"}},\"type\":\"function\"}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nread a<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"arguments\":{\"path\":\"a\"},\"name\":\"file_read\"}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nhello\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn llama3_and_phi3_are_recognised() {
        let llama = ChatTemplate::new(
            Some("{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}"),
            "llama",
            Some("<|begin_of_text|>".into()),
        );
        assert_eq!(
            llama.render(
                Some("S"),
                &[Message::user("u")],
                &[],
                &ToolNameMap::default()
            ),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nu<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        let phi = ChatTemplate::new(
            Some("{{'<|user|>' + '<|end|>' + '<|assistant|>'}}"),
            "phi3",
            None,
        );
        assert_eq!(
            phi.render(None, &[Message::user("u")], &[], &ToolNameMap::default()),
            "<|user|>\nu<|end|>\n<|assistant|>\n"
        );
        assert_eq!(ChatTemplate::new(None, "phi3", None).format, Format::Phi3);
    }
}
