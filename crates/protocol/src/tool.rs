use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a model is told about a tool: its dotted name, what it does and the
/// JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// Shared: one schema serves every request that offers the tool.
    pub input_schema: Arc<Value>,
}

/// The one key of the object a model client puts in place of a tool
/// call's arguments that are not valid JSON; its value is the text the
/// model sent. The turn answers such a call with an error result saying
/// so (the model can try again) instead of running the tool or failing.
pub const INVALID_ARGUMENTS_KEY: &str = "$invalid_json";

/// The text of arguments a model sent that were not valid JSON, when
/// `arguments` is the stand-in object (see [`INVALID_ARGUMENTS_KEY`]).
pub fn invalid_arguments(arguments: &Value) -> Option<&str> {
    let object = arguments.as_object()?;
    if object.len() != 1 {
        return None;
    }
    object.get(INVALID_ARGUMENTS_KEY)?.as_str()
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// What a tool call produced, as fed back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolResult {
    pub tool_use_id: String,
    pub content: String,
    pub is_error: bool,
    /// Images the tool attached (`browser.screenshot`'s PNG), for models
    /// that read images: a turn puts them after the message's tool results
    /// as [`ContentBlock::Image`](crate::ContentBlock::Image) blocks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<crate::ImageSource>,
}
