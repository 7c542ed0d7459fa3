use std::sync::Arc;
use std::time::Duration;

use flynn_protocol::config::{HookAction, ToolsConfig};
use flynn_protocol::{ToolCall, ToolResult};

use crate::gate::{ApprovalRequest, confirm};
use crate::{Hooks, ToolContext, ToolError, ToolRegistry};

/// How long a confirmation waits when no config says otherwise.
const DEFAULT_CONFIRM_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs tool calls: looks the tool up, passes the call through the gate
/// (the agent's policy, the hooks, an approver when a hook says confirm),
/// then enforces the tool's timeout and the turn's cancellation, truncates
/// long output, and reports every failure to the model as an error result.
#[derive(Debug, Clone)]
pub struct ToolExecutor {
    registry: Arc<ToolRegistry>,
    output_limit: usize,
    hooks: Hooks,
    confirm_timeout: Duration,
}

impl ToolExecutor {
    /// `output_limit` is in bytes (the config's `tools.output_limit_bytes`).
    /// No hooks: every allowed call runs without asking.
    pub fn new(registry: Arc<ToolRegistry>, output_limit: usize) -> Self {
        ToolExecutor {
            registry,
            output_limit,
            hooks: Hooks::default(),
            confirm_timeout: DEFAULT_CONFIRM_TIMEOUT,
        }
    }

    /// With `tools.output_limit_bytes`, `tools.hooks` and
    /// `tools.confirm_timeout_secs`.
    pub fn from_config(registry: Arc<ToolRegistry>, config: &ToolsConfig) -> Self {
        ToolExecutor {
            registry,
            output_limit: config.output_limit_bytes,
            hooks: Hooks::new(&config.hooks),
            confirm_timeout: Duration::from_secs(config.confirm_timeout_secs),
        }
    }

    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// Whether a hook holds calls of `tool` until an approver answers.
    pub fn needs_confirmation(&self, tool: &str) -> bool {
        self.hooks.action(tool) == HookAction::Confirm
    }

    /// Runs one call through the gate and the tool. Never fails: an
    /// unknown tool, a denial, a timeout or a cancellation is an error
    /// result for the model.
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
            // Name only the tools this agent may use.
            let available: Vec<&str> = self
                .registry
                .names()
                .filter(|name| ctx.policy.allows(name))
                .collect();
            return Err(ToolError::UnknownTool {
                name: call.name.clone(),
                available: if available.is_empty() {
                    "none".to_owned()
                } else {
                    available.join(", ")
                },
            });
        };
        if !ctx.policy.allows(&call.name) {
            return Err(ToolError::Denied {
                tool: call.name.clone(),
                reason: format!("not allowed for agent '{}' by the tools policy", ctx.agent),
            });
        }
        // A call of a cancelled turn asks no one and runs nothing.
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::Cancelled {
                tool: call.name.clone(),
            });
        }
        match self.hooks.action(&call.name) {
            HookAction::Silent => {}
            HookAction::Log => {
                tracing::info!(
                    target: "flynn::audit",
                    session = %ctx.session,
                    agent = %ctx.agent,
                    tool = %call.name,
                    "tool call"
                );
            }
            HookAction::Confirm => {
                let request = ApprovalRequest {
                    session: ctx.session.clone(),
                    agent: ctx.agent.clone(),
                    turn: ctx.turn,
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    input: call.arguments.clone(),
                    effect: tool.effect(),
                    timeout: self.confirm_timeout,
                };
                confirm(&request, ctx).await?;
            }
        }
        // The tool's own time starts only now, after any confirmation.
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
