//! The runtime side of the tools that reach beyond a turn: sub-agents
//! (`agents.spawn`), other sessions (`sessions.*`) and whole tool outputs
//! (`tool.output`). Each turn gets its own [`TurnHost`], which knows who
//! is asking, how deep in delegation it is, and whom to ask for approval.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use flynn_protocol::config::SessionAccess;
use flynn_protocol::text::clip;
use flynn_protocol::{
    ContentBlock, Message, Principal, Purpose, Role, SessionKey, Tier, TurnId, TurnOutcome,
};
use flynn_tools::builtin::{AgentHost, SpawnRequest, page};
use flynn_tools::{Approver, ToolContext, ToolError};

use crate::agents::AgentProfile;
use crate::delegate::SubAgentRequest;
use crate::prompt::PromptContext;
use crate::runtime::{Lineage, SessionManager, Shared, Submitted, TurnRequest};
use crate::{Error, Result};

/// Instructions for a sub-agent that answers without tools.
pub const SUBAGENT_PROMPT: &str = "You are a sub-agent of Flynn, a personal assistant. Another agent handed you the task below; it sees only your answer. Do the task completely and answer with the result itself: no greeting, no questions back (state any assumption you had to make).";

/// Characters of each message `sessions.history` shows.
const HISTORY_CLIP: usize = 600;

/// One turn's view of the runtime, for its tools.
pub(crate) struct TurnHost {
    pub(crate) shared: Arc<Shared>,
    pub(crate) session: SessionKey,
    pub(crate) agent: Arc<AgentProfile>,
    pub(crate) tier: Tier,
    pub(crate) lineage: Lineage,
    pub(crate) approver: Arc<dyn Approver>,
    /// Who sent the message the turn answers; the turns it starts act
    /// for the same sender.
    pub(crate) principal: Principal,
}

/// Makes child session names unique within a process run.
static CHILDREN: AtomicU64 = AtomicU64::new(0);

impl TurnHost {
    fn manager(&self) -> SessionManager {
        SessionManager::from_shared(self.shared.clone())
    }

    fn settings(&self) -> &crate::DelegationSettings {
        self.shared.orchestrator.settings()
    }

    /// The lineage of a turn this one starts and waits on.
    fn child_lineage(&self, ctx: &ToolContext) -> Lineage {
        let mut parents = self.lineage.parents.clone();
        parents.push(self.session.clone());
        Lineage {
            parents,
            in_place: self.lineage.in_place,
            autonomy_cap: Some(ctx.policy.autonomy()),
            provenance: Some(ctx.provenance.clone()),
            policy_cap: Some(ctx.policy.clone()),
            workspace_cap: Some(ctx.workspace.clone()),
            guards: Some(Arc::new(ctx.guards.snapshot())),
        }
    }

    fn check_depth(&self, what: &str) -> Result<(), ToolError> {
        let depth = self.lineage.depth() + 1;
        let max = self.settings().max_depth;
        if depth > max {
            return Err(ToolError::failed(format!(
                "{what} would nest {depth} deep, more than agents.max_delegation_depth ({max}); do this part yourself"
            )));
        }
        Ok(())
    }

    /// Whether this agent may see `key` (`agents.session_access`).
    /// A guest's turn sees only its own session.
    async fn may_see(&self, key: &SessionKey) -> Result<bool> {
        if self.principal.is_guest() {
            return Ok(key == &self.session);
        }
        if self.settings().session_access == SessionAccess::All {
            return Ok(true);
        }
        Ok(self.agent_of(key).await?.name == self.agent.name)
    }

    /// The agent that answers `key`: its `/agent` choice, else the routes'.
    async fn agent_of(&self, key: &SessionKey) -> Result<Arc<AgentProfile>> {
        let meta = self.shared.store.metadata(key).await?;
        Ok(meta
            .agent
            .as_deref()
            .and_then(|name| self.shared.agents.get(name))
            .unwrap_or_else(|| self.shared.agents.route(key))
            .clone())
    }

    /// Refuses reaching `other` unless this agent lists it in
    /// `can_delegate` (or it is this agent).
    fn check_delegation(&self, other: &str, what: &str) -> Result<(), ToolError> {
        if self.agent.may_delegate_to(other) {
            return Ok(());
        }
        Err(ToolError::failed(format!(
            "the agent '{}' may not {what} the agent '{other}': add it to agents.list[{}].can_delegate to allow it",
            self.agent.name, self.agent.name
        )))
    }

    async fn visible(&self, session: &str) -> Result<SessionKey, ToolError> {
        let key: SessionKey = session.parse().map_err(|error| {
            ToolError::failed(format!(
                "{error}; use a key as sessions.list shows it, e.g. telegram:12345"
            ))
        })?;
        let exists = self
            .shared
            .store
            .info(&key)
            .await
            .map_err(storage)?
            .is_some();
        if !exists || !self.may_see(&key).await.map_err(storage)? {
            return Err(ToolError::failed(format!(
                "no session '{key}' that agent '{}' may see (agents.session_access); sessions.list shows them",
                self.agent.name
            )));
        }
        Ok(key)
    }

    /// Submits a turn and waits for it, cancelling it when the calling
    /// turn is cancelled or `agents.subagents.timeout_secs` passes.
    async fn run_turn(
        &self,
        request: TurnRequest,
        what: &str,
        ctx: &ToolContext,
    ) -> Result<TurnOutcome, ToolError> {
        let manager = self.manager();
        let session = request.session.clone();
        let handle = match manager.submit(request).await {
            Ok(Submitted::Turn(handle)) => handle,
            Ok(Submitted::Command { reply, .. }) => {
                return Err(ToolError::failed(format!(
                    "the message was read as a chat command and answered: {reply}"
                )));
            }
            Err(error) => return Err(ToolError::failed(format!("{what} was refused: {error}"))),
        };
        let turn = handle.turn;
        // The executor drops this call when the calling turn is cancelled
        // or times out; the turn it waits on is cancelled with it.
        let _guard = CancelOnDrop {
            manager: Some(manager.clone()),
            session: session.clone(),
            turn,
        };
        let timeout = Duration::from_secs(self.settings().subagents.timeout_secs);
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => {
                manager.cancel_turn(&session, turn).await;
                Err(ToolError::Cancelled { tool: what.to_owned() })
            }
            outcome = tokio::time::timeout(timeout, handle.outcome()) => match outcome {
                Ok(Ok(outcome)) => Ok(outcome),
                Ok(Err(Error::Cancelled)) => Err(ToolError::failed(format!("{what} was cancelled"))),
                Ok(Err(error)) => Err(ToolError::failed(format!("{what} failed: {error}"))),
                Err(_) => {
                    manager.cancel_turn(&session, turn).await;
                    Err(ToolError::failed(format!(
                        "{what} did not finish within {} s (agents.subagents.timeout_secs) and was cancelled",
                        timeout.as_secs()
                    )))
                }
            },
        }
    }

    /// A child session for a sub-agent with tools: `agent:<parent peer>-<n>`.
    fn child_session(&self) -> Result<SessionKey, ToolError> {
        let parent: String = self
            .session
            .peer()
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            .take(64)
            .collect();
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let n = CHILDREN.fetch_add(1, Ordering::Relaxed);
        SessionKey::new("agent", &format!("{parent}-{stamp:x}{n}"))
            .map_err(|error| ToolError::failed(format!("cannot name a child session: {error}")))
    }
}

/// Cancels a turn when dropped, unless it has ended (cancelling an ended
/// turn does nothing).
struct CancelOnDrop {
    manager: Option<SessionManager>,
    session: SessionKey,
    turn: TurnId,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(manager) = self.manager.take() else {
            return;
        };
        // Running: cancelled at once. Still queued: the lane drops it.
        if manager.cancel_turn_now(&self.session, self.turn) {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (session, turn) = (self.session.clone(), self.turn);
            runtime.spawn(async move {
                manager.cancel_turn(&session, turn).await;
            });
        }
    }
}

fn storage(error: impl std::fmt::Display) -> ToolError {
    ToolError::failed(format!("cannot read the sessions: {error}"))
}

#[async_trait]
impl AgentHost for TurnHost {
    async fn spawn(&self, request: SpawnRequest, ctx: &ToolContext) -> Result<String, ToolError> {
        self.check_depth("this sub-agent")?;
        let named = match &request.agent {
            Some(name) => Some(
                self.shared
                    .agents
                    .lookup(name, "agents.spawn")
                    .map_err(|error| ToolError::failed(error.to_string()))?
                    .clone(),
            ),
            None => None,
        };
        if let Some(named) = &named {
            self.check_delegation(&named.name, "start")?;
        }
        let agent = named.clone().unwrap_or_else(|| self.agent.clone());
        let tier = request
            .tier
            .or(named.as_ref().map(|a| a.tier))
            .unwrap_or(self.tier);
        if let Err(error) = self.shared.router.check_tier(tier) {
            return Err(ToolError::failed(error.to_string()));
        }
        // At most `agents.subagents.max_concurrent` at once; wait for a
        // place, but not past the parent's cancellation. A sub-agent's own
        // sub-agents run in its place: waiting for another while holding
        // one deadlocks once every place is held by a waiting parent.
        let permit = if self.lineage.in_place {
            None
        } else {
            Some(tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled { tool: "agents.spawn".to_owned() }),
                permit = self.shared.subagents.clone().acquire_owned() => permit
                    .map_err(|_| ToolError::failed("Flynn is shutting down"))?,
            })
        };
        let result = if request.tools {
            let child = self.child_session()?;
            let mut turn = TurnRequest::text(child.clone(), request.task);
            turn.tier = Some(tier);
            turn.agent = Some(agent.name.clone());
            turn.approver = Some(self.approver.clone());
            turn.principal = self.principal.clone();
            turn.lineage = Lineage {
                in_place: true,
                ..self.child_lineage(ctx)
            };
            let outcome = self.run_turn(turn, "the sub-agent", ctx).await?;
            let mut out = outcome.reply.clone();
            let _ = write!(
                out,
                "\n\n[sub-agent in session {child} on the {tier} tier ({}/{}): {} tool calls",
                outcome.provider,
                outcome.model,
                outcome.tool_calls.len()
            );
            if let Some(warning) = &outcome.warning {
                let _ = write!(out, "; {warning}");
            }
            out.push(']');
            Ok(out)
        } else {
            let system = match &named {
                Some(agent) => {
                    let content = [ContentBlock::text(request.task.clone())];
                    agent
                        .prompt
                        .build(&PromptContext {
                            session: &self.session,
                            agent: &agent.name,
                            workspace: agent.workspace(),
                            message: &content,
                            principal: &self.principal,
                        })
                        .await
                }
                None => SUBAGENT_PROMPT.to_owned(),
            };
            let delegated = SubAgentRequest {
                tier: Some(tier),
                depth: self.lineage.depth(),
                ..SubAgentRequest::new(
                    Purpose::Subagent,
                    self.session.clone(),
                    system,
                    request.task,
                )
            };
            let timeout = Duration::from_secs(self.settings().subagents.timeout_secs);
            match tokio::time::timeout(
                timeout,
                self.shared.orchestrator.delegate(delegated, &ctx.cancel),
            )
            .await
            {
                Ok(Ok(result)) => Ok(format!(
                    "{}\n\n[sub-agent answer from {} on the {} tier]",
                    result.content, result.model, result.tier
                )),
                Ok(Err(Error::Cancelled)) => Err(ToolError::Cancelled {
                    tool: "agents.spawn".to_owned(),
                }),
                Ok(Err(error)) => Err(ToolError::failed(format!("the sub-agent failed: {error}"))),
                Err(_) => Err(ToolError::failed(format!(
                    "the sub-agent did not answer within {} s (agents.subagents.timeout_secs)",
                    timeout.as_secs()
                ))),
            }
        };
        drop(permit);
        result
    }

    async fn list_sessions(&self, limit: usize, _ctx: &ToolContext) -> Result<String, ToolError> {
        let sessions = self.shared.store.list().await.map_err(storage)?;
        let mut out = String::new();
        let mut shown = 0;
        for info in sessions {
            if shown == limit {
                break;
            }
            if !self.may_see(&info.key).await.map_err(storage)? {
                continue;
            }
            shown += 1;
            let mark = if info.key == self.session {
                " (this session)"
            } else {
                ""
            };
            let _ = write!(
                out,
                "- {}{mark}: {} messages, last active {}",
                info.key,
                info.message_count,
                ago(info.updated_at)
            );
            if let Some(title) = &info.meta.title {
                let _ = write!(out, ", \"{title}\"");
            }
            out.push('\n');
        }
        if out.is_empty() {
            return Ok("No sessions.".to_owned());
        }
        Ok(out)
    }

    async fn session_history(
        &self,
        session: &str,
        limit: usize,
        _ctx: &ToolContext,
    ) -> Result<String, ToolError> {
        let key = self.visible(session).await?;
        let page = self
            .shared
            .store
            .history_page(&key, None, limit)
            .await
            .map_err(storage)?;
        let mut out = String::new();
        for stored in page {
            let line = describe(&stored.message);
            if !line.is_empty() {
                let _ = writeln!(out, "{line}");
            }
        }
        if out.is_empty() {
            return Ok(format!("Session {key} has no messages."));
        }
        Ok(out)
    }

    async fn send_to_session(
        &self,
        session: &str,
        message: &str,
        ctx: &ToolContext,
    ) -> Result<String, ToolError> {
        let key = self.visible(session).await?;
        if key == self.session {
            return Err(ToolError::failed(
                "that is this session; answer here instead of sending to it",
            ));
        }
        if self.lineage.parents.contains(&key) {
            return Err(ToolError::failed(format!(
                "session {key} is waiting on this one; sending to it would wait forever"
            )));
        }
        self.check_depth("this message")?;
        let target = self.agent_of(&key).await.map_err(storage)?;
        self.check_delegation(&target.name, "message")?;
        let text = format!(
            "[message from session {} (agent {}), answered automatically]\n{message}",
            self.session, self.agent.name
        );
        let mut turn = TurnRequest::text(key.clone(), text);
        turn.approver = Some(self.approver.clone());
        turn.principal = self.principal.clone();
        turn.lineage = self.child_lineage(ctx);
        // That session's agent keeps its own workspace; its tools stay
        // within this turn's.
        turn.lineage.workspace_cap = None;
        let outcome = self
            .run_turn(turn, &format!("the turn in {key}"), ctx)
            .await?;
        Ok(format!("{}\n\n[answer from session {key}]", outcome.reply))
    }

    async fn tool_output(
        &self,
        call_id: &str,
        offset: usize,
        limit: usize,
        _ctx: &ToolContext,
    ) -> Result<String, ToolError> {
        match self
            .shared
            .store
            .tool_output(&self.session, call_id)
            .await
            .map_err(storage)?
        {
            Some(output) => Ok(page(&output.content, call_id, offset, limit)),
            None => Err(ToolError::failed(format!(
                "no kept output for call '{call_id}' in this session; only outputs shown to you condensed are kept, under the id their note gives"
            ))),
        }
    }
}

/// One message as a line: who said what, tool calls and results in short.
fn describe(message: &Message) -> String {
    let who = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
    };
    let mut parts: Vec<String> = Vec::new();
    for block in &message.content {
        match block {
            ContentBlock::Text { text } => parts.push(clip(text, HISTORY_CLIP)),
            ContentBlock::ToolUse { name, .. } => parts.push(format!("[called {name}]")),
            ContentBlock::ToolResult { is_error, .. } => parts.push(
                if *is_error {
                    "[tool failed]"
                } else {
                    "[tool result]"
                }
                .to_owned(),
            ),
            ContentBlock::Image { .. } => parts.push("[image]".to_owned()),
            ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => {}
        }
    }
    if parts.is_empty() {
        return String::new();
    }
    format!("{who}: {}", parts.join(" "))
}

/// "3 min ago" from Unix milliseconds.
fn ago(millis: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let secs = (now - millis).max(0) / 1000;
    match secs {
        0..60 => "just now".to_owned(),
        60..3600 => format!("{} min ago", secs / 60),
        3600..86_400 => format!("{} h ago", secs / 3600),
        _ => format!("{} days ago", secs / 86_400),
    }
}
