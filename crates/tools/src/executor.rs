use std::sync::Arc;

use flynn_protocol::{ToolCall, ToolResult};

use crate::{ToolContext, ToolError, ToolRegistry};

/// Runs tool calls: looks the tool up, enforces its timeout and the turn's
/// cancellation, truncates long output, and reports every failure to the
/// model as an error result.
#[derive(Debug, Clone)]
pub struct ToolExecutor {
    registry: Arc<ToolRegistry>,
    output_limit: usize,
}

impl ToolExecutor {
    /// `output_limit` is in bytes (the config's `tools.output_limit_bytes`).
    pub fn new(registry: Arc<ToolRegistry>, output_limit: usize) -> Self {
        ToolExecutor {
            registry,
            output_limit,
        }
    }

    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    pub async fn execute(&self, call: &ToolCall, ctx: &ToolContext) -> ToolResult {
        let outcome = self.run(call, ctx).await;
        let (content, is_error) = match outcome {
            Ok(output) => (output, false),
            Err(error) => (error.to_string(), true),
        };
        ToolResult {
            tool_use_id: call.id.clone(),
            content: truncate_output(&content, self.output_limit),
            is_error,
        }
    }

    async fn run(&self, call: &ToolCall, ctx: &ToolContext) -> Result<String, ToolError> {
        let Some(tool) = self.registry.get(&call.name) else {
            let available: Vec<&str> = self.registry.names().collect();
            return Err(ToolError::UnknownTool {
                name: call.name.clone(),
                available: if available.is_empty() {
                    "none".to_owned()
                } else {
                    available.join(", ")
                },
            });
        };
        let timeout = tool.timeout();
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => Err(ToolError::Cancelled { tool: call.name.clone() }),
            result = tokio::time::timeout(timeout, tool.call(call.arguments.clone(), ctx)) => {
                result.unwrap_or_else(|_| Err(ToolError::Timeout { tool: call.name.clone(), after: timeout }))
            }
        }
    }
}

/// Cuts `output` to at most `limit` bytes (on a character boundary) and
/// says so at the end, so the model knows it saw only part.
pub fn truncate_output(output: &str, limit: usize) -> String {
    if output.len() <= limit {
        return output.to_owned();
    }
    let mut end = limit;
    while !output.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[output truncated: showed {end} of {} bytes]",
        &output[..end],
        output.len()
    )
}
