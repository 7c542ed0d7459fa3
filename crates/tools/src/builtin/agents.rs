//! Tools that reach beyond the current turn: sub-agents, other sessions,
//! and tool outputs kept whole. The runtime does the work through the
//! context's [`AgentHost`]; without one (a tool called outside a turn)
//! they fail with a message saying so.

use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::{Tier, ToolEffect};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::{ToolContext, ToolError, TypedTool};

/// `tool.output`: reads back a tool output the model was shown condensed.
pub const TOOL_OUTPUT: &str = "tool.output";

/// What a sub-agent is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnRequest {
    pub task: String,
    /// The tier to run on; when `None`, the named agent's, else the
    /// calling agent's.
    pub tier: Option<Tier>,
    /// A named agent (`agents.list`) whose prompt and tools it uses.
    pub agent: Option<String>,
    /// Whether the sub-agent may use tools (in a child session of its
    /// own); without, it is a single model call.
    pub tools: bool,
}

/// What the tools in this module ask of the agent runtime. The runtime
/// gives each turn one ([`ToolContext::host`]), which knows the turn's
/// session, depth and approver.
#[async_trait]
pub trait AgentHost: Send + Sync {
    /// Runs a sub-agent to its end and returns its answer.
    async fn spawn(&self, request: SpawnRequest, ctx: &ToolContext) -> Result<String, ToolError>;

    /// The sessions this agent may see, most recent first.
    async fn list_sessions(&self, limit: usize, ctx: &ToolContext) -> Result<String, ToolError>;

    /// The last `limit` messages of a session this agent may see.
    async fn session_history(
        &self,
        session: &str,
        limit: usize,
        ctx: &ToolContext,
    ) -> Result<String, ToolError>;

    /// Sends a message to another session's agent and returns its answer.
    async fn send_to_session(
        &self,
        session: &str,
        message: &str,
        ctx: &ToolContext,
    ) -> Result<String, ToolError>;

    /// A whole tool output of this session, from byte `offset`, at most
    /// `limit` bytes.
    async fn tool_output(
        &self,
        call_id: &str,
        offset: usize,
        limit: usize,
        ctx: &ToolContext,
    ) -> Result<String, ToolError>;
}

fn host(ctx: &ToolContext) -> Result<&dyn AgentHost, ToolError> {
    ctx.host.as_deref().ok_or_else(|| {
        ToolError::failed("this tool works only inside an agent turn; none is running here")
    })
}

/// Sub-agents and remote sessions may take long; the runtime enforces
/// `agents.subagents.timeout_secs` itself and says so, this is only the
/// outer bound.
const LONG: Duration = Duration::from_secs(3600);

/// `agents.spawn`: hands a subtask to another tier or agent.
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentsSpawn;

/// Arguments of `agents.spawn`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentsSpawnArgs {
    /// The whole task, with every fact the sub-agent needs: it does not see
    /// this conversation.
    task: String,
    /// fast (cheap), default, complex (hard reasoning) or local.
    #[serde(default)]
    tier: Option<Tier>,
    /// A named agent to run it, instead of a tier.
    #[serde(default)]
    agent: Option<String>,
    /// Let the sub-agent use tools (default false: one answer, no tools).
    #[serde(default)]
    tools: bool,
}

#[async_trait]
impl TypedTool for AgentsSpawn {
    type Args = AgentsSpawnArgs;

    fn name(&self) -> &str {
        "agents.spawn"
    }

    fn description(&self) -> &str {
        "Hand a self-contained subtask to a sub-agent on another tier (fast for cheap work, complex for hard reasoning) or a named agent, and get its answer. Several calls run at once."
    }

    fn timeout(&self) -> Duration {
        LONG
    }

    fn effect(&self) -> ToolEffect {
        // The sub-agent's own tool calls pass the gate in its turn.
        ToolEffect::ReadOnly
    }

    async fn run(&self, args: AgentsSpawnArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        if args.task.trim().is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: self.name().to_owned(),
                message: "task is empty; describe the subtask in full".to_owned(),
            });
        }
        host(ctx)?
            .spawn(
                SpawnRequest {
                    task: args.task,
                    tier: args.tier,
                    agent: args.agent,
                    tools: args.tools,
                },
                ctx,
            )
            .await
    }
}

/// `sessions.list`: the sessions this agent may see.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionsList;

/// Arguments of `sessions.list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionsListArgs {
    /// At most this many (default 20).
    #[serde(default)]
    limit: Option<usize>,
}

#[async_trait]
impl TypedTool for SessionsList {
    type Args = SessionsListArgs;

    fn name(&self) -> &str {
        "sessions.list"
    }

    fn description(&self) -> &str {
        "List other conversations (sessions) you may read or message, most recent first."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn reads_private_data(&self) -> bool {
        true
    }

    async fn run(&self, args: SessionsListArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        host(ctx)?
            .list_sessions(args.limit.unwrap_or(20).clamp(1, 200), ctx)
            .await
    }
}

/// `sessions.history`: the recent messages of another session.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionsHistory;

/// Arguments of `sessions.history`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionsHistoryArgs {
    /// The session key, as `sessions.list` shows it (`channel:peer`).
    session: String,
    /// The last this many messages (default 20).
    #[serde(default)]
    limit: Option<usize>,
}

#[async_trait]
impl TypedTool for SessionsHistory {
    type Args = SessionsHistoryArgs;

    fn name(&self) -> &str {
        "sessions.history"
    }

    fn description(&self) -> &str {
        "Read the recent messages of another session."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    fn reads_private_data(&self) -> bool {
        true
    }

    /// Other sessions hold what strangers and web pages said.
    fn untrusted_output(&self) -> bool {
        true
    }

    async fn run(&self, args: SessionsHistoryArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        host(ctx)?
            .session_history(&args.session, args.limit.unwrap_or(20).clamp(1, 200), ctx)
            .await
    }
}

/// `sessions.send`: a message to another session's agent.
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionsSend;

/// Arguments of `sessions.send`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionsSendArgs {
    /// The session key (`channel:peer`).
    session: String,
    /// The message; its agent answers it as it would its owner.
    message: String,
}

#[async_trait]
impl TypedTool for SessionsSend {
    type Args = SessionsSendArgs;

    fn name(&self) -> &str {
        "sessions.send"
    }

    fn description(&self) -> &str {
        "Send a message to another session's agent and get its answer."
    }

    fn timeout(&self) -> Duration {
        LONG
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::SendsMessages
    }

    async fn run(&self, args: SessionsSendArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        if args.message.trim().is_empty() {
            return Err(ToolError::InvalidArguments {
                tool: self.name().to_owned(),
                message: "message is empty".to_owned(),
            });
        }
        host(ctx)?
            .send_to_session(&args.session, &args.message, ctx)
            .await
    }
}

/// `tool.output`: a tool output shown condensed, read whole.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolOutputRead;

/// Arguments of `tool.output`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolOutputArgs {
    /// The id of the tool call whose output was condensed.
    id: String,
    /// Byte to start at (default 0).
    #[serde(default)]
    offset: Option<usize>,
    /// Bytes to return (default and most 40000).
    #[serde(default)]
    limit: Option<usize>,
}

/// The most `tool.output` returns per call, under the output cap.
const TOOL_OUTPUT_PAGE: usize = 40_000;

#[async_trait]
impl TypedTool for ToolOutputRead {
    type Args = ToolOutputArgs;

    fn name(&self) -> &str {
        TOOL_OUTPUT
    }

    fn description(&self) -> &str {
        "Read the full output of an earlier tool call that was shown to you condensed, by its call id, a page at a time."
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn effect(&self) -> ToolEffect {
        ToolEffect::ReadOnly
    }

    async fn run(&self, args: ToolOutputArgs, ctx: &ToolContext) -> Result<String, ToolError> {
        let limit = args
            .limit
            .unwrap_or(TOOL_OUTPUT_PAGE)
            .clamp(1, TOOL_OUTPUT_PAGE);
        host(ctx)?
            .tool_output(&args.id, args.offset.unwrap_or(0), limit, ctx)
            .await
    }
}

/// One page of `content` from byte `offset` (moved back to a character
/// boundary), at most `limit` bytes, with a note saying where it is and
/// how to read on.
pub fn page(content: &str, call_id: &str, offset: usize, limit: usize) -> String {
    let total = content.len();
    if offset >= total {
        return format!("[output of {call_id}: {total} bytes; nothing at offset {offset}]");
    }
    let start = content.floor_char_boundary(offset);
    let end = content.floor_char_boundary((start + limit).min(total));
    let mut out = content[start..end].to_owned();
    if end < total {
        out.push_str(&format!(
            "\n[output of {call_id}: bytes {start}..{end} of {total}; read on with tool.output {{\"id\": \"{call_id}\", \"offset\": {end}}}]"
        ));
    } else if start > 0 {
        out.push_str(&format!(
            "\n[output of {call_id}: bytes {start}..{end} of {total}, the end]"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_stop_on_character_boundaries_and_say_how_to_read_on() {
        let content = "héllo wörld";
        let first = page(content, "c1", 0, 2);
        assert!(first.starts_with("h\n"), "{first}");
        assert!(first.contains("\"offset\": 1"), "{first}");
        let rest = page(content, "c1", 2, 100);
        assert!(
            rest.starts_with("é"),
            "a page from inside é starts at its first byte: {rest}"
        );
        assert!(rest.ends_with("the end]"), "{rest}");
        assert_eq!(page(content, "c1", 0, 100), content);
        assert!(page(content, "c1", 99, 10).contains("nothing at offset 99"));
    }
}
