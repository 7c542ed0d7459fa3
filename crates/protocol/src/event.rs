use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Usage;

/// The life cycle of one agent run (a turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Start,
    CancelRequested,
    Cancelled,
    Complete,
    Error,
}

/// Stable error codes carried by `AgentEvent::Error` and JSON output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Invalid configuration or arguments.
    Config,
    /// The model provider failed after retries and fallback.
    Provider,
    /// The session store failed.
    Storage,
    /// The run was cancelled.
    Cancelled,
    /// Anything else.
    Internal,
}

/// One tool call of a finished turn, for summaries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCallSummary {
    pub name: String,
    pub ok: bool,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnOutcome {
    /// The final answer text.
    pub reply: String,
    /// The provider and model that produced the final answer.
    pub provider: String,
    pub model: String,
    /// Usage summed over every model call of the turn.
    pub usage: Usage,
    /// What the turn's model calls cost in USD, when their prices are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    pub tool_calls: Vec<ToolCallSummary>,
    /// Set when the turn stopped early (say, at `max_iterations`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// What an agent run reports while it works, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    RunState {
        state: RunState,
    },
    /// A piece of answer text, as it streams.
    ContentDelta {
        text: String,
    },
    /// A piece of the model's reasoning.
    Thinking {
        text: String,
    },
    ToolStart {
        id: String,
        name: String,
        input: Value,
    },
    ToolEnd {
        id: String,
        name: String,
        ok: bool,
        /// The output as fed to the model (already truncated).
        output: String,
    },
    /// Something the user should know that does not end the run.
    Warning {
        message: String,
    },
    Done {
        outcome: TurnOutcome,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
}
