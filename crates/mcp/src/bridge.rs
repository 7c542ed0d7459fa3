//! One MCP tool as a Flynn [`Tool`]: named `<server>.<tool>`, its schema
//! passed on as the server gave it, its effect read from the server's
//! hints when the owner marked the server trusted (else acting on the
//! world, its output untrusted content), its result turned into text.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::ToolEffect;
use flynn_tools::{Tool, ToolContext, ToolError};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents};
use serde_json::Value;

use crate::client::{McpServer, call_error};

/// Longest description passed on to the model; some servers write pages.
const MAX_DESCRIPTION: usize = 1024;

pub(crate) struct McpTool {
    server: Weak<McpServer>,
    server_name: String,
    remote: String,
    name: String,
    description: String,
    schema: Arc<Value>,
    effect: ToolEffect,
    untrusted: bool,
    timeout: Duration,
}

impl McpTool {
    /// Bridges `tool` of the server named `server_name`. Fails (with the
    /// reason) for a tool Flynn cannot offer.
    pub(crate) fn new(
        server: Weak<McpServer>,
        server_name: &str,
        tool: rmcp::model::Tool,
        timeout: Duration,
        trusted: bool,
    ) -> Result<Self, String> {
        let remote = tool.name.to_string();
        if remote.trim().is_empty() || remote.chars().any(char::is_control) {
            return Err(format!(
                "tool name {remote:?} is empty or has control characters"
            ));
        }
        let mut description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or("")
            .trim()
            .to_owned();
        if description.len() > MAX_DESCRIPTION {
            let cut = description.floor_char_boundary(MAX_DESCRIPTION);
            description.truncate(cut);
            description.push('…');
        }
        if description.is_empty() {
            description = format!("The {remote} tool of the {server_name} MCP server.");
        }
        let mut schema = Value::Object((*tool.input_schema).clone());
        if let Value::Object(object) = &mut schema {
            object.remove("$schema");
            object
                .entry("type")
                .or_insert_with(|| Value::String("object".to_owned()));
        }
        // A server says what its tools do, but only a server the owner
        // marked trusted is believed: any other could lie to skip the
        // confirmation (`readOnlyHint`) or the taint (`openWorldHint`).
        let hints = tool.annotations.as_ref().filter(|_| trusted);
        let read_only = hints.and_then(|h| h.read_only_hint) == Some(true);
        // MCP's default is an open world: output from outside.
        let open_world = hints.and_then(|h| h.open_world_hint) != Some(false);
        Ok(McpTool {
            server,
            server_name: server_name.to_owned(),
            name: format!("{server_name}.{remote}"),
            remote,
            description,
            schema: Arc::new(schema),
            effect: if read_only {
                ToolEffect::ReadOnly
            } else {
                ToolEffect::External
            },
            untrusted: open_world,
            timeout,
        })
    }
}

#[async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> Arc<Value> {
        self.schema.clone()
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn effect(&self) -> ToolEffect {
        self.effect
    }

    fn untrusted_output(&self) -> bool {
        self.untrusted
    }

    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let arguments = match args {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            other => {
                return Err(ToolError::InvalidArguments {
                    tool: self.name.clone(),
                    message: format!("expected a JSON object, got {other}"),
                });
            }
        };
        let server = self.server.upgrade().ok_or_else(|| {
            ToolError::Failed(format!("MCP server '{}' is stopped", self.server_name))
        })?;
        let peer = server
            .peer()
            .map_err(|error| ToolError::Failed(error.to_string()))?;
        // Dropping this future (a timeout, a cancelled turn) tells the
        // server the request is cancelled.
        let result = peer
            .call_tool(CallToolRequestParams::new(self.remote.clone()).with_arguments(arguments))
            .await
            .map_err(|error| {
                ToolError::Failed(call_error(&self.server_name, &self.remote, error))
            })?;
        let (text, is_error) = render(&result);
        if is_error && self.untrusted {
            // A server whose output is untrusted is as untrusted when it
            // fails: its words are quoted, not spoken as Flynn's.
            Err(ToolError::quoting(
                format!("{} reported an error", self.name),
                text,
            ))
        } else if is_error {
            Err(ToolError::Failed(format!(
                "{} reported an error: {text}",
                self.name
            )))
        } else {
            Ok(text)
        }
    }
}

/// The text of a result: text blocks as they are, embedded text resources
/// with their URI, other media described (the model gets text), the
/// structured content when there is nothing else.
pub(crate) fn render(result: &CallToolResult) -> (String, bool) {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::Image(image) => parts.push(format!(
                "[image {}, {} bytes, not shown]",
                image.mime_type,
                image.data.len() * 3 / 4
            )),
            ContentBlock::Audio(audio) => parts.push(format!(
                "[audio {}, {} bytes, not shown]",
                audio.mime_type,
                audio.data.len() * 3 / 4
            )),
            ContentBlock::Resource(resource) => match &resource.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    parts.push(format!("[resource {uri}]\n{text}"));
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => {
                    parts.push(format!(
                        "[resource {uri}: {}, {} bytes, not shown]",
                        mime_type.as_deref().unwrap_or("binary"),
                        blob.len() * 3 / 4
                    ));
                }
                _ => parts.push("[a resource of a kind Flynn does not read]".to_owned()),
            },
            ContentBlock::ResourceLink(link) => {
                parts.push(format!("[resource link {} ({})]", link.uri, link.name));
            }
            _ => parts.push("[content of a kind Flynn does not read]".to_owned()),
        }
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    (parts.join("\n"), result.is_error == Some(true))
}
