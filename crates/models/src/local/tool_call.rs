//! Tool calls in a model's text, as Qwen writes them:
//! `<tool_call>\n{"name": "...", "arguments": {...}}\n</tool_call>`.
//!
//! [`Splitter`] separates the text the user sees from the calls as the
//! text streams in; [`parse`] reads one call strictly. A call that is not
//! exactly a JSON object with a string `name` and an object `arguments`
//! (or that is never closed) still becomes a tool call, with the stand-in
//! arguments the turn answers with an error result: the model sees what
//! was wrong and can try again.

use flynn_protocol::INVALID_ARGUMENTS_KEY;
use serde_json::{Map, Value, json};

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";

/// The name given to a call whose name could not be read.
pub(crate) const UNNAMED: &str = "tool_call";

/// One call, as read from the text: the wire name and the arguments (the
/// stand-in object when the call was malformed).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ParsedCall {
    pub name: String,
    pub arguments: Value,
}

/// What the splitter found in a piece of text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Piece {
    Text(String),
    Call(ParsedCall),
}

/// Splits streamed text into visible text and tool calls. Text that might
/// be the start of `<tool_call>`, and whitespace, are held back until what
/// follows them is known.
#[derive(Debug, Default)]
pub(crate) struct Splitter {
    pending: String,
    in_call: bool,
}

impl Splitter {
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        loop {
            if self.in_call {
                let Some(end) = self.pending.find(CLOSE) else {
                    break;
                };
                let body = self.pending[..end].to_owned();
                self.pending.drain(..end + CLOSE.len());
                self.in_call = false;
                out.push(Piece::Call(parse(&body)));
            } else if let Some(start) = self.pending.find(OPEN) {
                let before = self.pending[..start].to_owned();
                if !before.trim().is_empty() {
                    out.push(Piece::Text(before));
                }
                self.pending.drain(..start + OPEN.len());
                self.in_call = true;
            } else {
                // Keep back the longest tail that could begin the tag,
                // and the whitespace before it: between two calls it is
                // not text.
                let keep = (1..OPEN.len())
                    .rev()
                    .find(|n| self.pending.ends_with(&OPEN[..*n]))
                    .unwrap_or(0);
                let emit = self.pending[..self.pending.len() - keep].trim_end().len();
                if emit > 0 {
                    let text: String = self.pending.drain(..emit).collect();
                    out.push(Piece::Text(text));
                }
                break;
            }
        }
        out
    }

    /// The end of the answer: held-back text, or a call never closed.
    pub fn finish(&mut self) -> Vec<Piece> {
        let rest = std::mem::take(&mut self.pending);
        if self.in_call {
            self.in_call = false;
            return vec![Piece::Call(malformed(
                &rest,
                "the call was not closed with </tool_call>",
            ))];
        }
        if rest.is_empty() {
            Vec::new()
        } else {
            vec![Piece::Text(rest)]
        }
    }
}

/// Reads the body of one `<tool_call>` strictly.
pub(crate) fn parse(body: &str) -> ParsedCall {
    let value: Value = match serde_json::from_str(body.trim()) {
        Ok(value) => value,
        Err(_) => return malformed(body, "not JSON"),
    };
    let Value::Object(mut object) = value else {
        return malformed(body, "not a JSON object");
    };
    let name = match object.remove("name") {
        Some(Value::String(name)) if !name.is_empty() => name,
        _ => return malformed(body, "no \"name\" string"),
    };
    let arguments = match object.remove("arguments") {
        Some(Value::Object(arguments)) => Value::Object(arguments),
        _ => {
            return ParsedCall {
                name,
                arguments: stand_in(body),
            };
        }
    };
    if !object.is_empty() {
        return ParsedCall {
            name,
            arguments: stand_in(body),
        };
    }
    ParsedCall { name, arguments }
}

fn malformed(body: &str, why: &str) -> ParsedCall {
    tracing::debug!(why, "a malformed tool call from a local model");
    // The name, if it can be read at all, so the error names the tool.
    let name = serde_json::from_str::<Map<String, Value>>(body.trim())
        .ok()
        .and_then(|o| o.get("name").and_then(Value::as_str).map(str::to_owned))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| UNNAMED.to_owned());
    ParsedCall {
        name,
        arguments: stand_in(body),
    }
}

fn stand_in(body: &str) -> Value {
    json!({ INVALID_ARGUMENTS_KEY: body.trim() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Qwen2.5-7B-Instruct wrote (transformers, greedy) for "What's
    /// the temperature in San Francisco now? How about tomorrow?" with two
    /// temperature tools, as recorded in Qwen's function-calling guide
    /// (docs/source/framework/function_call.md of QwenLM/Qwen2.5), up to
    /// its `<|im_end|>`, where generation stops. No Qwen GGUF small enough
    /// for the tests ships in a registry package, so the local model's own
    /// output cannot be recorded here.
    const RECORDED: &str = "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"San Francisco, CA, USA\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_temperature_date\", \"arguments\": {\"location\": \"San Francisco, CA, USA\", \"date\": \"2024-10-01\"}}\n</tool_call>";

    fn feed(text: &str, step: usize) -> Vec<Piece> {
        let mut splitter = Splitter::default();
        let mut out = Vec::new();
        let chars: Vec<char> = text.chars().collect();
        for chunk in chars.chunks(step) {
            out.extend(splitter.push(&chunk.iter().collect::<String>()));
        }
        out.extend(splitter.finish());
        // Adjacent text pieces joined: how they were cut does not matter.
        let mut joined: Vec<Piece> = Vec::new();
        for piece in out {
            match (joined.last_mut(), piece) {
                (Some(Piece::Text(a)), Piece::Text(b)) => a.push_str(&b),
                (_, piece) => joined.push(piece),
            }
        }
        joined
    }

    #[test]
    fn a_recorded_qwen_call_is_read_however_it_streams() {
        for step in [1, 2, 3, 7, 100] {
            assert_eq!(
                feed(RECORDED, step),
                vec![
                    Piece::Call(ParsedCall {
                        name: "get_current_temperature".into(),
                        arguments: json!({"location": "San Francisco, CA, USA"}),
                    }),
                    Piece::Call(ParsedCall {
                        name: "get_temperature_date".into(),
                        arguments: json!({"location": "San Francisco, CA, USA", "date": "2024-10-01"}),
                    }),
                ],
                "step {step}"
            );
        }
    }

    #[test]
    fn text_around_calls_is_kept_and_a_lone_angle_bracket_is_text() {
        let text = "Let me check. <tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"b\", \"arguments\": {\"x\": 1}}</tool_call> 1 < 2 <tool";
        assert_eq!(
            feed(text, 4),
            vec![
                // The space before a call is not text.
                Piece::Text("Let me check.".into()),
                Piece::Call(ParsedCall {
                    name: "a".into(),
                    arguments: json!({})
                }),
                Piece::Call(ParsedCall {
                    name: "b".into(),
                    arguments: json!({"x": 1})
                }),
                Piece::Text(" 1 < 2 <tool".into()),
            ]
        );
    }

    #[test]
    fn malformed_calls_become_calls_the_turn_answers_with_an_error() {
        let cases = [
            (
                "{\"name\": \"get_weather\", \"arguments\": {\"city\": }}",
                UNNAMED,
            ),
            ("[1, 2]", UNNAMED),
            ("{\"arguments\": {}}", UNNAMED),
            (
                "{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": 1}\"}",
                "get_weather",
            ),
            (
                "{\"name\": \"get_weather\", \"arguments\": {}, \"extra\": 1}",
                "get_weather",
            ),
        ];
        for (body, name) in cases {
            let call = parse(body);
            assert_eq!(call.name, name, "{body}");
            assert_eq!(
                flynn_protocol::invalid_arguments(&call.arguments),
                Some(body),
                "{body}"
            );
        }
        let mut splitter = Splitter::default();
        assert_eq!(splitter.push("<tool_call>{\"name\": \"x\""), vec![]);
        assert_eq!(
            splitter.finish(),
            vec![Piece::Call(ParsedCall {
                name: UNNAMED.into(),
                arguments: json!({ INVALID_ARGUMENTS_KEY: "{\"name\": \"x\"" }),
            })]
        );
    }
}
